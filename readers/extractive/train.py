"""Training the extractive reader under `accelerate` (one CPU process to many GPUs, same code),
and scoring it on held-out examples.

    torchrun --nproc_per_node 4 -m convqa.front.cli.main train reader ...   # or plain `convqa`

- Batches are length-bucketed (`length_pool`): the seeded epoch order is sorted by length in
  pools of that many batches and the batches shuffled (convqa/training/schedule.py
  `bucketed_batches`), and each batch is padded to its longest window only; within a batch
  the windows go through the model `window_chunk` at a time in order of length, each chunk cut
  to its own longest (`chunked_logits`), so a window of a short passage costs about what its
  tokens cost, not 256.
- A micro-batch is `batch_size` questions per process, each read against
  `passages_per_question` passages (default 3): one of its positives and n-1 of its negatives
  (the benchmark's turns: the dense retriever's hard ones, dense_negatives.py), drawn by a
  generator seeded by (seed, epoch, example number), so a resumed run, or a run on another
  number of processes, sees the same questions with the same passages. An example with fewer
  negatives repeats them; one with none gets masked padding passages. Every passage is read in
  one window: for the positive, the first window holding a whole gold span (all gold spans in
  that window count), for a negative a seeded random one of its windows (always the first
  would teach the selection head that later windows are relevant).
- Unanswerable examples (data.py): all their passages are negatives; the first one (its own
  SQuAD paragraph, the retriever's best passage) takes the positive's slot and is read every
  time, the others are drawn as above. With any unanswerable example, or a reader that already
  has it, the run trains with the null option (loss.py) and the saved reader records
  `null_option: true`.
- Batches are built ahead of their step by `loader_workers` processes (a DataLoader,
  convqa/training/loader.py; `auto`: none on a CPU-only run, up to 4 with a GPU), the same
  batches in the same order as building each in the training process.
- Loss: loss.py (selection cross-entropy + span marginal likelihood). Each process scores its
  own questions; DDP averages the gradients.
- Distillation (`distill_weight` w > 0 with a teacher's targets, distill.py): the loss is
  (1 - w) x that loss + w x `loss.distillation_loss` against the teacher's selection and span
  distributions on the same windows; the targets are read from a file made once, so the
  teacher costs nothing per step. The targets' key (teacher, examples) joins the schedule key.
- AdamW, linear warm-up then linear decay, gradient clipping, gradient accumulation; precision
  `auto` (the faster of fp32 and bf16 autocast whose loss agrees, timed on the first batch at
  every start: bf16 is ~1.3x faster to train on AVX512-BF16 CPUs, several times slower on
  AVX2), `fp32` or `bf16` (the heads and the loss stay fp32). The precision is not part of the
  resume key: a run may move between machines.
- Checkpoints every `checkpoint_every` optimizer steps into OUT/checkpoint, swapped in
  atomically: the reader via `save_pretrained` (safetensors), optimizer, scheduler and RNG
  states via `torch.save`, read back with `torch.load(weights_only=True)`, and state.json. A
  rerun after a kill resumes there and ends with the same weights as an uninterrupted run.
  The loop, shared by every convqa trainer, is convqa/training/loop.py.
- OUT/log.jsonl (one line per optimizer step), a progress bar on the main process, and at the
  end OUT/model plus OUT/training.json.
- The curve: with `eval_every` N, a fixed seeded sample of the held-out examples
  (`eval_per_source` per source, heldout.py) is read with its gold passages at step 0 and every
  N steps, and its EM/F1 per source written into log.jsonl as `{"step", "heldout": {...}}`
  (before the step's checkpoint, so a resumed run redoes exactly the scores it lost);
  convqa/front/tools/plot_reader_curve.py draws it.
"""
from __future__ import annotations

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

from .data import ReaderExample
from .distill import (ExampleTargets, PassageTargets, TeacherTargets, selection_targets,
                      window_targets)
from .heldout import heldout_sample
from .inputs import ReaderFeatures, build_features, char_span_to_tokens
from .loss import distillation_loss, reader_loss
from .model import DEFAULT_HISTORY, ExtractiveReader, ReaderLogits

