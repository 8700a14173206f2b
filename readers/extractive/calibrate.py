"""Calibrating the extractive reader's decoding on training questions, written into its folder's
decoding block (decoding.py), so a user who changes nothing reads with the measured best.

    decoding, passage_choice, no_answer = calibrated_decoding(benchmark_sources, [squad_source])

(`convqa train reader-decoding` reads the questions, calls this and writes the folder: see
convqa/front/cli/train_decoding.py). Only training questions are used: the benchmarks' train
turns and the SQuAD v2.0 questions of the articles the reader was trained on.

1. Passage choice. Each answer-evaluable train turn's top k passages are read once
   (calibration_data.py); the answer at every k and under every weighting is recombined from
   that reading. The fusion weights (selection, span, retriever: decode.py `Fusion`) are chosen
   from a grid: the weighting with the best mean F1 over the ks (mean over benchmarks) among
   those that keep, on every benchmark, F1 non-decreasing in k (F1@k >= F1@k' for 1 < k' < k)
   and F1 at the second k at least F1@1 - `tolerance`. A grid, not a model fitted to the
   passages: the fused score only has to rank a question's passages (two directions in weight
   space once scale is set aside, which a grid covers), and what is asked is an end metric
   with a constraint (F1 at several k, never worse for reading more), which a grid scores
   exactly while a per-passage classifier would optimise a surrogate and ignore the constraint.
   A large retriever weight answers from the retriever's best passage at every k, so some
   weighting always meets the constraint.
2. Confidence. With the chosen weights, every question's answer (each benchmark turn at each
   of `--no-answer-ks`, by default the pipeline's top 5; each SQuAD question from its
   paragraph) gives its features (decoding.py `CONFIDENCE_FEATURES`; `answerable` only for a
   reader trained with the null option) and its F1; unanswerable
   questions (TopiOCQA's UNANSWERABLE turns, SQuAD v2.0's impossible questions) have F1 0 for
   any answer. A logistic model of the
   features, fitted with the F1 as a soft target, is the probability the answer is right.
   Every source weighs the same; inside a source, its answerable and unanswerable questions
   weigh by their natural shares (`prevalence="natural"`: TopiOCQA has 8% unanswerable turns,
   SQuAD v2.0 about half), so the threshold maximises the F1 a user of that collection would
   see; `"balanced"` weighs the two halves equally, which abstains far more often (on TopiOCQA
   dev it lost more F1 on answerable turns than it gained on unanswerable ones).
3. Threshold. Under it the reader answers "no answer in the collection": the confidence that
   maximises F1 over all those questions, SQuAD v2.0's way (a no-answer scores 1 on an
   unanswerable question and 0 on an answerable one; an answer scores its F1, 0 when there is
   no answer). Without unanswerable questions no threshold is calibrated, and the folder's is
   dropped (it was fitted to another passage choice).
"""
from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from convqa.errors import ConfigError
from convqa.metrics.answer import score_answer

from .calibration_data import Source
from .decode import Fusion, choose_span, retriever_evidence
from .decoding import BASE_FEATURES, Decoding, NoAnswer, confidence_features, feature_names
from .fusion_tuning import ReadTurn

SELECTION_WEIGHTS = (0.0, 0.25, 0.5, 1.0)
SPAN_WEIGHTS = (0.0, 0.05, 0.1, 0.2, 0.35, 0.5, 1.0)
RETRIEVER_WEIGHTS = (0.0, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 1000.0)
KS = (1, 5, 20)
NO_ANSWER_KS = (5,)
TOLERANCE = 0.5


def weight_grid() -> list[Fusion]:
    """Every combination of the grid's weights but all zeros."""
    return [Fusion(a, b, c) for a, b, c in
            itertools.product(SELECTION_WEIGHTS, SPAN_WEIGHTS, RETRIEVER_WEIGHTS)
            if (a, b, c) != (0.0, 0.0, 0.0)]


# ---------------------------------------------------------------------------------------------
# 1. Passage choice


@dataclass
class Table:
    """One source's reads at one k as arrays [questions, k] (absent passages: not valid)."""

    selection: np.ndarray
    span: np.ndarray
    evidence: np.ndarray
    valid: np.ndarray           # the passage has a span
    f1: np.ndarray              # F1 of the passage's span
    empty_f1: np.ndarray        # [questions] F1 of no answer at all ("")


