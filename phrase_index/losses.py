"""The training losses of the phrase model, one small function each, combined by weights.

Notation: B questions, each with its own (gold) passage of L tokens; `mask` [B, L] marks the
passage-text tokens (the only possible phrase boundaries); `q_start`, `q_end` [B, d] are the
query vectors; `h` [B, L, d] the token vectors; gold positions are token indices [B].

- `span_loss`: cross-entropy of the gold start (end) over the tokens of the question's own
  passage, scores `q_start . h_i` (DensePhrases' single-passage loss).
- `batch_span_loss`: the same cross-entropy over the text tokens of every passage of the batch
  (shared normalization): the only loss whose negatives are every token of other passages, so
  that scores compare across passages as a corpus search compares them. Batches hold
  consecutive turns of a conversation, whose passages are often of the same article: those
  are the hard negatives. Other copies of the question's own passage are left out. Mined hard
  negative passages (`negatives`: passages without the answer, e.g. BM25's) join the
  normalization as passages no question of the batch is answered in.
- `distill_loss`: KL(teacher || student) of the start and end distributions, the teacher being
  the trained extractive reader reading the same passage.
- `filter_loss`: binary cross-entropy of the filter logits: is this token a gold start (end)?
- `in_batch_negative_loss`: phrase level: each query against the gold start (end) vectors of
  the other questions of the batch.
- `pre_batch_negative_loss`: the same against the gold vectors of the C previous batches
  (`PreBatchQueue`, detached), DensePhrases' pre-batch negatives.
- `turn_loss`: PRO-ConvQA's L_turn: the query representation of turn t is pulled toward that
  of turn t-1 of the same conversation, against the other turns in the batch.
- `query_side_loss`: query-side fine-tuning: the marginal likelihood of the retrieved phrases
  that are correct, among the top phrases retrieved from the frozen index.
- `combine(losses, weights)`: the weighted sum (PRO-ConvQA's total is lambda1 * L_neg +
  lambda2 * L_turn on top of the DensePhrases losses; the weights say which is which).

Every function returns a scalar fp32 tensor; a loss with nothing to score (an empty queue, no
turn with its previous turn in the batch) returns 0 with no gradient, so combining stays valid.
"""
from __future__ import annotations

from typing import Mapping

import torch
import torch.nn.functional as F
from torch import Tensor

from convqa.errors import ConfigError

LOSS_NAMES = ("span", "batch_span", "distill", "filter", "in_batch", "pre_batch", "turn",
              "query_side")


def _zero(like: Tensor) -> Tensor:
    return torch.zeros((), dtype=torch.float32, device=like.device)


def token_scores(query: Tensor, tokens: Tensor) -> Tensor:
    """`query . h_i` for every token of each question's own passage: [B, d] x [B, L, d] -> [B, L]."""
    return torch.einsum("bd,bld->bl", query.float(), tokens.float())


def _masked_log_softmax(logits: Tensor, mask: Tensor) -> Tensor:
    return torch.log_softmax(logits.float().masked_fill(~mask, float("-inf")), dim=-1)


def _check_positions(positions: Tensor, mask: Tensor, name: str) -> None:
    picked = mask.gather(1, positions.long().unsqueeze(1))
    if not bool(picked.all()):
        raise ValueError(f"a gold {name} position is not a passage-text token")


def span_loss(start_logits: Tensor, end_logits: Tensor, mask: Tensor, start_positions: Tensor,
              end_positions: Tensor) -> Tensor:
    """Mean of the start and end cross-entropies over each passage's text tokens."""
    _check_positions(start_positions, mask, "start")
    _check_positions(end_positions, mask, "end")
    start = F.nll_loss(_masked_log_softmax(start_logits, mask), start_positions.long())
    end = F.nll_loss(_masked_log_softmax(end_logits, mask), end_positions.long())
    return (start + end) / 2


