"""Training the extractive reader under `accelerate` (one CPU process to many GPUs, same code),
and scoring it on held-out examples.

    torchrun --nproc_per_node 4 -m convqa.cli.main train reader ...   # or plain `convqa`

- A micro-batch is `batch_size` questions per process, each read against
  `passages_per_question` passages: one of its positives and n-1 of its negatives, drawn by a
  generator seeded by (seed, epoch, example number), so a resumed run, or a run on another
  number of processes, sees the same questions with the same passages. An example with fewer
  negatives repeats them; one with none gets masked padding passages. Every passage is read in
  one window: for the positive, the first window holding a whole gold span (all gold spans in
  that window count), for a negative a seeded random one of its windows (always the first
  would teach the selection head that later windows are relevant).
- Loss: loss.py (selection cross-entropy + span marginal likelihood). Each process scores its
  own questions; DDP averages the gradients.
- AdamW, linear warm-up then linear decay, gradient clipping, gradient accumulation, optional
  bf16 autocast (the heads and the loss stay fp32).
- Checkpoints every `checkpoint_every` optimizer steps into OUT/checkpoint, swapped in
  atomically: the reader via `save_pretrained` (safetensors), optimizer, scheduler and RNG
  states via `torch.save`, read back with `torch.load(weights_only=True)`, and state.json. A
  rerun after a kill resumes there and ends with the same weights as an uninterrupted run.
  The conventions and helpers are those of retrievers/training/trainer.py.
- OUT/log.jsonl (one line per optimizer step), a progress bar on the main process, and at the
  end OUT/model plus OUT/training.json.
"""
from __future__ import annotations

import hashlib
import math
import os
import shutil
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch import Tensor

from convqa.errors import ConfigError, ConvQAError, DataError
from convqa.io import load_json, write_json
from convqa.types import Passage
from convqa.training_log import append_log, trim_log
from retrievers.training.data import example_rng, global_batches
from retrievers.training.trainer import (_load_tensors, _set_rng_state, linear_schedule,
                                         make_accelerator, plan_steps, write_checkpoint)

from .data import ReaderExample
from .inputs import ReaderFeatures, build_features, char_span_to_tokens
from .loss import reader_loss
from .model import ExtractiveReader

CHECKPOINT = "checkpoint"
MODEL = "model"
TRAINING_JSON = "training.json"
STATE = "state.json"
# Current question first, then the newest history: a reader reads the question before all else,
# and 64 tokens leave ~180 of a 256-token window for the passage.
DEFAULT_HISTORY: dict[str, Any] = {"name": "current_first", "max_tokens": 64}

__all__ = ["DEFAULT_HISTORY", "ReaderBatch", "ReaderTrainConfig", "ReaderTrainResult",
           "ReaderTrainer", "evaluate_reader", "make_accelerator", "make_reader_batch",
           "train_reader"]


@dataclass
class ReaderTrainConfig:
    epochs: int = 1
    batch_size: int = 4               # questions per process per micro-step
    passages_per_question: int = 8    # 1 positive + n-1 negatives
    grad_accum: int = 1
    lr: float = 2e-5
    weight_decay: float = 0.0
    warmup_ratio: float = 0.1
    max_steps: int | None = None
    max_grad_norm: float | None = 2.0
    history: str | dict = field(default_factory=lambda: dict(DEFAULT_HISTORY))
    bf16: bool = False
    seed: int = 0
    checkpoint_every: int = 200       # optimizer steps; 0 = only at the end
    keep_checkpoint: bool = False
    progress: bool = True

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size", "grad_accum", "passages_per_question"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
        for name in ("checkpoint_every", "seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"{name} must be an integer >= 0, got {value!r}")
        if self.max_steps is not None and (isinstance(self.max_steps, bool) or
                                           not isinstance(self.max_steps, int)
                                           or self.max_steps < 1):
            raise ConfigError(f"max_steps must be an integer >= 1, got {self.max_steps!r}")
        if not isinstance(self.lr, (int, float)) or not self.lr > 0 or not math.isfinite(self.lr):
            raise ConfigError(f"lr must be a positive number, got {self.lr!r}")
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise ConfigError(f"warmup_ratio must be in [0, 1), got {self.warmup_ratio!r}")

    def schedule_key(self) -> dict[str, Any]:
        """The settings a checkpoint must share with the run that resumes it."""
        volatile = {"progress", "checkpoint_every", "keep_checkpoint"}
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in volatile}


@dataclass
class ReaderTrainResult:
    model_dir: Path
    steps: int
    seconds: float
    last_loss: float | None
    resumed_from: int = 0
    info: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# Batches