def table(turns: Sequence[ReadTurn], k: int, convention: str) -> Table:
    n = len(turns)
    shape = (n, k)
    selection, span, evidence, f1 = (np.zeros(shape) for _ in range(4))
    valid = np.zeros(shape, dtype=bool)
    empty = np.zeros(n)
    for i, turn in enumerate(turns):
        spans = turn.spans[:k]
        evidence[i, :len(spans)] = retriever_evidence(turn.scores[:k], len(spans))
        empty[i] = score_answer("", turn.answers, convention)["f1"]
        for j, s in enumerate(spans):
            if s is None:
                continue
            valid[i, j] = True
            selection[i, j] = s.selection if s.selection is not None else 0.0
            span[i, j] = s.span_score
            text = turn.passages[j].text[s.start:s.end]
            f1[i, j] = score_answer(text, turn.answers, convention)["f1"]
    return Table(selection, span, evidence, valid, f1, empty)


def fused_f1(t: Table, fusion: Fusion) -> float:
    """Mean F1 (percent) when each question answers from its best fused passage (ties: the
    earlier passage, as decode.py `choose_fused`)."""
    if not len(t.empty_f1):
        return 0.0
    fused = fusion.selection * t.selection + fusion.span * t.span \
        + fusion.retriever * t.evidence
    fused = np.where(t.valid, fused, -np.inf)
    best = fused.argmax(axis=1)
    rows = np.arange(len(best))
    answered = t.valid[rows, best]
    scores = np.where(answered, t.f1[rows, best], t.empty_f1)
    return round(100.0 * float(scores.mean()), 3)


def meets_constraint(f1: dict[int, float], tolerance: float = TOLERANCE) -> bool:
    """F1 at the second k >= F1 at the first - tolerance; never lower after that."""
    ks = sorted(f1)
    for i in range(1, len(ks)):
        slack = tolerance if i == 1 else 0.0
        if f1[ks[i]] < f1[ks[i - 1]] - slack - 1e-9:
            return False
    return True


def choose_fusion(sources: Sequence[Source], ks: Sequence[int] = KS,
                  grid: Sequence[Fusion] | None = None, tolerance: float = TOLERANCE,
                  current: Fusion | None = None) -> dict[str, Any]:
    """The weighting chosen on the sources' answerable questions (see the module docstring),
    with its F1 at each k per source, the number of weightings that met the constraint and
    the best few; `current` (e.g. the folder's weights) is scored beside it."""
    ks = sorted(set(ks))
    if len(ks) < 2:
        raise ConfigError("choosing the passage fusion needs at least two ks")
    if not sources or not any(s.answerable for s in sources):
        raise ConfigError("choosing the passage fusion needs answerable benchmark turns")
    tables = {s.name: {k: table(s.answerable, k, s.convention) for k in ks}
              for s in sources if s.answerable}

    def scored(fusion: Fusion) -> dict[str, Any]:
        f1 = {name: {k: fused_f1(t[k], fusion) for k in ks} for name, t in tables.items()}
        mean = float(np.mean([np.mean(list(v.values())) for v in f1.values()]))
        return {"fusion": fusion.to_dict(), "mean_f1": round(mean, 3),
                "meets_constraint": all(meets_constraint(v, tolerance) for v in f1.values()),
                "f1": {name: {str(k): v for k, v in by_k.items()} for name, by_k in f1.items()}}

    rows = [scored(f) for f in (grid or weight_grid())]
    eligible = [row for row in rows if row["meets_constraint"]]
    best = max(eligible or rows, key=lambda row: row["mean_f1"])  # the first of equals
    ranked = sorted(eligible, key=lambda row: -row["mean_f1"])
    return {"chosen": best, "eligible": len(eligible), "candidates": len(rows),
            "ks": ks, "tolerance": tolerance, "best_eligible": ranked[:5],
            "current": scored(current) if current is not None else None}


# ---------------------------------------------------------------------------------------------
# 2. Confidence and 3. threshold


@dataclass
class Samples:
    """One answer per question and k: its features, its F1, and what it weighs."""

    features: np.ndarray        # [m, len(names)]
    f1: np.ndarray              # F1 of the answer (0 for an unanswerable question)
    answerable: np.ndarray      # bool
    weight: np.ndarray
    group: list[str]            # "{source}:{answerable|unanswerable}"
    names: tuple[str, ...] = BASE_FEATURES  # the features' names, in column order


PREVALENCES = ("natural", "balanced")


def group_weights(source: Source, prevalence: str) -> tuple[float, float]:
    """(answerable, unanswerable) total weights of a source's two groups, summing to 1: the
    source's natural unanswerable share, or one half each ("balanced", or a share unknown)."""
    if prevalence not in PREVALENCES:
        raise ConfigError(f"prevalence must be one of {', '.join(PREVALENCES)}, "
                          f"got {prevalence!r}")
    share = source.unanswerable_share
    if prevalence == "balanced" or share is None:
        share = 0.5
    if not source.unanswerable:
        return 1.0, 0.0
    if not source.answerable:
        return 0.0, 1.0
    return 1.0 - share, share


