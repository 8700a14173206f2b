"""The DPR negative log-likelihood loss, as small functions that can be checked by hand.

Layout of one (per-process) batch of B examples with n hard negatives each: the passages are
grouped per example, `[pos_1, hn_1^1 .. hn_1^n, pos_2, hn_2^1 .. , pos_B, ...]`, so a group has
G = 1 + n passages and example i's positive is passage i * G. Every query is scored against every
passage of the *global* batch (all processes' passages, gathered), so the negatives of a query are
the other examples' positives and hard negatives (in-batch negatives) plus its own hard negatives:

    loss = mean_i  -log softmax(scale * q_i . P^T)[target_i]

Only this process's queries contribute to its loss. The trainer gathers passages with an exact
gradient (each process's passage rows receive the gradient of every process's loss, via an
all-reduce in the backward pass) and DDP averages the parameter gradients, so W processes with B
examples each compute the gradient of the mean loss over the global batch of W x B, the same as
one process with batch W x B (tests/test_training_distributed.py). Every process holds the same B
(batches are never ragged).

`scale` (1 / temperature): DPR used raw dot products (scale 1). An encoder that L2-normalises
its embeddings (MiniLM) has scores in [-1, 1], and a softmax over such a narrow range is almost
flat, so the loss barely separates positives from negatives; a scale of ~20 (temperature 0.05,
the value sentence-transformers trains MiniLM with) restores a useful range. `default_scale`
encodes that choice.

False negatives: passages of *other* examples that are positives of query i (two turns about the
same article in one batch, common with article-level positives) are masked out of its softmax
when `mask_false_negatives` is on; a query's own hard negatives are never masked (they were
filtered when mined, or deliberately kept with `keep_positives_in_negatives`).
"""
from __future__ import annotations

import hashlib
from typing import Callable, Sequence

import torch
import torch.nn.functional as F

NORMALIZED_SCALE = 20.0


def default_scale(normalized: bool) -> float:
    """1 / temperature: 20 for unit-length embeddings (cosine), 1 for raw dot products (DPR)."""
    return NORMALIZED_SCALE if normalized else 1.0


