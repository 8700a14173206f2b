"""Held-out scores of a reader per source: the sample a training run scores every N steps (its
curve, readers/extractive/train.py) and the comparison of a run with the shipped reader
(convqa/front/tools/promote_reader.py). Each question is read with its gold passage alone, scored under
its source's convention (`scoring_convention`)."""
from __future__ import annotations

import hashlib
import time
from typing import Any, Sequence

import numpy as np

from .data import ReaderExample, scoring_convention


def by_source(examples: Sequence[ReaderExample]) -> dict[str, list[ReaderExample]]:
    """The examples of each source (sources sorted by name, examples in input order)."""
    groups: dict[str, list[ReaderExample]] = {}
    for example in examples:
        groups.setdefault(example.source or "examples", []).append(example)
    return {source: groups[source] for source in sorted(groups)}


def heldout_sample(examples: Sequence[ReaderExample], per_source: int | None,
                   seed: int = 0) -> list[ReaderExample]:
    """At most `per_source` examples of each source, the first in sha256("{seed}:{id}") order:
    a fixed sample that does not depend on the file order, and that grows by adding questions
    when `per_source` grows. Unanswerable examples have no gold passage to read: left out."""
    chosen: list[ReaderExample] = []
    for items in by_source([e for e in examples if not e.unanswerable]).values():
        ranked = sorted(items, key=lambda e: hashlib.sha256(f"{seed}:{e.id}".encode()).digest())
        chosen += ranked if per_source is None else ranked[:per_source]
    return chosen


def sample_digest(examples: Sequence[ReaderExample]) -> str:
    """Names a sample (its ids), so scores of two samples are never compared by mistake."""
    digest = hashlib.sha256()
    for example in examples:
        digest.update(example.id.encode() + b"\0")
    return digest.hexdigest()[:16]


def scores_by_source(reader: Any, examples: Sequence[ReaderExample]) -> dict[str, Any]:
    """EM/F1 (percent) of `reader` (a SpanReader or ExtractiveReader) per source on `examples`,
    the gold passage alone, plus their macro average over sources (each source counts once,
    however many questions it has) and the micro average over questions. An ExtractiveReader
    reads in fp32: the reference precision, so that scores of different weights compare."""
    started = time.perf_counter()
    return score_answers(examples, read_answers(reader, examples),
                         seconds=time.perf_counter() - started)


def read_answers(reader: Any, examples: Sequence[ReaderExample]) -> dict[str, str]:
    """The answer text `reader` gives each question (by id), read with its gold passage alone:
    the part of `scores_by_source` that several processes can share (each its own questions)."""
    from .model import ExtractiveReader
    from .reader import SpanReader

    if isinstance(reader, ExtractiveReader):
        reader = SpanReader.from_model(reader, precision="fp32")
    answers: dict[str, str] = {}
    for source, items in by_source(examples).items():
        answers.update(evaluate_reader(reader, items,
                                       convention=scoring_convention(source))["predictions"])
    return answers


def score_answers(examples: Sequence[ReaderExample], answers: dict[str, str],
                  seconds: float | None = None) -> dict[str, Any]:
    """`scores_by_source`'s result from the answers `read_answers` gave (possibly gathered from
    several processes): the same sums in the same order, so the same numbers as one process."""
    missing = [e.id for e in examples if e.id not in answers]
    if missing:
        raise ValueError(f"no answer for {len(missing)} held-out questions (e.g. {missing[0]})")
    sources: dict[str, dict[str, Any]] = {}
    for source, items in by_source(examples).items():
        em, f1 = summed_scores(items, answers, scoring_convention(source))
        count = len(items)
        sources[source] = {"em": round(100.0 * em / count, 2), "f1": round(100.0 * f1 / count, 2),
                           "count": count}
    count = sum(s["count"] for s in sources.values())
    result: dict[str, Any] = {"sources": sources, "count": count,
                              "sample": sample_digest(examples)}
    for metric in ("em", "f1"):
        values = [s[metric] for s in sources.values()]
        result[metric] = round(sum(values) / len(values), 2) if values else 0.0
        result[f"micro_{metric}"] = round(sum(s[metric] * s["count"] for s in sources.values())
                                          / count, 2) if count else 0.0
    if seconds is not None:
        result["seconds"] = round(seconds, 1)
    return result


def question_scores(examples: Sequence[ReaderExample], answers: dict[str, str],
                    convention: str) -> list[dict[str, float]]:
    """Each question's EM and F1 (0-1) of `answers` (by question id), in the order of
    `examples`: what `summed_scores` sums and question-by-question comparisons pair."""
    from convqa.metrics.answer import score_answer

    return [score_answer(answers[example.id], example.golds(), convention)
            for example in examples]


def summed_scores(examples: Sequence[ReaderExample], answers: dict[str, str],
                  convention: str) -> tuple[float, float]:
    """(EM, F1) of `answers` (by question id) summed over `examples` in their order (0-1 each):
    the one summation behind `evaluate_reader` and `score_answers`, so their numbers agree."""
    em = f1 = 0.0
    for scores in question_scores(examples, answers, convention):
        em += scores["em"]
        f1 += scores["f1"]
    return em, f1


def evaluate_reader(reader: Any, examples: Sequence[ReaderExample], with_negatives: bool = False,
                    max_negatives: int | None = None, convention: str = "squad",
                    seed: int = 0, progress: bool = False) -> dict[str, Any]:
    """EM/F1 (percent, convqa.metrics.answer) of `reader` on `examples`.

    `reader` is a `SpanReader` (readers/extractive/reader.py) or an `ExtractiveReader` (read
    with its training history strategy and its decoding defaults); it always answers. Each
    question is read against its first positive passage alone, or, `with_negatives`, together
    with its negatives (at most `max_negatives`), the positive at a seeded random position; then
    `passage_accuracy` is the share of answers taken from the positive passage."""
    from .model import ExtractiveReader
    from .reader import SpanReader

    if isinstance(reader, ExtractiveReader):
        reader = SpanReader.from_model(reader)
    items: Any = examples
    if progress:
        from tqdm.auto import tqdm

        items = tqdm(examples, desc="evaluating reader", unit=" questions")
    from_positive = no_answer = 0
    predictions: dict[str, str] = {}
    for example in items:
        gold = example.positives[0].passage
        passages = [gold]
        if with_negatives:
            negatives = example.negatives[:max_negatives] if max_negatives is not None \
                else example.negatives
            passages = list(negatives)
            digest = hashlib.sha256(f"{seed}:{example.id}".encode()).digest()
            position = int(np.random.default_rng(list(digest[:8])).integers(len(passages) + 1))
            passages.insert(position, gold)
        answer = reader.read(example.question, example.history_turns(), passages,
                             always_answer=True)  # every question here has an answer
        text = answer.text if answer is not None else ""
        no_answer += answer is None
        from_positive += answer is not None and answer.passage_id == gold.id
        predictions[example.id] = text
    em, f1 = summed_scores(examples, predictions, convention)
    count = len(examples)
    result = {"em": 100.0 * em / count if count else 0.0,
              "f1": 100.0 * f1 / count if count else 0.0,
              "count": count, "no_answer": no_answer, "with_negatives": with_negatives,
              "convention": convention, "predictions": predictions}
    if with_negatives:
        result["passage_accuracy"] = 100.0 * from_positive / count if count else 0.0
    return result