def batch_span_loss(q_start: Tensor, q_end: Tensor, h_start: Tensor, h_end: Tensor,
                    mask: Tensor, start_positions: Tensor, end_positions: Tensor,
                    passage_groups: Tensor,
                    negatives: tuple[Tensor, Tensor, Tensor] | None = None) -> Tensor:
    """Cross-entropy of each question's gold start (end) token over the text tokens of all B
    passages of the batch, `[B, (B + N) * L]` scores. `passage_groups` [B]: equal for rows
    holding the same passage window; those other rows are masked out for each other's
    questions (the same tokens would be a second gold). `negatives`: (start vectors, end
    vectors [N, L, d], text mask [N, L]) of N passages that answer no question of the batch,
    padded to the same L; every question scores their tokens too."""
    batch, length = mask.shape
    _check_positions(start_positions, mask, "start")
    _check_positions(end_positions, mask, "end")
    same = passage_groups.view(-1, 1) == passage_groups.view(1, -1)
    same.fill_diagonal_(False)
    allowed = mask.bool().unsqueeze(0) & ~same.unsqueeze(-1)            # [B(query), B, L]
    if negatives is not None:
        n_start, n_end, n_mask = negatives
        if n_mask.shape[1] != length:
            raise ValueError(f"negative passages have {n_mask.shape[1]} token positions, the "
                             f"batch's passages {length}")
        h_start, h_end = torch.cat([h_start, n_start]), torch.cat([h_end, n_end])
        extra = n_mask.bool().unsqueeze(0).expand(batch, -1, -1)
        allowed = torch.cat([allowed, extra], dim=1)                  # [B, B + N, L]
    rows = allowed.shape[1]
    offsets = torch.arange(batch, device=mask.device) * length

    def one(query: Tensor, tokens: Tensor, positions: Tensor) -> Tensor:
        scores = torch.einsum("qd,pld->qpl", query.float(), tokens.float())
        scores = scores.masked_fill(~allowed, float("-inf")).reshape(batch, rows * length)
        return F.cross_entropy(scores, offsets + positions.long())

    return (one(q_start, h_start, start_positions) + one(q_end, h_end, end_positions)) / 2


def _kl(student: Tensor, teacher: Tensor, mask: Tensor, teacher_mask: Tensor,
        temperature: float) -> Tensor:
    teacher_mask = teacher_mask & mask
    rows = teacher_mask.any(dim=1)
    if not bool(rows.any()):
        return _zero(student)
    log_q = _masked_log_softmax(student[rows] / temperature, mask[rows])
    log_p = _masked_log_softmax(teacher[rows].detach() / temperature, teacher_mask[rows])
    p = log_p.exp()
    terms = torch.where(teacher_mask[rows], p * (log_p - log_q), torch.zeros_like(p))
    return terms.sum(dim=1).mean() * temperature ** 2


def distill_loss(start_logits: Tensor, end_logits: Tensor, teacher_start: Tensor,
                 teacher_end: Tensor, mask: Tensor, teacher_mask: Tensor | None = None,
                 temperature: float = 1.0) -> Tensor:
    """KL(teacher || student) of the start and end distributions (mean of the two), scaled by
    T^2 as usual. `teacher_mask` marks the tokens the teacher saw (default: `mask`); the
    teacher's distribution is over those, the student's over all of `mask`. Rows where the
    teacher saw nothing are left out."""
    if temperature <= 0:
        raise ConfigError(f"distillation temperature must be > 0, got {temperature}")
    teacher_mask = mask if teacher_mask is None else teacher_mask
    return (_kl(start_logits, teacher_start, mask, teacher_mask, temperature)
            + _kl(end_logits, teacher_end, mask, teacher_mask, temperature)) / 2


def filter_loss(start_filter: Tensor, end_filter: Tensor, mask: Tensor, start_positions: Tensor,
                end_positions: Tensor) -> Tensor:
    """Binary cross-entropy over the text tokens: 1 at the gold start (end), 0 elsewhere."""
    def one(logits: Tensor, positions: Tensor) -> Tensor:
        target = torch.zeros_like(logits, dtype=torch.float32)
        target.scatter_(1, positions.long().unsqueeze(1), 1.0)
        return F.binary_cross_entropy_with_logits(logits.float()[mask], target[mask])

    return (one(start_filter, start_positions) + one(end_filter, end_positions)) / 2


def gather_gold(tokens: Tensor, positions: Tensor) -> Tensor:
    """The vectors of the gold tokens: [B, L, d], [B] -> [B, d]."""
    index = positions.long().view(-1, 1, 1).expand(-1, 1, tokens.shape[-1])
    return tokens.gather(1, index).squeeze(1)


def _in_batch(query: Tensor, gold: Tensor, groups: Tensor | None) -> Tensor:
    scores = query.float() @ gold.float().T
    if groups is not None:
        same = groups.view(-1, 1) == groups.view(1, -1)
        same.fill_diagonal_(False)
        scores = scores.masked_fill(same, float("-inf"))
    return F.cross_entropy(scores, torch.arange(len(query), device=query.device))


def in_batch_negative_loss(q_start: Tensor, q_end: Tensor, gold_start: Tensor, gold_end: Tensor,
                           groups: Tensor | None = None) -> Tensor:
    """Each query's gold start (end) vector against the other questions' gold vectors.
    `groups` [B]: questions with the same group id share their gold phrase (the same answer in
    the same passage), so they are not each other's negatives."""
    return (_in_batch(q_start, gold_start, groups) + _in_batch(q_end, gold_end, groups)) / 2


