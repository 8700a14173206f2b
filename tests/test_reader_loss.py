"""The DPR reader loss on values computed by hand."""
from __future__ import annotations

import math

import pytest
import torch

from readers.extractive.loss import reader_loss, span_nll


def lse(*values: float) -> float:
    return math.log(sum(math.exp(v) for v in values))


def test_span_nll_marginalises_over_every_gold_position():
    logits = torch.tensor([[0.0, 1.0, 2.0, 3.0]])
    allowed = torch.tensor([[False, True, True, True]])   # position 0 is the query: excluded
    one = torch.tensor([[False, False, True, False]])
    two = torch.tensor([[False, True, False, True]])
    # -(2 - log(e^1 + e^2 + e^3))
    assert span_nll(logits, one, allowed).item() == pytest.approx(lse(1, 2, 3) - 2)
    # -(log(e^1 + e^3) - log(e^1 + e^2 + e^3))
    assert span_nll(logits, two, allowed).item() == pytest.approx(lse(1, 2, 3) - lse(1, 3))
    # the whole allowed set gold: probability 1, loss 0
    assert span_nll(logits, allowed, allowed).item() == pytest.approx(0.0, abs=1e-6)


def test_reader_loss_by_hand():
    # one question, two passages (positive first), three tokens each; token 0 is not text
    start = torch.tensor([[[9.0, 1.0, 0.0], [0.0, 2.0, 2.0]]])
    end = torch.tensor([[[9.0, 0.0, 1.0], [0.0, 0.0, 0.0]]])
    selection = torch.tensor([[1.0, 3.0]])
    text = torch.tensor([[[False, True, True], [False, True, True]]])
    gold_start = torch.zeros(1, 2, 3, dtype=torch.bool)
    gold_end = torch.zeros(1, 2, 3, dtype=torch.bool)
    gold_start[0, 0, 1] = True   # answer = tokens 1..2 of the positive
    gold_end[0, 0, 2] = True
    loss = reader_loss(start, end, selection, text, gold_start, gold_end)
    expected_selection = lse(1, 3) - 1                 # -log softmax([1, 3])[0]
    expected_span = (lse(1, 0) - 1) + (lse(0, 1) - 1)  # start and end, text tokens only
    assert loss.selection.item() == pytest.approx(expected_selection)
    assert loss.span.item() == pytest.approx(expected_span)
    assert loss.total.item() == pytest.approx(expected_selection + expected_span)
    assert loss.span_rows == 1
    # the positive at index 1 instead: the selection term changes accordingly
    moved = reader_loss(start, end, selection, text, gold_start.flip(1), gold_end.flip(1),
                        positive=torch.tensor([1]))
    assert moved.selection.item() == pytest.approx(lse(1, 3) - 3)


def test_span_loss_averages_over_questions_and_skips_rows_without_gold():
    start = torch.tensor([[[0.0, 1.0]], [[0.0, 0.0]], [[5.0, 5.0]]])  # 3 questions, 1 passage
    end = torch.zeros(3, 1, 2)
    text = torch.ones(3, 1, 2, dtype=torch.bool)
    gold_start = torch.tensor([[[False, True]], [[True, False]], [[False, False]]])
    gold_end = torch.tensor([[[True, False]], [[True, False]], [[False, False]]])
    loss = reader_loss(start, end, None, text, gold_start, gold_end)
    first = (lse(0, 1) - 1) + math.log(2)
    second = math.log(2) + math.log(2)
    assert loss.span_rows == 2 and loss.selection is None
    assert loss.span.item() == pytest.approx((first + second) / 2)


def test_padding_passages_leave_the_selection_softmax():
    start = end = torch.zeros(1, 3, 2)
    text = torch.ones(1, 3, 2, dtype=torch.bool)
    no_gold = torch.zeros(1, 3, 2, dtype=torch.bool)
    selection = torch.tensor([[0.0, 0.0, 50.0]])
    mask = torch.tensor([[True, True, False]])
    loss = reader_loss(start, end, selection, text, no_gold, no_gold, passage_mask=mask)
    assert loss.selection.item() == pytest.approx(math.log(2))
    assert loss.span is None and loss.span_rows == 0
    with pytest.raises(ValueError, match="positive passage is masked"):
        reader_loss(start, end, selection, text, no_gold, no_gold,
                    passage_mask=torch.tensor([[False, True, True]]))


def test_gradients_and_bad_masks():
    start = torch.zeros(1, 1, 3, requires_grad=True)
    end = torch.zeros(1, 1, 3, requires_grad=True)
    text = torch.tensor([[[False, True, True]]])
    gold = torch.tensor([[[False, True, False]]])
    loss = reader_loss(start, end, None, text, gold, gold)
    loss.total.backward()
    # d/dlogit of (logsumexp(text) - logit_gold): softmax over text minus the gold indicator
    assert start.grad[0, 0].tolist() == pytest.approx([0.0, -0.5, 0.5])
    outside = torch.tensor([[[True, False, False]]])
    with pytest.raises(ValueError, match="outside the span mask"):
        reader_loss(start, end, None, text, outside, outside)
    # nothing to learn from: a zero that still reaches every head (DDP needs the graph)
    selection = torch.zeros(1, 1, requires_grad=True)
    none = torch.zeros(1, 1, 3, dtype=torch.bool)
    empty = reader_loss(start, end, selection, text, none, none)
    assert empty.total.item() == 0.0
    empty.total.backward()
    assert selection.grad is not None
