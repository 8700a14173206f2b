"""The decoding defaults a reader folder carries, so every caller that names only the model reads
the way it was calibrated to (`convqa answer`, an eval row, `convqa serve` alike).

`convqa_reader.json` may hold a "decoding" block, every key optional:

    "decoding": {"fusion": {"selection": 0.0, "span": 0.1, "retriever": 0.25},
                 "strategy": "best_passage", "max_answer_length": 30,
                 "no_answer": {"weights": {"selection": 0.2, "span": 0.3, "evidence": 0.1},
                               "bias": -4.0, "threshold": 0.35},
                 "stop_when_sure": 0.45,
                 "after_reranker": {"fusion": {"selection": 0.0, "span": 0.05, "retriever": 2.0},
                                    "no_answer": {...}}}

- fusion / strategy / max_answer_length: how the answer passage and span are chosen
  (decode.py); the reader's options override them, and a folder without the block reads as
  before (best passage by selection, the model config's answer length);
- no_answer: a logistic calibration of the chosen answer's features (`CONFIDENCE_FEATURES`: its
  passage's selection logit, its span score, the retriever's standardised evidence of its
  passage, log(1 + its words), the share of the passages read whose best span is the same
  answer, whether more than one passage had a span, and `answer_odds`: the log-odds that the
  passages read back this answer rather than another, their selection logits as a softmax,
  with the null option's constant 0 among the others for a reader trained with it) into the
  probability that the answer is right, and the threshold under which the reader answers that
  the collection holds no answer (still showing its best evidence). Both are chosen on
  training questions by readers/extractive/calibrate.py; a block may weigh any subset of the
  features. Its optional `one_passage` block is the same kind of fit for reads of a single
  passage (`convqa train reader-decoding --one-passage`), used when the reader reads one.
  A reader trained with the null option (model.py `null_option`) has one more feature,
  `answerable`: the log-odds that some passage read answers rather than none, the logsumexp
  of the read passages' selection logits against the null option's constant 0. A reader
  without the option has no such feature, and a block that weighs it does not fit it.
- stop_when_sure: a read of several passages reads the first alone and stops there when the
  one-passage confidence (no_answer.one_passage) of its answer reaches this value; otherwise
  it reads the rest and answers as always. Most turns whose first passage holds a clear answer
  then cost one passage, not k. Chosen on training turns (`convqa train reader-decoding
  --stop-when-sure`, readers/extractive/stop_when_sure.py); absent: every passage is read.
- after_reranker: the fusion, no_answer and stop_when_sure to use when the passages come from
  a reranker (`convqa answer --rerank`, an eval row with a `reranker`). Its scores rank far
  better than a retriever's, so the weight its evidence deserves is another one, calibrated on
  reranked training turns (`convqa train reader-decoding --reranker MODEL`); what the block
  leaves out is taken from the outer one.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Sequence

from convqa.errors import ConfigError, DataError
from convqa.types import Passage

from .decode import STRATEGIES, Choice, Fusion, PassageSpan

BASE_FEATURES = ("selection", "span", "evidence", "words", "agreement", "several",
                 "answer_odds")
ODDS_LIMIT = 20.0  # |answer_odds| is clipped here: one-sided evidence is "sure", not infinite
CONFIDENCE_FEATURES = BASE_FEATURES + ("answerable",)
_KEYS = ("fusion", "strategy", "max_answer_length", "no_answer", "stop_when_sure",
         "after_reranker")
_AFTER_RERANKER_KEYS = ("fusion", "no_answer", "stop_when_sure")


def _number(value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


def feature_names(null_option: bool) -> tuple[str, ...]:
    """The confidence features of a reader with or without the null option."""
    return CONFIDENCE_FEATURES if null_option else BASE_FEATURES


def _logsumexp(values: Sequence[float]) -> float:
    top = max(values)
    return top + math.log(sum(math.exp(v - top) for v in values))


def answerable_log_odds(spans: Sequence[PassageSpan | None]) -> float:
    """log(sum of exp(selection logit) over the passages read) - log(exp(0)): under the null
    option's softmax, the log-odds that one of them answers rather than none (-inf: none read
    with a selection logit, clipped to -1e4 to stay finite)."""
    logits = [s.selection for s in spans if s is not None and s.selection is not None]
    return max(-1e4, _logsumexp(logits)) if logits else -1e4


def answer_log_odds(chosen: Sequence[bool], spans: Sequence[PassageSpan | None],
                    null_option: bool = False) -> float:
    """log(mass of the passages whose best span is the answer) - log(mass of the others), the
    mass of a passage exp(its selection logit), the null option's exp(0) among the others when
    the reader has it; `chosen[i]`: span i gives the chosen answer. Several passages that each
    look as likely to answer but answer differently (a collection that lacks the answer: the
    capitals of Australia's states for its capital) make it low even when each is confident.
    0 for a reader without a selection head."""
    same = [s.selection for s, hit in zip(spans, chosen)
            if s is not None and s.selection is not None and hit]
    other = [s.selection for s, hit in zip(spans, chosen)
             if s is not None and s.selection is not None and not hit]
    if null_option:
        other.append(0.0)
    if not same:
        return 0.0
    if not other:
        return ODDS_LIMIT
    return max(-ODDS_LIMIT, min(ODDS_LIMIT, _logsumexp(same) - _logsumexp(other)))


def confidence_features(choice: Choice, spans: Sequence[PassageSpan | None],
                        passages: Sequence[Passage], null_option: bool = False
                        ) -> dict[str, float]:
    """The features the confidence is computed from (see the module docstring): the chosen
    span's (selection 0 without a selection head) and how the passages read agree with it;
    with `null_option`, also `answerable`."""
    from convqa.metrics.answer import normalize_answer

    span = choice.span

    def text(s: PassageSpan) -> str:
        return normalize_answer(passages[s.passage].text[s.start:s.end])

    answer = passages[span.passage].text[span.start:span.end]
    read = [s for s in spans if s is not None]
    chosen = text(span)
    backs = [s is not None and text(s) == chosen for s in spans]  # each span's text once
    features = {"selection": span.selection if span.selection is not None else 0.0,
                "span": span.span_score, "evidence": choice.evidence,
                "words": math.log1p(len(answer.split())),
                "agreement": sum(backs) / len(read),
                "several": float(len(read) > 1),
                "answer_odds": answer_log_odds(backs, spans, null_option)}
    if null_option:
        features["answerable"] = answerable_log_odds(spans)
    return features


@dataclass(frozen=True)
class NoAnswer:
    """confidence = sigmoid(bias + sum(weights[f] * feature f)); below `threshold`: no answer.
    `one_passage`: another fit for reads of a single passage, where the features that weigh
    how the passages read agree (`agreement`, `several`, `answer_odds`) have nothing to
    compare, so the fit for several passages misjudges them."""

    weights: dict[str, float]
    bias: float
    threshold: float
    one_passage: "NoAnswer | None" = None

    def confidence(self, features: dict[str, float]) -> float:
        z = self.bias + sum(w * features[name] for name, w in self.weights.items())
        z = max(-700.0, min(700.0, z))
        return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))

    def for_passages(self, count: int) -> "NoAnswer":
        """The fit for a read of `count` passages."""
        return self.one_passage if count == 1 and self.one_passage is not None else self

    def with_threshold(self, threshold: float) -> "NoAnswer":
        """The same fits with one threshold for every read (a user's option)."""
        one = self.one_passage
        return NoAnswer(self.weights, self.bias, threshold,
                        None if one is None else NoAnswer(one.weights, one.bias, threshold))

    def weighs(self, feature: str) -> bool:
        """Whether either fit uses `feature` (a reader must be able to compute it)."""
        return feature in self.weights or (self.one_passage is not None
                                           and feature in self.one_passage.weights)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"weights": dict(self.weights), "bias": self.bias,
                                "threshold": self.threshold}
        if self.one_passage is not None:
            data["one_passage"] = self.one_passage.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: Any, where: str, block: str = "decoding",
                  key: str = "no_answer") -> "NoAnswer":
        def fail(message: str, field: str) -> DataError:
            name = f"{block}.{key}.{field}" if field else f"{block}.{key}"
            return DataError(message, where, None, name)

        nested = key == "one_passage"
        known = {"weights", "bias", "threshold"} | (set() if nested else {"one_passage"})
        if not isinstance(data, dict):
            raise fail("expected a mapping {weights, bias, threshold}", "")
        unknown = sorted(set(data) - known)
        if unknown:
            raise fail(f"unknown key {unknown[0]!r}", unknown[0])
        weights = data.get("weights")
        if not isinstance(weights, dict) or not weights:
            raise fail(f"expected a mapping of {', '.join(CONFIDENCE_FEATURES)} to numbers",
                       "weights")
        for name, value in weights.items():
            if name not in CONFIDENCE_FEATURES:
                raise fail(f"unknown feature {name!r} (one of "
                           f"{', '.join(CONFIDENCE_FEATURES)})", "weights")
            if not _number(value):
                raise fail(f"weight of {name!r} must be a number, got {value!r}", "weights")
        for name in ("bias", "threshold"):
            if not _number(data.get(name)):
                raise fail(f"expected a number, got {data.get(name)!r}", name)
        if not 0.0 <= data["threshold"] <= 1.0:
            raise fail(f"a probability in [0, 1], got {data['threshold']!r}", "threshold")
        one = data.get("one_passage")
        return cls({k: float(v) for k, v in weights.items()}, float(data["bias"]),
                   float(data["threshold"]),
                   None if one is None else cls.from_dict(one, where, f"{block}.{key}",
                                                          "one_passage"))


