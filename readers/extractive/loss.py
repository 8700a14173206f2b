"""The DPR reader loss, a pure function of logits and masks.

For a question read against N passages (its positive among sampled negatives):
- selection: cross-entropy of the selection logits over the N passages, target the positive;
- span: marginal log-likelihood of ALL gold span occurrences in the positive passage (an answer
  may occur several times and we cannot tell which occurrence the annotator meant), for the
  start and for the end positions separately:
      span = -(logsumexp_{s in gold starts} start[s] - logsumexp_{s in text} start[s])
             -(logsumexp_{e in gold ends} end[e]     - logsumexp_{e in text} end[e])
  The normaliser runs over passage-text tokens only (`span_mask`), the same positions the
  decoder may choose from.
total = mean selection loss over questions + mean span loss over the passages that have gold
positions. Logits are taken in fp32.

The null option ("no passage answers"): with `null_option=True` every question's softmax gets a
constant logit 0 (no parameter) beside its N passage logits. An answerable question still
targets its positive; an unanswerable one (`answerable` False: every passage read is a
negative) targets that extra column and has no span loss. A passage's selection logit then
means something on its own: above 0, "this passage answers it" beats "none does".
"""
from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor


class ReaderLoss(NamedTuple):
    total: Tensor
    selection: Tensor | None
    span: Tensor | None
    span_rows: int  # passages that contributed a span loss


def _masked_logsumexp(logits: Tensor, mask: Tensor) -> Tensor:
    return torch.logsumexp(logits.masked_fill(~mask, float("-inf")), dim=-1)


def span_nll(logits: Tensor, gold: Tensor, span_mask: Tensor) -> Tensor:
    """-(logsumexp over gold positions - logsumexp over allowed positions), per row.
    Inputs [rows, length]; every row needs a gold position, and gold must be allowed."""
    if bool((gold & ~span_mask).any()):
        raise ValueError("a gold position lies outside the span mask")
    if not bool(gold.any(dim=-1).all()):
        raise ValueError("a row has no gold position")
    logits = logits.float()
    return _masked_logsumexp(logits, span_mask) - _masked_logsumexp(logits, gold)


def reader_loss(start_logits: Tensor, end_logits: Tensor, selection_logits: Tensor | None,
                span_mask: Tensor, gold_starts: Tensor, gold_ends: Tensor,
                positive: Tensor | None = None, passage_mask: Tensor | None = None,
                null_option: bool = False, answerable: Tensor | None = None) -> ReaderLoss:
    """Shapes: start/end logits, span_mask, gold_starts/ends [Q, N, L]; selection_logits and
    passage_mask [Q, N]; positive [Q] (index of the positive passage, default 0); answerable
    [Q] bool (default all; a False one needs `null_option`, see the module docstring).

    Gold positions mark the positive passage's answer tokens (rows without any are left out of
    the span loss: e.g. an answer the window cut off); `passage_mask` False marks padding
    passages that do not take part in the selection softmax."""
    questions, passages = start_logits.shape[:2]
    device = start_logits.device
    if positive is None:
        positive = torch.zeros(questions, dtype=torch.long, device=device)
    if answerable is None:
        answerable = torch.ones(questions, dtype=torch.bool, device=device)
    if not null_option and not bool(answerable.all()):
        raise ValueError("unanswerable questions need the null option")
    if null_option and selection_logits is None:
        raise ValueError("the null option needs selection logits")
    if bool((~answerable[:, None, None] & (gold_starts | gold_ends)).any()):
        raise ValueError("an unanswerable question has gold span positions")
    parts: list[Tensor] = []
    selection = None
    if selection_logits is not None and (passages > 1 or null_option):
        logits = selection_logits.float()
        if passage_mask is not None:
            kept = passage_mask.gather(1, positive[:, None]).squeeze(1)
            if not bool((kept | ~answerable).all()):
                raise ValueError("the positive passage is masked out")
            logits = logits.masked_fill(~passage_mask, float("-inf"))
        target = positive
        if null_option:  # the constant "no passage answers" logit, last
            logits = torch.cat([logits, logits.new_zeros(questions, 1)], dim=1)
            target = torch.where(answerable, positive, torch.full_like(positive, passages))
        selection = torch.nn.functional.cross_entropy(logits, target)
        parts.append(selection)
    rows = (gold_starts.any(-1) & gold_ends.any(-1)).flatten()
    span = None
    count = int(rows.sum())
    if count:
        flat = lambda t: t.flatten(0, 1)[rows]  # noqa: E731 - [Q, N, L] -> [rows, L]
        mask = flat(span_mask)
        span = (span_nll(flat(start_logits), flat(gold_starts), mask)
                + span_nll(flat(end_logits), flat(gold_ends), mask)).mean()
        parts.append(span)
    if not parts:  # each process must call backward with every head in the graph
        total = graph_zero(start_logits, end_logits, selection_logits)
    else:
        total = sum(parts[1:], parts[0])
        if selection_logits is not None and selection is None:  # one passage per question
            total = total + graph_zero(selection_logits)
        if null_option and span is None:  # e.g. only unanswerable questions: heads stay in
            total = total + graph_zero(start_logits, end_logits)
    return ReaderLoss(total, selection, span, count)


