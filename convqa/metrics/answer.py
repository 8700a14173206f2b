"""Answer metrics: exact match and token F1, counted as the official SQuAD, TopiOCQA and QReCC
scripts count them.

Normalization is the SQuAD one: lowercase; delete every ASCII punctuation character
(`string.punctuation`, so "U.S." -> "us" and curly quotes or dashes stay); replace the whole words
a/an/the by a space; collapse whitespace. The order matters and is the official one: punctuation
goes before articles, so "the-end" becomes the single token "theend".

F1 follows SQuAD v2.0 (and CoQA/TopiOCQA/QReCC): if either side normalizes to no tokens the score
is 1 when both are empty, else 0.

Two conventions for several gold answers:
- "squad" (SQuAD v2.0, SCAI-QReCC-21, QReCC): drop golds that normalize to nothing; if none is left
  the gold is the empty answer; score = max over golds.
- "topiocqa" (TopiOCQA's evaluate_reader.py, adapted from CoQA): golds used as given; with n > 1
  golds, score = mean over i of the max over the golds other than gold i (leave-one-out), so a
  system is scored as a human annotator would be; with one gold, that gold.

Unanswerable turns: TopiOCQA's gold answer is the literal string "UNANSWERABLE", which normalizes to
the one token "unanswerable"; the official script scores it literally, so do we. A reader that
abstains must answer `UNANSWERABLE` (not "") to get credit on TopiOCQA. QReCC/SQuAD mark no-answer
with an empty gold; there the abstaining answer is "".

Missing predictions score 0 and stay in the average (TopiOCQA and SQuAD v1.1 do this; SQuAD v2.0
would drop them, which can only inflate a score); `missing` counts them.
"""
from __future__ import annotations

import re
import string
from collections import Counter
from typing import Any, Callable, Mapping, Sequence

from convqa.errors import DataError
from convqa.metrics._keys import keyed_by_query

UNANSWERABLE = "UNANSWERABLE"
CONVENTIONS = ("squad", "topiocqa")

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)

Metric = Callable[[str, str], float]


def normalize_answer(text: str) -> str:
    """SQuAD normalization: lower, strip ASCII punctuation, drop articles, collapse spaces."""
    lowered = text.lower()
    no_punct = "".join(ch for ch in lowered if ch not in _PUNCTUATION)
    no_articles = _ARTICLES.sub(" ", no_punct)
    return " ".join(no_articles.split())


def answer_tokens(text: str) -> list[str]:
    """The tokens F1 counts: the normalized answer split on whitespace."""
    return normalize_answer(text).split()


def exact_match(prediction: str, gold: str) -> float:
    """1.0 when both answers normalize to the same string, else 0.0."""
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1_from_tokens(prediction_tokens: Sequence[str], gold_tokens: Sequence[str]) -> float:
    """Token-multiset F1; empty on either side scores 1 only if both are empty (SQuAD v2)."""
    if not prediction_tokens or not gold_tokens:
        return float(len(prediction_tokens) == len(gold_tokens))
    common = sum((Counter(prediction_tokens) & Counter(gold_tokens)).values())
    return f1_from_counts(common, len(prediction_tokens), len(gold_tokens))


def f1_from_counts(common: int, n_prediction: int, n_gold: int) -> float:
    """F1 from the overlap count, with the same float arithmetic as the official scripts
    (precision and recall first), so thresholds such as QReCC's 0.8 compare identically."""
    if common == 0:
        return 0.0
    precision = common / n_prediction
    recall = common / n_gold
    return (2 * precision * recall) / (precision + recall)


def f1(prediction: str, gold: str) -> float:
    """SQuAD token F1 between two answer strings."""
    return f1_from_tokens(answer_tokens(prediction), answer_tokens(gold))