@dataclass(frozen=True)
class Decoding:
    """A reader folder's decoding defaults (see the module docstring); None: not set."""

    fusion: Fusion | None = None
    strategy: str | None = None
    max_answer_length: int | None = None
    no_answer: NoAnswer | None = None
    stop_when_sure: float | None = None
    after_reranker: "Decoding | None" = None   # only fusion, no_answer, stop_when_sure set

    def reranked(self) -> "Decoding":
        """The decoding of passages a reranker ordered: `after_reranker`'s fusion, no_answer
        and stop_when_sure where it has them, this block's otherwise."""
        after = self.after_reranker
        if after is None:
            return self
        fusion = after.fusion if after.fusion is not None else self.fusion
        return Decoding(fusion, None if after.fusion is not None else self.strategy,
                        self.max_answer_length,
                        after.no_answer if after.no_answer is not None else self.no_answer,
                        after.stop_when_sure if after.stop_when_sure is not None
                        else self.stop_when_sure)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        if self.fusion is not None:
            data["fusion"] = self.fusion.to_dict()
        if self.strategy is not None:
            data["strategy"] = self.strategy
        if self.max_answer_length is not None:
            data["max_answer_length"] = self.max_answer_length
        if self.no_answer is not None:
            data["no_answer"] = self.no_answer.to_dict()
        if self.stop_when_sure is not None:
            data["stop_when_sure"] = self.stop_when_sure
        if self.after_reranker is not None:
            data["after_reranker"] = self.after_reranker.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: Any, where: str | os.PathLike) -> "Decoding":
        """The block of `where` (a reader's convqa_reader.json); bad values are a DataError
        naming the file and the field."""
        where = str(where)
        if not isinstance(data, dict):
            raise DataError("expected a JSON object", where, None, "decoding")
        unknown = sorted(set(data) - set(_KEYS))
        if unknown:
            raise DataError(f"unknown key {unknown[0]!r} (one of {', '.join(_KEYS)})", where,
                            None, "decoding")
        try:
            fusion = Fusion.from_value(data.get("fusion"))
        except ConfigError as exc:  # name the file
            raise DataError(str(exc), where, None, "decoding.fusion") from None
        strategy = data.get("strategy")
        if strategy is not None and strategy not in STRATEGIES:
            raise DataError(f"expected one of {', '.join(STRATEGIES)}, got {strategy!r}",
                            where, None, "decoding.strategy")
        length = data.get("max_answer_length")
        if length is not None and (isinstance(length, bool) or not isinstance(length, int)
                                   or length < 1):
            raise DataError(f"expected a positive integer, got {length!r}", where, None,
                            "decoding.max_answer_length")
        no_answer = data.get("no_answer")
        return cls(fusion, strategy, length,
                   NoAnswer.from_dict(no_answer, where) if no_answer is not None else None,
                   _stop_when_sure(data.get("stop_when_sure"), where, "decoding"),
                   _after_reranker(data.get("after_reranker"), where))