@dataclass
class ReaderBatch:
    """One process's micro-batch: `features` hold questions x passages windows, row-major."""

    features: ReaderFeatures
    gold_starts: Tensor    # [Q, N, L] bool
    gold_ends: Tensor      # [Q, N, L] bool
    passage_mask: Tensor   # [Q, N] bool (False: padding passage)
    questions: int
    group: int
    no_span: int = 0       # positives none of whose gold spans fits a window
    padded: int = 0        # padding passages (examples without negatives)


def _choose_passages(example: ReaderExample, count: int, rng) -> tuple[int, list[Passage], int]:
    """(positive number, the passages [positive, negatives...], padding passages)."""
    positive = int(rng.integers(len(example.positives)))
    chosen = [example.positives[positive].passage]
    need = count - 1
    pool = example.negatives
    if need and pool:
        if len(pool) >= need:
            chosen += [pool[int(i)] for i in rng.choice(len(pool), size=need, replace=False)]
        else:
            chosen += list(pool) + [pool[int(i)] for i in rng.integers(len(pool),
                                                                        size=need - len(pool))]
    padding = count - len(chosen)
    chosen += [Passage("", "")] * padding
    return positive, chosen, padding


def make_reader_batch(examples: Sequence[ReaderExample], indices: Sequence[int],
                      queries: Callable[[int], str], reader: ExtractiveReader,
                      passages_per_question: int, seed: int, epoch: int) -> ReaderBatch:
    """The batch of examples `indices`; `queries(i)` is the query text of example i."""
    n = passages_per_question
    texts: list[str] = []
    passages: list[Passage] = []
    positives: list[int] = []
    real: list[bool] = []
    for index in indices:
        example = examples[int(index)]
        positive, chosen, pad = _choose_passages(example, n, example_rng(seed, epoch, int(index)))
        positives.append(positive)
        real.extend([True] * (n - pad) + [False] * pad)
        texts.extend([queries(int(index))] * n)
        passages.extend(chosen)
    features = build_features(reader.tokenizer, texts, passages, reader.config)
    windows: list[int] = []
    golds: list[list[tuple[int, int]]] = []
    no_span = 0
    for pair in range(len(passages)):
        options = features.windows_of(pair)
        question, slot = divmod(pair, n)
        if slot:  # a negative: any of its windows, so window position tells nothing
            pick = np.random.default_rng([seed, epoch, int(indices[question]), slot, 2])
            windows.append(options[int(pick.integers(len(options)))] if len(options) > 1
                           else options[0])
            golds.append([])
            continue
        spans = examples[int(indices[question])].positives[positives[question]].spans
        chosen_window, found = options[0], []
        for window in options:
            found = [t for t in (char_span_to_tokens(features, window, s.start, s.end)
                                 for s in spans) if t is not None]
            if found:
                chosen_window = window
                break
        no_span += not found
        windows.append(chosen_window)
        golds.append(found)
    features = features.select(windows)
    q, length = len(indices), features.length
    starts = torch.zeros(q * n, length, dtype=torch.bool)
    ends = torch.zeros(q * n, length, dtype=torch.bool)
    for row, spans in enumerate(golds):
        for first, last in spans:
            starts[row, first] = True
            ends[row, last] = True
    mask = torch.tensor(real, dtype=torch.bool).view(q, n)
    return ReaderBatch(features, starts.view(q, n, length), ends.view(q, n, length), mask, q, n,
                       no_span, real.count(False))


# ---------------------------------------------------------------------------------------------
# The loop


def _examples_digest(examples: Sequence[ReaderExample]) -> str:
    digest = hashlib.sha256()
    for example in examples:
        digest.update(example.id.encode() + b"\0")
    return digest.hexdigest()[:16]


