"""Each phrase-training loss on inputs small enough to check by hand."""
from __future__ import annotations

import math

import pytest
import torch

from convqa.errors import ConfigError
from phrase_index.losses import (PreBatchQueue, batch_span_loss, combine, distill_loss,
                                 filter_loss, gather_gold,
                                 in_batch_negative_loss, pre_batch_negative_loss,
                                 query_side_loss, span_loss, token_scores, turn_loss)


def close(value: torch.Tensor, expected: float) -> bool:
    return math.isclose(float(value), expected, rel_tol=1e-5, abs_tol=1e-6)


def test_token_scores_and_gather_gold():
    tokens = torch.tensor([[[1.0, 0.0], [0.0, 2.0], [3.0, 3.0]]])
    assert token_scores(torch.tensor([[1.0, 1.0]]), tokens).tolist() == [[1.0, 2.0, 6.0]]
    assert gather_gold(tokens, torch.tensor([2])).tolist() == [[3.0, 3.0]]


def test_span_loss_is_cross_entropy_over_text_tokens_only():
    # token 0 is masked (e.g. [CLS]): its large logit must not count
    logits = torch.tensor([[5.0, 0.0, math.log(3.0)]])
    mask = torch.tensor([[False, True, True]])
    loss = span_loss(logits, logits, mask, torch.tensor([2]), torch.tensor([2]))
    assert close(loss, -math.log(0.75))
    # start right, end wrong: the mean of -ln(3/4) and -ln(1/4)
    loss = span_loss(logits, logits, mask, torch.tensor([2]), torch.tensor([1]))
    assert close(loss, (-math.log(0.75) - math.log(0.25)) / 2)
    with pytest.raises(ValueError, match="gold start position is not a passage-text token"):
        span_loss(logits, logits, mask, torch.tensor([0]), torch.tensor([1]))


def test_batch_span_loss_normalizes_over_every_passage_of_the_batch():
    # 3 questions, passages of 3 tokens (token 0 not text), 1-d vectors: score = q * h
    h = torch.tensor([[[9.0], [1.0], [2.0]],
                      [[9.0], [0.0], [3.0]],
                      [[9.0], [1.0], [2.0]]])
    mask = torch.tensor([[False, True, True]] * 3)
    q = torch.ones(3, 1)
    gold = torch.tensor([2, 1, 2])
    loss = batch_span_loss(q, q, h, h, mask, gold, gold, torch.tensor([0, 1, 2]))
    # question 0: gold e^2 among text tokens e^1, e^2 | e^0, e^3 | e^1, e^2
    denominator = 2 * (math.e + math.e ** 2) + 1 + math.e ** 3
    expected = [-math.log(math.e ** 2 / denominator), -math.log(1 / denominator),
                -math.log(math.e ** 2 / denominator)]
    assert close(loss, sum(expected) / 3)
    # rows 0 and 2 hold the same passage: each leaves the other's copy out
    loss = batch_span_loss(q, q, h, h, mask, gold, gold, torch.tensor([0, 1, 0]))
    alone = math.e + math.e ** 2 + 1 + math.e ** 3
    expected = [-math.log(math.e ** 2 / alone), -math.log(1 / denominator),
                -math.log(math.e ** 2 / alone)]
    assert close(loss, sum(expected) / 3)
    # with one question it is the single-passage span loss
    one = batch_span_loss(q[:1], q[:1], h[:1], h[:1], mask[:1], gold[:1], gold[:1],
                          torch.tensor([0]))
    logits = token_scores(q[:1], h[:1])
    assert close(one, float(span_loss(logits, logits, mask[:1], gold[:1], gold[:1])))
    with pytest.raises(ValueError, match="gold end position is not a passage-text token"):
        batch_span_loss(q, q, h, h, mask, gold, torch.tensor([0, 1, 2]), torch.tensor([0, 1, 2]))


def test_hard_negative_passages_join_the_batch_wide_normalization():
    h = torch.tensor([[[9.0], [1.0], [2.0]],
                      [[9.0], [0.0], [3.0]]])
    mask = torch.tensor([[False, True, True]] * 2)
    q = torch.ones(2, 1)
    gold = torch.tensor([2, 1])
    groups = torch.tensor([0, 1])
    # one negative passage: text tokens 1 and 2 (e^4, e^5); token 0 is padding (e^9, ignored)
    negative = torch.tensor([[[9.0], [4.0], [5.0]]])
    n_mask = torch.tensor([[False, True, True]])
    loss = batch_span_loss(q, q, h, h, mask, gold, gold, groups, (negative, negative, n_mask))
    denominator = math.e + math.e ** 2 + 1 + math.e ** 3 + math.e ** 4 + math.e ** 5
    expected = [-math.log(math.e ** 2 / denominator), -math.log(1 / denominator)]
    assert close(loss, sum(expected) / 2)
    # a negative passage adds terms to every denominator, so the loss only grows
    plain = batch_span_loss(q, q, h, h, mask, gold, gold, groups)
    assert float(loss) > float(plain)
    # a negative whose text is all masked out changes nothing
    nothing = batch_span_loss(q, q, h, h, mask, gold, gold, groups,
                              (negative, negative, torch.zeros_like(n_mask)))
    assert close(nothing, float(plain))
    with pytest.raises(ValueError, match="negative passages have 2 token positions"):
        batch_span_loss(q, q, h, h, mask, gold, gold, groups,
                        (negative[:, :2], negative[:, :2], n_mask[:, :2]))


