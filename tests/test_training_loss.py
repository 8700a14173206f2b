"""The DPR NLL loss on hand-made tensors, with expected values computed by hand."""
from __future__ import annotations

import math

import pytest
import torch

from retrievers.training.loss import (NORMALIZED_SCALE, default_scale, dpr_loss,
                                      false_negative_mask, gather_with_grad, nll_loss,
                                      passage_key, positive_targets, scores)


def nll(logits_row: list[float], target: int) -> float:
    """-log softmax(row)[target], written out."""
    return -logits_row[target] + math.log(sum(math.exp(x) for x in logits_row))


def test_in_batch_only_two_orthogonal_pairs():
    # q_i . p_j = identity: each row's logits are [1, 0] / [0, 1].
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    p = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    loss, logits = dpr_loss(q, p, group_size=1, scale=1.0)
    expected = math.log(1 + math.exp(-1))  # = -log(e / (e + 1)) = 0.3133
    assert logits.tolist() == [[1.0, 0.0], [0.0, 1.0]]
    assert loss.item() == pytest.approx(expected, abs=1e-6)
    assert expected == pytest.approx(0.31326, abs=1e-5)


def test_scale_multiplies_the_scores():
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    p = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    loss, _ = dpr_loss(q, p, group_size=1, scale=2.0)
    assert loss.item() == pytest.approx(math.log(1 + math.exp(-2)), abs=1e-6)  # 0.1269


def test_hard_negatives_layout_and_value():
    # Two examples, one hard negative each: passages [pos1, hn1, pos2, hn2].
    q = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    p = torch.tensor([[1.0, 0.0], [0.5, 0.5], [0.0, 1.0], [1.0, 1.0]])
    loss, logits = dpr_loss(q, p, group_size=2, scale=1.0)
    # row 1: [1, 0.5, 0, 1], target column 0; row 2: [0, 1, 2, 2], target column 2.
    assert logits.tolist() == [[1.0, 0.5, 0.0, 1.0], [0.0, 1.0, 2.0, 2.0]]
    expected = (nll([1, 0.5, 0, 1], 0) + nll([0, 1, 2, 2], 2)) / 2
    assert loss.item() == pytest.approx(expected, abs=1e-6)
    assert positive_targets(2, 2).tolist() == [0, 2]
    assert positive_targets(2, 3, offset=2).tolist() == [6, 9]


