"""Training and evaluating the FiD reader under `accelerate`: one CPU process to many GPUs, same
code, with the conventions of the dual-encoder trainer (retrievers/training/trainer.py).

    accelerate launch --num_processes 4 -m convqa.cli.main train fid ...   # or plain `convqa`

- Batches: `batch_size` examples per process per micro-step, taken from a seeded permutation of
  the examples per epoch (the ragged tail is dropped); each process builds its own slice, so
  nothing but gradients is exchanged. An example with several gold answers trains on one of
  them drawn per (seed, epoch, example), as FiD does.
- Loss: mean token cross-entropy of the answer (eos included) given the fused passages.
- AdamW, linear warm-up then linear decay to 0, gradient clipping, gradient accumulation (DDP
  syncs only on the last micro-step), optional bf16 autocast (CPU or GPU).
- Checkpoints every `checkpoint_every` optimizer steps into OUT/checkpoint (swapped in whole):
  the model via `save_pretrained` (safetensors), optimizer/scheduler state and each process's
  RNG state via `torch.save`, read back with `torch.load(weights_only=True)`, and state.json.
  A rerun after a kill resumes from it and ends with the same weights as an uninterrupted run.
- Logs: OUT/log.jsonl (one line per optimizer step), a progress bar on the main process; the
  finished model is OUT/model plus OUT/training.json.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch

from convqa.errors import ConfigError, ConvQAError, DataError
from convqa.io import load_json, write_json
from convqa.metrics.answer import score_answers
from convqa.training_log import append_log, trim_log
# The generic pieces of the dual-encoder trainer: step planning, schedule, accelerator, and
# reading checkpoint tensors without unpickling code.
from retrievers.training.data import example_rng, global_batches
from retrievers.training.trainer import (TrainResult, _load_tensors, _set_rng_state,
                                         linear_schedule, make_accelerator, plan_steps,
                                         write_checkpoint)

from .data import FiDExample
from .model import FiDReader

CHECKPOINT = "checkpoint"
MODEL = "model"
TRAINING_JSON = "training.json"
STATE = "state.json"


@dataclass
class FiDTrainConfig:
    epochs: int = 1
    batch_size: int = 2             # examples (questions) per process per micro-step
    grad_accum: int = 1             # micro-steps per optimizer step
    lr: float = 1e-4                # FiD's
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1       # of the total optimizer steps
    max_steps: int | None = None    # cap on optimizer steps (None: epochs decide)
    max_grad_norm: float | None = 1.0
    bf16: bool = False              # bf16 autocast (CPU or GPU)
    seed: int = 0
    checkpoint_every: int = 200     # optimizer steps; 0 = only at the end
    keep_checkpoint: bool = False   # keep OUT/checkpoint after a finished run
    progress: bool = True

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size", "grad_accum"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
        for name in ("checkpoint_every", "seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"{name} must be an integer >= 0, got {value!r}")
        if self.max_steps is not None and (isinstance(self.max_steps, bool) or not isinstance(
                self.max_steps, int) or self.max_steps < 1):
            raise ConfigError(f"max_steps must be an integer >= 1, got {self.max_steps!r}")
        if not isinstance(self.lr, (int, float)) or not self.lr > 0 or not math.isfinite(self.lr):
            raise ConfigError(f"lr must be a positive number, got {self.lr!r}")
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise ConfigError(f"warmup_ratio must be in [0, 1), got {self.warmup_ratio!r}")
        if self.weight_decay < 0:
            raise ConfigError(f"weight_decay must be >= 0, got {self.weight_decay!r}")

    def schedule_key(self) -> dict[str, Any]:
        """The settings a checkpoint must share with the run that resumes it."""
        volatile = {"progress", "checkpoint_every", "keep_checkpoint"}
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in volatile}


class FiDTrainer:
    """Trains `reader` on `examples`, writing to `out` (see the module docstring)."""

    def __init__(self, reader: FiDReader, examples: Sequence[FiDExample],
                 out: str | os.PathLike, config: FiDTrainConfig, accelerator: Any = None,
                 info: Mapping[str, Any] | None = None):
        for example in examples:
            if not example.answers:
                raise DataError("no gold answer to train on", field=f"example {example.id}")
        self.model = reader
        self.examples = list(examples)
        self.out = Path(out)
        self.config = config
        self.accelerator = accelerator if accelerator is not None else make_accelerator()
        self.info = dict(info or {})

    @property
    def model_dir(self) -> Path:
        return self.out / MODEL

    def schedule(self) -> dict[str, Any]:
        """Training settings plus the reader settings that change what is learned."""
        reader = self.model.config
        return {"train": self.config.schedule_key(),
                "reader": {**reader.answer_settings(),
                           "answer_max_length": reader.answer_max_length},
                "adapters": self.model.has_adapters}

    def finished(self) -> dict[str, Any] | None:
        """training.json of a finished run with the same settings, else None."""
        path = self.out / TRAINING_JSON
        if not path.exists() or not self.model_dir.is_dir():
            return None
        record = load_json(path)
        if record.get("schedule") != _jsonable(self.schedule()):
            raise ConfigError(f"{self.out} holds a model trained with different settings; "
                              "use another output folder")
        return record

    # -- the loop -----------------------------------------------------------------------------
    def train(self, on_step: Callable[[int, float], None] | None = None) -> TrainResult:
        done = self.finished()
        if done is not None:
            return TrainResult(self.model_dir, done["steps"], done["seconds"],
                               done.get("last_loss"), info=done)
        acc = self.accelerator
        config = self.config
        world, rank = acc.num_processes, acc.process_index
        per_epoch, total = plan_steps(len(self.examples), config, world)
        warmup = round(config.warmup_ratio * total)
        questions = [self.model.format_question(e.question, e.history) for e in self.examples]

        torch.manual_seed(config.seed + rank)  # dropout; the data order has its own seeds
        start = self._restore_model()
        params = [p for p in self.model.parameters() if p.requires_grad]
        if not params:
            raise ConfigError("the FiD reader has no trainable parameters (loaded LoRA "
                              "adapters are frozen: call train_adapters())")
        optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, linear_schedule(warmup, total))
        model, optimizer = acc.prepare(self.model, optimizer)
        if start:
            self._restore_optimizer(optimizer, scheduler, start)
        self._trim_log(start)

        bar = None
        if config.progress and acc.is_main_process:
            from tqdm.auto import tqdm

            bar = tqdm(total=total, initial=start, desc="training FiD", unit=" steps")
        model.train()
        began = time.perf_counter()
        last_loss = None
        step = start
        batches: list = []
        batches_epoch = -1
        try:
            while step < total:
                epoch = step // per_epoch
                if epoch != batches_epoch:
                    batches = global_batches(len(self.examples), config.batch_size * world,
                                             config.seed, epoch)
                    batches_epoch = epoch
                tick = time.perf_counter()
                loss_sum = 0.0
                for micro in range(config.grad_accum):
                    indices = batches[(step % per_epoch) * config.grad_accum + micro]
                    mine = indices[rank * config.batch_size:(rank + 1) * config.batch_size]
                    batch = self._batch(mine, questions, epoch)
                    last = micro == config.grad_accum - 1
                    sync = acc.no_sync(model) if not last and world > 1 else nullcontext()
                    with sync:
                        with torch.autocast(device_type=acc.device.type, dtype=torch.bfloat16,
                                            enabled=config.bf16):
                            loss = model(**batch)
                        acc.backward(loss.float() / config.grad_accum)
                    loss_sum += loss.detach().float()
                if config.max_grad_norm:
                    acc.clip_grad_norm_(params, config.max_grad_norm)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                step += 1
                mean_loss = acc.reduce(torch.as_tensor(loss_sum / config.grad_accum,
                                                       device=acc.device), "mean").item()
                last_loss = mean_loss
                self._log({"step": step, "epoch": epoch, "loss": round(mean_loss, 6),
                           "lr": scheduler.get_last_lr()[0],
                           "seconds": round(time.perf_counter() - tick, 4)})
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(loss=f"{mean_loss:.4f}")
                if config.checkpoint_every and step % config.checkpoint_every == 0 \
                        and step < total:
                    self._save_checkpoint(model, optimizer, scheduler, step)
                if on_step is not None:
                    on_step(step, mean_loss)
        finally:
            if bar is not None:
                bar.close()
        seconds = time.perf_counter() - began
        self._save_final(model, step, seconds, last_loss, start, total, warmup)
        acc.free_memory()
        return TrainResult(self.model_dir, step, seconds, last_loss, start,
                           load_json(self.out / TRAINING_JSON))

    def _batch(self, indices, questions: list[str], epoch: int) -> dict[str, torch.Tensor]:
        chosen = [self.examples[int(i)] for i in indices]
        answers = []
        for index, example in zip(indices, chosen):
            pick = int(example_rng(self.config.seed, epoch, int(index)).integers(
                len(example.answers))) if len(example.answers) > 1 else 0
            answers.append(example.answers[pick])
        batch = self.model.tokenize([questions[int(i)] for i in indices],
                                    [e.passages for e in chosen], answers)
        return {k: v.to(self.accelerator.device) for k, v in batch.items()}

    # -- checkpoints --------------------------------------------------------------------------
    def _checkpoint_state(self) -> dict[str, Any] | None:
        path = self.out / CHECKPOINT / STATE
        if not path.exists():
            return None
        state = load_json(path)
        if state.get("schedule") != _jsonable(self.schedule()):
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
        saved = FiDReader.from_pretrained(self.out / CHECKPOINT / MODEL)
        self.model.load_state_dict(saved.state_dict())
        return int(state["step"])

    def _restore_optimizer(self, optimizer, scheduler, step: int) -> None:
        folder = self.out / CHECKPOINT
        optimizer.load_state_dict(_load_tensors(folder / "optimizer.pt"))
        scheduler.load_state_dict(_load_tensors(folder / "scheduler.pt"))
        _set_rng_state(_load_tensors(folder / f"rng-{self.accelerator.process_index}.pt"))
        if scheduler.last_epoch != step:
            raise DataError(f"scheduler is at step {scheduler.last_epoch}, state.json says "
                            f"{step} (checkpoint damaged?)", folder / STATE)

    def _save_checkpoint(self, model, optimizer, scheduler, step: int) -> None:
        """Write OUT/checkpoint.partial, then swap it in: a kill at any point leaves either
        the previous checkpoint or the new one."""
        acc = self.accelerator
        write_checkpoint(acc, self.out / CHECKPOINT, acc.unwrap_model(model).save_pretrained,
                         optimizer,
                         scheduler, {"step": step, "schedule": self.schedule(),
                                     "processes": acc.num_processes})

    def _save_final(self, model, step: int, seconds: float, last_loss: float | None,
                    start: int, total: int, warmup: int) -> None:
        acc = self.accelerator
        acc.wait_for_everyone()
        if acc.is_main_process:
            reader = acc.unwrap_model(model)
            reader.save_pretrained(self.model_dir)
            write_json(self.out / TRAINING_JSON, {
                "steps": step, "total_steps": total, "resumed_from": start,
                "seconds": round(seconds, 2), "last_loss": last_loss,
                "processes": acc.num_processes, "device": str(acc.device),
                "examples": len(self.examples), "warmup_steps": warmup,
                "base_model": reader.config.model, "fingerprint": reader.fingerprint(),
                "config": asdict(self.config), "schedule": self.schedule(), **self.info})
            if not self.config.keep_checkpoint:
                shutil.rmtree(self.out / CHECKPOINT, ignore_errors=True)
        acc.wait_for_everyone()

    # -- log ----------------------------------------------------------------------------------
    def _log(self, record: dict[str, Any]) -> None:
        append_log(self.out, record, self.accelerator.is_main_process)

    def _trim_log(self, step: int) -> None:
        """Drop log lines past the checkpoint we resume from (they will be redone)."""
        trim_log(self.out, step, self.accelerator.is_main_process)


def _jsonable(value: Any) -> Any:
    """`value` as it reads back from JSON (tuples become lists), for comparisons."""
    return json.loads(json.dumps(value))


def train_fid(reader: FiDReader, examples: Sequence[FiDExample], out: str | os.PathLike,
              config: FiDTrainConfig | None = None, accelerator: Any = None,
              info: Mapping[str, Any] | None = None,
              on_step: Callable[[int, float], None] | None = None) -> TrainResult:
    """Train (or resume, or return the finished result of) one run into `out`."""
    if not len(examples):
        raise ConvQAError("no training examples")
    return FiDTrainer(reader, examples, out, config or FiDTrainConfig(), accelerator,
                      info).train(on_step)


def evaluate_fid(reader: FiDReader, examples: Sequence[FiDExample], batch_size: int = 8,
                 convention: str = "squad", progress: bool = False) -> dict[str, Any]:
    """Generate an answer for every example and score it (convqa.metrics.answer): `em`, `f1`
    (percent), `count`, `per_query`, plus `predictions` {example id: answer}."""
    if not examples:
        raise ConvQAError("no examples to evaluate")
    questions = [reader.format_question(e.question, e.history) for e in examples]
    chunks = range(0, len(examples), batch_size)
    if progress:
        from tqdm.auto import tqdm

        chunks = tqdm(chunks, desc="evaluating FiD", unit=" batches")
    predictions: dict[str, str] = {}
    for start in chunks:
        part = examples[start:start + batch_size]
        texts = reader.generate(questions[start:start + batch_size],
                                [e.passages for e in part], batch_size)
        predictions.update((e.id, text) for e, text in zip(part, texts))
    scores = score_answers(predictions, {e.id: list(e.answers) for e in examples}, convention)
    scores["predictions"] = predictions
    return scores
