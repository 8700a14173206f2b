"""ConvDR losses against values computed by hand."""
from __future__ import annotations

import math

import pytest
import torch

from retrievers.convdr.loss import convdr_loss, kd_loss, rank_loss

S = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
T = torch.tensor([[0.0, 1.0], [0.0, 1.0]])


def test_kd_is_mean_squared_distance_over_rows():
    # row 0: (1-0)^2 + (0-1)^2 = 2; row 1: 0 -> mean 1
    assert kd_loss(S, T).item() == pytest.approx(1.0)
    # unit vectors: ||s - t||^2 = 2 - 2 cos; cos = 0.6 -> 0.8
    s = torch.tensor([[0.6, 0.8]])
    t = torch.tensor([[1.0, 0.0]])
    assert kd_loss(s, t).item() == pytest.approx(0.8)


def test_kd_mask_averages_only_masked_rows():
    assert kd_loss(S, T, torch.tensor([True, False])).item() == pytest.approx(2.0)
    assert kd_loss(S, T, torch.tensor([False, True])).item() == pytest.approx(0.0)
    student = S.clone().requires_grad_(True)
    none = kd_loss(student, T, torch.tensor([False, False]))
    assert none.item() == 0.0
    none.backward()  # still a graph: a process with no KD example takes the same path
    assert torch.equal(student.grad, torch.zeros_like(S))


def test_kd_gradient_is_two_times_difference_over_batch_and_target_gets_none():
    student = S.clone().requires_grad_(True)
    target = T.clone().requires_grad_(True)
    kd_loss(student, target).backward()
    assert torch.allclose(student.grad, 2 * (S - T) / 2)
    assert target.grad is None


def test_rank_loss_by_hand():
    q = torch.tensor([[1.0, 0.0]])
    p = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])  # positive first: scores 1 and 0
    assert rank_loss(q, p).item() == pytest.approx(math.log(1 + math.exp(-1)))
    assert rank_loss(q, p, scale=2.0).item() == pytest.approx(math.log(1 + math.exp(-2)))
    # a negative scoring above the positive: logits [0, 1] -> log(1 + e)
    swapped = torch.tensor([[[0.0, 1.0], [1.0, 0.0]]])
    assert rank_loss(q, swapped).item() == pytest.approx(math.log(1 + math.e))


def test_rank_loss_masks_rows_and_checks_shapes():
    q = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    p = torch.tensor([[[1.0, 0.0], [0.0, 1.0]], [[0.0, 1.0], [1.0, 0.0]]])
    both = rank_loss(q, p).item()
    first = rank_loss(q, p, mask=torch.tensor([True, False])).item()
    second = rank_loss(q, p, mask=torch.tensor([False, True])).item()
    assert first == pytest.approx(math.log(1 + math.exp(-1)))
    assert second == pytest.approx(math.log(1 + math.e))
    assert both == pytest.approx((first + second) / 2)
    with pytest.raises(ValueError):
        rank_loss(q, p[:, :, :1])
    with pytest.raises(ValueError):
        rank_loss(q, p, mask=torch.tensor([True]))


def test_multitask_is_weighted_sum_and_modes_pick_terms():
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    p = torch.tensor([[[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.0], [0.0, 1.0]]])
    kd = kd_loss(q, T).item()  # 1.0
    rank = rank_loss(q, p).item()  # (log(1+e^-1) + log(1+e)) / 2
    assert rank == pytest.approx((math.log(1 + math.exp(-1)) + math.log(1 + math.e)) / 2)
    parts = convdr_loss("multitask", q, T, passages=p, kd_weight=0.5, rank_weight=2.0)
    assert parts.total.item() == pytest.approx(0.5 * kd + 2.0 * rank)
    assert parts.kd.item() == pytest.approx(kd) and parts.rank.item() == pytest.approx(rank)
    only_kd = convdr_loss("kd", q, T)
    assert only_kd.total.item() == pytest.approx(kd) and only_kd.rank.item() == 0.0
    only_rank = convdr_loss("rank", q, passages=p)
    assert only_rank.total.item() == pytest.approx(rank) and only_rank.kd.item() == 0.0
    with pytest.raises(ValueError):
        convdr_loss("kd", q)
    with pytest.raises(ValueError):
        convdr_loss("rank", q, T)
    with pytest.raises(ValueError):
        convdr_loss("distil", q, T)


def test_in_batch_rank_loss_by_hand():
    """Two rows of (positive, negative); row 0's query also meets row 1's two passages."""
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    p = torch.tensor([[[1.0, 0.0], [0.0, 0.0]], [[0.0, 1.0], [0.5, 0.0]]])
    every = torch.ones(2, 4, dtype=torch.bool)
    # row 0 logits [1, 0, 0, 0.5], target 0; row 1 logits [0, 0, 1, 0], target 2
    row0 = -math.log(math.e / (math.e + 2 + math.exp(0.5)))
    row1 = -math.log(math.e / (math.e + 3))
    assert rank_loss(q, p, candidates=every).item() == pytest.approx((row0 + row1) / 2)
    # a passage masked out of row 0 (say, one of its positives in row 1) leaves its softmax
    masked = every.clone()
    masked[0, 3] = False
    expected0 = -math.log(math.e / (math.e + 2))
    assert rank_loss(q, p, candidates=masked).item() == pytest.approx((expected0 + row1) / 2)
    with pytest.raises(ValueError):
        rank_loss(q, p, candidates=every[:, :3])


def test_in_batch_rank_loss_of_a_row_without_group_stays_finite():
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0]], requires_grad=True)
    p = torch.tensor([[[1.0, 0.0], [0.0, 0.0]], [[0.0, 0.0], [0.0, 0.0]]])
    allowed = torch.tensor([[True, True, False, False], [False, False, True, False]])
    loss = rank_loss(q, p, mask=torch.tensor([True, False]), candidates=allowed)
    assert loss.item() == pytest.approx(math.log(1 + math.exp(-1)))
    loss.backward()
    assert torch.isfinite(q.grad).all() and torch.equal(q.grad[1], torch.zeros(2))