def test_false_negative_mask_hides_other_examples_copies_of_a_positive():
    # Example 1's positive "A#0" is also example 2's positive; example 2 lists "A#0" and "A#1".
    ids = ["A#0", "X#3", "A#1", "A#0"]  # group 2: [pos1, hn1, pos2, hn2]
    keys = [passage_key(i) for i in ids]
    rows = [{passage_key("A#0")}, {passage_key("A#1"), passage_key("A#0")}]
    mask = false_negative_mask(rows, keys, group_size=2)
    # Row 1: column 3 (example 2's copy of A#0) is masked; its own columns are not.
    # Row 2: column 0 (A#0, example 1's positive) is masked; its own hn "A#0" (column 3) is kept:
    # own hard negatives are never masked (they were deliberately kept if they are there).
    assert mask.tolist() == [[False, False, False, True], [True, False, False, False]]
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    p = torch.tensor([[1.0, 0.0], [0.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    loss, _ = dpr_loss(q, p, 2, 1.0, rows, keys)
    expected = (nll([1, 0, 0], 0) + nll([0, 1, 0], 1)) / 2  # masked columns dropped
    assert loss.item() == pytest.approx(expected, abs=1e-6)
    unmasked, _ = dpr_loss(q, p, 2, 1.0)
    assert unmasked.item() == pytest.approx((nll([1, 0, 0, 1], 0) + nll([0, 0, 1, 0], 2)) / 2,
                                            abs=1e-6)


def test_mask_with_offset_for_a_later_process():
    keys = [passage_key(i) for i in ["A", "B", "C", "D"]]  # 4 examples, group 1, 2 processes
    rows = [{passage_key("C"), passage_key("A")}]  # rank 1's first row is example 2 ("C")
    mask = false_negative_mask(rows, keys, group_size=1, offset=2)
    assert mask.tolist() == [[True, False, False, False]]


def test_nll_refuses_a_mask_that_hides_the_positive():
    with pytest.raises(ValueError, match="hides a positive"):
        nll_loss(torch.zeros(1, 2), torch.tensor([0]), torch.tensor([[True, False]]))


def test_gather_with_grad_keeps_the_local_gradient():
    local = torch.tensor([[1.0, 2.0]], requires_grad=True)
    other = torch.tensor([[5.0, 6.0]])

    def fake_gather(t: torch.Tensor) -> torch.Tensor:  # what all_gather returns on rank 1
        assert not t.requires_grad
        return torch.cat([other, t])

    full = gather_with_grad(local, fake_gather, rank=1, world_size=2)
    assert full.tolist() == [[5.0, 6.0], [1.0, 2.0]]
    full.sum().backward()
    assert local.grad.tolist() == [[1.0, 1.0]]
    with pytest.raises(ValueError, match="expected 1 x 3"):
        gather_with_grad(local, fake_gather, rank=0, world_size=3)


def test_exact_gather_backward_returns_this_process_rows_of_the_summed_gradient():
    local = torch.tensor([[1.0, 2.0]], requires_grad=True)
    other = torch.tensor([[5.0, 6.0]])
    received = []

    def all_reduce_sum(g: torch.Tensor) -> torch.Tensor:  # the other process adds its own
        received.append(g.clone())
        return g + torch.tensor([[10.0, 20.0], [30.0, 40.0]])

    full = gather_with_grad(local, lambda t: torch.cat([other, t]), 1, 2, all_reduce_sum)
    assert full.tolist() == [[5.0, 6.0], [1.0, 2.0]]
    full.backward(torch.tensor([[1.0, 1.0], [2.0, 3.0]]))
    assert received[0].tolist() == [[1.0, 1.0], [2.0, 3.0]]
    assert local.grad.tolist() == [[32.0, 43.0]]  # row 1 of the sum


def test_summed_process_gradients_are_the_global_batch_gradient():
    """Why the all-reduce: with 2 processes each scoring its 2 queries against all 8 passages,
    the mean over processes of their gradients w.r.t. the gathered passages is the gradient of
    the global mean loss (DDP's mean of parameter gradients then matches one process)."""
    torch.manual_seed(0)
    q, p = torch.randn(4, 3), torch.randn(8, 3)
    leaf = p.clone().requires_grad_()
    dpr_loss(q, leaf, 2, 1.0)[0].backward()
    per_process = []
    for rank in (0, 1):
        full = p.clone().requires_grad_()
        logits = scores(q[2 * rank:2 * rank + 2], full)
        nll_loss(logits, positive_targets(2, 2, offset=2 * rank)).backward()
        per_process.append(full.grad)
    assert torch.allclose((per_process[0] + per_process[1]) / 2, leaf.grad, atol=1e-6)
    # the local-only variant (DPR's) misses the other process's share:
    assert not torch.allclose(per_process[0][:4] / 2, leaf.grad[:4], atol=1e-3)


def test_two_process_loss_matches_its_share_of_the_global_loss():
    torch.manual_seed(0)
    q = torch.randn(4, 3)
    p = torch.randn(8, 3)  # 4 examples, group 2
    global_loss, _ = dpr_loss(q, p, 2, 1.0)
    halves = []
    for rank in (0, 1):
        def gather(t: torch.Tensor, rank: int = rank) -> torch.Tensor:
            parts = [p[:4], p[4:]]
            parts[rank] = t
            return torch.cat(parts)
        loss, logits = dpr_loss(q[2 * rank:2 * rank + 2], p[4 * rank:4 * rank + 4], 2, 1.0,
                                gather=gather, rank=rank, world_size=2)
        assert logits.shape == (2, 8)
        halves.append(loss.item())
    assert sum(halves) / 2 == pytest.approx(global_loss.item(), abs=1e-6)


def test_shapes_are_checked():
    with pytest.raises(ValueError, match="3 passages for 2 queries"):
        dpr_loss(torch.zeros(2, 2), torch.zeros(3, 2), 1, 1.0)
    with pytest.raises(ValueError, match="gather function"):
        dpr_loss(torch.zeros(2, 2), torch.zeros(2, 2), 1, 1.0, world_size=2)


def test_default_scale_and_keys():
    assert default_scale(True) == NORMALIZED_SCALE == 20.0
    assert default_scale(False) == 1.0
    assert passage_key("Force#0") == passage_key("Force#0") != passage_key("Force#1")
    assert -2**63 <= passage_key("x") < 2**63
    assert scores(torch.ones(1, 2), torch.ones(3, 2), 2.0).tolist() == [[4.0, 4.0, 4.0]]