class ReaderTrainer:
    """Trains `reader` on `examples` (their "train" split is not filtered here: pass the
    examples to train on), writing to `out`."""

    def __init__(self, reader: ExtractiveReader, examples: Sequence[ReaderExample],
                 out: str | os.PathLike, config: ReaderTrainConfig, accelerator: Any = None,
                 info: dict[str, Any] | None = None):
        from convqa.history import build_history_strategy

        if not examples:
            raise ConvQAError("no reader training examples")
        self.reader = reader
        self.examples = list(examples)
        self.out = Path(out)
        self.config = config
        self.accelerator = accelerator if accelerator is not None else make_accelerator()
        self.info = dict(info or {})
        self.strategy = build_history_strategy(config.history)
        self.reader.config.history = self.strategy.to_dict()  # saved with the model
        if self.reader.selection_head is None and config.passages_per_question > 1:
            self.reader.add_selection_head()
        self.data_key = {"examples": len(self.examples),
                         "ids_sha256": _examples_digest(self.examples)}
        self.last_batch: ReaderBatch | None = None

    @property
    def model_dir(self) -> Path:
        return self.out / MODEL

    def _schedule(self) -> dict[str, Any]:
        return {**self.config.schedule_key(), "data": self.data_key}

    def query(self, index: int) -> str:
        example = self.examples[index]
        return self.strategy.format(example.question, example.history_turns())

    def finished(self) -> dict[str, Any] | None:
        path = self.out / TRAINING_JSON
        if not path.exists() or not self.model_dir.is_dir():
            return None
        record = load_json(path)
        if record.get("config", {}).get("schedule") != self._schedule():
            raise ConfigError(f"{self.out} holds a reader trained with different settings or "
                              "data; use another output folder")
        return record

    def train(self, on_step: Callable[[int, float], None] | None = None) -> ReaderTrainResult:
        done = self.finished()
        if done is not None:
            return ReaderTrainResult(self.model_dir, done["steps"], done["seconds"],
                                     done.get("last_loss"), info=done)
        acc, config = self.accelerator, self.config
        world, rank = acc.num_processes, acc.process_index
        per_epoch, total = plan_steps(len(self.examples), config, world)
        warmup = round(config.warmup_ratio * total)
        torch.manual_seed(config.seed + rank)  # dropout; batches have their own seeds
        start = self._restore_model()
        params = [p for p in self.reader.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, linear_schedule(warmup, total))
        model, optimizer = acc.prepare(self.reader, optimizer)
        if start:
            self._restore_optimizer(optimizer, scheduler, start)
        self._trim_log(start)
        bar = None
        if config.progress and acc.is_main_process:
            from tqdm.auto import tqdm

            bar = tqdm(total=total, initial=start, desc="training reader", unit=" steps")
        model.train()
        began = time.perf_counter()
        last_loss = None
        cached: tuple[int, list] | None = None
        step = start
        try:
            while step < total:
                epoch = step // per_epoch
                if cached is None or cached[0] != epoch:
                    cached = (epoch, global_batches(len(self.examples), config.batch_size * world,
                                                    config.seed, epoch))
                batches = cached[1]
                tick = time.perf_counter()
                sums = torch.zeros(3)
                no_span = 0
                for micro in range(config.grad_accum):
                    indices = batches[(step % per_epoch) * config.grad_accum + micro]
                    mine = indices[rank * config.batch_size:(rank + 1) * config.batch_size]
                    batch = make_reader_batch(self.examples, mine, self.query, self.reader,
                                              config.passages_per_question, config.seed, epoch)
                    self.last_batch = batch
                    no_span += batch.no_span
                    last = micro == config.grad_accum - 1
                    sync = acc.no_sync(model) if not last and world > 1 else nullcontext()
                    with sync:
                        loss = self._forward_loss(model, batch)
                        acc.backward(loss.total / config.grad_accum)
                    sums += torch.tensor([
                        float(loss.total.detach()),
                        float(loss.selection.detach()) if loss.selection is not None else 0.0,
                        float(loss.span.detach()) if loss.span is not None else 0.0])
                if config.max_grad_norm:
                    acc.clip_grad_norm_(params, config.max_grad_norm)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                step += 1
                means = acc.reduce((sums / config.grad_accum).to(acc.device), "mean").cpu()
                last_loss = float(means[0])
                self._log({"step": step, "epoch": epoch, "loss": round(last_loss, 6),
                           "selection_loss": round(float(means[1]), 6),
                           "span_loss": round(float(means[2]), 6),
                           "lr": scheduler.get_last_lr()[0],
                           "seconds": round(time.perf_counter() - tick, 4),
                           "no_span": no_span})
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(loss=f"{last_loss:.4f}")
                if config.checkpoint_every and step % config.checkpoint_every == 0 \
                        and step < total:
                    self._save_checkpoint(model, optimizer, scheduler, step)
                if on_step is not None:
                    on_step(step, last_loss)
        finally:
            if bar is not None:
                bar.close()
        seconds = time.perf_counter() - began
        self._save_final(model, step, seconds, last_loss, start, total, warmup)
        acc.free_memory()
        return ReaderTrainResult(self.model_dir, step, seconds, last_loss, start,
                                 load_json(self.out / TRAINING_JSON))

    def _forward_loss(self, model, batch: ReaderBatch):
        acc = self.accelerator
        inputs = {k: v.to(acc.device) for k, v in batch.features.tensors.items()}
        with torch.autocast(device_type=acc.device.type, dtype=torch.bfloat16,
                            enabled=self.config.bf16):
            logits = model(**inputs)
        q, n = batch.questions, batch.group
        shape = (q, n, batch.features.length)
        selection = None if logits.selection is None else logits.selection.view(q, n)
        return reader_loss(logits.start.view(shape), logits.end.view(shape), selection,
                           batch.features.context.view(shape).to(acc.device),
                           batch.gold_starts.to(acc.device), batch.gold_ends.to(acc.device),
                           passage_mask=batch.passage_mask.to(acc.device))

    # -- checkpoints ------------------------------------------------------------------------
    def _checkpoint_state(self) -> dict[str, Any] | None:
        path = self.out / CHECKPOINT / STATE
        if not path.exists():
            return None
        state = load_json(path)
        if state.get("schedule") != self._schedule():
            raise ConfigError(f"{self.out / CHECKPOINT} was written with different training "
                              "settings or data; use another output folder or delete it")
        if state.get("processes") != self.accelerator.num_processes:
            raise ConfigError(f"{self.out / CHECKPOINT} was written by "
                              f"{state.get('processes')} processes, this run has "
                              f"{self.accelerator.num_processes}")
        return state

    def _restore_model(self) -> int:
        state = self._checkpoint_state()
        if state is None:
            return 0
        saved = ExtractiveReader.from_pretrained(self.out / CHECKPOINT / MODEL)
        self.reader.load_state_dict(saved.state_dict())
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
        """OUT/checkpoint.partial, then swapped in: a kill leaves the old or the new one."""
        acc = self.accelerator
        write_checkpoint(acc, self.out / CHECKPOINT, acc.unwrap_model(model).save_pretrained,
                         optimizer,
                         scheduler, {"step": step, "schedule": self._schedule(),
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
                "lora": reader.has_adapters, "model_fingerprint": reader.fingerprint(),
                "config": {**asdict(self.config), "schedule": self._schedule()},
                **self.info})
            if not self.config.keep_checkpoint:
                shutil.rmtree(self.out / CHECKPOINT, ignore_errors=True)
        acc.wait_for_everyone()

    # -- log --------------------------------------------------------------------------------
    def _log(self, record: dict[str, Any]) -> None:
        append_log(self.out, record, self.accelerator.is_main_process)

    def _trim_log(self, step: int) -> None:
        """Drop log lines past the checkpoint resumed from (they are redone)."""
        trim_log(self.out, step, self.accelerator.is_main_process)


