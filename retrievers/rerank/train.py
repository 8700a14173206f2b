"""Training the cross-encoder under `accelerate` (one CPU process, several, or a GPU: the same
code), and its held-out ranking score.

    torchrun --nproc_per_node 2 -m convqa.front.cli.main train reranker ...   # or plain `convqa`

- A micro-batch is `batch_size` questions per process, each scored against 1 positive (one of
  its positives, seeded) and up to `negatives` K negatives: its article and mined negatives
  shuffled and interleaved, article first, so both kinds are always among them. The choices
  are drawn by a generator seeded by (seed, epoch, example number): a resumed run, or a run on
  another number of processes, sees the same candidates. A question with fewer negatives
  than K has its empty slots masked out of the softmax.
- Batches are built ahead of their step by `loader_workers` processes (a DataLoader,
  convqa/training/loader.py; `auto`: none on a CPU-only run, up to 4 with a GPU), the same
  batches in the same order as building each in the training process.
- Loss: listwise softmax cross-entropy over each question's 1 + K logits, target the positive
  (fp32 logits); DDP averages the gradients of the processes. With a teacher's scores
  (distill.py) and `distill_weight` w: (1 - w) x that + w x the cross-entropy against the
  teacher's softmax over the same candidates (`listwise_distillation_loss`).
- Batches are length-bucketed (`length_pool`, convqa/training/schedule.py): questions of
  similar length go together, and each forward pass is padded to its own longest pair; with
  `pair_chunk` the pairs of a batch go through the encoder that many at a time in order of
  length, each chunk cut to its own longest (cheaper on CPUs; 0: one pass, for a GPU).
- The loop, checkpoints (OUT/checkpoint every `checkpoint_every` steps, resumed by a rerun),
  precision (`fp32`, `bf16` autocast, or `auto`: measured at each start), OUT/log.jsonl,
  OUT/model and OUT/training.json are convqa/training/loop.py's, shared by every trainer.
- With `eval_every` N, a fixed sample of held-out questions (`eval_examples`) is ranked at
  step 0 and every N steps, its MRR / Hits@1 written into log.jsonl as `{"step", "heldout"}`.

Held-out score (`evaluate_ranking`): each question's positives and all its stored negatives
are scored; the rank of its best positive counts every negative scoring at least as high (a
model that scores all alike ranks last, not first); MRR and Hits@1 (percent) per source and
over all questions.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch
from torch import Tensor

from convqa.errors import ConvQAError
from convqa.example_records import ids_digest
from convqa.precision import autocast
from convqa.training.loop import TrainResult, make_accelerator
from convqa.training.schedule import bucketed_batches, check_counts, example_rng
from convqa.training.student import StudentSchedule
from convqa.training.student_trainer import StudentTrainer
from convqa.types import Passage
from readers.extractive.model import DEFAULT_HISTORY

from .data import NEGATIVE_KINDS, RerankExample
from .distill import TeacherScores, TeacherScoreSet
from .model import CrossEncoder

__all__ = ["RerankTrainConfig", "RerankTrainer", "evaluate_ranking", "listwise_loss",
           "make_accelerator", "make_rerank_batch", "train_reranker"]


@dataclass
class RerankTrainConfig(StudentSchedule):
    batch_size: int = 8               # questions per process per micro-step
    lr: float = 3e-5
    weight_decay: float = 0.01
    max_grad_norm: float | None = 1.0
    negatives: int = 7                # K: negatives per question in its softmax
    history: str | dict = field(default_factory=lambda: dict(DEFAULT_HISTORY))
    pair_chunk: int = 0               # pairs per forward pass, by length; 0: all at once
    eval_examples: int = 200          # held-out questions in those scores

    def __post_init__(self) -> None:
        super().__post_init__()
        check_counts(self, ("negatives", "eval_examples"), 1)
        check_counts(self, ("pair_chunk",), 0)

    def schedule_key(self) -> dict[str, Any]:
        return super().schedule_key(skip=("eval_examples", "pair_chunk"))


# ---------------------------------------------------------------------------------------------
# Batches and loss


@dataclass
class RerankBatch:
    """One process's micro-batch: the real pairs, row-major by question, and where each sits
    in the [questions, 1 + K] grid (slot 0: the positive)."""

    tensors: dict[str, Tensor]
    slots: Tensor          # [pairs] long: question * group + slot
    questions: int
    group: int
    padded: int            # empty slots (questions with fewer than K negatives)
    teacher: Tensor | None = None  # [questions, group] the teacher's logits, -inf: empty


def choose_negatives(example: RerankExample, count: int, rng: np.random.Generator
                     ) -> list[tuple[str, int]]:
    """Up to `count` negatives as (kind, number in that kind's list): both kinds shuffled,
    then taken in turn, article first (numbers, so a teacher's scores can follow them)."""
    pools = [[(kind, int(i)) for i in rng.permutation(len(getattr(example, kind)))]
             for kind in NEGATIVE_KINDS]
    chosen: list[tuple[str, int]] = []
    while len(chosen) < count and any(pools):
        for pool in pools:
            if pool and len(chosen) < count:
                chosen.append(pool.pop(0))
    return chosen


def make_rerank_batch(examples: Sequence[RerankExample], indices: Sequence[int],
                      queries: Callable[[int], str], model: CrossEncoder, negatives: int,
                      seed: int, epoch: int,
                      teacher: Mapping[str, TeacherScores] | None = None) -> RerankBatch:
    """The batch of examples `indices`; `queries(i)` is the query text of example i; with
    `teacher` (scores by example id) the teacher's logits of the drawn candidates too."""
    group = 1 + negatives
    texts: list[str] = []
    passages: list[Passage] = []
    slots: list[int] = []
    taught = torch.full((len(indices), group), float("-inf")) if teacher is not None else None
    for row, index in enumerate(indices):
        example = examples[int(index)]
        rng = example_rng(seed, epoch, int(index))
        positive = int(rng.integers(len(example.positives)))
        numbers = [("positives", positive)] + choose_negatives(example, negatives, rng)
        texts += [queries(int(index))] * len(numbers)
        passages += [getattr(example, kind)[number] for kind, number in numbers]
        slots += [row * group + slot for slot in range(len(numbers))]
        if taught is not None:
            scores = teacher[example.id]
            taught[row, :len(numbers)] = torch.tensor([scores.score(kind, number)
                                                       for kind, number in numbers])
    return RerankBatch(model.encode_pairs(texts, passages), torch.tensor(slots, dtype=torch.long),
                       len(indices), group, len(indices) * group - len(slots), taught)


def listwise_loss(logits: Tensor) -> Tensor:
    """Mean softmax cross-entropy of [questions, 1 + K] logits (-inf: empty slots), the
    positive in slot 0; in fp32."""
    target = torch.zeros(logits.shape[0], dtype=torch.long, device=logits.device)
    return torch.nn.functional.cross_entropy(logits.float(), target)


def listwise_distillation_loss(logits: Tensor, teacher: Tensor, temperature: float = 1.0
                               ) -> Tensor:
    """Mean cross-entropy of the student's softmax over each question's candidates against
    the teacher's (both / T), scaled by T^2; -inf marks empty slots in both."""
    t = float(temperature)
    mask = torch.isfinite(teacher)
    target = torch.softmax(teacher.float() / t, dim=-1)
    log_probs = torch.log_softmax(logits.float().masked_fill(~mask, float("-inf")) / t, dim=-1)
    return (t * t) * -(target * log_probs.masked_fill(~mask, 0.0)).sum(-1).mean()


def chunked_logits(model, inputs: dict[str, Tensor], chunk: int) -> Tensor:
    """The logits of all pairs, `chunk` pairs per forward pass in order of length, each pass
    cut to its own longest pair (one pass pads them all to the longest). 0: one pass."""
    mask = inputs["attention_mask"]
    if not chunk or mask.shape[0] <= chunk:
        return model(**inputs)
    lengths = mask.sum(1)
    order = torch.argsort(lengths, descending=True, stable=True)
    parts = []
    for begin in range(0, len(order), chunk):
        rows = order[begin:begin + chunk]
        used = int(lengths[rows].max())
        parts.append(model(**{k: v[rows, :used] for k, v in inputs.items()}))
    return torch.cat(parts)[torch.argsort(order)]


# ---------------------------------------------------------------------------------------------
# The loop


examples_digest = ids_digest  # the digest of the example ids a checkpoint is keyed by


class RerankTrainer(StudentTrainer):
    """Trains `model` on `examples` (all of them: pass the train split) into `out`."""

    what = "a reranker"
    compared = "settings or data"
    progress_label = "training reranker"
    precision_what = "reranker training"
    teacher_what = "a teacher's scores"

    def __init__(self, model: CrossEncoder, examples: Sequence[RerankExample],
                 out: str | os.PathLike, config: RerankTrainConfig, accelerator: Any = None,
                 info: dict[str, Any] | None = None, heldout: Sequence[RerankExample] = (),
                 teacher: TeacherScoreSet | None = None):
        from convqa.history import model_history_strategy

        if not examples:
            raise ConvQAError("no reranker training examples")
        super().__init__(model, out, config, accelerator, info, teacher)
        self.examples = list(examples)
        self.strategy = model_history_strategy(config.history, model)
        model.config.history = self.strategy.to_dict()  # saved with the model
        self.data_key = {"examples": len(self.examples),
                         "ids_sha256": examples_digest(self.examples)}
        self.curve_sample = heldout_sample(heldout, config.eval_examples, config.seed) \
            if config.eval_every else []
        self._queries: dict[int, str] = {}
        self._lengths: list[int] | None = None

    def schedule(self) -> dict[str, Any]:
        extra = {"teacher": self.teacher.key} if self.teacher is not None else {}
        return {**self.config.schedule_key(), "data": self.data_key, **extra}

    def query(self, index: int) -> str:
        if index not in self._queries:
            example = self.examples[index]
            self._queries[index] = self.strategy.format(example.question,
                                                        example.history_turns())
        return self._queries[index]

    def num_examples(self) -> int:
        return len(self.examples)

    def epoch_batches(self, epoch: int, global_batch: int):
        if not self.config.length_pool:
            return super().epoch_batches(epoch, global_batch)
        if self._lengths is None:  # the question's text and its longest candidate
            self._lengths = [len(e.question) + sum(len(q) + len(a or "") for q, a in e.history)
                             + max(len(p.title) + len(p.text) for p in e.positives + e.negatives)
                             for e in self.examples]
        return bucketed_batches(self._lengths, global_batch, self.config.seed, epoch,
                                self.config.length_pool)

    def make_batch(self, indices, epoch: int) -> RerankBatch:
        return make_rerank_batch(self.examples, indices, self.query, self.model,
                                 self.config.negatives, self.config.seed, epoch,
                                 self.teacher.examples if self.teacher else None)

    def batch_counts(self, batch: RerankBatch) -> dict[str, int]:
        return {"empty_slots": batch.padded}

    def compute_loss(self, model, batch: RerankBatch):
        device = self.accelerator.device
        inputs = {k: v.to(device, non_blocking=True) for k, v in batch.tensors.items()}
        with autocast(self.precision, device):
            scores = chunked_logits(model, inputs, self.config.pair_chunk)
        grid = torch.full((batch.questions * batch.group,), float("-inf"), device=device)
        grid = grid.index_put((batch.slots.to(device, non_blocking=True),), scores.float())
        logits = grid.view(batch.questions, batch.group)
        loss = listwise_loss(logits)
        accuracy = (logits.argmax(1) == 0).float().mean()
        logged = {"loss": loss.detach().float(), "batch_hits@1": accuracy.detach()}
        if batch.teacher is not None:
            taught = listwise_distillation_loss(logits, batch.teacher.to(device),
                                                self.config.distill_temperature)
            weight = self.config.distill_weight
            logged.update({"hard_loss": logged["loss"], "distill_loss": taught.detach().float()})
            loss = (1.0 - weight) * loss + weight * taught
            logged["loss"] = loss.detach().float()
        return loss, logged

    def score_share(self, model, share: Sequence[RerankExample]) -> list[tuple[str, int, int]]:
        return ranked_positions(model, share)

    def summarize_curve(self, gathered: list[tuple[str, int, int]],
                        seconds: float) -> dict[str, Any]:
        return summarize_ranks(gathered)


def train_reranker(model: CrossEncoder, examples: Sequence[RerankExample],
                   out: str | os.PathLike, config: RerankTrainConfig | None = None,
                   accelerator: Any = None, info: dict[str, Any] | None = None,
                   on_step: Callable[[int, float], None] | None = None,
                   heldout: Sequence[RerankExample] = (),
                   teacher: TeacherScoreSet | None = None) -> TrainResult:
    """Train (or resume, or return the finished result of) one run into `out`; with `teacher`
    (and `config.distill_weight`), learning from a teacher's scores too."""
    return RerankTrainer(model, examples, out, config or RerankTrainConfig(), accelerator, info,
                         heldout, teacher).train(on_step)


# ---------------------------------------------------------------------------------------------
# Held-out ranking


def heldout_sample(examples: Sequence[RerankExample], count: int | None,
                   seed: int = 0) -> list[RerankExample]:
    """At most `count` examples of each source, the first in a seeded order of their ids: a
    fixed sample that does not depend on the file's order."""
    by_source: dict[str, list[RerankExample]] = {}
    for example in examples:
        by_source.setdefault(example.source or "examples", []).append(example)
    chosen: list[RerankExample] = []
    for source in sorted(by_source):
        items = sorted(by_source[source],
                       key=lambda e: hashlib.sha256(f"{seed}:{e.id}".encode()).digest())
        chosen += items if count is None else items[:count]
    return chosen


def ranked_positions(model_or_reranker: Any, examples: Sequence[RerankExample],
                     progress: str | None = None) -> list[tuple[str, int, int]]:
    """(source, rank of the best positive, candidates) of each example; a tie with a negative
    counts against the positive. A bare model is scored in fp32 with its training history.
    `progress`: a bar's label (a large model ranks a few hundred questions for many minutes)."""
    from tqdm.auto import tqdm

    from .reranker import CrossEncoderReranker

    reranker = model_or_reranker
    if isinstance(reranker, CrossEncoder):
        reranker = CrossEncoderReranker.from_model(reranker, precision="fp32")
    rows = []
    for example in tqdm(examples, desc=progress, unit=" q", disable=progress is None):
        candidates = example.positives + example.negatives
        scores = reranker.score(reranker.query_text(example.question, example.history_turns()),
                                candidates)
        best = max(scores[:len(example.positives)])
        rank = 1 + sum(s >= best for s in scores[len(example.positives):])
        rows.append((example.source or "examples", rank, len(candidates)))
    return rows


def summarize_ranks(rows: Sequence[tuple[str, int, int]]) -> dict[str, Any]:
    """MRR and Hits@1 (percent) per source and over all questions, with the mean number of
    candidates (chance Hits@1 is about 100 / candidates)."""
    def scores(items) -> dict[str, Any]:
        count = len(items)
        return {"count": count,
                "mrr": round(sum(1.0 / r for _, r, _ in items) / count, 4) if count else 0.0,
                "hits@1": round(100.0 * sum(r == 1 for _, r, _ in items) / count, 2)
                if count else 0.0,
                "candidates": round(sum(c for _, _, c in items) / count, 2) if count else 0.0}

    sources = sorted({s for s, _, _ in rows})
    return {**scores(list(rows)),
            "sources": {s: scores([r for r in rows if r[0] == s]) for s in sources}}


def evaluate_ranking(model_or_reranker: Any, examples: Sequence[RerankExample]
                     ) -> dict[str, Any]:
    """MRR / Hits@1 of the positive among each example's stored candidates."""
    return summarize_ranks(ranked_positions(model_or_reranker, examples))
