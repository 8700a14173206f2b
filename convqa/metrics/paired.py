"""Paired bootstrap intervals: two systems scored on the same questions differ by less than
their means suggest when most questions score the same, so a gap is read with its interval.

    paired_bootstrap([60, 10, 100], [50, 0, 90])            # mean +10, interval [+10, +10]
    stratified_paired_bootstrap({"squad": (a1, b1), "covid": (a2, b2)})   # mean over sources
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from convqa.errors import ConvQAError


def _differences(a: Sequence[float], b: Sequence[float]) -> np.ndarray:
    if len(a) != len(b) or not len(a):
        raise ConvQAError(f"paired scores need two equally long non-empty lists, got "
                          f"{len(a)} and {len(b)}")
    return np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)


def _summary(diff: np.ndarray, means: np.ndarray, mean: float) -> dict[str, float]:
    low, high = np.percentile(means, [2.5, 97.5])
    return {"mean": float(mean), "low": float(low), "high": float(high),
            "wins": int((diff > 0).sum()), "losses": int((diff < 0).sum()),
            "ties": int((diff == 0).sum())}


def paired_bootstrap(a: Sequence[float], b: Sequence[float], samples: int = 10000,
                     seed: int = 0) -> dict[str, float]:
    """Mean of `a - b` (paired per question), its percentile-bootstrap 95% interval, and how
    many questions each side wins."""
    diff = _differences(a, b)
    rng = np.random.default_rng(seed)
    means = diff[rng.integers(0, len(diff), (samples, len(diff)))].mean(axis=1)
    return _summary(diff, means, diff.mean())


def stratified_paired_bootstrap(groups: Mapping[str, tuple[Sequence[float], Sequence[float]]],
                                samples: int = 10000, seed: int = 0) -> dict[str, float]:
    """The unweighted mean over groups (e.g. sources) of each group's mean `a - b`, with a
    95% interval that resamples questions within each group, so every group keeps its size
    and its equal weight in the mean, as in a per-source table's mean column."""
    if not groups:
        raise ConvQAError("stratified scores need at least one group")
    rng = np.random.default_rng(seed)
    diffs = [_differences(a, b) for a, b in groups.values()]
    means = np.mean([diff[rng.integers(0, len(diff), (samples, len(diff)))].mean(axis=1)
                     for diff in diffs], axis=0)
    return _summary(np.concatenate(diffs), means, float(np.mean([d.mean() for d in diffs])))