__all__ = ["DEFAULT_HISTORY", "ReaderBatch", "ReaderTrainConfig", "ReaderTrainResult",
           "ReaderTrainer", "make_accelerator", "make_reader_batch",
           "train_reader"]


@dataclass
class ReaderTrainConfig(StudentSchedule):
    batch_size: int = 4               # questions per process per micro-step
    passages_per_question: int = 3    # 1 positive + n-1 negatives
    history: str | dict = field(default_factory=lambda: dict(DEFAULT_HISTORY))
    window_chunk: int = 4             # windows per forward pass, by length; 0: all at once
    eval_per_source: int = 50         # held-out questions per source in those scores

    def __post_init__(self) -> None:
        super().__post_init__()
        check_counts(self, ("passages_per_question", "eval_per_source"), 1)
        check_counts(self, ("window_chunk",), 0)

    def schedule_key(self) -> dict[str, Any]:
        return super().schedule_key(skip=("eval_per_source",))


ReaderTrainResult = TrainResult  # the shared result type (convqa/training/loop.py)


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
    answerable: Tensor | None = None  # [Q] bool; None: every question has a positive
    teacher: "TeacherBatch | None" = None  # the teacher's targets on these windows


@dataclass
class TeacherBatch:
    """A teacher's targets on a batch's windows (distill.py, loss.distillation_loss)."""

    selection: Tensor      # [Q, N] logits, -inf for padding
    starts: Tensor         # [Q, N, L] probabilities
    ends: Tensor           # [Q, N, L]


def _choose_passages(example: ReaderExample, count: int, rng
                     ) -> tuple[int, list[Passage], int, list[int | None]]:
    """(positive number, the passages [positive, negatives...], padding passages, each
    passage's number in the example: positives first, then negatives; None for padding); for
    an unanswerable example (-1, [its first negative, other negatives...], padding, numbers)."""
    first = len(example.positives)
    if example.unanswerable:
        positive, chosen, pool, numbers = -1, [example.negatives[0]], example.negatives[1:], [first]
        offset = first + 1
    else:
        positive = int(rng.integers(len(example.positives)))
        chosen, pool, numbers = [example.positives[positive].passage], example.negatives, [positive]
        offset = first
    need = count - 1
    if need and pool:
        if len(pool) >= need:
            picks = [int(i) for i in rng.choice(len(pool), size=need, replace=False)]
        else:
            picks = list(range(len(pool))) + [int(i) for i in rng.integers(
                len(pool), size=need - len(pool))]
        chosen += [pool[i] for i in picks]
        numbers += [offset + i for i in picks]
    padding = count - len(chosen)
    chosen += [Passage("", "")] * padding
    numbers += [None] * padding
    return positive, chosen, padding, numbers


def make_reader_batch(examples: Sequence[ReaderExample], indices: Sequence[int],
                      queries: Callable[[int], str], reader: ExtractiveReader,
                      passages_per_question: int, seed: int, epoch: int,
                      teacher: Mapping[str, ExampleTargets] | None = None,
                      temperature: float = 1.0) -> ReaderBatch:
    """The batch of examples `indices`; `queries(i)` is the query text of example i; with
    `teacher` (targets by example id) the teacher's targets on the chosen windows too."""
    n = passages_per_question
    texts: list[str] = []
    passages: list[Passage] = []
    positives: list[int] = []
    real: list[bool] = []
    numbers: list[int | None] = []
    for index in indices:
        example = examples[int(index)]
        positive, chosen, pad, chosen_numbers = _choose_passages(
            example, n, example_rng(seed, epoch, int(index)))
        positives.append(positive)
        numbers.extend(chosen_numbers)
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
        if slot or positives[question] < 0:  # a negative: any of its windows, so window
            # position tells nothing (slot 0 of an unanswerable example is a negative too)
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
    answerable = torch.tensor([p >= 0 for p in positives], dtype=torch.bool)
    taught = None if teacher is None else _teacher_batch(
        features, [teacher[examples[int(i)].id] for i in indices], numbers, n, temperature)
    return ReaderBatch(features, starts.view(q, n, length), ends.view(q, n, length), mask, q, n,
                       no_span, real.count(False), answerable, taught)