def _stop_when_sure(value: Any, where: str, block: str) -> float | None:
    """A block's `stop_when_sure`: a probability, or absent."""
    if value is None:
        return None
    if not _number(value) or not 0.0 <= value <= 1.0:
        raise DataError(f"expected a probability in [0, 1], got {value!r}", where, None,
                        f"{block}.stop_when_sure")
    return float(value)


def _after_reranker(data: Any, where: str) -> Decoding | None:
    """The `after_reranker` block: a fusion, a no_answer and a stop_when_sure, nothing else."""
    if data is None:
        return None
    block = "decoding.after_reranker"
    if not isinstance(data, dict):
        raise DataError("expected a mapping {fusion, no_answer, stop_when_sure}", where, None,
                        block)
    unknown = sorted(set(data) - set(_AFTER_RERANKER_KEYS))
    if unknown:
        raise DataError(f"unknown key {unknown[0]!r} (one of "
                        f"{', '.join(_AFTER_RERANKER_KEYS)})", where, None, block)
    try:
        fusion = Fusion.from_value(data.get("fusion"))
    except ConfigError as exc:
        raise DataError(str(exc), where, None, f"{block}.fusion") from None
    no_answer = data.get("no_answer")
    return Decoding(fusion, no_answer=NoAnswer.from_dict(no_answer, where, block)
                    if no_answer is not None else None,
                    stop_when_sure=_stop_when_sure(data.get("stop_when_sure"), where, block))
