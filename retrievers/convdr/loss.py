"""ConvDR's losses as pure functions (checked by hand in tests/test_convdr_loss.py).

- KD: the student's embedding of the conversation should be the teacher's embedding of the
  rewrite. `kd_loss` = mean over examples of the squared L2 distance ||s - t||^2 (summed over
  dimensions). For unit-length embeddings that is 2 - 2 cos(s, t), so the loss does not shrink
  with the dimension the way an element-wise mean (torch's MSELoss, = ||s - t||^2 / d) does; the
  two differ only by the constant factor d, which the learning rate would otherwise absorb.
- Rank: cross-entropy of the student query against [positive, negatives] passage embeddings
  (the teacher's, fixed), positive in column 0: -log softmax(scale * q . P^T)[0]. `scale`
  is 1/temperature, 20 for normalised embeddings (see retrievers/training/loss.py).
  With `candidates` (a [B, B * G] mask) the Rank term also reads the batch's other groups:
  query i is scored against every passage of the batch, its own positive (column i * G) the
  target, and the mask leaves out rows without a group and other rows' passages that are
  positives of query i. Negatives from the whole batch (mostly other articles) keep the query
  where the rest of the collection is, while its own mined group (mostly the same article)
  teaches the finer choice; without them a query tower trained on its own group alone drifts.
- Multitask: kd_weight * KD + rank_weight * Rank.

Each term is a masked mean: `kd_mask` / `rank_mask` say which examples have that term's input
(a rewrite's target, a positive with negatives); an example without it contributes nothing, and
a term with no example in the batch is 0 (still part of the graph, so every process of a
distributed run takes the same backward path).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

MODES = ("kd", "rank", "multitask")


def _masked_mean(values: Tensor, mask: Tensor | None) -> Tensor:
    if mask is None:
        return values.mean()
    mask = mask.to(device=values.device, dtype=torch.bool)
    if mask.shape != values.shape:
        raise ValueError(f"mask of shape {tuple(mask.shape)} for {tuple(values.shape)} values")
    count = mask.sum()
    if count == 0:
        return (values * 0.0).sum()
    return values.masked_fill(~mask, 0.0).sum() / count


def kd_loss(student: Tensor, target: Tensor, mask: Tensor | None = None) -> Tensor:
    """Mean over (masked) rows of ||student - target||^2: [B, d] x [B, d] -> scalar."""
    if student.shape != target.shape:
        raise ValueError(f"student {tuple(student.shape)} and target {tuple(target.shape)} "
                         "differ in shape")
    distances = (student.float() - target.float().detach()).pow(2).sum(-1)
    return _masked_mean(distances, mask)


def rank_loss(queries: Tensor, passages: Tensor, scale: float = 1.0,
              mask: Tensor | None = None, candidates: Tensor | None = None) -> Tensor:
    """Mean over (masked) rows of -log softmax(scale * q_i . P_i^T)[0]: queries [B, d],
    passages [B, G, d] with each row's positive first and its G - 1 negatives after. With
    `candidates` ([B, B * G] bool), row i is scored against every passage of the batch that
    the mask allows, its positive at column i * G."""
    if passages.dim() != 3 or passages.shape[0] != queries.shape[0] \
            or passages.shape[2] != queries.shape[1]:
        raise ValueError(f"passages must be [B, G, d] for queries {tuple(queries.shape)}, got "
                         f"{tuple(passages.shape)}")
    count, width = passages.shape[:2]
    if candidates is None:
        logits = scale * torch.einsum("bd,bgd->bg", queries.float(), passages.float().detach())
        targets = torch.zeros(count, dtype=torch.long, device=logits.device)
    else:
        if tuple(candidates.shape) != (count, count * width):
            raise ValueError(f"candidates must be [{count}, {count * width}], got "
                             f"{tuple(candidates.shape)}")
        flat = passages.float().detach().reshape(count * width, -1)
        logits = scale * queries.float() @ flat.T
        logits = logits.masked_fill(~candidates.to(device=logits.device, dtype=torch.bool),
                                    float("-inf"))
        targets = torch.arange(count, device=logits.device) * width
    losses = F.cross_entropy(logits, targets, reduction="none")
    return _masked_mean(losses, mask)


@dataclass
class LossParts:
    total: Tensor
    kd: Tensor
    rank: Tensor


def convdr_loss(mode: str, student: Tensor, target: Tensor | None = None,
                kd_mask: Tensor | None = None, passages: Tensor | None = None,
                rank_mask: Tensor | None = None, scale: float = 1.0, kd_weight: float = 1.0,
                rank_weight: float = 1.0, candidates: Tensor | None = None) -> LossParts:
    """The loss of `mode`: "kd" (needs target), "rank" (needs passages) or "multitask"
    (both, weighted). Unused terms are reported as 0."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    zero = (student * 0.0).sum()
    kd = rank = zero
    if mode in ("kd", "multitask"):
        if target is None:
            raise ValueError(f"mode {mode!r} needs the teacher's targets")
        kd = kd_loss(student, target, kd_mask)
    if mode in ("rank", "multitask"):
        if passages is None:
            raise ValueError(f"mode {mode!r} needs passage embeddings")
        rank = rank_loss(student, passages, scale, rank_mask, candidates)
    if mode == "kd":
        total = kd
    elif mode == "rank":
        total = rank
    else:
        total = kd_weight * kd + rank_weight * rank
    return LossParts(total, kd.detach(), rank.detach())