def answer_samples(sources: Sequence[Source], fusion: Fusion | None, ks: Sequence[int],
                   strategy: str = "best_passage", prevalence: str = "natural",
                   null_option: bool = False) -> Samples:
    """Each source's questions answered at each k (SQuAD questions have one passage: k=1
    only), chosen under `fusion`; each source weighs 1 in all, split between its answerable
    and unanswerable questions by `group_weights`. `null_option`: the reader has it (one more
    feature)."""
    names = feature_names(null_option)
    rows: list[tuple[list[float], float, bool, str]] = []
    for source in sources:
        for answerable, turns in ((True, source.answerable), (False, source.unanswerable)):
            group = f"{source.name}:{'answerable' if answerable else 'unanswerable'}"
            for turn in turns:
                for k in sorted({min(k, len(turn.spans)) for k in ks}):
                    choice = choose_span(turn.spans[:k], strategy, fusion, turn.scores[:k])
                    if choice is None:
                        continue  # nothing to answer from: the reader gives no answer anyway
                    span = choice.span
                    f1 = 0.0
                    if answerable:
                        text = turn.passages[span.passage].text[span.start:span.end]
                        f1 = score_answer(text, turn.answers, source.convention)["f1"]
                    features = confidence_features(choice, turn.spans[:k], turn.passages[:k],
                                                   null_option)
                    rows.append(([features[name] for name in names], f1, answerable, group))
    if not rows:
        raise ConfigError("no answers to calibrate the confidence on")
    groups = [r[3] for r in rows]
    sizes = {g: groups.count(g) for g in set(groups)}
    totals = {}
    for source in sources:
        answerable_weight, unanswerable_weight = group_weights(source, prevalence)
        totals[f"{source.name}:answerable"] = answerable_weight
        totals[f"{source.name}:unanswerable"] = unanswerable_weight
    return Samples(np.array([r[0] for r in rows], dtype=float),
                   np.array([r[1] for r in rows]), np.array([r[2] for r in rows]),
                   np.array([totals[g] / sizes[g] for g in groups]), groups, names)


def fit_logistic(x: np.ndarray, y: np.ndarray, weight: np.ndarray, l2: float = 1e-3,
                 steps: int = 50) -> tuple[np.ndarray, float]:
    """(weights, bias) of sigmoid(x @ w + b) fitted to soft targets `y` in [0, 1] by weighted
    cross-entropy (Newton's method on standardised features, a small L2 for stability)."""
    w_sum = weight.sum()
    mean = (weight[:, None] * x).sum(0) / w_sum
    std = np.sqrt((weight[:, None] * (x - mean) ** 2).sum(0) / w_sum)
    std = np.where(std > 0, std, 1.0)
    z = np.hstack([(x - mean) / std, np.ones((len(x), 1))])
    theta = np.zeros(z.shape[1])
    ridge = np.diag([l2] * (z.shape[1] - 1) + [0.0])
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-np.clip(z @ theta, -40, 40)))
        gradient = z.T @ (weight * (p - y)) / w_sum + ridge @ theta
        hessian = (z.T * (weight * p * (1 - p))) @ z / w_sum + ridge + 1e-9 * np.eye(len(theta))
        step = np.linalg.solve(hessian, gradient)
        theta -= step
        if np.abs(step).max() < 1e-8:
            break
    weights = theta[:-1] / std
    bias = float(theta[-1] - (theta[:-1] * mean / std).sum())
    return weights, bias


def abstention_f1(confidence: np.ndarray, samples: Samples, threshold: float) -> float:
    """Weighted mean F1 when every answer under `threshold` becomes a no-answer."""
    abstain = confidence < threshold
    scores = np.where(abstain, (~samples.answerable).astype(float), samples.f1)
    return float((samples.weight * scores).sum() / samples.weight.sum())


def choose_threshold(confidence: np.ndarray, samples: Samples) -> tuple[float, float]:
    """(threshold, its weighted F1): among 0 (always answer) and the midpoints between
    consecutive distinct confidences, the best; of equals, the lowest (answer more)."""
    values = np.unique(confidence)
    candidates = [0.0] + [float(v) for v in (values[:-1] + values[1:]) / 2] \
        + [float(np.nextafter(values[-1], 2.0))]
    best = (0.0, abstention_f1(confidence, samples, 0.0))
    for threshold in candidates[1:]:
        value = abstention_f1(confidence, samples, threshold)
        if value > best[1] + 1e-12:
            best = (threshold, value)
    return best


