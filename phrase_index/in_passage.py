"""The phrase model as a reader of one passage: the best phrase of each question's own gold
passage, its EM / F1 and their chance level, a check of a trained model that needs no index.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch
from torch import Tensor

from .data import PhraseExample
from .losses import token_scores
from .model import PhraseModel


def phrase_scores_in_passage(start_logits: Tensor, end_logits: Tensor, mask: Tensor,
                             max_tokens: int) -> Tensor:
    """`[L, L]` scores of every phrase (first, last) of one window: start + end score where
    both tokens are phrase tokens and 0 <= last - first < max_tokens, -inf elsewhere."""
    length = start_logits.shape[0]
    scores = start_logits.view(-1, 1) + end_logits.view(1, -1)
    band = torch.ones(length, length, dtype=torch.bool).triu() & \
        ~torch.ones(length, length, dtype=torch.bool).triu(max_tokens)
    valid = band & mask.view(-1, 1) & mask.view(1, -1)
    return scores.masked_fill(~valid, float("-inf"))


def best_span_in_passage(start_logits: Tensor, end_logits: Tensor, mask: Tensor,
                         max_tokens: int) -> tuple[int, int, float]:
    """(first, last, score) of the best phrase of one window: last - first < max_tokens."""
    length = start_logits.shape[0]
    scores = phrase_scores_in_passage(start_logits, end_logits, mask, max_tokens)
    best = int(scores.flatten().argmax())
    first, last = divmod(best, length)
    return first, last, float(scores[first, last])


def gold_passage_token_scores(model: PhraseModel, examples: Sequence[PhraseExample]
                              ) -> tuple[Any, Tensor, Tensor]:
    """(passage encoding, start scores, end scores `[B, L]`) of each example's question against
    the tokens of its own gold passage (first window): the phrase model as a reader."""
    enc = model.tokenize_passages([e.passage.title for e in examples],
                                  [e.passage.text for e in examples])
    queries = model.tokenize_queries([model.format_query(e.question, e.history_turns())
                                      for e in examples])
    pv = model.encode_passages(enc["input_ids"], enc["attention_mask"])
    qv = model.encode_queries(queries["input_ids"], queries["attention_mask"])
    return enc, token_scores(qv.start, pv.start), token_scores(qv.end, pv.end)


def evaluate_in_passage(model: PhraseModel, examples: Sequence[PhraseExample],
                        convention: str = "topiocqa", batch_size: int = 16) -> dict[str, Any]:
    """EM/F1 (percent) of the best phrase of each example's gold passage (its first window),
    scored q_start . h_i + q_end . h_j with j - i < max_answer_tokens: the phrase model as a
    reader of one passage, a quick check that needs no index."""
    from convqa.metrics.answer import score_answer

    model.eval()
    em = f1 = 0.0
    predictions = {}
    with torch.no_grad():
        for first in range(0, len(examples), batch_size):
            chunk = list(examples[first:first + batch_size])
            enc, starts, ends = gold_passage_token_scores(model, chunk)
            for row, example in enumerate(chunk):
                a, b, _ = best_span_in_passage(starts[row], ends[row], enc["phrase_mask"][row],
                                               model.config.max_answer_tokens)
                offsets = enc["offset_mapping"][row]
                text = example.passage.text[int(offsets[a, 0]):int(offsets[b, 1])]
                predictions[example.id] = text
                scores = score_answer(text, example.answers, convention)
                em += scores["em"]
                f1 += scores["f1"]
    count = len(examples)
    return {"em": 100 * em / count if count else 0.0, "f1": 100 * f1 / count if count else 0.0,
            "count": count, "convention": convention, "predictions": predictions}


def heldout_scores(model: PhraseModel, heldout: Sequence[PhraseExample],
                   limit: int | None = None) -> dict[str, dict[str, Any]]:
    """Per source (sorted), EM/F1 of `evaluate_in_passage` and its chance level over the first
    `limit` held-out examples, scored by the source's convention (rounded to 0.01)."""
    from readers.extractive.data import scoring_convention

    by_source: dict[str, list[PhraseExample]] = {}
    for example in heldout:
        by_source.setdefault(example.source, []).append(example)
    scores = {}
    for source, items in sorted(by_source.items()):
        items = items[:limit] if limit is not None else items
        convention = scoring_convention(source)
        result = evaluate_in_passage(model, items, convention)
        chance = chance_in_passage(model, items, convention)
        scores[source] = {"em": round(result["em"], 2), "f1": round(result["f1"], 2),
                          "count": result["count"], "convention": convention,
                          "chance_em": round(chance["em"], 2),
                          "chance_f1": round(chance["f1"], 2)}
    return scores


def chance_in_passage(model: PhraseModel, examples: Sequence[PhraseExample],
                      convention: str = "topiocqa", samples: int = 20,
                      seed: int = 0) -> dict[str, Any]:
    """Chance level of `evaluate_in_passage`: the mean EM/F1 (percent) of uniformly random
    phrases (first <= last < first + max_answer_tokens, text tokens of the same window as the
    model reads), `samples` per example, seeded."""
    from convqa.metrics.answer import score_answer

    rng = np.random.default_rng([seed, 5])
    em = f1 = 0.0
    span = model.config.max_answer_tokens
    for example in examples:
        enc = model.tokenize_passages([example.passage.title], [example.passage.text])
        positions = torch.nonzero(enc["phrase_mask"][0]).flatten().tolist()
        offsets = enc["offset_mapping"][0]
        pairs = [(a, b) for i, a in enumerate(positions) for b in positions[i:i + span]]
        for choice in rng.integers(len(pairs), size=samples) if pairs else []:
            a, b = pairs[int(choice)]
            text = example.passage.text[int(offsets[a, 0]):int(offsets[b, 1])]
            scores = score_answer(text, example.answers, convention)
            em += scores["em"] / samples
            f1 += scores["f1"] / samples
    count = len(examples)
    return {"em": 100 * em / count if count else 0.0, "f1": 100 * f1 / count if count else 0.0,
            "count": count, "samples_per_example": samples, "convention": convention}
