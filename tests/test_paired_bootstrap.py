"""convqa/metrics/paired.py: paired bootstrap intervals, plain and stratified by source."""
from __future__ import annotations

import pytest

from convqa.errors import ConvQAError
from convqa.metrics.paired import paired_bootstrap, stratified_paired_bootstrap


def test_paired_bootstrap_of_equal_shifted_and_mixed_scores():
    same = paired_bootstrap([50, 0, 100], [50, 0, 100])
    assert same == {"mean": 0.0, "low": 0.0, "high": 0.0, "wins": 0, "losses": 0, "ties": 3}
    shifted = paired_bootstrap([60, 10, 100], [50, 0, 90])
    assert (shifted["mean"], shifted["low"], shifted["high"], shifted["wins"]) == (10, 10, 10, 3)
    mixed = paired_bootstrap([100, 0, 100, 0], [0, 100, 0, 100])
    assert mixed["mean"] == 0 and mixed["low"] < 0 < mixed["high"]
    assert (mixed["wins"], mixed["losses"]) == (2, 2)
    with pytest.raises(ConvQAError, match="equally long"):
        paired_bootstrap([1, 2], [1])


def test_stratified_mean_weighs_each_group_equally_whatever_its_size():
    # a small group gaining 10 on each question, a large one level: the mean over groups is
    # +5 (not the +2 of pooling the ten questions), with no spread since each group is constant
    groups = {"small": ([60, 20], [50, 10]), "large": ([30] * 8, [30] * 8)}
    result = stratified_paired_bootstrap(groups)
    assert result["mean"] == pytest.approx(5.0)
    assert result["low"] == pytest.approx(5.0) and result["high"] == pytest.approx(5.0)
    assert (result["wins"], result["losses"], result["ties"]) == (2, 0, 8)


def test_stratified_interval_spans_zero_when_a_group_is_split_both_ways():
    groups = {"split": ([100, 0] * 10, [0, 100] * 10), "level": ([40] * 5, [40] * 5)}
    result = stratified_paired_bootstrap(groups, seed=1)
    assert result["mean"] == 0.0 and result["low"] < 0 < result["high"]
    # the level group halves the split group's spread in the mean of the two
    alone = paired_bootstrap(*groups["split"], seed=1)
    assert result["high"] - result["low"] < alone["high"] - alone["low"]


def test_stratified_needs_groups_of_paired_scores():
    with pytest.raises(ConvQAError, match="at least one group"):
        stratified_paired_bootstrap({})
    with pytest.raises(ConvQAError, match="equally long"):
        stratified_paired_bootstrap({"a": ([1.0], [])})
