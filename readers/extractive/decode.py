"""From logits to an answer span with character offsets into its passage.

A span (s, e) of a window is valid when s <= e, e - s + 1 <= max_answer_length and both tokens
are passage-text tokens (never the query, the title, special tokens or padding); its score is
start[s] + end[e]. The best valid span of each window is found exactly, over all valid pairs
(a banded score matrix: at 256 tokens that is 65k sums per window, cheaper than the Python
loop over DPR's top-n starts x top-n ends, and it cannot miss the best pair the way a top-n cut
can). A passage read in several windows keeps its best window's span, and its selection logit
is the largest of its windows' (the window that looks most relevant).

Strategies over the passages of one question:
- "best_passage" (DPR): the passage with the highest selection logit, then its best span; a
  passage without any valid span (empty text) is passed over for the next one;
- "global": the passage maximising best span score + selection logit.
Without a selection head (a plain HF QA checkpoint) both rank passages by span score alone.
- a `Fusion` (weights set in the reader options, chosen by convqa/front/tools/tune_reader_fusion.py):
  the passage maximising  w_sel * selection + w_span * span score + w_ret * retriever evidence,
  the evidence being the retriever's score of the passage standardised over the passages read
  ((score - best) / standard deviation: 0 for the retriever's best, scale-free, so one weight
  fits BM25 and dense scores alike; 0 for every passage when no scores are given or all are
  equal). A large w_ret answers from the retriever's best passage, as top-1 reading does.
Ties go to the earlier passage (the retriever's better rank).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Sequence

import torch
from torch import Tensor

from convqa.errors import ConfigError
from convqa.types import Answer, Passage

from .inputs import ReaderFeatures

STRATEGIES = ("best_passage", "global")
_CHUNK = 64  # windows scored at once (bounds the [chunk, L, L] score tensor)


@dataclass
class PassageSpan:
    """The best span of one passage."""

    passage: int              # index into the passages
    window: int
    first: int                # token positions in the window
    last: int
    span_score: float
    selection: float | None
    start: int                # character offsets into the passage text
    end: int


def best_window_spans(start: Tensor, end: Tensor, context: Tensor,
                      max_answer_length: int) -> tuple[Tensor, Tensor, Tensor]:
    """(score, first, last) of the best valid span of each window; score is -inf for a window
    without any valid span. Inputs are [windows, length]."""
    if max_answer_length < 1:
        raise ConfigError(f"max_answer_length must be at least 1, got {max_answer_length}")
    windows, length = start.shape
    scores = torch.full((windows,), float("-inf"))
    firsts = torch.zeros(windows, dtype=torch.long)
    lasts = torch.zeros(windows, dtype=torch.long)
    if windows == 0 or length == 0:
        return scores, firsts, lasts
    positions = torch.arange(length)
    gap = positions[None, :] - positions[:, None]            # e - s
    band = (gap >= 0) & (gap < max_answer_length)           # [L, L]
    for begin in range(0, windows, _CHUNK):
        s = start[begin:begin + _CHUNK].float().cpu()
        e = end[begin:begin + _CHUNK].float().cpu()
        mask = context[begin:begin + _CHUNK].cpu()
        valid = band[None] & mask[:, :, None] & mask[:, None, :]
        pair = (s[:, :, None] + e[:, None, :]).masked_fill(~valid, float("-inf"))
        best, flat = pair.flatten(1).max(dim=1)
        scores[begin:begin + len(s)] = best
        firsts[begin:begin + len(s)] = flat // length
        lasts[begin:begin + len(s)] = flat % length
    return scores, firsts, lasts


def passage_spans(start: Tensor, end: Tensor, selection: Tensor | None,
                  features: ReaderFeatures, passages: int,
                  max_answer_length: int) -> list[PassageSpan | None]:
    """The best span of every passage (None for a passage with no valid span)."""
    scores, firsts, lasts = best_window_spans(start, end, features.context, max_answer_length)
    result: list[PassageSpan | None] = [None] * passages
    selections: list[float | None] = [None] * passages
    for w in range(len(features)):
        p = int(features.window_passage[w])
        if selection is not None:
            value = float(selection[w])
            selections[p] = value if selections[p] is None else max(selections[p], value)
        score = float(scores[w])
        if score == float("-inf"):
            continue
        current = result[p]
        if current is None or score > current.span_score:
            first, last = int(firsts[w]), int(lasts[w])
            result[p] = PassageSpan(p, w, first, last, score, None,
                                    int(features.offsets[w, first, 0]),
                                    int(features.offsets[w, last, 1]))
    for p, span in enumerate(result):
        if span is not None:
            span.selection = selections[p]
    return result


def rank_score(span: PassageSpan, strategy: str) -> float:
    """What a strategy ranks passages by (see the module docstring)."""
    if span.selection is None:
        return span.span_score
    if strategy == "best_passage":
        return span.selection
    return span.span_score + span.selection


def choose(spans: Sequence[PassageSpan | None], strategy: str) -> tuple[PassageSpan, float] | None:
    """The chosen passage span and its rank score; None when no passage has a span."""
    if strategy not in STRATEGIES:
        raise ConfigError(f"unknown reader strategy {strategy!r} (choose one of "
                          f"{', '.join(STRATEGIES)})")
    best: tuple[PassageSpan, float] | None = None
    for span in spans:
        if span is not None:
            score = rank_score(span, strategy)
            if best is None or score > best[1]:
                best = (span, score)
    return best


@dataclass(frozen=True)
class Fusion:
    """Weights of the reader's selection logit, its span score and the retriever's evidence
    in the score that picks the passage to answer from (see the module docstring)."""

    selection: float = 1.0
    span: float = 0.0
    retriever: float = 0.0

    @classmethod
    def from_value(cls, value: Any) -> "Fusion | None":
        """None, a Fusion, or a mapping {selection, span, retriever} (missing ones: 0)."""
        if value is None or isinstance(value, Fusion):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"fusion: expected a mapping of weights "
                              f"{{selection, span, retriever}}, got {value!r}")
        unknown = sorted(set(value) - {"selection", "span", "retriever"})
        if unknown:
            raise ConfigError(f"fusion: unknown weight {unknown[0]!r} (selection, span, "
                              "retriever)")
        weights = {name: value.get(name, 0.0) for name in ("selection", "span", "retriever")}
        for name, weight in weights.items():
            if isinstance(weight, bool) or not isinstance(weight, (int, float)) \
                    or not math.isfinite(weight):
                raise ConfigError(f"fusion: weight {name!r} must be a number, got {weight!r}")
        return cls(**{k: float(v) for k, v in weights.items()})

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def retriever_evidence(scores: Sequence[float] | None, count: int) -> list[float]:
    """The retriever's scores of `count` passages standardised: (score - best) / std."""
    if scores is None or count < 2:
        return [0.0] * count
    if len(scores) != count:
        raise ConfigError(f"{len(scores)} retriever scores for {count} passages")
    values = [float(v) for v in scores]
    mean = sum(values) / count
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / count)
    if not std > 0 or not math.isfinite(std):
        return [0.0] * count
    best = max(values)
    return [(v - best) / std for v in values]