def test_distill_loss_is_kl_from_the_teacher():
    mask = torch.tensor([[False, True, True]])
    student = torch.tensor([[9.0, math.log(3.0), 0.0]])     # (3/4, 1/4) over the text
    uniform = torch.tensor([[-7.0, 0.0, 0.0]])               # (1/2, 1/2)
    assert close(distill_loss(student, student, student, student, mask), 0.0)
    expected = 0.5 * math.log(0.5 / 0.75) + 0.5 * math.log(0.5 / 0.25)
    assert close(distill_loss(student, student, uniform, uniform, mask), expected)
    # the teacher saw only token 1: its distribution is all there, KL = -log q(1)
    seen = torch.tensor([[False, True, False]])
    assert close(distill_loss(student, student, uniform, uniform, mask, seen), -math.log(0.75))
    # temperature 2 flattens both and scales by T^2
    t2 = distill_loss(student, student, uniform, uniform, mask, temperature=2.0)
    q = torch.softmax(torch.tensor([math.log(3.0), 0.0]) / 2, 0)
    assert close(t2, 4 * float(0.5 * torch.log(0.5 / q).sum()))
    # a row whose teacher saw nothing is left out; all rows empty: 0
    assert close(distill_loss(student, student, uniform, uniform, mask,
                              torch.zeros_like(mask)), 0.0)


def test_filter_loss_is_binary_cross_entropy_on_text_tokens():
    mask = torch.tensor([[False, True, True, True]])
    zeros = torch.zeros(1, 4)
    assert close(filter_loss(zeros, zeros, mask, torch.tensor([1]), torch.tensor([2])),
                 math.log(2))
    confident = torch.tensor([[0.0, 20.0, -20.0, -20.0]])
    assert float(filter_loss(confident, confident, mask, torch.tensor([1]),
                             torch.tensor([1]))) < 1e-6


def test_in_batch_negatives_and_shared_gold_phrases():
    q = torch.eye(2)
    assert close(in_batch_negative_loss(q, q, q, q), math.log(1 + math.exp(-1)))
    # both questions have the same gold phrase: no negative is left, the loss is 0
    assert close(in_batch_negative_loss(q, q, q, q, groups=torch.tensor([7, 7])), 0.0)
    swapped = torch.eye(2).flip(0)
    assert float(in_batch_negative_loss(q, q, swapped, swapped)) > math.log(2)


def test_pre_batch_queue_keeps_the_last_batches():
    queue = PreBatchQueue(2)
    q = torch.tensor([[1.0, 0.0]])
    assert close(pre_batch_negative_loss(q, q, q, q, queue), 0.0)  # empty: nothing to score
    queue.push(torch.tensor([[1.0, 0.0]]), torch.tensor([[1.0, 0.0]]))
    assert close(pre_batch_negative_loss(q, q, q, q, queue), math.log(2))  # a tie with the gold
    queue.push(torch.tensor([[0.0, 1.0]]), torch.tensor([[0.0, 1.0]]))
    queue.push(torch.tensor([[0.0, 1.0]]), torch.tensor([[0.0, 1.0]]))
    start, end = queue.tensors()
    assert len(queue) == 2 and start.tolist() == [[0.0, 1.0], [0.0, 1.0]]  # oldest dropped
    assert close(pre_batch_negative_loss(q, q, q, q, queue), math.log(1 + 2 * math.exp(-1)))
    grad = torch.ones(1, 2, requires_grad=True)
    queue.push(grad, grad)
    assert not queue.tensors()[0].requires_grad
    with pytest.raises(ConfigError, match="pre-batch size"):
        PreBatchQueue(-1)


def test_turn_loss_pulls_turn_t_toward_turn_t_minus_1():
    candidates = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    positives = torch.tensor([0])
    same = turn_loss(torch.tensor([[1.0, 0.0]]), candidates, positives, temperature=1.0)
    assert close(same, -math.log(math.e / (math.e + 1)))
    other = turn_loss(torch.tensor([[0.0, 1.0]]), candidates, positives, temperature=1.0)
    assert float(same) < float(other)
    # cosine: the scale of the vectors does not matter
    assert close(turn_loss(torch.tensor([[5.0, 0.0]]), candidates * 3, positives,
                           temperature=1.0), float(same))
    # excluded candidates are no negatives (but the positive is never excluded)
    exclude = torch.tensor([[True, True]])
    assert close(turn_loss(torch.tensor([[0.0, 1.0]]), candidates, positives, exclude,
                           temperature=1.0), 0.0)
    # anchors without a previous turn are skipped; none at all: 0
    assert close(turn_loss(torch.eye(2), candidates, torch.tensor([-1, -1])), 0.0)
    mixed = turn_loss(torch.eye(2), candidates, torch.tensor([0, -1]), temperature=1.0)
    assert close(mixed, float(same))


def test_query_side_loss_is_marginal_likelihood_of_correct_candidates():
    scores = torch.tensor([[1.0, 1.0, 1.0, 1.0]])
    assert close(query_side_loss(scores, torch.tensor([[True, False, False, False]])),
                 math.log(4))
    assert close(query_side_loss(scores, torch.tensor([[True, True, False, False]])),
                 math.log(2))
    assert close(query_side_loss(scores, torch.zeros(1, 4, dtype=torch.bool)), 0.0)


def test_combine_weights_and_refusals():
    losses = {"span": torch.tensor(2.0), "turn": torch.tensor(3.0), "pre_batch": None}
    assert close(combine(losses, {"span": 1.0, "turn": 0.5}), 3.5)
    assert close(combine(losses, {"span": 1.0, "turn": 0.0}), 2.0)  # --turn-weight 0
    with pytest.raises(ConfigError, match="unknown loss 'spam'"):
        combine(losses, {"span": 1.0, "turn": 1.0, "spam": 1.0})
    with pytest.raises(ConfigError, match="no weight given for loss 'turn'"):
        combine(losses, {"span": 1.0})
    with pytest.raises(ConfigError, match="no loss with a non-zero weight"):
        combine(losses, {"span": 0.0, "turn": 0.0})