def _teacher_batch(features: ReaderFeatures, targets: Sequence[ExampleTargets],
                   numbers: Sequence[int | None], n: int, temperature: float) -> TeacherBatch:
    """The teacher's targets of each (question, slot) passage on the window chosen for it."""
    length = features.length
    starts = torch.zeros(len(numbers), length)
    ends = torch.zeros(len(numbers), length)
    kept: list[PassageTargets | None] = []
    for row, number in enumerate(numbers):
        if number is None:
            kept.append(None)
            continue
        passage = targets[row // n].passage(number)
        kept.append(passage)
        starts[row], ends[row] = window_targets(features, row, passage, temperature)
    q = len(numbers) // n
    return TeacherBatch(selection_targets(kept).view(q, n), starts.view(q, n, length),
                        ends.view(q, n, length))


def chunked_logits(model, inputs: dict[str, Tensor], chunk: int) -> ReaderLogits:
    """The model's logits of all windows, computed `chunk` windows at a time in order of
    length, each chunk cut to its own longest window: a batch mixes short and long windows
    (a short positive, a long negative), and one forward pass pads them all to the longest.
    Padding positions get logit 0 (the loss masks them). `chunk` 0: one forward pass."""
    mask = inputs["attention_mask"]
    windows, length = mask.shape
    if not chunk or windows <= chunk:
        return model(**inputs)
    lengths = mask.sum(1)
    order = torch.argsort(lengths, descending=True, stable=True)
    starts, ends, selections = [], [], []
    for begin in range(0, windows, chunk):
        rows = order[begin:begin + chunk]
        used = int(lengths[rows].max())
        logits = model(**{k: v[rows, :used] for k, v in inputs.items()})
        pad = (0, length - used)
        starts.append(torch.nn.functional.pad(logits.start, pad))
        ends.append(torch.nn.functional.pad(logits.end, pad))
        if logits.selection is not None:
            selections.append(logits.selection.reshape(-1))
    back = torch.argsort(order)
    return ReaderLogits(torch.cat(starts)[back], torch.cat(ends)[back],
                        torch.cat(selections)[back] if selections else None)


# ---------------------------------------------------------------------------------------------
# The loop


class ReaderTrainer(StudentTrainer):
    """Trains `reader` on `examples` (their "train" split is not filtered here: pass the
    examples to train on), writing to `out`."""

    what = "a reader"
    compared = "settings or data"
    progress_label = "training reader"
    precision_what = "reader training"
    teacher_what = "a teacher's targets"

    def __init__(self, reader: ExtractiveReader, examples: Sequence[ReaderExample],
                 out: str | os.PathLike, config: ReaderTrainConfig, accelerator: Any = None,
                 info: dict[str, Any] | None = None,
                 heldout: Sequence[ReaderExample] = (),
                 teacher: TeacherTargets | None = None):
        from convqa.history import model_history_strategy

        if not examples:
            raise ConvQAError("no reader training examples")
        super().__init__(reader, out, config, accelerator, info, teacher)
        self.reader = reader
        self.examples = list(examples)
        self.strategy = model_history_strategy(config.history, reader)
        self.reader.config.history = self.strategy.to_dict()  # saved with the model
        # the null option: asked for by unanswerable examples, kept by a reader that has it
        self.null_option = self.reader.config.null_option or any(
            e.unanswerable for e in self.examples)
        self.reader.config.null_option = self.null_option  # saved with the model
        if self.reader.selection_head is None and (config.passages_per_question > 1
                                                   or self.null_option):
            self.reader.add_selection_head()
        self.data_key = {"examples": len(self.examples),
                         "ids_sha256": ids_digest(self.examples)}
        self.last_batch: ReaderBatch | None = None
        self.curve_sample = heldout_sample(heldout, config.eval_per_source, config.seed) \
            if config.eval_every else []
        self._lengths: list[int] | None = None

    def schedule(self) -> dict[str, Any]:
        extra = {"null_option": True} if self.null_option else {}
        if self.teacher is not None:
            extra["teacher"] = self.teacher.key
        return {**self.config.schedule_key(), "data": self.data_key, **extra}

    def query(self, index: int) -> str:
        example = self.examples[index]
        return self.strategy.format(example.question, example.history_turns())

    def num_examples(self) -> int:
        return len(self.examples)

    def example_length(self, index: int) -> int:
        """What bucketing sorts by: the characters of the query plus those of the example's
        longest passage (a batch is padded to its longest window)."""
        example = self.examples[index]
        passages = [p.passage for p in example.positives] + list(example.negatives)
        return len(self.query(index)) + max(len(p.title) + len(p.text) for p in passages)

    def epoch_batches(self, epoch: int, global_batch: int):
        if not self.config.length_pool:
            return super().epoch_batches(epoch, global_batch)
        if self._lengths is None:
            self._lengths = [self.example_length(i) for i in range(len(self.examples))]
        return bucketed_batches(self._lengths, global_batch, self.config.seed, epoch,
                                self.config.length_pool)

    def score_share(self, model, share: Sequence[ReaderExample]) -> list[dict[str, str]]:
        from .heldout import read_answers

        return [read_answers(model, share)]

    def summarize_curve(self, gathered: list[dict[str, str]], seconds: float) -> dict[str, Any]:
        from .heldout import score_answers

        answers = {qid: text for part in gathered for qid, text in part.items()}
        return score_answers(self.curve_sample, answers, seconds=seconds)

    def make_batch(self, indices, epoch: int) -> ReaderBatch:
        return make_reader_batch(self.examples, indices, self.query, self.reader,
                                 self.config.passages_per_question, self.config.seed, epoch,
                                 self.teacher.examples if self.teacher else None,
                                 self.config.distill_temperature)

    def batch_counts(self, batch: ReaderBatch) -> dict[str, int]:
        counts = {"no_span": batch.no_span}
        if self.null_option:
            counts["unanswerable"] = int((~batch.answerable).sum())
        return counts

    def compute_loss(self, model, batch: ReaderBatch):
        acc = self.accelerator
        inputs = {k: v.to(acc.device, non_blocking=True)
                  for k, v in batch.features.tensors.items()}
        with autocast(self.precision, acc.device):
            logits = chunked_logits(model, inputs, self.config.window_chunk)
        q, n = batch.questions, batch.group
        shape = (q, n, batch.features.length)
        selection = None if logits.selection is None else logits.selection.view(q, n)
        loss = reader_loss(logits.start.view(shape), logits.end.view(shape), selection,
                           batch.features.context.view(shape).to(acc.device),
                           batch.gold_starts.to(acc.device), batch.gold_ends.to(acc.device),
                           passage_mask=batch.passage_mask.to(acc.device),
                           null_option=self.null_option,
                           answerable=None if batch.answerable is None
                           else batch.answerable.to(acc.device))
        logged = {"loss": loss.total, "selection_loss": loss.selection,
                  "span_loss": loss.span}
        total = loss.total
        if batch.teacher is not None:
            device = acc.device
            taught = distillation_loss(
                logits.start.view(shape), logits.end.view(shape), selection,
                batch.features.context.view(shape).to(device),
                batch.passage_mask.to(device), batch.teacher.selection.to(device),
                batch.teacher.starts.to(device), batch.teacher.ends.to(device),
                self.config.distill_temperature)
            weight = self.config.distill_weight
            total = (1.0 - weight) * loss.total + weight * taught.total
            logged.update({"loss": total, "hard_loss": loss.total,
                           "distill_selection_loss": taught.selection,
                           "distill_span_loss": taught.span})
        # fp32 sums, an absent part counted as 0
        return total, {name: torch.tensor(0.0 if value is None else float(value.detach()))
                       for name, value in logged.items()}


def train_reader(reader: ExtractiveReader, examples: Sequence[ReaderExample],
                 out: str | os.PathLike, config: ReaderTrainConfig | None = None,
                 accelerator: Any = None, info: dict[str, Any] | None = None,
                 on_step: Callable[[int, float], None] | None = None,
                 heldout: Sequence[ReaderExample] = (),
                 teacher: TeacherTargets | None = None) -> ReaderTrainResult:
    """Train (or resume, or return the finished result of) one run into `out`; with
    `config.eval_every`, a fixed sample of `heldout` is scored every that many steps; with
    `teacher` (and `config.distill_weight`), learning from a teacher's targets too."""
    return ReaderTrainer(reader, examples, out, config or ReaderTrainConfig(), accelerator,
                         info, heldout, teacher).train(on_step)
