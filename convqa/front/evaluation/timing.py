"""Per-turn times of an evaluation stage summarised the same way in every table."""
from __future__ import annotations

import statistics
from typing import Sequence


def percentiles(values: Sequence[float]) -> dict[str, float]:
    """Mean, p50 and p90 of `values` (milliseconds), one decimal; zeros when there are none."""
    if not values:
        return {"mean": 0.0, "p50": 0.0, "p90": 0.0}
    ordered = sorted(values)
    return {"mean": round(statistics.fmean(ordered), 1),
            "p50": round(ordered[int(0.5 * (len(ordered) - 1))], 1),
            "p90": round(ordered[int(0.9 * (len(ordered) - 1))], 1)}
