"""Unanswerable examples made from answerable turns by taking their topic article away: what a
reader faces when the collection does not hold the answer ("What is the capital of Australia?"
against a collection without Canberra). The retriever still returns fluent passages of related
articles; the null option ("no passage answers", loss.py) should win over all of them.

    made = add_absent_article_examples(turns, share=0.25, seed=0)

TopiOCQA's UNANSWERABLE turns and SQuAD v2.0's impossible questions teach the null option on
questions nobody could answer; these teach it on questions that another collection answers,
which is the case a small collection meets most. For a seeded `share` of a benchmark's
answerable *train* turns, a copy `{id}/absent-article` is added with no positive and, as
negatives, the turn's negatives that are neither of its gold article (by id or title) nor hold a
gold answer, in their order (the retriever's best first: an unanswerable example's first
negative is read every time, train.py). Build them after the retriever's negatives are in place
and before the gold article's own passages are added (article_negatives.py), which must never
stand in for a missing article. Held-out turns give none (the held-out scores read gold passages).
"""
from __future__ import annotations

import numpy as np

from convqa.errors import ConfigError

from .data import BuildReport, ReaderExample
from .dense_negatives import BENCHMARK_SOURCE, not_negative

SUFFIX = "/absent-article"


def absent_article_example(example: ReaderExample) -> ReaderExample | None:
    """The unanswerable copy of a benchmark turn (None: no negative survives the filter)."""
    excluded = not_negative(example)
    negatives = [p for p in example.negatives if excluded(p) is None]
    if not negatives:
        return None
    return ReaderExample(example.id + SUFFIX, example.question, list(example.history), [],
                         negatives, [], "train", example.source, unanswerable=True)


def add_absent_article_examples(examples: list[ReaderExample], share: float, seed: int = 0,
                                report: BuildReport | None = None) -> int:
    """Append the absent-article copies of a seeded `share` (0..1) of the answerable benchmark
    train turns in `examples`; returns how many were added (counted in `report` per source as
    `train_absent_article`)."""
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 1:
        raise ConfigError(f"absent-article share must be a number in [0, 1], got {share!r}")
    eligible = [e for e in examples if e.split == "train" and not e.unanswerable
                and e.positives and e.source.startswith(BENCHMARK_SOURCE)]
    if not share or not eligible:
        return 0
    rng = np.random.default_rng(seed)
    count = int(round(share * len(eligible)))
    picked = sorted(rng.choice(len(eligible), size=count, replace=False).tolist())
    made: list[ReaderExample] = []
    for position in picked:
        copy = absent_article_example(eligible[position])
        if copy is not None:
            made.append(copy)
        if report is not None:
            report.add(eligible[position].source, "train_absent_article" if copy is not None
                       else "absent_article_without_negatives")
    examples.extend(made)
    return len(made)