def passage_key(passage_id: str) -> int:
    """A stable signed 64-bit key of a passage id, so ids can travel in a tensor (all_gather)."""
    digest = hashlib.blake2b(passage_id.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


def scores(queries: torch.Tensor, passages: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """[B, d] x [P, d] -> [B, P] scaled inner products (computed in float32)."""
    return scale * queries.float() @ passages.float().T


def positive_targets(batch_size: int, group_size: int, offset: int = 0) -> torch.Tensor:
    """Column of each query's positive: `(offset + i) * group_size`, where `offset` is the number
    of examples held by earlier processes (rank * batch_size)."""
    return (torch.arange(batch_size) + offset) * group_size


def false_negative_mask(row_positive_keys: Sequence[set[int]],
                        column_keys: Sequence[int] | torch.Tensor,
                        group_size: int, offset: int = 0) -> torch.Tensor:
    """[B, P] bool, True where column j holds a positive of query i but belongs to another
    example (its own positive and its own hard negatives are never masked)."""
    columns = torch.as_tensor(column_keys, dtype=torch.int64).view(-1)
    rows = len(row_positive_keys)
    width = max((len(keys) for keys in row_positive_keys), default=0)
    if rows == 0 or width == 0:
        return torch.zeros(rows, columns.numel(), dtype=torch.bool)
    padded = torch.zeros(rows, width, dtype=torch.int64)
    valid = torch.zeros(rows, width, dtype=torch.bool)
    for i, keys in enumerate(row_positive_keys):
        padded[i, :len(keys)] = torch.tensor(sorted(keys), dtype=torch.int64)
        valid[i, :len(keys)] = True
    hits = ((padded.unsqueeze(2) == columns.view(1, 1, -1)) & valid.unsqueeze(2)).any(1)
    owner = torch.arange(columns.numel()) // group_size
    own = (torch.arange(rows) + offset).view(-1, 1) == owner.view(1, -1)
    return hits & ~own


def nll_loss(logits: torch.Tensor, targets: torch.Tensor,
             mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean over rows of -log softmax(logits)[target]; masked entries are left out of the
    softmax. A mask may not hide a row's target."""
    if mask is not None:
        if mask.gather(1, targets.view(-1, 1)).any():
            raise ValueError("the false-negative mask hides a positive")
        logits = logits.masked_fill(mask, float("-inf"))
    return F.cross_entropy(logits, targets)


class _GatherExact(torch.autograd.Function):
    """all_gather whose backward sums every process's gradient for this process's rows, so the
    gradient is that of the global-batch loss (gloo has no reduce_scatter; all_reduce works
    on every backend)."""

    @staticmethod
    def forward(ctx, tensor, gather, reduce_sum, rank, world_size):  # type: ignore[override]
        ctx.reduce_sum, ctx.rank, ctx.size = reduce_sum, rank, tensor.shape[0]
        gathered = gather(tensor.detach().contiguous())
        _check_gathered(gathered, tensor.shape[0], world_size)
        return gathered

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        total = ctx.reduce_sum(grad.contiguous())
        start = ctx.rank * ctx.size
        return total[start:start + ctx.size], None, None, None, None


def _check_gathered(gathered: torch.Tensor, size: int, world_size: int) -> None:
    if gathered.shape[0] != size * world_size:
        raise ValueError(f"gathered {gathered.shape[0]} rows, expected {size} x {world_size}")


def gather_with_grad(tensor: torch.Tensor, gather: Callable[[torch.Tensor], torch.Tensor],
                     rank: int, world_size: int,
                     reduce_sum: Callable[[torch.Tensor], torch.Tensor] | None = None
                     ) -> torch.Tensor:
    """All processes' `tensor`s concatenated along dim 0 (every process passes the same shape).

    Without `reduce_sum` (DPR's own implementation) the gradient reaches only this process's
    part, from this process's loss; the other processes' losses do not train these rows. With
    `reduce_sum` (an all-reduce sum) the backward pass adds every process's gradient for these
    rows, so W processes with batch B compute exactly the gradient of one process with batch
    W x B."""
    if world_size == 1:
        return tensor
    if reduce_sum is not None:
        return _GatherExact.apply(tensor, gather, reduce_sum, rank, world_size)
    gathered = gather(tensor.detach().contiguous())
    size = tensor.shape[0]
    _check_gathered(gathered, size, world_size)
    return torch.cat([gathered[:rank * size], tensor, gathered[(rank + 1) * size:]])


def dpr_loss(queries: torch.Tensor, passages: torch.Tensor, group_size: int, scale: float,
             row_positive_keys: Sequence[set[int]] | None = None,
             column_keys: Sequence[int] | None = None,
             gather: Callable[[torch.Tensor], torch.Tensor] | None = None,
             rank: int = 0, world_size: int = 1,
             reduce_sum: Callable[[torch.Tensor], torch.Tensor] | None = None
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, logits) for this process's B queries against the global batch of passages.

    `passages` is this process's [B * group_size, d]; `column_keys` are the `passage_key`s of the
    *global* passages (gathered by the caller), and with `row_positive_keys` enable the
    false-negative mask (pass None for both to disable it); `reduce_sum` makes the gathered
    gradient exact (see `gather_with_grad`)."""
    batch = queries.shape[0]
    if passages.shape[0] != batch * group_size:
        raise ValueError(f"{passages.shape[0]} passages for {batch} queries x group {group_size}")
    if world_size > 1:
        if gather is None:
            raise ValueError("a gather function is needed with more than one process")
        passages = gather_with_grad(passages.float(), gather, rank, world_size, reduce_sum)
    logits = scores(queries, passages, scale)
    targets = positive_targets(batch, group_size, rank * batch).to(logits.device)
    mask = None
    if row_positive_keys is not None and column_keys is not None:
        mask = false_negative_mask(row_positive_keys, column_keys, group_size,
                                   rank * batch).to(logits.device)
    return nll_loss(logits, targets, mask), logits