def graph_zero(*logits: Tensor | None) -> Tensor:
    """A zero that depends on every given tensor (None skipped): a loss with nothing to learn
    from still reaches every head, so each process's backward touches the same parameters."""
    kept = [t for t in logits if t is not None]
    return sum((t.sum() * 0.0 for t in kept[1:]), kept[0].sum() * 0.0) if kept \
        else torch.zeros(())


class DistillationLoss(NamedTuple):
    total: Tensor
    selection: Tensor | None
    span: Tensor | None


def soft_cross_entropy(logits: Tensor, target: Tensor, mask: Tensor) -> Tensor:
    """-sum(target * log_softmax(logits)) over `mask`, per row; `target` sums to 1 over it."""
    log_probs = torch.log_softmax(logits.float().masked_fill(~mask, float("-inf")), dim=-1)
    return -(target * log_probs.masked_fill(~mask, 0.0)).sum(-1)


def distillation_loss(start_logits: Tensor, end_logits: Tensor, selection_logits: Tensor | None,
                      span_mask: Tensor, passage_mask: Tensor, teacher_selection: Tensor,
                      start_targets: Tensor, end_targets: Tensor,
                      temperature: float = 1.0) -> DistillationLoss:
    """Knowledge distillation from a teacher reader (distill.py), both parts scaled by T^2:

    - selection: cross-entropy of the student's selection softmax (logits / T) against the
      teacher's over the same passages (`teacher_selection` [Q, N], -inf where it has none);
    - span: each passage window's start and end distributions (student logits / T) against the
      teacher's on that window (`start_targets` / `end_targets` [Q, N, L]: each row sums to the
      teacher's probability mass inside the window, 0 where it has none), each row weighed by
      the teacher's probability of its passage among the question's, so spans in passages the
      teacher finds irrelevant count little (p(passage) p(span | passage), as the reader
      decodes).

    A question or row without teacher targets takes no part."""
    t = float(temperature)
    if t <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    kept = passage_mask & torch.isfinite(teacher_selection)
    has_any = kept.any(-1)
    teacher_probs = torch.zeros_like(teacher_selection, dtype=torch.float)
    if bool(has_any.any()):
        teacher_probs[has_any] = torch.softmax(
            teacher_selection[has_any].float().masked_fill(~kept[has_any], float("-inf")) / t,
            dim=-1)
    parts: list[Tensor] = []
    selection = None
    several = kept.sum(-1) > 1
    if selection_logits is not None and bool(several.any()):
        rows = several
        selection = (t * t) * soft_cross_entropy(selection_logits[rows] / t,
                                                 teacher_probs[rows], kept[rows]).mean()
        parts.append(selection)
    weights = torch.where(has_any[:, None], teacher_probs, passage_mask.float()
                          / passage_mask.float().sum(-1, keepdim=True).clamp(min=1))
    span = None
    span_terms = []
    for logits, targets in ((start_logits, start_targets), (end_logits, end_targets)):
        rows = (targets.sum(-1) > 0) & passage_mask
        if not bool(rows.any()):
            continue
        loss = soft_cross_entropy(logits[rows] / t, targets[rows].float(), span_mask[rows])
        weight = weights[rows]
        span_terms.append((t * t) * (loss * weight).sum() / weight.sum().clamp(min=1e-8))
    if span_terms:
        span = sum(span_terms[1:], span_terms[0])
        parts.append(span)
    total = sum(parts[1:], parts[0]) if parts else graph_zero(start_logits, end_logits,
                                                                 selection_logits)
    return DistillationLoss(total, selection, span)
