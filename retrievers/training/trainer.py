"""The dual-encoder training loop under `accelerate`: one CPU process to many GPUs, same code.

    accelerate launch --num_processes 4 -m convqa.cli.main train dpr ...   # or plain `convqa`

- Batches: `batch_size` examples per process per micro-step; the global batch is
  batch_size x processes, every query is scored against all its passages (loss.py).
  Each process builds its own slice of the global batch from the seeded order (data.py), so no
  data is sent between processes except the passage embeddings and their ids.
- AdamW, linear warm-up then linear decay to 0, gradient clipping, gradient accumulation
  (DDP syncs only on the last micro-step), optional bf16 autocast (CPU or GPU; the loss and the
  embeddings' pooling stay fp32).
- Checkpoints every `checkpoint_every` optimizer steps into OUT/checkpoint (replaced atomically):
  the model via `save_pretrained` (safetensors), optimizer and scheduler state dicts and each
  process's RNG state via `torch.save`, read back with `torch.load(weights_only=True)` (plain
  tensors and numbers only, no pickled code), and state.json. A rerun after a kill resumes from
  it and produces the same weights as an uninterrupted run (tests/test_training_trainer.py).
  accelerate's own save_state was not used: it pickles registered custom objects with
  weights_only=False and stores the model under its own names rather than our safetensors folder.
- Logs: OUT/log.jsonl, one line per optimizer step (step, epoch, loss, lr, seconds); a progress
  bar with the loss on the main process. The finished model is OUT/model plus OUT/training.json.
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

import torch

from convqa.errors import ConfigError, ConvQAError, DataError
from convqa.io import load_json, write_json
from convqa.training_log import append_log, trim_log

from .data import POSITIVE_CHOICES, ExampleSet, PassageLookup, global_batches, make_batch
from .loss import default_scale, dpr_loss, passage_key

CHECKPOINT = "checkpoint"
MODEL = "model"
TRAINING_JSON = "training.json"
STATE = "state.json"


@dataclass
class TrainConfig:
    epochs: int = 1
    batch_size: int = 16            # examples per process per micro-step
    grad_accum: int = 1             # micro-steps per optimizer step
    lr: float = 2e-5
    weight_decay: float = 0.0
    warmup_ratio: float = 0.1       # of the total optimizer steps
    max_steps: int | None = None    # cap on optimizer steps (None: epochs decide)
    max_grad_norm: float | None = 2.0
    hard_negatives: int = 0         # n per example, drawn from the mined top-k
    scale: float | None = None      # None: 20 for normalising encoders, 1 otherwise (loss.py)
    mask_false_negatives: bool = True
    positive_choice: str = "random"  # "random" | "first" positive per example and epoch
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
        for name in ("hard_negatives", "checkpoint_every", "seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"{name} must be an integer >= 0, got {value!r}")
        if self.max_steps is not None and (not isinstance(self.max_steps, int)
                                           or self.max_steps < 1):
            raise ConfigError(f"max_steps must be an integer >= 1, got {self.max_steps!r}")
        if not self.lr > 0 or not math.isfinite(self.lr):
            raise ConfigError(f"lr must be a positive number, got {self.lr!r}")
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise ConfigError(f"warmup_ratio must be in [0, 1), got {self.warmup_ratio!r}")
        if self.scale is not None and not self.scale > 0:
            raise ConfigError(f"scale must be positive, got {self.scale!r}")
        if self.positive_choice not in POSITIVE_CHOICES:
            raise ConfigError(f"positive_choice must be one of {', '.join(POSITIVE_CHOICES)}, "
                              f"got {self.positive_choice!r}")

    def schedule_key(self) -> dict[str, Any]:
        """The settings a checkpoint must share with the run that resumes it."""
        volatile = {"progress", "checkpoint_every", "keep_checkpoint"}
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in volatile}


@dataclass
class TrainResult:
    model_dir: Path
    steps: int
    seconds: float
    last_loss: float | None
    resumed_from: int = 0
    info: dict[str, Any] = field(default_factory=dict)


def plan_steps(examples: int, config: TrainConfig, processes: int) -> tuple[int, int]:
    """(optimizer steps per epoch, total optimizer steps)."""
    global_batch = config.batch_size * processes
    micro = examples // global_batch
    per_epoch = micro // config.grad_accum
    if per_epoch == 0:
        raise ConfigError(f"{examples} training examples are too few for one optimizer step "
                          f"(batch {config.batch_size} x {processes} processes x "
                          f"{config.grad_accum} accumulation steps)")
    total = per_epoch * config.epochs
    return per_epoch, min(total, config.max_steps) if config.max_steps else total


def linear_schedule(warmup: int, total: int) -> Callable[[int], float]:
    """LR multiplier: 0 -> 1 over `warmup` steps, then linearly to 0 at `total`."""
    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / (warmup + 1)
        return max(0.0, (total - step) / max(1, total - warmup))

    return factor


def make_accelerator(cpu: bool = False):
    """An Accelerator without accelerate's own mixed precision (autocast is ours, so several
    runs with different settings can share one process). Several CPU processes started by
    torchrun join one gloo group."""
    from datetime import timedelta

    from accelerate import Accelerator, InitProcessGroupKwargs

    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.cuda.is_available():
        cpu = True  # torchrun on CPUs: without this accelerate runs each process alone
    # Mining runs on the main process while the others wait: allow long waits.
    return Accelerator(cpu=cpu, kwargs_handlers=[InitProcessGroupKwargs(
        timeout=timedelta(hours=12))])


def _load_tensors(path: Path) -> Any:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is a damaged checkpoint
        raise DataError(f"cannot read checkpoint file ({type(exc).__name__}: "
                        f"{str(exc).splitlines()[0] if str(exc) else ''})", path) from None


def _rng_state() -> dict[str, Any]:
    state = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: Mapping[str, Any]) -> None:
    torch.set_rng_state(state["cpu"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])



def write_checkpoint(accelerator, folder: Path, save_model: Callable[[Path], None], optimizer,
                     scheduler, state: Mapping[str, Any],
                     per_process: Mapping[str, Any] | None = None) -> None:
    """Write `folder`.partial, then swap it in as `folder`: a kill at any point leaves either
    the previous checkpoint or the new one. Every process writes its RNG state (and each
    `per_process` object as NAME-{process}.pt); the main process the model (`save_model(path)`),
    optimizer, scheduler and `state` (JSON). Shared by every convqa trainer."""
    acc = accelerator
    folder = Path(folder)
    partial = folder.with_name(f"{folder.name}.partial")
    if acc.is_main_process:
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
    acc.wait_for_everyone()
    torch.save(_rng_state(), partial / f"rng-{acc.process_index}.pt")
    for name, value in (per_process or {}).items():
        torch.save(value, partial / f"{name}-{acc.process_index}.pt")
    acc.wait_for_everyone()
    if acc.is_main_process:
        save_model(partial / MODEL)
        torch.save(optimizer.state_dict(), partial / "optimizer.pt")
        torch.save(scheduler.state_dict(), partial / "scheduler.pt")
        write_json(partial / STATE, dict(state))
        old = folder.with_name(f"{folder.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        if folder.exists():
            os.rename(folder, old)
        os.rename(partial, folder)
        shutil.rmtree(old, ignore_errors=True)
    acc.wait_for_everyone()

class Trainer:
    """Trains `model` (a DualEncoder, or anything with its tokenize_* / forward / save and
    load methods) on `examples`, writing to `out`."""

    def __init__(self, model: torch.nn.Module, examples: ExampleSet, lookup: PassageLookup,
                 out: str | os.PathLike, config: TrainConfig,
                 negatives: Mapping[str, Sequence[str]] | None = None,
                 accelerator: Any = None, info: Mapping[str, Any] | None = None):
        if config.hard_negatives and negatives is None:
            raise ConfigError(f"hard_negatives={config.hard_negatives} needs mined negatives")
        self.model = model
        self.examples = examples
        self.lookup = lookup
        self.out = Path(out)
        self.config = config
        self.negatives = negatives
        self.accelerator = accelerator if accelerator is not None else make_accelerator()
        self.info = dict(info or {})
        self.last_logits_shape: tuple[int, ...] = ()  # (local queries, global passages)

    # -- paths ------------------------------------------------------------------------------
    @property
    def model_dir(self) -> Path:
        return self.out / MODEL

    def finished(self) -> dict[str, Any] | None:
        """training.json of a finished run with the same settings, else None."""
        path = self.out / TRAINING_JSON
        if not path.exists() or not (self.model_dir).is_dir():
            return None
        record = load_json(path)
        if record.get("config", {}).get("schedule") != self.config.schedule_key():
            raise ConfigError(f"{self.out} holds a model trained with different settings; "
                              "use another output folder")
        return record

    # -- the loop ---------------------------------------------------------------------------
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
        scale = config.scale if config.scale is not None else default_scale(
            bool(getattr(self.model.config, "normalize", False)))

        torch.manual_seed(config.seed + rank)  # dropout; the data order has its own seeds
        start = self._restore_model()
        params = [p for p in self.model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, linear_schedule(warmup, total))
        model, optimizer = acc.prepare(self.model, optimizer)
        if start:
            self._restore_optimizer(optimizer, scheduler, start)
        self._trim_log(start)

        bar = None
        if config.progress and acc.is_main_process:
            from tqdm.auto import tqdm

            bar = tqdm(total=total, initial=start, desc="training", unit=" steps")
        model.train()
        began = time.perf_counter()
        last_loss = None
        batches_cache: dict[int, list] = {}
        step = start
        try:
            while step < total:
                epoch = step // per_epoch
                batches = batches_cache.get(epoch)
                if batches is None:
                    global_batch = config.batch_size * world
                    batches_cache.clear()
                    batches = batches_cache[epoch] = global_batches(
                        len(self.examples), global_batch, config.seed, epoch)
                tick = time.perf_counter()
                loss_sum, filled = 0.0, 0
                for micro in range(config.grad_accum):
                    indices = batches[(step % per_epoch) * config.grad_accum + micro]
                    mine = indices[rank * config.batch_size:(rank + 1) * config.batch_size]
                    batch = make_batch(self.examples, mine, self.lookup, config.seed, epoch,
                                       config.hard_negatives, self.negatives,
                                       config.positive_choice)
                    filled += batch.filled
                    last = micro == config.grad_accum - 1
                    sync = acc.no_sync(model) if not last and world > 1 else nullcontext()
                    with sync:
                        loss = self._forward_loss(model, batch, scale)
                        acc.backward(loss / config.grad_accum)
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
                           "seconds": round(time.perf_counter() - tick, 4),
                           "filled_negatives": filled})
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
        self._save_final(model, step, seconds, last_loss, start, total, scale, warmup)
        acc.free_memory()  # drop accelerate's references to this run's model and optimizer
        return TrainResult(self.model_dir, step, seconds, last_loss, start,
                           load_json(self.out / TRAINING_JSON))

    def _forward_loss(self, model, batch, scale: float) -> torch.Tensor:
        acc = self.accelerator
        queries = self.model.tokenize_queries(batch.queries)
        passages = self.model.tokenize_passages(batch.passages)
        queries = {k: v.to(acc.device) for k, v in queries.items()}
        passages = {k: v.to(acc.device) for k, v in passages.items()}
        with torch.autocast(device_type=acc.device.type, dtype=torch.bfloat16,
                            enabled=self.config.bf16):
            q, p = model(queries, passages)
        keys = rows = None
        if self.config.mask_false_negatives:
            local = torch.tensor([passage_key(i) for i in batch.passage_ids], dtype=torch.int64,
                                 device=acc.device)
            keys = (acc.gather(local) if acc.num_processes > 1 else local).cpu()
            rows = [{passage_key(i) for i in ids} for ids in batch.positive_ids]
        loss, logits = dpr_loss(q.float(), p.float(), batch.group_size, scale, rows, keys,
                                acc.gather, acc.process_index, acc.num_processes,
                                lambda t: acc.reduce(t, "sum"))
        self.last_logits_shape = tuple(logits.shape)
        return loss

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
        saved = type(self.model).from_pretrained(self.out / CHECKPOINT / MODEL)
        self.model.load_state_dict(saved.state_dict())
        return int(state["step"])

    def _restore_optimizer(self, optimizer, scheduler, step: int) -> None:
        folder = self.out / CHECKPOINT
        optimizer.load_state_dict(_load_tensors(folder / "optimizer.pt"))
        scheduler.load_state_dict(_load_tensors(folder / "scheduler.pt"))
        rng = folder / f"rng-{self.accelerator.process_index}.pt"
        _set_rng_state(_load_tensors(rng))
        if scheduler.last_epoch != step:
            raise DataError(f"scheduler is at step {scheduler.last_epoch}, state.json says "
                            f"{step} (checkpoint damaged?)", folder / STATE)

    def _save_checkpoint(self, model, optimizer, scheduler, step: int) -> None:
        """Write OUT/checkpoint.partial, then swap it in: a kill at any point leaves either
        the previous checkpoint or the new one."""
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
            acc.unwrap_model(model).save_pretrained(self.model_dir)
            write_json(self.out / TRAINING_JSON, {
                "steps": step, "total_steps": total, "resumed_from": start,
                "seconds": round(seconds, 2), "last_loss": last_loss,
                "processes": acc.num_processes, "device": str(acc.device),
                "examples": len(self.examples), "scale": scale, "warmup_steps": warmup,
                "config": {**asdict(self.config), "schedule": self.config.schedule_key()},
                **self.info})
            if not self.config.keep_checkpoint:
                shutil.rmtree(self.out / CHECKPOINT, ignore_errors=True)
        acc.wait_for_everyone()

    # -- log --------------------------------------------------------------------------------
    def _log(self, record: dict[str, Any]) -> None:
        append_log(self.out, record, self.accelerator.is_main_process)

    def _trim_log(self, step: int) -> None:
        """Drop log lines past the checkpoint we resume from (they will be redone)."""
        trim_log(self.out, step, self.accelerator.is_main_process)


def train_dual_encoder(model: torch.nn.Module, examples: ExampleSet, lookup: PassageLookup,
                       out: str | os.PathLike, config: TrainConfig | None = None,
                       negatives: Mapping[str, Sequence[str]] | None = None,
                       accelerator: Any = None, info: Mapping[str, Any] | None = None,
                       on_step: Callable[[int, float], None] | None = None) -> TrainResult:
    """Train (or resume, or return the finished result of) one run into `out`."""
    if not len(examples):
        raise ConvQAError("no training examples")
    return Trainer(model, examples, lookup, out, config or TrainConfig(), negatives,
                   accelerator, info).train(on_step)
