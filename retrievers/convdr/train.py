"""The ConvDR training loop under `accelerate`: one CPU process to many GPUs, same code.

Only the student's query tower is trained. Its inputs are the conversation texts; its targets
are fixed arrays computed once before training: the teacher's embeddings of the rewrites (KD,
targets.py) and the teacher's passage embeddings of each example's positive and mined negatives
(Rank, mining.py), read from the teacher's index. So a step is one forward/backward of the
student on a batch of conversations, nothing else; the teacher never runs in the loop.

Runs the loop every convqa trainer shares (convqa/training/loop.py: schedule, step planning,
accelerator, seeded batch order, checkpoints):
- `batch_size` examples per process per micro-step from the seeded order of each epoch (each
  process takes its slice of the global batch); each example's positive and negatives are drawn
  from a generator seeded by (seed, epoch, example), so a resumed run sees the same batches;
- AdamW, linear warm-up then decay, gradient clipping, accumulation, optional bf16 autocast;
- checkpoints every `checkpoint_every` optimizer steps into OUT/checkpoint, swapped in
  atomically: the student (`ConvDR.save_pretrained`, safetensors), optimizer and scheduler state
  and every process's RNG state (`torch.save`, read back with `weights_only=True`), state.json.
  A rerun after a kill resumes there and ends with the same weights as an uninterrupted run;
- OUT/log.jsonl, one line per optimizer step (step, epoch, loss, kd, rank, lr, seconds);
  OUT/model and OUT/training.json when finished.

Distributed: every process holds the same number of examples per step; KD is a plain mean, so
DDP's gradient average equals one process with the whole batch. The Rank term is a mean over
each process's examples that have a group, so with uneven counts across processes it weights
examples slightly differently from one big batch (documented, not corrected).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch

from convqa.errors import ConfigError, ConvQAError
from convqa.training.loop import StepTrainer, TrainResult, make_accelerator
from convqa.training.schedule import StepSchedule, check_counts, example_rng
from retrievers.training.loss import default_scale

from .loss import MODES, convdr_loss
from .mining import Group, TeacherPassageVectors

__all__ = ["ConvDRTrainConfig", "TrainingSet", "ConvDRBatch", "make_batch", "ConvDRTrainer",
           "train_convdr", "make_accelerator"]


@dataclass
class ConvDRTrainConfig(StepSchedule):
    mode: str = "kd"                # kd | rank | multitask
    negatives: int = 4              # teacher-mined negatives per example (rank, multitask)
    in_batch_negatives: bool = False  # rank also against the batch's other groups (loss.py)
    kd_weight: float = 1.0          # multitask weights
    rank_weight: float = 1.0
    scale: float | None = None      # None: 20 for a normalising teacher, else 1

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        super().__post_init__()
        check_counts(self, ("negatives",), 1)
        for name in ("kd_weight", "rank_weight"):
            if not getattr(self, name) >= 0:
                raise ConfigError(f"{name} must be >= 0, got {getattr(self, name)!r}")
        if self.scale is not None and not self.scale > 0:
            raise ConfigError(f"scale must be positive, got {self.scale!r}")

    @property
    def uses_kd(self) -> bool:
        return self.mode in ("kd", "multitask")

    @property
    def uses_rank(self) -> bool:
        return self.mode in ("rank", "multitask")

    def schedule_key(self) -> dict[str, Any]:
        """The settings a checkpoint must share with the run that resumes it (a run without
        in-batch negatives keeps the key it had before the option existed)."""
        return super().schedule_key(() if self.in_batch_negatives else ("in_batch_negatives",))


@dataclass
class TrainingSet:
    """What the loop reads: the student's input texts and the fixed teacher-side arrays.

    `targets[i]` is the teacher's embedding of example i's rewrite where `has_target[i]`;
    `groups[i]` its Rank group or None; `vectors` gives the teacher's passage embeddings."""

    queries: list[str]
    targets: np.ndarray | None = None
    has_target: np.ndarray | None = None
    groups: list[Group | None] | None = None
    vectors: TeacherPassageVectors | None = None
    info: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.queries)

    def check(self, config: ConvDRTrainConfig) -> None:
        n = len(self.queries)
        if config.uses_kd:
            if self.targets is None or self.has_target is None:
                raise ConfigError(f"mode {config.mode!r} needs the teacher's targets")
            if len(self.targets) != n or len(self.has_target) != n:
                raise ConfigError(f"{len(self.targets)} targets for {n} examples")
        if config.uses_rank:
            if self.groups is None or self.vectors is None:
                raise ConfigError(f"mode {config.mode!r} needs mined groups and the teacher's "
                                  "passage vectors")
            if len(self.groups) != n:
                raise ConfigError(f"{len(self.groups)} groups for {n} examples")
        usable = [self._usable(i, config) for i in range(n)]
        if not any(usable):
            raise ConvQAError(f"no example has what mode {config.mode!r} trains on")

    def _usable(self, i: int, config: ConvDRTrainConfig) -> bool:
        kd = config.uses_kd and bool(self.has_target[i])
        rank = config.uses_rank and self.groups[i] is not None
        return kd or rank