class PreBatchQueue:
    """The gold start/end vectors of the last `size` batches, detached (oldest dropped first)."""

    def __init__(self, size: int):
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ConfigError(f"pre-batch size must be an int >= 0, got {size!r}")
        self.size = size
        self._batches: list[tuple[Tensor, Tensor]] = []

    def __len__(self) -> int:
        return len(self._batches)

    def push(self, gold_start: Tensor, gold_end: Tensor) -> None:
        if self.size == 0:
            return
        self._batches.append((gold_start.detach().float(), gold_end.detach().float()))
        del self._batches[:-self.size]

    def tensors(self) -> tuple[Tensor, Tensor] | None:
        """(start [N, d], end [N, d]) of every queued batch, None when empty."""
        if not self._batches:
            return None
        return (torch.cat([s for s, _ in self._batches]), torch.cat([e for _, e in self._batches]))

    def clear(self) -> None:
        self._batches.clear()


def _pre_batch(query: Tensor, gold: Tensor, queue: Tensor) -> Tensor:
    positive = (query.float() * gold.float()).sum(-1, keepdim=True)
    logits = torch.cat([positive, query.float() @ queue.to(query.device).float().T], dim=1)
    return F.cross_entropy(logits, torch.zeros(len(query), dtype=torch.long,
                                               device=query.device))


def pre_batch_negative_loss(q_start: Tensor, q_end: Tensor, gold_start: Tensor,
                            gold_end: Tensor, queue: PreBatchQueue) -> Tensor:
    """Each query's gold vector against the queued gold vectors of earlier batches."""
    queued = queue.tensors()
    if queued is None:
        return _zero(q_start)
    return (_pre_batch(q_start, gold_start, queued[0])
            + _pre_batch(q_end, gold_end, queued[1])) / 2


def turn_loss(anchors: Tensor, candidates: Tensor, positives: Tensor,
              exclude: Tensor | None = None, temperature: float = 0.1) -> Tensor:
    """L_turn: cross-entropy of each anchor (turn t) picking its positive candidate (turn t-1
    of its conversation) among `candidates` (the batch's turns), by cosine / temperature.

    `positives` [N] indexes `candidates` (-1: no previous turn, the anchor is skipped);
    `exclude` [N, M] marks candidates that are no negatives of an anchor (the anchor itself,
    the same query met twice)."""
    if temperature <= 0:
        raise ConfigError(f"turn-loss temperature must be > 0, got {temperature}")
    rows = positives >= 0
    if not bool(rows.any()):
        return _zero(anchors)
    logits = F.normalize(anchors[rows].float(), dim=-1) @ \
        F.normalize(candidates.float(), dim=-1).T / temperature
    targets = positives[rows].long()
    if exclude is not None:
        blocked = exclude[rows].clone()
        blocked[torch.arange(len(targets)), targets] = False
        logits = logits.masked_fill(blocked, float("-inf"))
    return F.cross_entropy(logits, targets)


def query_side_loss(scores: Tensor, positive: Tensor) -> Tensor:
    """-log of the softmax mass of the correct phrases among each query's candidates
    (scores [B, K], positive [B, K] bool); queries without a correct candidate are skipped."""
    rows = positive.any(dim=1)
    if not bool(rows.any()):
        return _zero(scores)
    scores, positive = scores[rows].float(), positive[rows]
    return (torch.logsumexp(scores, dim=1)
            - torch.logsumexp(scores.masked_fill(~positive, float("-inf")), dim=1)).mean()


def combine(losses: Mapping[str, Tensor | None], weights: Mapping[str, float]) -> Tensor:
    """sum(weights[name] * losses[name]); a zero weight or a None loss adds nothing. Every
    weight must name a known loss and every computed loss must have a weight."""
    unknown = sorted(set(weights) - set(LOSS_NAMES))
    if unknown:
        raise ConfigError(f"unknown loss '{unknown[0]}' (known: {', '.join(LOSS_NAMES)})")
    missing = sorted(name for name, value in losses.items()
                     if value is not None and name not in weights)
    if missing:
        raise ConfigError(f"no weight given for loss '{missing[0]}'")
    total: Tensor | None = None
    for name, value in losses.items():
        weight = float(weights[name]) if value is not None else 0.0
        if value is None or weight == 0.0:
            continue
        term = weight * value.float()
        total = term if total is None else total + term
    if total is None:
        raise ConfigError("no loss with a non-zero weight to train on")
    return total
