"""The resumable training loop every convqa trainer runs under `accelerate` (one CPU process to
many GPUs, same code). A trainer subclasses `StepTrainer` and supplies its batches and its loss;
the loop does the rest, the same way for all:

- AdamW over the trainable parameters, linear warm-up then linear decay to 0, gradient
  clipping, gradient accumulation (DDP syncs only on the last micro-step);
- each process takes its slice of every global batch of the seeded epoch order, so a resumed
  run, or a run on another number of processes, sees the same examples; a config with
  `loader_workers` has its batches built ahead by a DataLoader's worker processes
  (loader.py), the same batches in the same order;
- checkpoints every `checkpoint_every` optimizer steps into OUT/checkpoint (checkpoint.py); a
  rerun after a kill resumes there and ends with the same weights as an uninterrupted run;
- OUT/log.jsonl, one line per optimizer step (convqa/training_log.py; `batch_seconds`: the
  step's wait for its batches), a progress bar on the main process, and at the end OUT/model
  plus OUT/training.json; a rerun of a finished run returns its result.

The config is a dataclass with the fields epochs, batch_size, grad_accum, lr, weight_decay,
warmup_ratio, max_steps, max_grad_norm, bf16, seed, checkpoint_every, keep_checkpoint, progress
and a `schedule_key()` method (schedule.py); an optional `start_step` continues a run whose
checkpoint is gone from weights saved at that step (the trainer's model): the same data order
and learning-rate schedule from there, a fresh optimizer.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch

from convqa.errors import ConfigError, DataError
from convqa.precision import AUTO, BF16, FP32, choose_training_precision
from convqa.io import load_json, write_json
from convqa.training_log import append_log, trim_log

from .checkpoint import (CHECKPOINT, MODEL, STATE, TRAINING_JSON, load_tensors, set_rng_state,
                         write_checkpoint)
from .loader import MicroBatches, open_stream
from .schedule import global_batches, linear_schedule, plan_steps, same_schedule


def schedule_at(optimizer: torch.optim.Optimizer, factor: Callable[[int], float],
                step: int = 0) -> torch.optim.lr_scheduler.LambdaLR:
    """The LR schedule `factor`, positioned at `step` (as if `step` steps had been taken)."""
    if step:
        for group in optimizer.param_groups:
            group.setdefault("initial_lr", group["lr"])
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor, last_epoch=step - 1)


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


@dataclass
class TrainResult:
    model_dir: Path
    steps: int
    seconds: float
    last_loss: float | None
    resumed_from: int = 0
    info: dict[str, Any] = field(default_factory=dict)


def jsonable(value: Any) -> Any:
    """`value` as it reads back from JSON (tuples become lists), for comparisons."""
    return json.loads(json.dumps(value))


Loss = tuple[torch.Tensor, Mapping[str, Any]]  # (what is backpropagated, {name: value to log})


class StepTrainer:
    """Trains `model` into `out` with `config` (see the module docstring).

    A subclass gives `num_examples`, `make_batch` and `compute_loss`, and where its model is
    not a `save_pretrained`/`from_pretrained` model, `save_model` and `load_weights`; the other
    methods below the loop are hooks with a default."""

    what = "a model"            # named in the error for a folder trained with other settings
    compared = "settings"       # what the schedule key covers ("settings or data")
    progress_label = "training"
    precision_what = "training"  # named in the precision choice ("precision for ...")

    def __init__(self, model: torch.nn.Module, out: str | os.PathLike, config: Any,
                 accelerator: Any = None, info: Mapping[str, Any] | None = None):
        self.model = model
        self.out = Path(out)
        self.config = config
        self.accelerator = accelerator if accelerator is not None else make_accelerator()
        self.info = dict(info or {})
        self.precision = FP32  # the autocast of compute_loss, set by choose_precision
        self.last_batch: Any = None

    @property
    def model_dir(self) -> Path:
        return self.out / MODEL

    def finished(self) -> dict[str, Any] | None:
        """training.json of a finished run with the same settings, else None."""
        path = self.out / TRAINING_JSON
        if not path.exists() or not self.model_dir.is_dir():
            return None
        record = load_json(path)
        if not same_schedule(self.recorded_schedule(record), jsonable(self.schedule())):
            raise ConfigError(f"{self.out} holds {self.what} trained with different "
                              f"{self.compared}; use another output folder")
        return record

    # -- the loop ---------------------------------------------------------------------------
    def train(self, on_step: Callable[[int, float], None] | None = None) -> TrainResult:
        done = self.finished()
        if done is not None:
            return TrainResult(self.model_dir, done["steps"], done["seconds"],
                               done.get("last_loss"), info=done)
        acc, config = self.accelerator, self.config
        world, rank = acc.num_processes, acc.process_index
        per_epoch, total = plan_steps(self.num_examples(), config, world)
        warmup = round(config.warmup_ratio * total)

        torch.manual_seed(config.seed + rank)  # dropout; the data order has its own seeds
        start, continued = self._start_step(total)
        self.before_optimizer()
        params = self.trainable_parameters()
        optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
        scheduler = schedule_at(optimizer, linear_schedule(warmup, total),
                                start if continued else 0)
        model, optimizer = acc.prepare(self.model, optimizer)
        if start and not continued:
            self._restore_optimizer(optimizer, scheduler, start)
        trim_log(self.out, start, acc.is_main_process)  # those steps are redone
        self.choose_precision(model)
        self.on_start(model, start)

        # the batches, in the seeded order from `start` (built ahead by workers if asked)
        stream = open_stream(MicroBatches(
            lambda epoch: self.epoch_batches(epoch, config.batch_size * world), self.make_batch,
            start=start, total=total, per_epoch=per_epoch, grad_accum=config.grad_accum,
            rank=rank, size=config.batch_size), getattr(config, "loader_workers", None),
            acc.device)
        bar = None
        if config.progress and acc.is_main_process:
            from tqdm.auto import tqdm

            bar = tqdm(total=total, initial=start, desc=self.progress_label, unit=" steps")
        self.set_train_mode(model)
        began = time.perf_counter()
        last_loss = None
        step = start
        try:
            while step < total:
                epoch = step // per_epoch
                tick = time.perf_counter()
                sums, counts, waited = self._accumulate(model, stream)
                self._optimizer_step(params, optimizer, scheduler)
                step += 1
                record = self._mean_over_processes(sums)
                last_loss = record["loss"]
                append_log(self.out, {
                    "step": step, "epoch": epoch, **self.log_tags(),
                    **{k: round(v, 6) for k, v in record.items()},
                    "lr": scheduler.get_last_lr()[0],
                    "seconds": round(time.perf_counter() - tick, 4),
                    "batch_seconds": round(waited, 4), **counts},
                    acc.is_main_process)
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(loss=f"{last_loss:.4f}")
                self.after_step(model, step, total)
                if config.checkpoint_every and step % config.checkpoint_every == 0 \
                        and step < total:
                    self._save_checkpoint(model, optimizer, scheduler, step)
                if on_step is not None:
                    on_step(step, last_loss)
        finally:
            stream.close()
            if bar is not None:
                bar.close()
        seconds = time.perf_counter() - began
        run = {"steps": step, "total_steps": total, "resumed_from": start,
               "seconds": round(seconds, 2), "last_loss": last_loss, "processes": world,
               "device": str(acc.device), "examples": self.num_examples(),
               "warmup_steps": warmup}
        self._save_final(model, run)
        acc.free_memory()  # drop accelerate's references to this run's model and optimizer
        return TrainResult(self.model_dir, step, seconds, last_loss, start,
                           load_json(self.out / TRAINING_JSON))

    def _start_step(self, total: int) -> tuple[int, bool]:
        """(the step to start from, whether it continues another run's weights): a checkpoint
        of this run resumes where it stopped; else the config's `start_step` (a run continued
        from another's weights on the same schedule), else 0."""
        start = self._restore_model()
        start_step = getattr(self.config, "start_step", 0)
        if start or not start_step:
            return start, False
        if start_step >= total:
            raise ConfigError(f"start_step {start_step} is not before the last step of this "
                              f"schedule ({total})")
        return start_step, True

    def _optimizer_step(self, params, optimizer, scheduler) -> None:
        if self.config.max_grad_norm:
            self.accelerator.clip_grad_norm_(params, self.config.max_grad_norm)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)

    def _mean_over_processes(self, sums: dict[str, Any]) -> dict[str, float]:
        """The step's logged losses, averaged over micro-batches and processes."""
        acc, names = self.accelerator, list(sums)
        means = acc.reduce(torch.tensor([float(sums[n]) / self.config.grad_accum for n in names],
                                        device=acc.device), "mean").cpu().tolist()
        return dict(zip(names, means))

    def _accumulate(self, model, stream) -> tuple[dict[str, Any], dict[str, int], float]:
        """Forward and backward of this process's next `grad_accum` micro-batches from
        `stream` (one optimizer step); returns the summed logged losses, the summed batch
        counts and the seconds spent waiting for the batches (building them, without
        workers)."""
        acc, config = self.accelerator, self.config
        sums: dict[str, Any] = {}
        counts: dict[str, int] = {}
        waited = 0.0
        for micro in range(config.grad_accum):
            asked = time.perf_counter()
            batch = stream.next()
            waited += time.perf_counter() - asked
            self.last_batch = batch
            for name, value in self.batch_counts(batch).items():
                counts[name] = counts.get(name, 0) + value
            last = micro == config.grad_accum - 1
            sync = acc.no_sync(model) if not last and acc.num_processes > 1 else nullcontext()
            with sync:
                loss, logged = self.compute_loss(model, batch)
                acc.backward(loss / config.grad_accum)
            for name, value in logged.items():
                if value is not None:
                    sums[name] = sums.get(name, 0.0) + value
        return sums, counts, waited

    # -- what a trainer supplies ------------------------------------------------------------
    def num_examples(self) -> int:
        raise NotImplementedError

    def make_batch(self, indices: Sequence[int], epoch: int) -> Any:
        """This process's micro-batch of example numbers `indices`."""
        raise NotImplementedError

    def compute_loss(self, model, batch: Any) -> Loss:
        """(loss to backpropagate, {name: detached value}); the names are logged and "loss",
        the first, is the loss reported. A None value is left out of the log."""
        raise NotImplementedError

    # -- hooks with a default ---------------------------------------------------------------
    def schedule(self) -> dict[str, Any]:
        """What a checkpoint or a finished run must share with this run to be reused."""
        return self.config.schedule_key()

    def recorded_schedule(self, record: Mapping[str, Any]) -> Any:
        """The schedule stored in a training.json (as `final_record` writes it)."""
        return record.get("config", {}).get("schedule")

    def epoch_batches(self, epoch: int, global_batch: int) -> Sequence[Sequence[int]]:
        """The global batches of example numbers of `epoch`, in order."""
        return global_batches(self.num_examples(), global_batch, self.config.seed, epoch)

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def before_optimizer(self) -> None:
        """Runs once the checkpoint's weights are loaded, before the optimizer is built."""

    def set_train_mode(self, model) -> None:
        model.train()

    def batch_counts(self, batch: Any) -> dict[str, int]:
        """Counts summed over the micro-batches of a step and logged (e.g. padded items)."""
        return {}

    def on_start(self, model, step: int) -> None:
        """Runs once before the first step of this process's run (`step`: the step resumed
        from, 0 for a fresh run), after the log was trimmed to it and the precision chosen."""

    # -- precision -------------------------------------------------------------------------
    def requested_precision(self) -> str:
        """fp32, bf16 or auto: the config's `precision` (or its older `bf16` flag)."""
        if getattr(self.config, "bf16", False):
            return BF16
        return getattr(self.config, "precision", FP32)

    def probe_guard(self):
        """A context around the precision probe's loss passes that undoes what computing a
        loss changes besides gradients (e.g. a queue of earlier batches)."""
        return nullcontext()

    def choose_precision(self, model) -> None:
        """Set `self.precision`, the autocast of `compute_loss`. For `auto`: time a forward and
        backward pass of the first examples in fp32 and in bf16 (no update, RNG restored) and
        keep the faster whose loss agrees (convqa/precision.py); the main process decides for
        all and keeps the choice in OUT, so a restart on the same machine (CPU, torch,
        threads) reuses it. Recorded in `self.info["precision"]`."""
        acc = self.accelerator
        requested = self.requested_precision()
        if requested != AUTO:
            self.precision = requested
            if hasattr(self.config, "precision"):
                self.info["precision"] = {"precision": requested, "what": self.precision_what}
            return
        from accelerate.utils import broadcast_object_list

        batch = self.make_batch(list(range(min(self.config.batch_size, self.num_examples()))),
                                0)
        rng = torch.get_rng_state()

        def step(precision: str) -> float:
            self.precision = precision
            with self.probe_guard(), acc.no_sync(model):
                loss, _ = self.compute_loss(model, batch)
                loss.backward()
            model.zero_grad(set_to_none=True)
            return float(loss.detach())

        choice = choose_training_precision(step, what=self.precision_what, device=acc.device,
                                           run_folder=self.out)
        torch.set_rng_state(rng)
        picked = [choice.precision]
        broadcast_object_list(picked)
        self.precision = picked[0]
        self.info["precision"] = choice.to_dict() if acc.is_main_process else picked[0]
        if acc.is_main_process and self.config.progress:
            print(choice.summary(), flush=True)

    def after_step(self, model, step: int, total: int) -> None:
        """Runs after optimizer step `step` was logged and before its checkpoint is written,
        so that whatever it logs is redone by a run resumed from an earlier checkpoint."""

    def log_tags(self) -> dict[str, Any]:
        """Fixed fields of every log line."""
        return {}

    def save_model(self, model, folder: Path) -> None:
        model.save_pretrained(folder)

    def load_weights(self, folder: Path) -> None:
        """Load the weights saved by `save_model` in `folder` into `self.model`."""
        saved = type(self.model).from_pretrained(folder)
        self.model.load_state_dict(saved.state_dict())

    def process_state(self) -> dict[str, Any]:
        """Per-process objects (plain tensors and numbers) saved with a checkpoint."""
        return {}

    def restore_process_state(self, folder: Path, rank: int) -> None:
        """Read back what `process_state` saved in checkpoint `folder`."""

    def config_record(self) -> dict[str, Any]:
        return {**asdict(self.config), "schedule": self.schedule()}

    def final_record(self, model, run: dict[str, Any]) -> dict[str, Any]:
        """training.json: `run` (steps, seconds, loss...), the config and `info`; `model` is
        the trained model, unwrapped."""
        return {**run, "config": self.config_record(), **self.info}

    # -- checkpoints ------------------------------------------------------------------------
    def _checkpoint_state(self) -> dict[str, Any] | None:
        path = self.out / CHECKPOINT / STATE
        if not path.exists():
            return None
        state = load_json(path)
        if not same_schedule(state.get("schedule"), jsonable(self.schedule())):
            raise ConfigError(f"{self.out / CHECKPOINT} was written with different training "
                              f"{self.compared}; use another output folder or delete the "
                              "checkpoint")
        if state.get("processes") != self.accelerator.num_processes:
            raise ConfigError(f"{self.out / CHECKPOINT} was written by "
                              f"{state.get('processes')} processes, this run has "
                              f"{self.accelerator.num_processes}")
        return state

    def _restore_model(self) -> int:
        """The step of the checkpoint to resume (its weights loaded), or 0."""
        state = self._checkpoint_state()
        if state is None:
            return 0
        self.load_weights(self.out / CHECKPOINT / MODEL)
        return int(state["step"])

    def _restore_optimizer(self, optimizer, scheduler, step: int) -> None:
        folder = self.out / CHECKPOINT
        rank = self.accelerator.process_index
        optimizer.load_state_dict(load_tensors(folder / "optimizer.pt"))
        scheduler.load_state_dict(load_tensors(folder / "scheduler.pt"))
        set_rng_state(load_tensors(folder / f"rng-{rank}.pt"))
        self.restore_process_state(folder, rank)
        if scheduler.last_epoch != step:
            raise DataError(f"scheduler is at step {scheduler.last_epoch}, state.json says "
                            f"{step} (checkpoint damaged?)", folder / STATE)

    def _save_checkpoint(self, model, optimizer, scheduler, step: int) -> None:
        acc = self.accelerator
        unwrapped = acc.unwrap_model(model)
        write_checkpoint(acc, self.out / CHECKPOINT,
                         lambda folder: self.save_model(unwrapped, folder), optimizer,
                         scheduler, {"step": step, "schedule": self.schedule(),
                                     "processes": acc.num_processes},
                         per_process=self.process_state())

    def _save_final(self, model, run: dict[str, Any]) -> None:
        acc = self.accelerator
        acc.wait_for_everyone()
        if acc.is_main_process:
            trained = acc.unwrap_model(model)
            self.save_model(trained, self.model_dir)
            write_json(self.out / TRAINING_JSON, self.final_record(trained, run))
            if not self.config.keep_checkpoint:
                shutil.rmtree(self.out / CHECKPOINT, ignore_errors=True)
        acc.wait_for_everyone()