def max_over_golds(metric: Metric, prediction: str, golds: Sequence[str]) -> float:
    """The best score of `prediction` against any gold (SQuAD convention)."""
    if not golds:
        raise ValueError("max_over_golds needs at least one gold answer")
    return max(metric(prediction, gold) for gold in golds)


def leave_one_out(metric: Metric, prediction: str, golds: Sequence[str]) -> float:
    """CoQA/TopiOCQA: mean over i of the max over golds without gold i; one gold: that gold."""
    if not golds:
        raise ValueError("leave_one_out needs at least one gold answer")
    if len(golds) == 1:
        return metric(prediction, golds[0])
    total = 0.0
    for i in range(len(golds)):
        total += max_over_golds(metric, prediction, [*golds[:i], *golds[i + 1:]])
    return total / len(golds)


def squad_golds(golds: Sequence[str]) -> list[str]:
    """SQuAD v2.0's gold list: golds that normalize to nothing are dropped; none left -> [""]."""
    kept = [gold for gold in golds if normalize_answer(gold)]
    return kept or [""]


def score_answer(prediction: str, golds: Sequence[str],
                 convention: str = "squad") -> dict[str, float]:
    """EM and F1 (0-1) of one prediction under `convention` ("squad" or "topiocqa")."""
    _check_convention(convention)
    if convention == "squad":
        kept = squad_golds(golds)
        return {"em": max_over_golds(exact_match, prediction, kept),
                "f1": max_over_golds(f1, prediction, kept)}
    given = list(golds) or [""]
    return {"em": leave_one_out(exact_match, prediction, given),
            "f1": leave_one_out(f1, prediction, given)}


def score_answers(predictions: Mapping[Any, str], golds: Mapping[Any, Sequence[str]],
                  convention: str = "squad") -> dict[str, Any]:
    """Score predictions against golds, both keyed by query id (`str(QueryId)`).

    Every query in `golds` is scored; a query without a prediction scores 0. Returns `em` and `f1`
    in percent (0-100), `count` (queries scored), `missing` (no prediction), `extra` (predictions
    for queries not in `golds`, ignored) and `per_query` {qid: {"em": 0-1, "f1": 0-1}}.
    """
    _check_convention(convention)
    preds = keyed_by_query(predictions, "predictions")
    gold_map = keyed_by_query(golds, "golds")
    per_query: dict[str, dict[str, float]] = {}
    missing = 0
    for qid, gold_list in gold_map.items():
        gold_list = _check_golds(qid, gold_list)
        if qid not in preds:
            missing += 1
            per_query[qid] = {"em": 0.0, "f1": 0.0}
            continue
        prediction = preds[qid]
        if not isinstance(prediction, str):
            raise DataError(f"prediction must be a string, got {type(prediction).__name__}",
                            path="predictions", field=qid)
        per_query[qid] = score_answer(prediction, gold_list, convention)
    count = len(per_query)
    return {
        "em": 100.0 * sum(s["em"] for s in per_query.values()) / count if count else 0.0,
        "f1": 100.0 * sum(s["f1"] for s in per_query.values()) / count if count else 0.0,
        "count": count,
        "missing": missing,
        "extra": sum(1 for qid in preds if qid not in gold_map),
        "convention": convention,
        "per_query": per_query,
    }


def _check_convention(convention: str) -> None:
    if convention not in CONVENTIONS:
        raise DataError(f"unknown answer convention {convention!r}; choose one of {CONVENTIONS}",
                        field="convention")


def _check_golds(qid: str, gold_list: Any) -> list[str]:
    # A bare string would be iterated character by character: a silent wrong answer.
    if isinstance(gold_list, str) or not isinstance(gold_list, Sequence):
        raise DataError(f"gold answers must be a list of strings, got {type(gold_list).__name__}",
                        path="golds", field=qid)
    for gold in gold_list:
        if not isinstance(gold, str):
            raise DataError(f"gold answer must be a string, got {type(gold).__name__}",
                            path="golds", field=qid)
    return list(gold_list)