def fused_score(span: PassageSpan, evidence: float, fusion: Fusion) -> float:
    selection = span.selection if span.selection is not None else 0.0
    return (fusion.selection * selection + fusion.span * span.span_score
            + fusion.retriever * evidence)


def choose_fused(spans: Sequence[PassageSpan | None], evidence: Sequence[float],
                 fusion: Fusion) -> tuple[PassageSpan, float] | None:
    """The passage span with the best fused score (ties: the earlier passage)."""
    best: tuple[PassageSpan, float] | None = None
    for span in spans:
        if span is not None:
            score = fused_score(span, evidence[span.passage], fusion)
            if best is None or score > best[1]:
                best = (span, score)
    return best


def decode_answer(start: Tensor, end: Tensor, selection: Tensor | None,
                  features: ReaderFeatures, passages: Sequence[Passage],
                  strategy: str = "best_passage", max_answer_length: int = 30,
                  fusion: Fusion | None = None,
                  retriever_scores: Sequence[float] | None = None) -> Answer | None:
    """The answer of one question whose passages were read as `features` (None when no
    passage has a valid span). `Answer.score` is what the passage was chosen by: the fused
    score with a `fusion`, else the selection logit for "best_passage", span score + selection
    for "global", the span score without a selection head."""
    spans = passage_spans(start, end, selection, features, len(passages), max_answer_length)
    return span_answer(spans, passages, strategy, fusion, retriever_scores)


@dataclass
class Choice:
    """The passage span an answer is read from, with what it was chosen by."""

    span: PassageSpan
    score: float        # the rank score (see `decode_answer`)
    evidence: float     # the retriever's standardised evidence of its passage (0 without scores)


def choose_span(spans: Sequence[PassageSpan | None], strategy: str = "best_passage",
                fusion: Fusion | None = None,
                retriever_scores: Sequence[float] | None = None) -> Choice | None:
    """The chosen passage span under `fusion`, else `strategy` (None: no passage has a span)."""
    evidence = retriever_evidence(retriever_scores, len(spans))
    chosen = choose_fused(spans, evidence, fusion) if fusion is not None \
        else choose(spans, strategy)
    if chosen is None:
        return None
    span, score = chosen
    return Choice(span, float(score), evidence[span.passage])


def choice_answer(choice: Choice, passages: Sequence[Passage]) -> Answer:
    passage = passages[choice.span.passage]
    span = choice.span
    return Answer(text=passage.text[span.start:span.end], score=choice.score,
                  passage_id=passage.id, start=span.start, end=span.end, evidence=passage)


def span_answer(spans: Sequence[PassageSpan | None], passages: Sequence[Passage],
                strategy: str = "best_passage", fusion: Fusion | None = None,
                retriever_scores: Sequence[float] | None = None) -> Answer | None:
    """The Answer chosen among the passages' best spans (see `decode_answer`)."""
    choice = choose_span(spans, strategy, fusion, retriever_scores)
    return choice_answer(choice, passages) if choice is not None else None