@dataclass
class ConvDRBatch:
    queries: list[str]
    targets: torch.Tensor | None     # [B, d]
    kd_mask: torch.Tensor | None     # [B] bool
    passages: torch.Tensor | None    # [B, 1 + negatives, d], positive first
    rank_mask: torch.Tensor | None   # [B] bool
    candidates: torch.Tensor | None = None  # [B, B * (1 + negatives)] bool: in-batch negatives
    filled: int = 0                  # negatives repeated because fewer were mined


def _draw_group(group: Group, count: int, rng: np.random.Generator) -> tuple[list[int], int]:
    positive = group.positives[int(rng.integers(len(group.positives)))]
    pool = group.negatives
    if len(pool) >= count:
        chosen = [pool[i] for i in rng.choice(len(pool), size=count, replace=False)]
        return [positive, *chosen], 0
    extra = [pool[i] for i in rng.integers(len(pool), size=count - len(pool))]
    return [positive, *pool, *extra], count - len(pool)


def make_batch(data: TrainingSet, indices: Sequence[int], config: ConvDRTrainConfig,
               epoch: int) -> ConvDRBatch:
    indices = [int(i) for i in indices]
    queries = [data.queries[i] for i in indices]
    targets = kd_mask = passages = rank_mask = candidates = None
    filled = 0
    if config.uses_kd:
        targets = torch.from_numpy(np.ascontiguousarray(data.targets[indices], np.float32))
        kd_mask = torch.from_numpy(np.asarray(data.has_target[indices], dtype=bool))
    if config.uses_rank:
        keys, mask = [], []
        for index in indices:
            group = data.groups[index]
            if group is None:
                keys.append(None)
                mask.append(False)
                continue
            drawn, extra = _draw_group(group, config.negatives, example_rng(config.seed, epoch,
                                                                            index))
            keys.append(drawn)
            mask.append(True)
            filled += extra
        width = 1 + config.negatives
        flat = [k for row in keys if row is not None for k in row]
        vectors = data.vectors.get(flat) if flat else None
        array = np.zeros((len(indices), width, data.vectors.dim), dtype=np.float32)
        position = 0
        for row, drawn in enumerate(keys):
            if drawn is not None:
                array[row] = vectors[position:position + width]
                position += width
        passages = torch.from_numpy(array)
        rank_mask = torch.tensor(mask, dtype=torch.bool)
        if config.in_batch_negatives:
            candidates = in_batch_candidates(
                keys, [data.groups[i].positives if data.groups[i] else [] for i in indices],
                width)
    return ConvDRBatch(queries, targets, kd_mask, passages, rank_mask, filled=filled,
                       candidates=candidates)


