"""Choosing a reader's `stop_when_sure` on training turns: the lowest one-passage confidence at
which a read may stop after its first passage without costing F1.

    choice = choose_stop_when_sure(sources, decoding, ks=(5, 20))
    choice["chosen"]    # a probability, or None: stopping early costs F1 at every value

Every benchmark turn is read once, k deep (calibration_data.py), and stopping is replayed from
that read: the first passage's answer when its one-passage confidence reaches the value, the
answer from all k passages otherwise (decoding.py; readers/extractive/reader.py reads so). A
value is eligible when on every benchmark, at every k, the mean F1 with stopping is at least
the F1 of reading all k passages minus `tolerance`, both answering always (what evaluation
scores) and abstaining under the no-answer thresholds, the benchmark's unanswerable turns
weighed at their natural share (what a user sees), and some read stops at it. The lowest
eligible value stops most often. Values start at the one-passage no-answer threshold: a read
that stops gives an answer.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from convqa.errors import ConfigError
from convqa.metrics.answer import score_answer

from .calibration_data import Source
from .decode import choose_span
from .decoding import Decoding, NoAnswer, confidence_features
from .fusion_tuning import ReadTurn

STEP = 0.025        # the grid of candidate values, from the one-passage threshold up to 1
TOLERANCE = 0.5     # F1 points a benchmark may lose, at any k, against reading every passage


@dataclass(frozen=True)
class Replay:
    """One question read k deep, and what its first passage alone gives."""

    answerable: bool
    sure: float         # one-passage confidence of the first passage's answer (-1: none)
    f1_first: float     # F1 of the first passage's answer (0 on an unanswerable question)
    f1_all: float       # F1 of the answer from all k passages, always answering
    answered: bool      # the k-passage answer clears the no-answer threshold


def _answer(turn: ReadTurn, count: int, decoding: Decoding, null_option: bool, convention: str
            ) -> tuple[float, float, bool]:
    """(confidence, F1, clears the threshold) of the answer read from the first `count`
    passages of `turn` (no answer at all: confidence -1, F1 of the empty answer)."""
    spans, passages = turn.spans[:count], turn.passages[:count]
    choice = choose_span(spans, decoding.strategy or "best_passage", decoding.fusion,
                         turn.scores[:count])
    if choice is None:
        return -1.0, score_answer("", turn.answers, convention)["f1"] if turn.answers else 0.0, \
            False
    span = choice.span
    text = passages[span.passage].text[span.start:span.end]
    f1 = score_answer(text, turn.answers, convention)["f1"] if turn.answers else 0.0
    fit: NoAnswer = decoding.no_answer.for_passages(len(passages))
    confidence = fit.confidence(confidence_features(choice, spans, passages, null_option))
    return confidence, f1, confidence >= fit.threshold


def replay(turns: Sequence[ReadTurn], answerable: bool, k: int, decoding: Decoding,
           convention: str, null_option: bool = False) -> list[Replay]:
    """Each turn read `k` deep (or as deep as it was read) and from its first passage."""
    out = []
    for turn in turns:
        depth = min(k, len(turn.spans))
        sure, f1_first, _ = _answer(turn, 1, decoding, null_option, convention)
        _, f1_all, answered = _answer(turn, depth, decoding, null_option, convention)
        out.append(Replay(answerable, sure, f1_first if answerable else 0.0,
                          f1_all if answerable else 0.0, answered))
    return out


def scores(replays: Sequence[Replay], stop: float | None, threshold: float,
           unanswerable_share: float | None) -> dict[str, float]:
    """F1 (percent) answering always and abstaining, and the share of reads that stop, when
    reads stop at `stop` (None: never); `threshold`: the one-passage no-answer threshold."""
    def stops(r: Replay, abstains: bool) -> bool:
        return stop is not None and r.sure >= (max(stop, threshold) if abstains else stop)

    answerable = [r for r in replays if r.answerable]
    unanswerable = [r for r in replays if not r.answerable]
    always = [r.f1_first if stops(r, False) else r.f1_all for r in answerable]

    def abstaining(r: Replay) -> float:
        if stops(r, True):
            return r.f1_first                    # an answer: 0 on an unanswerable question
        if r.answered:
            return r.f1_all
        return 0.0 if r.answerable else 1.0      # "no answer"

    share = (unanswerable_share if unanswerable_share is not None else 0.5) \
        if unanswerable else 0.0
    abstain = sum(weight * float(np.mean([abstaining(r) for r in group]))
                  for group, weight in ((answerable, 1.0 - share), (unanswerable, share))
                  if group)
    return {"f1_always": round(100.0 * float(np.mean(always)), 3) if always else 0.0,
            "f1_abstaining": round(100.0 * abstain, 3),
            "stops": round(100.0 * float(np.mean([stops(r, False) for r in answerable])), 2)
            if answerable else 0.0}


def candidates(threshold: float, step: float = STEP) -> list[float]:
    """The grid's values from `threshold` (the one-passage no-answer threshold) to 1."""
    start = int(np.ceil(threshold / step - 1e-9))
    values = [round(i * step, 4) for i in range(start, int(round(1 / step)) + 1)]
    return [v for v in values if v >= threshold] or [1.0]


def choose_stop_when_sure(sources: Sequence[Source], decoding: Decoding, ks: Sequence[int],
                          tolerance: float = TOLERANCE, null_option: bool = False
                          ) -> dict[str, Any]:
    """The chosen value (None when none is eligible) and every candidate's scores per
    benchmark and k, beside reading every passage (see the module docstring)."""
    if decoding.no_answer is None or decoding.no_answer.one_passage is None:
        raise ConfigError("choosing stop_when_sure needs a one-passage confidence: calibrate "
                          "it with --one-passage")
    ks = sorted({k for k in ks if k > 1})
    if not ks:
        raise ConfigError("choosing stop_when_sure needs a k above 1 (a read of one passage "
                          "has nothing to stop)")
    benchmarks = [s for s in sources if s.answerable]
    if not benchmarks:
        raise ConfigError("choosing stop_when_sure needs answerable benchmark turns")
    threshold = decoding.no_answer.one_passage.threshold
    played = {(s.name, k): replay(s.answerable, True, k, decoding, s.convention, null_option)
              + replay(s.unanswerable, False, k, decoding, s.convention, null_option)
              for s in benchmarks for k in ks}
    shares = {s.name: s.unanswerable_share for s in benchmarks}

    def scored(stop: float | None) -> dict[str, dict[str, dict[str, float]]]:
        return {name: {str(k): scores(played[(name, k)], stop, threshold, shares[name])
                       for k in ks} for name in shares}

    baseline = scored(None)

    def eligible(row: dict[str, dict[str, dict[str, float]]]) -> bool:
        cells = [(name, k) for name in row for k in row[name]]
        return any(row[name][k]["stops"] > 0 for name, k in cells) and all(
            row[name][k][metric] >= baseline[name][k][metric] - tolerance - 1e-9
            for name, k in cells for metric in ("f1_always", "f1_abstaining"))

    rows = [{"stop_when_sure": value, "eligible": eligible(row), "scores": row}
            for value in candidates(threshold) for row in (scored(value),)]
    chosen = next((row["stop_when_sure"] for row in rows if row["eligible"]), None)
    return {"chosen": chosen, "tolerance": tolerance, "ks": ks,
            "one_passage_threshold": threshold, "read_all": baseline, "candidates": rows,
            "questions": {s.name: {"answerable": len(s.answerable),
                                   "unanswerable": len(s.unanswerable)} for s in benchmarks}}
