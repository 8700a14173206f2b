"""The ConvDR training loop under `accelerate`: one CPU process to many GPUs, same code.

Only the student's query tower is trained. Its inputs are the conversation texts; its targets
are fixed arrays computed once before training: the teacher's embeddings of the rewrites (KD,
targets.py) and the teacher's passage embeddings of each example's positive and mined negatives
(Rank, mining.py), read from the teacher's index. So a step is one forward/backward of the
student on a batch of conversations, nothing else; the teacher never runs in the loop.

Mirrors retrievers/training/trainer.py (and reuses its schedule, step planning, accelerator and
seeded batch order):
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

import math
import os
import shutil
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch

from convqa.errors import ConfigError, ConvQAError, DataError
from convqa.io import load_json, write_json
from convqa.training_log import append_log, trim_log
from retrievers.training.data import example_rng, global_batches
from retrievers.training.loss import default_scale
from retrievers.training.trainer import (CHECKPOINT, MODEL, STATE, TRAINING_JSON, linear_schedule,
                                         make_accelerator, plan_steps, write_checkpoint)

from .loss import MODES, convdr_loss
from .mining import Group, TeacherPassageVectors

__all__ = ["ConvDRTrainConfig", "TrainingSet", "ConvDRBatch", "make_batch", "ConvDRTrainer",
           "train_convdr", "make_accelerator"]


@dataclass
class ConvDRTrainConfig:
    mode: str = "kd"                # kd | rank | multitask
    epochs: int = 1
    batch_size: int = 16            # examples per process per micro-step
    grad_accum: int = 1
    lr: float = 2e-5
    weight_decay: float = 0.0
    warmup_ratio: float = 0.1
    max_steps: int | None = None
    max_grad_norm: float | None = 2.0
    negatives: int = 4              # teacher-mined negatives per example (rank, multitask)
    kd_weight: float = 1.0          # multitask weights
    rank_weight: float = 1.0
    scale: float | None = None      # None: 20 for a normalising teacher, else 1
    bf16: bool = False
    seed: int = 0
    checkpoint_every: int = 200     # optimizer steps; 0 = only at the end
    keep_checkpoint: bool = False
    progress: bool = True

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        for name in ("epochs", "batch_size", "grad_accum", "negatives"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
        for name in ("checkpoint_every", "seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"{name} must be an integer >= 0, got {value!r}")
        if self.max_steps is not None and (isinstance(self.max_steps, bool)
                                           or not isinstance(self.max_steps, int)
                                           or self.max_steps < 1):
            raise ConfigError(f"max_steps must be an integer >= 1, got {self.max_steps!r}")
        if not self.lr > 0 or not math.isfinite(self.lr):
            raise ConfigError(f"lr must be a positive number, got {self.lr!r}")
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise ConfigError(f"warmup_ratio must be in [0, 1), got {self.warmup_ratio!r}")
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
        """The settings a checkpoint must share with the run that resumes it."""
        volatile = {"progress", "checkpoint_every", "keep_checkpoint"}
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in volatile}


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
    targets = kd_mask = passages = rank_mask = None
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
    return ConvDRBatch(queries, targets, kd_mask, passages, rank_mask, filled)


def _read_tensors(path: Path) -> Any:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is a damaged checkpoint
        raise DataError(f"cannot read checkpoint file ({type(exc).__name__})", path) from None


def _rng_state() -> dict[str, Any]:
    state = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: Mapping[str, Any]) -> None:
    torch.set_rng_state(state["cpu"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


@dataclass
class TrainResult:
    model_dir: Path
    steps: int
    seconds: float
    last_loss: float | None
    resumed_from: int = 0
    info: dict[str, Any] = field(default_factory=dict)


class ConvDRTrainer:
    """Trains `model` (a ConvDR) on `data`, writing into `out`."""

    def __init__(self, model, data: TrainingSet, out: str | os.PathLike,
                 config: ConvDRTrainConfig, accelerator: Any = None,
                 info: Mapping[str, Any] | None = None):
        data.check(config)
        self.model = model
        self.data = data
        self.out = Path(out)
        self.config = config
        self.accelerator = accelerator if accelerator is not None else make_accelerator()
        self.info = dict(info or {})

    @property
    def model_dir(self) -> Path:
        return self.out / MODEL

    def finished(self) -> dict[str, Any] | None:
        path = self.out / TRAINING_JSON
        if not path.exists() or not self.model_dir.is_dir():
            return None
        record = load_json(path)
        if record.get("config", {}).get("schedule") != self.config.schedule_key():
            raise ConfigError(f"{self.out} holds a model trained with different settings; "
                              "use another output folder")
        return record

    def train(self, on_step: Callable[[int, float], None] | None = None) -> TrainResult:
        done = self.finished()
        if done is not None:
            return TrainResult(self.model_dir, done["steps"], done["seconds"],
                               done.get("last_loss"), info=done)
        acc, config = self.accelerator, self.config
        world, rank = acc.num_processes, acc.process_index
        per_epoch, total = plan_steps(len(self.data), config, world)
        warmup = round(config.warmup_ratio * total)
        scale = config.scale if config.scale is not None else default_scale(self.model.normalize)

        torch.manual_seed(config.seed + rank)  # dropout; the data order has its own seeds
        start = self._restore_model()
        params = [p for p in self.model.query_encoder.parameters() if p.requires_grad]
        if not params:
            raise ConvQAError("the student has no trainable parameters")
        optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, linear_schedule(warmup, total))
        model, optimizer = acc.prepare(self.model, optimizer)
        if start:
            self._restore_optimizer(optimizer, scheduler, start)
        self._trim_log(start)

        bar = None
        if config.progress and acc.is_main_process:
            from tqdm.auto import tqdm

            bar = tqdm(total=total, initial=start, desc=f"ConvDR ({config.mode})", unit=" steps")
        model.train()
        began = time.perf_counter()
        last_loss = None
        batches: dict[int, list] = {}
        step = start
        try:
            while step < total:
                epoch = step // per_epoch
                if epoch not in batches:
                    batches.clear()
                    batches[epoch] = global_batches(len(self.data), config.batch_size * world,
                                                    config.seed, epoch)
                tick = time.perf_counter()
                sums = torch.zeros(3, dtype=torch.float64)
                filled = 0
                for micro in range(config.grad_accum):
                    indices = batches[epoch][(step % per_epoch) * config.grad_accum + micro]
                    mine = indices[rank * config.batch_size:(rank + 1) * config.batch_size]
                    batch = make_batch(self.data, mine, config, epoch)
                    filled += batch.filled
                    last = micro == config.grad_accum - 1
                    sync = acc.no_sync(model) if not last and world > 1 else nullcontext()
                    with sync:
                        parts = self._forward(model, batch, scale)
                        acc.backward(parts.total / config.grad_accum)
                    sums += torch.tensor([parts.total.item(), parts.kd.item(), parts.rank.item()],
                                         dtype=torch.float64)
                if config.max_grad_norm:
                    acc.clip_grad_norm_(params, config.max_grad_norm)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                step += 1
                means = acc.reduce((sums / config.grad_accum).float().to(acc.device), "mean")
                total_loss, kd, rank_part = (float(v) for v in means.cpu())
                last_loss = total_loss
                self._log({"step": step, "epoch": epoch, "loss": round(total_loss, 6),
                           "kd": round(kd, 6), "rank": round(rank_part, 6),
                           "lr": scheduler.get_last_lr()[0],
                           "seconds": round(time.perf_counter() - tick, 4),
                           "filled_negatives": filled})
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(loss=f"{total_loss:.4f}")
                if config.checkpoint_every and step % config.checkpoint_every == 0 \
                        and step < total:
                    self._save_checkpoint(model, optimizer, scheduler, step)
                if on_step is not None:
                    on_step(step, total_loss)
        finally:
            if bar is not None:
                bar.close()
        seconds = time.perf_counter() - began
        self._save_final(model, step, seconds, last_loss, start, total, scale, warmup)
        acc.free_memory()
        return TrainResult(self.model_dir, step, seconds, last_loss, start,
                           load_json(self.out / TRAINING_JSON))

    def _forward(self, model, batch: ConvDRBatch, scale: float):
        device = self.accelerator.device
        tokens = {k: v.to(device) for k, v in self.model.tokenize_queries(batch.queries).items()}
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16,
                            enabled=self.config.bf16):
            student = model(tokens)
        move = (lambda t: None if t is None else t.to(device))  # noqa: E731
        return convdr_loss(self.config.mode, student.float(), move(batch.targets),
                           move(batch.kd_mask), move(batch.passages), move(batch.rank_mask),
                           scale, self.config.kd_weight, self.config.rank_weight)

    # -- checkpoints ------------------------------------------------------------------------
    def _checkpoint_state(self) -> dict[str, Any] | None:
        path = self.out / CHECKPOINT / STATE
        if not path.exists():
            return None
        state = load_json(path)
        if state.get("schedule") != self.config.schedule_key():
            raise ConfigError(f"{self.out / CHECKPOINT} was written with different training "
                              "settings; use another output folder or delete the checkpoint")
        if state.get("processes") != self.accelerator.num_processes:
            raise ConfigError(f"{self.out / CHECKPOINT} was written by "
                              f"{state.get('processes')} processes, this run has "
                              f"{self.accelerator.num_processes}")
        return state

    def _restore_model(self) -> int:
        state = self._checkpoint_state()
        if state is None:
            return 0
        saved = type(self.model).from_pretrained(self.out / CHECKPOINT / MODEL,
                                                 teacher=self.model.teacher)
        self.model.query_encoder.load_state_dict(saved.query_encoder.state_dict())
        return int(state["step"])

    def _restore_optimizer(self, optimizer, scheduler, step: int) -> None:
        folder = self.out / CHECKPOINT
        optimizer.load_state_dict(_read_tensors(folder / "optimizer.pt"))
        scheduler.load_state_dict(_read_tensors(folder / "scheduler.pt"))
        _set_rng_state(_read_tensors(folder / f"rng-{self.accelerator.process_index}.pt"))
        if scheduler.last_epoch != step:
            raise DataError(f"scheduler is at step {scheduler.last_epoch}, state.json says "
                            f"{step} (checkpoint damaged?)", folder / STATE)

    def _save_checkpoint(self, model, optimizer, scheduler, step: int) -> None:
        """OUT/checkpoint.partial, then swapped in: a kill leaves the old or the new one."""
        acc = self.accelerator
        write_checkpoint(acc, self.out / CHECKPOINT, acc.unwrap_model(model).save_pretrained,
                         optimizer,
                         scheduler, {"step": step, "schedule": self.config.schedule_key(),
                                     "processes": acc.num_processes})

    def _save_final(self, model, step: int, seconds: float, last_loss: float | None,
                    start: int, total: int, scale: float, warmup: int) -> None:
        acc = self.accelerator
        acc.wait_for_everyone()
        if acc.is_main_process:
            unwrapped = acc.unwrap_model(model)
            unwrapped.save_pretrained(self.model_dir)
            write_json(self.out / TRAINING_JSON, {
                "method": "ConvDR", "mode": self.config.mode, "steps": step,
                "total_steps": total, "resumed_from": start, "seconds": round(seconds, 2),
                "last_loss": last_loss, "processes": acc.num_processes,
                "device": str(acc.device), "examples": len(self.data), "scale": scale,
                "warmup_steps": warmup, "teacher": unwrapped.config.teacher,
                "teacher_fingerprint": unwrapped.teacher_fingerprint,
                "config": {**asdict(self.config), "schedule": self.config.schedule_key()},
                **self.data.info, **self.info})
            if not self.config.keep_checkpoint:
                shutil.rmtree(self.out / CHECKPOINT, ignore_errors=True)
        acc.wait_for_everyone()

    # -- log --------------------------------------------------------------------------------
    def _log(self, record: dict[str, Any]) -> None:
        append_log(self.out, record, self.accelerator.is_main_process)

    def _trim_log(self, step: int) -> None:
        """Drop log lines past the checkpoint we resume from (they will be redone)."""
        trim_log(self.out, step, self.accelerator.is_main_process)


def train_convdr(model, data: TrainingSet, out: str | os.PathLike,
                 config: ConvDRTrainConfig | None = None, accelerator: Any = None,
                 info: Mapping[str, Any] | None = None,
                 on_step: Callable[[int, float], None] | None = None) -> TrainResult:
    """Train (or resume, or return the finished result of) one ConvDR run into `out`."""
    if not len(data):
        raise ConvQAError("no training examples")
    return ConvDRTrainer(model, data, out, config or ConvDRTrainConfig(), accelerator,
                         info).train(on_step)