def train_reader(reader: ExtractiveReader, examples: Sequence[ReaderExample],
                 out: str | os.PathLike, config: ReaderTrainConfig | None = None,
                 accelerator: Any = None, info: dict[str, Any] | None = None,
                 on_step: Callable[[int, float], None] | None = None) -> ReaderTrainResult:
    """Train (or resume, or return the finished result of) one run into `out`."""
    return ReaderTrainer(reader, examples, out, config or ReaderTrainConfig(), accelerator,
                         info).train(on_step)


# ---------------------------------------------------------------------------------------------
# Evaluation


def evaluate_reader(reader: Any, examples: Sequence[ReaderExample], with_negatives: bool = False,
                    max_negatives: int | None = None, convention: str = "squad",
                    seed: int = 0, progress: bool = False) -> dict[str, Any]:
    """EM/F1 (percent, convqa.metrics.answer) of `reader` on `examples`.

    `reader` is a `SpanReader` (readers/extractive/reader.py) or an `ExtractiveReader` (read
    with its training history strategy and the default strategy). Each question is read
    against its first positive passage alone, or, `with_negatives`, together with its
    negatives (at most `max_negatives`), the positive at a seeded random position; then
    `passage_accuracy` is the share of answers taken from the positive passage."""
    from convqa.metrics.answer import score_answer

    from .reader import SpanReader

    if isinstance(reader, ExtractiveReader):
        reader = SpanReader.from_model(reader)
    items: Any = examples
    if progress:
        from tqdm.auto import tqdm

        items = tqdm(examples, desc="evaluating reader", unit=" questions")
    em = f1 = 0.0
    from_positive = no_answer = 0
    predictions: dict[str, str] = {}
    for example in items:
        gold = example.positives[0].passage
        passages = [gold]
        if with_negatives:
            negatives = example.negatives[:max_negatives] if max_negatives is not None \
                else example.negatives
            passages = list(negatives)
            digest = hashlib.sha256(f"{seed}:{example.id}".encode()).digest()
            position = int(np.random.default_rng(list(digest[:8])).integers(len(passages) + 1))
            passages.insert(position, gold)
        answer = reader.read(example.question, example.history_turns(), passages)
        text = answer.text if answer is not None else ""
        no_answer += answer is None
        from_positive += answer is not None and answer.passage_id == gold.id
        predictions[example.id] = text
        scores = score_answer(text, example.golds(), convention)
        em += scores["em"]
        f1 += scores["f1"]
    count = len(examples)
    result = {"em": 100.0 * em / count if count else 0.0,
              "f1": 100.0 * f1 / count if count else 0.0,
              "count": count, "no_answer": no_answer, "with_negatives": with_negatives,
              "convention": convention, "predictions": predictions}
    if with_negatives:
        result["passage_accuracy"] = 100.0 * from_positive / count if count else 0.0
    return result