def in_batch_candidates(keys: Sequence[list[int] | None], positives: Sequence[Sequence[int]],
                        width: int) -> torch.Tensor:
    """[B, B * width] bool: which passages of the batch query i is ranked against. Its own
    group always; another row's passages unless that row has no group or the passage is one
    of query i's positives (a false negative). A row without a group sees only its own first
    slot, so its masked-out loss stays finite."""
    count = len(keys)
    allowed = torch.zeros(count, count * width, dtype=torch.bool)
    for i, own in enumerate(keys):
        if own is None:
            allowed[i, i * width] = True
            continue
        mine = set(positives[i])
        for row, drawn in enumerate(keys):
            if drawn is None:
                continue
            for slot, key in enumerate(drawn):
                allowed[i, row * width + slot] = row == i or key not in mine
    return allowed


class ConvDRTrainer(StepTrainer):
    """Trains `model` (a ConvDR) on `data`, writing into `out`."""

    def __init__(self, model, data: TrainingSet, out: str | os.PathLike,
                 config: ConvDRTrainConfig, accelerator: Any = None,
                 info: Mapping[str, Any] | None = None):
        data.check(config)
        super().__init__(model, out, config, accelerator, info)
        self.data = data
        self.progress_label = f"ConvDR ({config.mode})"
        self.scale = config.scale

    def num_examples(self) -> int:
        return len(self.data)

    def before_optimizer(self) -> None:
        if self.config.scale is None:
            self.scale = default_scale(self.model.normalize)

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        """The student's query tower only."""
        params = [p for p in self.model.query_encoder.parameters() if p.requires_grad]
        if not params:
            raise ConvQAError("the student has no trainable parameters")
        return params

    def make_batch(self, indices, epoch: int) -> ConvDRBatch:
        return make_batch(self.data, indices, self.config, epoch)

    def batch_counts(self, batch: ConvDRBatch) -> dict[str, int]:
        return {"filled_negatives": batch.filled}

    def compute_loss(self, model, batch: ConvDRBatch):
        device = self.accelerator.device
        tokens = {k: v.to(device) for k, v in self.model.tokenize_queries(batch.queries).items()}
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16,
                            enabled=self.config.bf16):
            student = model(tokens)
        move = (lambda t: None if t is None else t.to(device))  # noqa: E731
        parts = convdr_loss(self.config.mode, student.float(), move(batch.targets),
                            move(batch.kd_mask), move(batch.passages), move(batch.rank_mask),
                            self.scale, self.config.kd_weight, self.config.rank_weight,
                            move(batch.candidates))
        return parts.total, {"loss": parts.total.item(), "kd": parts.kd.item(),
                             "rank": parts.rank.item()}

    def load_weights(self, folder) -> None:
        """The student's query tower; the teacher is the one this run was given."""
        saved = type(self.model).from_pretrained(folder, teacher=self.model.teacher)
        self.model.query_encoder.load_state_dict(saved.query_encoder.state_dict())

    def final_record(self, model, run: dict[str, Any]) -> dict[str, Any]:
        return {"method": "ConvDR", "mode": self.config.mode, **run, "scale": self.scale,
                "teacher": model.config.teacher,
                "teacher_fingerprint": model.teacher_fingerprint,
                "config": self.config_record(), **self.data.info, **self.info}


def train_convdr(model, data: TrainingSet, out: str | os.PathLike,
                 config: ConvDRTrainConfig | None = None, accelerator: Any = None,
                 info: Mapping[str, Any] | None = None,
                 on_step: Callable[[int, float], None] | None = None) -> TrainResult:
    """Train (or resume, or return the finished result of) one ConvDR run into `out`."""
    if not len(data):
        raise ConvQAError("no training examples")
    return ConvDRTrainer(model, data, out, config or ConvDRTrainConfig(), accelerator,
                         info).train(on_step)