def calibrate_no_answer(sources: Sequence[Source], fusion: Fusion | None,
                        ks: Sequence[int] = KS, strategy: str = "best_passage",
                        prevalence: str = "natural", null_option: bool = False
                        ) -> dict[str, Any]:
    """The confidence model and threshold (see the module docstring), with per-group scores:
    answerable F1 (answering always, and under the threshold), unanswerable questions caught."""
    if not any(s.unanswerable for s in sources):
        raise ConfigError("calibrating the no-answer threshold needs unanswerable questions "
                          "(benchmark turns or SQuAD v2.0 impossible questions)")
    samples = answer_samples(sources, fusion, ks, strategy, prevalence, null_option)
    weights, bias = fit_logistic(samples.features, samples.f1, samples.weight)
    model = NoAnswer({name: round(float(w), 6) for name, w in zip(samples.names, weights)},
                     round(bias, 6), 0.0)
    confidence = np.array([model.confidence(dict(zip(samples.names, row)))
                           for row in samples.features])
    threshold, value = choose_threshold(confidence, samples)
    model = NoAnswer(model.weights, model.bias, round(threshold, 6))
    abstain = confidence < model.threshold
    groups: dict[str, Any] = {}
    for group in dict.fromkeys(samples.group):
        mask = np.array([g == group for g in samples.group])
        entry: dict[str, Any] = {"answers": int(mask.sum()),
                                 "weight": round(float(samples.weight[mask].sum()), 4),
                                 "no_answer_share": round(100.0 * float(abstain[mask].mean()), 2)}
        if group.endswith(":answerable"):
            entry["f1_always"] = round(100.0 * float(samples.f1[mask].mean()), 2)
            entry["f1"] = round(100.0 * float(np.where(abstain, 0.0, samples.f1)[mask].mean()), 2)
        groups[group] = entry
    return {"no_answer": model.to_dict(), "prevalence": prevalence,
            "f1": round(100.0 * value, 2),
            "f1_always_answer": round(100.0 * abstention_f1(confidence, samples, 0.0), 2),
            "groups": groups}


def calibrated_decoding(sources: Sequence[Source], extra: Sequence[Source] = (),
                        existing: Decoding | None = None, ks: Sequence[int] = KS,
                        no_answer_ks: Sequence[int] = NO_ANSWER_KS,
                        tolerance: float = TOLERANCE, keep_fusion: bool = False,
                        prevalence: str = "natural", null_option: bool = False,
                        keep_no_answer: bool = False, one_passage: bool = False
                        ) -> tuple[Decoding, dict[str, Any] | None, dict[str, Any] | None]:
    """(the decoding, the passage choice's report, the no-answer calibration's report):
    the fusion chosen on the benchmark `sources` (kept from `existing` with `keep_fusion` or
    without benchmark sources), then the confidence and threshold calibrated on `sources` and
    `extra` (SQuAD) with that fusion. What is not calibrated is kept from `existing`; without
    unanswerable questions there is no threshold (a kept one was fitted to another choice).
    `null_option`: the reader was trained with it, and its `answerable` feature is weighed.
    `keep_no_answer`: the confidence is not calibrated; `existing`'s stays. `one_passage`: a
    second confidence is fitted on the same questions read one passage deep, for readers of a
    single passage (its report under the no-answer report's "one_passage"); with
    `keep_no_answer` only that one is fitted, beside the kept confidence (report "kept")."""
    existing = existing or Decoding()
    if keep_fusion or not sources:
        fusion, strategy = existing.fusion, existing.strategy or "best_passage"
        passage_choice = None
    else:
        passage_choice = choose_fusion(sources, ks, tolerance=tolerance,
                                       current=existing.fusion)
        fusion, strategy = Fusion(**passage_choice["chosen"]["fusion"]), "best_passage"
    everything = list(sources) + list(extra)
    no_answer = calibrate_no_answer(everything, fusion, no_answer_ks, strategy, prevalence,
                                    null_option) \
        if any(s.unanswerable for s in everything) and not keep_no_answer else None
    if keep_no_answer:
        confidence = existing.no_answer
        if one_passage and confidence is None:
            raise ConfigError("a one-passage fit with the confidence kept needs a kept "
                              "confidence: this decoding has none (calibrate both: leave out "
                              "--keep-no-answer)")
    else:
        confidence = NoAnswer.from_dict(no_answer["no_answer"], "calibration") \
            if no_answer is not None else None
    if confidence is not None and one_passage:
        one = calibrate_no_answer(everything, fusion, (1,), strategy, prevalence, null_option)
        confidence = dataclasses.replace(
            confidence, one_passage=NoAnswer.from_dict(one["no_answer"], "calibration"))
        no_answer = {**(no_answer or {"kept": True}), "no_answer": confidence.to_dict(),
                     "one_passage": one}
    decoding = Decoding(fusion, existing.strategy if fusion is None else None,
                        existing.max_answer_length, confidence)
    return decoding, passage_choice, no_answer
