"""Training the phrase model under `accelerate` (one CPU process to many GPUs, same code).

Two stages, each a resumable run in its own folder:
- "phrase": span loss on the question's own passage, distillation from the extractive reader
  (KL on its start/end distributions), filter loss, phrase-level in-batch negatives,
  pre-batch negatives from the C previous batches, and PRO-ConvQA's L_turn; the total is the
  weighted sum (losses.py). PRO-ConvQA's "lambda1 * L_neg + lambda2 * L_turn" is
  `weights["in_batch"] = weights["pre_batch"] = lambda1`, `weights["turn"] = lambda2`.
- "query": query-side fine-tuning. The phrase tower and filter are frozen (so the model's
  `fingerprint()`, and any index built from it, stays valid); the phrase vectors of a pool of
  training passages are computed once into an in-memory matrix, and each query is trained to
  put the mass of its top retrieved phrases (start-vector MIPS, then the best end within
  `max_answer_tokens`, plus its gold phrase) on those whose text is a gold answer (SQuAD
  exact match), with L_turn kept.

Conventions as readers/extractive/train.py: AdamW with linear warm-up/decay, clipping,
gradient accumulation, precision auto | fp32 | bf16 (the loop times fp32 and bf16 autocast on
the first batch at each start for auto; heads and losses fp32); checkpoints every
`checkpoint_every` steps in OUT/checkpoint (model safetensors, optimizer, scheduler, RNG and
pre-batch queue, swapped in atomically), so a rerun after a kill resumes and ends with the
same weights; OUT/log.jsonl per step; OUT/model and OUT/training.json at the end.
`train_phrase_model` runs both stages (OUT/phrase, OUT/query) and writes OUT/model.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import dataclasses
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch import Tensor

from convqa.errors import ConfigError, ConvQAError
from convqa.precision import BF16, autocast, training_precision_setting
from convqa.io import write_json
from convqa.training.checkpoint import MODEL, load_tensors
from convqa.training.loop import StepTrainer, TrainResult, make_accelerator
from convqa.training.schedule import check_counts, check_schedule, schedule_key

from .data import (PhraseBatch, PhraseExample, align_teacher_logits, conversation_batches,
                   make_phrase_batch)
from .losses import (LOSS_NAMES, PreBatchQueue, batch_span_loss, combine, distill_loss,
                     filter_loss, gather_gold, in_batch_negative_loss, pre_batch_negative_loss,
                     query_side_loss, span_loss, token_scores, turn_loss)
from .model import PhraseModel

STAGES = ("phrase", "query")
POOL_FILE = "frozen_pool.safetensors"   # the query stage's pool, kept for a resumed run
PHRASE_WEIGHTS = {"span": 1.0, "batch_span": 0.0, "distill": 1.0, "filter": 0.5,
                  "in_batch": 1.0, "pre_batch": 1.0, "turn": 0.5}
QUERY_WEIGHTS = {"query_side": 1.0, "turn": 0.5}

__all__ = ["PhraseTrainConfig", "PhraseTrainResult", "PhraseTrainer", "FrozenPhrases",
           "evaluate_in_passage", "export_adapter", "export_query_adapter", "heldout_scores",
           "make_accelerator", "train_phrase_model", "train_stage"]


@dataclass
class PhraseTrainConfig:
    stage: str = "phrase"
    epochs: int = 1
    batch_size: int = 16              # questions per process per micro-step
    grad_accum: int = 1
    lr: float = 5e-5
    weight_decay: float = 0.0
    warmup_ratio: float = 0.1
    max_steps: int | None = None
    max_grad_norm: float | None = 2.0
    weights: dict = field(default_factory=dict)   # loss name -> weight; {} = the stage default
    pre_batch: int = 2                # C: previous batches whose gold phrases are negatives
    hard_negatives: int = 0           # mined negative passages per question (batch_span loss)
    distill_temperature: float = 1.0
    turn_temperature: float = 0.1
    run_length: int = 4               # consecutive turns of a conversation kept together
    stride: int = 64                  # tokens shared by the windows of a long passage
    pool_passages: int = 2000         # query stage: passages in the frozen phrase matrix
    pool_store: str | None = None     # query stage: a passage store (the corpus to be searched)
    pool_store_passages: int | None = None   # ... a seeded sample of that many of its passages
    start_candidates: int = 64        # query stage: starts taken from the MIPS per query
    candidates: int = 16              # query stage: retrieved phrases per query
    bf16: bool = False                # older spelling of precision="bf16"
    precision: str = "fp32"           # auto | fp32 | bf16; auto measures both at each start
    seed: int = 0
    checkpoint_every: int = 100       # optimizer steps; 0 = only at the end
    keep_checkpoint: bool = False
    progress: bool = True

    def __post_init__(self) -> None:
        if self.stage not in STAGES:
            raise ConfigError(f"stage must be one of {', '.join(STAGES)}, got {self.stage!r}")
        check_counts(self, ("epochs", "batch_size", "grad_accum", "run_length",
                            "pool_passages", "start_candidates", "candidates"), 1)
        check_counts(self, ("checkpoint_every", "seed", "pre_batch", "stride",
                            "hard_negatives"), 0)
        if self.pool_store_passages is not None:
            check_counts(self, ("pool_store_passages",), 1)
        if self.pool_store is not None and self.stage != "query":
            raise ConfigError("pool_store is a query-stage setting (the frozen phrase pool)")
        check_schedule(self)
        self.precision = training_precision_setting(self.precision, self.bf16)
        for name in ("distill_temperature", "turn_temperature"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be > 0, got {getattr(self, name)!r}")
        default = PHRASE_WEIGHTS if self.stage == "phrase" else QUERY_WEIGHTS
        weights = {**default, **(self.weights or {})}
        for name, value in weights.items():
            if name not in LOSS_NAMES:
                raise ConfigError(f"unknown loss '{name}' (known: {', '.join(LOSS_NAMES)})")
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 \
                    or not math.isfinite(value):
                raise ConfigError(f"weight of loss '{name}' must be a number >= 0, got {value!r}")
        allowed = set(PHRASE_WEIGHTS if self.stage == "phrase" else QUERY_WEIGHTS)
        extra = sorted(n for n, v in weights.items() if n not in allowed and v)
        if extra:
            raise ConfigError(f"loss '{extra[0]}' is not part of the {self.stage} stage")
        self.weights = {name: float(weights[name]) for name in sorted(allowed)}
        if self.hard_negatives and not self.weights.get("batch_span"):
            raise ConfigError("hard negative passages are scored by the batch-wide span loss: "
                              "give it a weight > 0 (--batch-span-weight)")

    def schedule_key(self) -> dict[str, Any]:
        """The settings a checkpoint must share with the run that resumes it (the pool-store
        and hard-negative settings only when set, so runs from before they existed still
        resume)."""
        skip = [name for name in ("pool_store", "pool_store_passages")
                if getattr(self, name) is None]
        if not self.hard_negatives:
            skip.append("hard_negatives")
        return schedule_key(self, skip)


PhraseTrainResult = TrainResult  # the shared result type (convqa/training/loop.py)


def _digest_ids(ids) -> str:
    digest = hashlib.sha256()
    for pid in ids:
        digest.update(str(pid).encode() + b"\0")
    return digest.hexdigest()[:16]


def _digest(examples: Sequence[PhraseExample]) -> str:
    return _digest_ids(example.id for example in examples)


# ---------------------------------------------------------------------------------------------
# The frozen phrase matrix of the query stage


class FrozenPhrases:
    """Phrase vectors of a pool of passages, computed once with the frozen phrase tower:
    `vectors` [N, d] (fp16) over every text token, in window order, with each token's window
    and character offsets; searched by start-vector MIPS then the best end within
    `max_answer_tokens` of the same window."""

    SEARCH_CHUNK = 262_144   # rows scored at once (bounds the fp32 copy of a large pool)
    FP32_CACHE_BYTES = 4 << 30   # up to this size the pool is also kept as fp32 for search

    def __init__(self, model: PhraseModel, passages: Sequence[Any], batch_size: int = 32,
                 bf16: bool = False, stride: int = 64, progress: bool = False):
        from tqdm.auto import tqdm

        self.passages = list(passages)
        self.max_answer_tokens = model.config.max_answer_tokens
        vectors, windows, offsets, owners = [], [], [], []
        window_count = 0
        was_training = model.training
        model.eval()
        bar = tqdm(total=len(self.passages), desc="query stage: frozen phrase pool",
                   unit="psg", disable=not progress)
        with torch.no_grad():
            for first in range(0, len(self.passages), batch_size):
                chunk = self.passages[first:first + batch_size]
                bar.update(len(chunk))
                encoding = model.tokenize_passages([p.title for p in chunk],
                                                   [p.text for p in chunk], stride=stride)
                with torch.autocast(device_type=model.device.type, dtype=torch.bfloat16,
                                    enabled=bf16):
                    out = model.encode_passages(encoding["input_ids"], encoding["attention_mask"])
                mask = encoding["phrase_mask"]
                mapping = encoding["overflow_to_sample_mapping"]
                for row in range(mask.shape[0]):
                    keep = mask[row]
                    count = int(keep.sum())
                    vectors.append(out.start[row][keep.to(out.start.device)].to("cpu",
                                                                                 torch.float16))
                    offsets.append(encoding["offset_mapping"][row][keep])
                    windows.append(torch.full((count,), window_count, dtype=torch.long))
                    owners.append(torch.full((count,), first + int(mapping[row]),
                                             dtype=torch.long))
                    window_count += 1
        bar.close()
        model.train(was_training)
        self.vectors = torch.cat(vectors) if vectors else torch.zeros(0, model.dim)
        self.windows = torch.cat(windows) if windows else torch.zeros(0, dtype=torch.long)
        self.offsets = torch.cat(offsets) if offsets else torch.zeros(0, 2, dtype=torch.long)
        self.owners = torch.cat(owners) if owners else torch.zeros(0, dtype=torch.long)
        self._matrix: Tensor | None = None

    @classmethod
    def cached(cls, model: PhraseModel, passages: Sequence[Any], path: Path, save: bool = True,
               **options: Any) -> "FrozenPhrases":
        """The pool of `passages` read back from `path` (a safetensors file) when it was
        encoded by the same phrase tower with the same settings, else encoded (and, with
        `save`, written atomically): a resumed run does not pay for encoding a corpus again."""
        from safetensors.torch import load_file, save_file

        passages = list(passages)
        key = hashlib.sha256(json.dumps({
            "fingerprint": model.fingerprint(), "ids": _digest_ids(p.id for p in passages),
            "bf16": bool(options.get("bf16", False)), "stride": options.get("stride", 64)},
            sort_keys=True).encode()).hexdigest()[:24]
        if path.exists():
            try:
                from safetensors import safe_open

                with safe_open(str(path), "pt") as handle:
                    stored = (handle.metadata() or {}).get("key")
                if stored == key:
                    tensors = load_file(str(path))
                    pool = cls.__new__(cls)
                    pool.passages, pool.max_answer_tokens = passages, \
                        model.config.max_answer_tokens
                    for name in ("vectors", "windows", "offsets", "owners"):
                        setattr(pool, name, tensors[name])
                    pool._matrix = None
                    return pool
            except Exception:  # noqa: BLE001 - an unreadable cache is encoded again
                pass
        pool = cls(model, passages, **options)
        if save:
            tensors = {name: getattr(pool, name).contiguous()
                       for name in ("vectors", "windows", "offsets", "owners")}
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.tmp")
            save_file(tensors, str(tmp), metadata={"key": key})
            os.replace(tmp, path)
        return pool

    def __len__(self) -> int:
        return int(self.vectors.shape[0])

    def search(self, q_start: Tensor, q_end: Tensor, starts: int, k: int
               ) -> list[list[tuple[int, int]]]:
        """For each query, its top `k` phrases as (start row, end row) into `vectors`,
        distinct by (passage, character span)."""
        n, span = len(self), self.max_answer_tokens
        if n == 0:
            return [[] for _ in range(len(q_start))]
        top_scores, top_rows = self._top_starts(q_start.detach().float().cpu(), min(starts, n))
        ends = top_rows.unsqueeze(-1) + torch.arange(span)                 # [B, S, A]
        valid = ends < n
        ends = ends.clamp(max=n - 1)
        valid &= self.windows[ends] == self.windows[top_rows].unsqueeze(-1)
        end_scores = torch.einsum("bd,bsad->bsa", q_end.detach().float().cpu(),
                                  self.vectors[ends].float())
        totals = (top_scores.unsqueeze(-1) + end_scores).masked_fill(~valid, float("-inf"))
        results = []
        for b in range(len(q_start)):
            flat = totals[b].flatten()
            order = torch.argsort(flat, descending=True)
            chosen, seen = [], set()
            for position in order.tolist():
                if not math.isfinite(float(flat[position])) or len(chosen) == k:
                    break
                s, a = divmod(position, span)
                first, last = int(top_rows[b, s]), int(ends[b, s, a])
                key = (int(self.owners[first]), int(self.offsets[first, 0]),
                       int(self.offsets[last, 1]))
                if key not in seen:
                    seen.add(key)
                    chosen.append((first, last))
            results.append(chosen)
        return results

    def _top_starts(self, queries: Tensor, k: int) -> tuple[Tensor, Tensor]:
        """(scores, rows) of each query's `k` best start vectors: exact MIPS, a chunk of rows
        at a time (a pool of a whole corpus has millions of rows: only one chunk is ever
        converted to fp32)."""
        if self._matrix is None and self.vectors.numel() * 4 <= self.FP32_CACHE_BYTES:
            self._matrix = self.vectors.float()   # converted once, not at every step
        matrix = self.vectors if self._matrix is None else self._matrix
        values, indices = [], []
        for first in range(0, len(self), self.SEARCH_CHUNK):
            chunk = matrix[first:first + self.SEARCH_CHUNK].float()
            top = (queries @ chunk.T).topk(min(k, chunk.shape[0]), dim=1)
            values.append(top.values)
            indices.append(top.indices + first)
        best = torch.cat(values, dim=1).topk(k, dim=1)
        return best.values, torch.cat(indices, dim=1).gather(1, best.indices)

    def text(self, first: int, last: int) -> str:
        passage = self.passages[int(self.owners[first])]
        return passage.text[int(self.offsets[first, 0]):int(self.offsets[last, 1])]


def _pool(examples: Sequence[PhraseExample], size: int, seed: int, store: str | None = None,
          store_size: int | None = None) -> list[Any]:
    """The distinct passages of the examples (by id), a seeded sample of at most `size`; with
    `store`, also the passages of that passage store (a seeded sample of `store_size`), so the
    query learns against the corpus it will search, neighbours of each gold passage included."""
    unique = {}
    for example in examples:
        unique.setdefault(example.passage.id, example.passage)
    ids = sorted(unique)
    if len(ids) > size:
        keep = np.random.default_rng([seed, 11]).choice(len(ids), size=size, replace=False)
        ids = [ids[i] for i in sorted(keep)]
    pool = [unique[i] for i in ids]
    if store is not None:
        from convqa.corpus import PassageStore

        taken = set(ids)
        with PassageStore.open(store) as opened:
            rows = range(len(opened))
            if store_size is not None and store_size < len(opened):
                rows = sorted(np.random.default_rng([seed, 13]).choice(
                    len(opened), size=store_size, replace=False).tolist())
            for row in rows:
                passage = opened.at(int(row))
                if passage.id not in taken:
                    taken.add(passage.id)
                    pool.append(passage)
    return pool


# ---------------------------------------------------------------------------------------------
# The loop


class PhraseTrainer(StepTrainer):
    """Trains `model` on `examples` for one stage, writing to `out`. `teacher` (an
    ExtractiveReader) is needed when the distillation weight is not 0."""

    what = "a phrase model"
    compared = "settings or data"

    def __init__(self, model: PhraseModel, examples: Sequence[PhraseExample],
                 out: str | os.PathLike, config: PhraseTrainConfig, teacher: Any = None,
                 accelerator: Any = None, info: dict[str, Any] | None = None):
        if not examples:
            raise ConvQAError("no phrase training examples")
        super().__init__(model, out, config, accelerator, info)
        self.examples = list(examples)
        self.progress_label = f"training phrases ({config.stage})"
        self.precision_what = f"phrase training ({config.stage} stage)"
        self.weights = dict(config.weights)
        self.teacher = teacher if self.weights.get("distill", 0.0) else None
        if self.weights.get("distill", 0.0) and teacher is None:
            raise ConfigError("distillation weight > 0 but no teacher reader given "
                              "(give one, or set the distill weight to 0)")
        self.teacher_strategy = None
        if self.teacher is not None:
            from convqa.history import build_history_strategy

            # on the training device: a teacher left on the CPU would read every batch there
            self.teacher.to(self.accelerator.device).eval()
            self.teacher_strategy = build_history_strategy(
                self.teacher.config.history or "current_first")
        self.queue = PreBatchQueue(config.pre_batch if self.weights.get("pre_batch") else 0)
        self.frozen: FrozenPhrases | None = None
        self.data_key = {"examples": len(self.examples), "ids_sha256": _digest(self.examples),
                         "teacher": self.teacher.fingerprint() if self.teacher else None}
        self.last_batch: PhraseBatch | None = None
        self.skipped_unfit: set[str] = set()   # examples whose answer fits no window
        self._set_trainable()

    def _set_trainable(self) -> None:
        """Query stage: only the query side trains. Phrase stage: a head with no loss on it is
        frozen (an unused parameter would break DDP)."""
        model = self.model
        if self.config.stage == "query":
            for param in model.phrase_parameters():
                param.requires_grad_(False)
        elif not self.weights.get("filter"):
            for param in model.filter_head.parameters():
                param.requires_grad_(False)

    def schedule(self) -> dict[str, Any]:
        return {**self.config.schedule_key(), "data": self.data_key,
                "start_model": self.info.get("start_fingerprint")}

    def teacher_query(self, example: PhraseExample) -> str:
        return self.teacher_strategy.format(example.question, example.history_turns())

    # -- the loop's hooks ----------------------------------------------------------------------
    def num_examples(self) -> int:
        return len(self.examples)

    def epoch_batches(self, epoch: int, global_batch: int) -> list[list[int]]:
        """Runs of consecutive turns of a conversation stay together (L_turn needs them)."""
        return conversation_batches(self.examples, global_batch, self.config.seed, epoch,
                                    self.config.run_length)

    def before_optimizer(self) -> None:
        """Query stage: the frozen phrase matrix, from the (restored) phrase tower."""
        config = self.config
        if config.stage == "query":
            pool = _pool(self.examples, config.pool_passages, config.seed, config.pool_store,
                         config.pool_store_passages)
            shown = config.progress and self.accelerator.is_main_process
            self.frozen = FrozenPhrases.cached(
                self.model, pool, self.out / POOL_FILE, save=self.accelerator.is_main_process,
                bf16=config.precision == BF16, stride=config.stride, progress=shown)

    def set_train_mode(self, model) -> None:
        model.train()
        if self.config.stage == "query":  # frozen: no dropout, the same vectors as the pool's
            self.model.phrase_encoder.eval()

    def log_tags(self) -> dict[str, Any]:
        return {"stage": self.config.stage}

    @contextmanager
    def probe_guard(self):
        """The precision probe computes losses that would queue its batch: put the queue back."""
        queued = list(self.queue._batches)
        try:
            yield
        finally:
            self.queue.clear()
            for start, end in queued:
                self.queue.push(start, end)

    def make_batch(self, indices, epoch: int) -> PhraseBatch:
        """The batch of `indices`, less any example whose answer fits no passage window (an
        answer longer than a window, e.g. some COVID-QA answers): counted in the final record."""
        batch = make_phrase_batch(self.examples, indices, self.model, self.config.stride,
                                  self.teacher,
                                  self.teacher_query if self.teacher is not None else None,
                                  skip_unfit=True, negatives=self.config.hard_negatives)
        self.skipped_unfit.update(batch.skipped)
        return batch

    def compute_loss(self, model, batch: PhraseBatch):
        """The weighted sum of the stage's losses; every loss is logged, in name order."""
        losses = self._losses(model, batch)
        total = combine(losses, self.weights)
        logged = {"loss": total, **losses}
        return total, {name: float(logged[name].detach()) for name in sorted(logged)
                       if logged[name] is not None}

    # -- losses ------------------------------------------------------------------------------
    def _losses(self, model, batch: PhraseBatch) -> dict[str, Tensor | None]:
        device = self.accelerator.device
        queries = {k: v.to(device) for k, v in batch.queries.items()}
        if self.config.stage == "query":
            with autocast(self.precision, device):
                _, qv = model(queries=queries)
            return self._query_losses(batch, qv)
        passages = {k: v.to(device) for k, v in batch.passages.items()}
        gold = len(batch)
        if batch.negatives is not None:  # one forward pass for gold and negative passages
            passages = {k: torch.cat([v, batch.negatives[k].to(device)])
                        for k, v in passages.items()}
        with autocast(self.precision, device):
            pv, qv = model(passages=passages, queries=queries)
        negatives = None
        if batch.negatives is not None:
            negatives = (pv.start[gold:], pv.end[gold:], batch.negative_mask.to(device))
            pv = type(pv)(*(tensor[:gold] for tensor in pv))
        current = batch.current.to(device)
        q_start, q_end = qv.start[current], qv.end[current]
        mask = batch.mask.to(device)
        starts, ends = batch.start_positions.to(device), batch.end_positions.to(device)
        start_logits, end_logits = token_scores(q_start, pv.start), token_scores(q_end, pv.end)
        gold_start, gold_end = gather_gold(pv.start, starts), gather_gold(pv.end, ends)
        w = self.weights
        losses: dict[str, Tensor | None] = {
            "span": span_loss(start_logits, end_logits, mask, starts, ends),
            "batch_span": batch_span_loss(q_start, q_end, pv.start, pv.end, mask, starts, ends,
                                          batch.passage_groups.to(device), negatives)
            if w.get("batch_span") else None,
            "filter": filter_loss(pv.start_filter, pv.end_filter, mask, starts, ends)
            if w.get("filter") else None,
            "in_batch": in_batch_negative_loss(q_start, q_end, gold_start, gold_end,
                                               batch.groups.to(device))
            if w.get("in_batch") else None,
            "pre_batch": pre_batch_negative_loss(q_start, q_end, gold_start, gold_end,
                                                 self.queue) if w.get("pre_batch") else None,
            "turn": self._turn(qv, batch) if w.get("turn") else None,
            "distill": self._distill(start_logits, end_logits, mask, batch)
            if self.teacher is not None else None,
        }
        self.queue.push(gold_start, gold_end)
        return losses

    def _turn(self, qv, batch: PhraseBatch) -> Tensor:
        device = self.accelerator.device
        reps = torch.cat([qv.start, qv.end], dim=-1)
        return turn_loss(reps[batch.current.to(device)], reps, batch.previous.to(device),
                         batch.turn_exclude().to(device), self.config.turn_temperature)

    def _distill(self, start_logits: Tensor, end_logits: Tensor, mask: Tensor,
                 batch: PhraseBatch) -> Tensor:
        teacher = self.teacher
        with torch.no_grad(), autocast(self.precision, self.accelerator.device):
            logits = teacher(**teacher.model_inputs(batch.teacher.features.tensors))
        t_start, seen = align_teacher_logits(logits.start.float(), batch.teacher.alignment)
        t_end, _ = align_teacher_logits(logits.end.float(), batch.teacher.alignment)
        return distill_loss(start_logits, end_logits, t_start.to(mask.device),
                            t_end.to(mask.device), mask, seen.to(mask.device),
                            self.config.distill_temperature)

    def _query_losses(self, batch: PhraseBatch, qv) -> dict[str, Tensor | None]:
        """Candidates: the gold phrase (frozen vectors of its passage) + the top retrieved."""
        from convqa.metrics.answer import normalize_answer

        device = self.accelerator.device
        current = batch.current.to(device)
        q_start, q_end = qv.start[current], qv.end[current]
        with torch.no_grad():
            unwrapped = self.accelerator.unwrap_model(self.model)
            pv = unwrapped.encode_passages(batch.passages["input_ids"],
                                           batch.passages["attention_mask"])
            gold_start = gather_gold(pv.start, batch.start_positions.to(pv.start.device))
            gold_end = gather_gold(pv.end, batch.end_positions.to(pv.end.device))
        found = self.frozen.search(q_start, q_end, self.config.start_candidates,
                                   self.config.candidates)
        k = self.config.candidates + 1
        dim = q_start.shape[-1]
        cand_start = torch.zeros(len(batch), k, dim)
        cand_end = torch.zeros(len(batch), k, dim)
        positive = torch.zeros(len(batch), k, dtype=torch.bool)
        present = torch.zeros(len(batch), k, dtype=torch.bool)
        for b, phrases in enumerate(found):
            example = self.examples[batch.indices[b]]
            golds = {normalize_answer(a) for a in example.answers} - {""}
            cand_start[b, 0], cand_end[b, 0] = gold_start[b].float().cpu(), \
                gold_end[b].float().cpu()
            positive[b, 0] = present[b, 0] = True
            for slot, (first, last) in enumerate(phrases, start=1):
                cand_start[b, slot] = self.frozen.vectors[first].float()
                cand_end[b, slot] = self.frozen.vectors[last].float()
                present[b, slot] = True
                positive[b, slot] = normalize_answer(self.frozen.text(first, last)) in golds
        scores = (q_start.float().unsqueeze(1) * cand_start.to(device)).sum(-1) + \
            (q_end.float().unsqueeze(1) * cand_end.to(device)).sum(-1)
        scores = scores.masked_fill(~present.to(device), float("-inf"))
        return {"query_side": query_side_loss(scores, positive.to(device)),
                "turn": self._turn(qv, batch) if self.weights.get("turn") else None}

    # -- checkpoints ---------------------------------------------------------------------------
    def save_model(self, model, folder: Path) -> None:
        model.save(folder)

    def load_weights(self, folder: Path) -> None:
        self.model.load_state_dict(PhraseModel.load(folder).state_dict())

    def process_state(self) -> dict[str, Any]:
        return {"prebatch": list(self.queue._batches)}

    def restore_process_state(self, folder: Path, rank: int) -> None:
        queued = load_tensors(folder / f"prebatch-{rank}.pt")
        self.queue.clear()
        for start, end in queued:
            self.queue.push(start, end)

    def final_record(self, model, run: dict[str, Any]) -> dict[str, Any]:
        return {**run, "lora": model.has_adapters, "fingerprint": model.fingerprint(),
                "full_fingerprint": model.full_fingerprint(),
                "pool_phrases": len(self.frozen) if self.frozen is not None else None,
                "skipped_unfit_since_start": len(self.skipped_unfit),
                "config": self.config_record(), **self.info}


def train_stage(model: PhraseModel, examples: Sequence[PhraseExample], out: str | os.PathLike,
                config: PhraseTrainConfig, teacher: Any = None, accelerator: Any = None,
                info: dict[str, Any] | None = None,
                on_step: Callable[[int, float], None] | None = None) -> PhraseTrainResult:
    """Train (or resume, or return the finished result of) one stage into `out`."""
    info = {"start_fingerprint": model.full_fingerprint(), **(info or {})}
    return PhraseTrainer(model, examples, out, config, teacher, accelerator, info).train(on_step)


def train_phrase_model(model: PhraseModel, examples: Sequence[PhraseExample],
                       out: str | os.PathLike, phrase: PhraseTrainConfig | None,
                       query: PhraseTrainConfig | None, teacher: Any = None,
                       accelerator: Any = None, say: Callable[[str], None] = print
                       ) -> Path:
    """The "phrase" stage into OUT/phrase, then (unless `query` is None) query-side fine-tuning
    into OUT/query starting from its model; the final model is copied to OUT/model.
    `phrase=None` skips the phrase stage: only the query side of `model` trains, so every index
    built with `model` stays valid for the result."""
    out = Path(out)
    acc = accelerator if accelerator is not None else make_accelerator()
    if phrase is None and query is None:
        raise ConfigError("nothing to train: both the phrase and the query stage are skipped")
    if phrase is not None:
        result = train_stage(model, examples, out / "phrase", phrase, teacher, acc)
        say(f"phrase stage: {result.steps} steps, last loss {result.last_loss}")
        final = result.model_dir
    if query is not None:
        tuned = PhraseModel.load(final) if phrase is not None else model
        result = train_stage(tuned, examples, out / "query", query, None, acc)
        say(f"query stage: {result.steps} steps, last loss {result.last_loss}")
        final = result.model_dir
    if acc.is_main_process:
        PhraseModel.load(final).save(out / MODEL)
    acc.wait_for_everyone()
    return out / MODEL


# ---------------------------------------------------------------------------------------------
# Exporting and scoring


def export_adapter(base: PhraseModel, tuned: PhraseModel, rank: int = 64,
                   exact_modules: Sequence[str] | None = None) -> tuple[PhraseModel, dict]:
    """`base` (a plain model from the same checkpoint) with LoRA adapters that reproduce
    `tuned`'s towers up to rank `rank` (retrievers/dense/lora_export.py) and `tuned`'s heads;
    returns it with the export report of each tower. `exact_modules`: module names stored
    exactly (default: LayerNorms; add the position and token-type embeddings with
    `lora_export.SMALL_EMBEDDINGS`)."""
    from retrievers.dense.lora_export import EXACT_MODULES, encoder_lora_from_finetuned

    exact = tuple(EXACT_MODULES if exact_modules is None else exact_modules)
    if base.has_adapters or tuned.has_adapters:
        raise ConvQAError("LoRA export needs two plain models (merge adapters first)")
    if base.config.shared_query_encoder != tuned.config.shared_query_encoder:
        raise ConvQAError("base and tuned phrase models differ in their query tower")
    report = {}
    base.phrase_encoder, phrase_report = encoder_lora_from_finetuned(
        base.phrase_encoder, tuned.phrase_encoder, rank, exact_modules=exact)
    report["phrase"] = phrase_report.to_dict()
    if tuned.separate_query_encoder is not None:
        base.separate_query_encoder, query_report = encoder_lora_from_finetuned(
            base.separate_query_encoder, tuned.separate_query_encoder, rank, exact_modules=exact)
        report["query"] = query_report.to_dict()
    for name in ("filter_head", "query_start_head", "query_end_head"):
        getattr(base, name).load_state_dict(getattr(tuned, name).state_dict())
    base.config = tuned.config
    return base, report


def export_query_adapter(source: PhraseModel, tuned: PhraseModel, rank: int = 64,
                         exact_modules: Sequence[str] | None = None
                         ) -> tuple[PhraseModel, dict]:
    """`source` (a saved phrase model with LoRA adapters, as loaded) with its phrase tower and
    filter untouched and a rank-`rank` LoRA query tower that reproduces `tuned`'s, plus
    `tuned`'s query heads: the export of a query-only run, whose fingerprint is `source`'s, so
    every index built with `source` serves it. The position and token-type embeddings are
    stored exactly by default (0.8 MB for MiniLM); the word embeddings are left out."""
    from retrievers.dense.lora_export import (EXACT_MODULES, SMALL_EMBEDDINGS,
                                              encoder_lora_from_finetuned)

    if not source.has_adapters or tuned.has_adapters:
        raise ConvQAError("query export needs a source with LoRA adapters and a plain tuned "
                          "model")
    if tuned.separate_query_encoder is None or source.separate_query_encoder is None:
        raise ConvQAError("query export needs separate query towers (a shared one is the "
                          "phrase tower)")
    if source.fingerprint() != tuned.fingerprint():
        raise ConvQAError(f"the tuned model's phrase side ({tuned.fingerprint()}) is not the "
                          f"source's ({source.fingerprint()}): not a query-only run of it")
    exact = tuple(EXACT_MODULES + SMALL_EMBEDDINGS if exact_modules is None else exact_modules)
    plain = PhraseModel.build(source.config).separate_query_encoder
    source.separate_query_encoder, report = encoder_lora_from_finetuned(
        plain, tuned.separate_query_encoder, rank, exact_modules=exact)
    for name in ("query_start_head", "query_end_head"):
        getattr(source, name).load_state_dict(getattr(tuned, name).state_dict())
    return source, {"query": report.to_dict(), "phrase": "kept from the source adapter"}


def phrase_scores_in_passage(start_logits: Tensor, end_logits: Tensor, mask: Tensor,
                             max_tokens: int) -> Tensor:
    """`[L, L]` scores of every phrase (first, last) of one window: start + end score where
    both tokens are phrase tokens and 0 <= last - first < max_tokens, -inf elsewhere."""
    length = start_logits.shape[0]
    scores = start_logits.view(-1, 1) + end_logits.view(1, -1)
    band = torch.ones(length, length, dtype=torch.bool).triu() & \
        ~torch.ones(length, length, dtype=torch.bool).triu(max_tokens)
    valid = band & mask.view(-1, 1) & mask.view(1, -1)
    return scores.masked_fill(~valid, float("-inf"))


def best_span_in_passage(start_logits: Tensor, end_logits: Tensor, mask: Tensor,
                         max_tokens: int) -> tuple[int, int, float]:
    """(first, last, score) of the best phrase of one window: last - first < max_tokens."""
    length = start_logits.shape[0]
    scores = phrase_scores_in_passage(start_logits, end_logits, mask, max_tokens)
    best = int(scores.flatten().argmax())
    first, last = divmod(best, length)
    return first, last, float(scores[first, last])


def gold_passage_token_scores(model: PhraseModel, examples: Sequence[PhraseExample]
                              ) -> tuple[Any, Tensor, Tensor]:
    """(passage encoding, start scores, end scores `[B, L]`) of each example's question against
    the tokens of its own gold passage (first window): the phrase model as a reader."""
    enc = model.tokenize_passages([e.passage.title for e in examples],
                                  [e.passage.text for e in examples])
    queries = model.tokenize_queries([model.format_query(e.question, e.history_turns())
                                      for e in examples])
    pv = model.encode_passages(enc["input_ids"], enc["attention_mask"])
    qv = model.encode_queries(queries["input_ids"], queries["attention_mask"])
    return enc, token_scores(qv.start, pv.start), token_scores(qv.end, pv.end)


def evaluate_in_passage(model: PhraseModel, examples: Sequence[PhraseExample],
                        convention: str = "topiocqa", batch_size: int = 16) -> dict[str, Any]:
    """EM/F1 (percent) of the best phrase of each example's gold passage (its first window),
    scored q_start . h_i + q_end . h_j with j - i < max_answer_tokens: the phrase model as a
    reader of one passage, a quick check that needs no index."""
    from convqa.metrics.answer import score_answer

    model.eval()
    em = f1 = 0.0
    predictions = {}
    with torch.no_grad():
        for first in range(0, len(examples), batch_size):
            chunk = list(examples[first:first + batch_size])
            enc, starts, ends = gold_passage_token_scores(model, chunk)
            for row, example in enumerate(chunk):
                a, b, _ = best_span_in_passage(starts[row], ends[row], enc["phrase_mask"][row],
                                               model.config.max_answer_tokens)
                offsets = enc["offset_mapping"][row]
                text = example.passage.text[int(offsets[a, 0]):int(offsets[b, 1])]
                predictions[example.id] = text
                scores = score_answer(text, example.answers, convention)
                em += scores["em"]
                f1 += scores["f1"]
    count = len(examples)
    return {"em": 100 * em / count if count else 0.0, "f1": 100 * f1 / count if count else 0.0,
            "count": count, "convention": convention, "predictions": predictions}


def heldout_scores(model: PhraseModel, heldout: Sequence[PhraseExample],
                   limit: int | None = None) -> dict[str, dict[str, Any]]:
    """Per source (sorted), EM/F1 of `evaluate_in_passage` and its chance level over the first
    `limit` held-out examples, scored by the source's convention (rounded to 0.01)."""
    from readers.extractive.data import scoring_convention

    by_source: dict[str, list[PhraseExample]] = {}
    for example in heldout:
        by_source.setdefault(example.source, []).append(example)
    scores = {}
    for source, items in sorted(by_source.items()):
        items = items[:limit] if limit is not None else items
        convention = scoring_convention(source)
        result = evaluate_in_passage(model, items, convention)
        chance = chance_in_passage(model, items, convention)
        scores[source] = {"em": round(result["em"], 2), "f1": round(result["f1"], 2),
                          "count": result["count"], "convention": convention,
                          "chance_em": round(chance["em"], 2),
                          "chance_f1": round(chance["f1"], 2)}
    return scores


def chance_in_passage(model: PhraseModel, examples: Sequence[PhraseExample],
                      convention: str = "topiocqa", samples: int = 20,
                      seed: int = 0) -> dict[str, Any]:
    """Chance level of `evaluate_in_passage`: the mean EM/F1 (percent) of uniformly random
    phrases (first <= last < first + max_answer_tokens, text tokens of the same window as the
    model reads), `samples` per example, seeded."""
    from convqa.metrics.answer import score_answer

    rng = np.random.default_rng([seed, 5])
    em = f1 = 0.0
    span = model.config.max_answer_tokens
    for example in examples:
        enc = model.tokenize_passages([example.passage.title], [example.passage.text])
        positions = torch.nonzero(enc["phrase_mask"][0]).flatten().tolist()
        offsets = enc["offset_mapping"][0]
        pairs = [(a, b) for i, a in enumerate(positions) for b in positions[i:i + span]]
        for choice in rng.integers(len(pairs), size=samples) if pairs else []:
            a, b = pairs[int(choice)]
            text = example.passage.text[int(offsets[a, 0]):int(offsets[b, 1])]
            scores = score_answer(text, example.answers, convention)
            em += scores["em"] / samples
            f1 += scores["f1"] / samples
    count = len(examples)
    return {"em": 100 * em / count if count else 0.0, "f1": 100 * f1 / count if count else 0.0,
            "count": count, "samples_per_example": samples, "convention": convention}


# ---------------------------------------------------------------------------------------------
# One run, as `convqa train phrase` does it


@dataclass
class PhraseRunConfig:
    squad: list[str] = field(default_factory=list)        # SQuAD-format files
    benchmarks: list[str] = field(default_factory=list)   # TopiOCQA x Wikipedia folders
    examples: list[str] = field(default_factory=list)     # reader-example JSONL files
    model: dict = field(default_factory=dict)             # PhraseModelConfig options
    teacher: str | None = "convqa-reader"                 # extractive reader to distil from
    lora_r: int = 0                   # 0: train all weights
    export_rank: int = 0              # > 0: also write OUT/adapter, a rank-r LoRA export
    max_examples: int | None = None   # training examples per source (seeded sample)
    heldout_fraction: float = 0.1
    eval_examples: int = 300          # held-out examples scored per source (0: none)
    phrase: PhraseTrainConfig = field(default_factory=PhraseTrainConfig)
    query: PhraseTrainConfig | None = field(
        default_factory=lambda: PhraseTrainConfig(stage="query"))
    query_only: bool = False          # skip the phrase stage: indexes of the start model stay valid


# Settings a run may change when it starts from a saved phrase model (the rest is its architecture).
LIMITS = ("max_passage_tokens", "max_query_tokens", "max_answer_tokens")


def initial_phrase_model(settings: dict[str, Any]) -> PhraseModel:
    """The model a run starts from. `settings["base"]` may name a saved phrase model (a folder
    or `convqa-phrase`): training continues from its towers and heads (adapters merged), with
    the run's LIMITS; its architecture settings must agree. Anything else is a Hugging Face
    checkpoint to build a new model on."""
    from convqa.models import resolve_model

    from .model import META_FILE, PhraseModelConfig

    folder = Path(resolve_model(settings["base"]))
    if not (folder / META_FILE).exists():
        try:
            return PhraseModel.build(PhraseModelConfig(**settings))
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"phrase model: {exc}") from None
    model = PhraseModel.load(folder)
    if model.has_adapters:
        model.merge_adapters()
    saved = asdict(model.config)
    for name in ("shared_query_encoder", "encoder_layers"):
        if name in settings and settings[name] != saved[name]:
            raise ConfigError(f"{folder}: a phrase model with {name}={saved[name]!r}; this run "
                              f"asks for {settings[name]!r}")
    model.config = dataclasses.replace(model.config, **{
        name: settings[name] for name in LIMITS if name in settings})
    for parameter in model.parameters():
        parameter.requires_grad_(True)
    return model


def _saved_phrase_model(name: str) -> PhraseModel:
    """The saved phrase model a query-only run starts from (its phrase tower is kept)."""
    from convqa.models import resolve_model

    from .model import META_FILE

    folder = Path(resolve_model(name))
    if not (folder / META_FILE).exists():
        raise ConfigError(f"query-only training needs a saved phrase model to start from "
                          f"(--init-model convqa-phrase or a folder); {name} is not one")
    return PhraseModel.load(folder)


def run_phrase_training(config: PhraseRunConfig, out: str | os.PathLike, accelerator: Any = None,
                        say: Callable[[str], None] = print) -> Path:
    """Examples -> phrase stage -> query stage -> OUT/model (+ OUT/adapter) -> OUT/eval.json.
    Rerunning resumes (each stage skips what is finished)."""
    from convqa.models import DEFAULT_MODEL

    from .data import build_examples

    out = Path(out)
    acc = accelerator if accelerator is not None else make_accelerator()
    if not (config.squad or config.benchmarks or config.examples):
        raise ConfigError("no training data: give --squad, --benchmark or --examples")
    mined = 0 if config.query_only else config.phrase.hard_negatives
    examples = build_examples(config.squad, config.benchmarks, config.examples,
                              config.max_examples, config.heldout_fraction, config.phrase.seed,
                              negatives=mined)
    train = [e for e in examples if e.split == "train"]
    heldout = [e for e in examples if e.split != "train"]
    say(f"data: {len(train)} training and {len(heldout)} held-out examples")
    torch.manual_seed(config.phrase.seed)
    settings = {"base": DEFAULT_MODEL, **config.model}
    if config.query_only:
        if config.query is None:
            raise ConfigError("query_only with the query stage skipped: nothing to train")
        source = _saved_phrase_model(settings["base"])
    model = initial_phrase_model(settings)
    model_config = model.config
    if config.lora_r:
        model.add_lora(r=config.lora_r, alpha=2 * config.lora_r)
    teacher = None
    if config.teacher and config.phrase.weights.get("distill") and not config.query_only:
        from readers.extractive.model import ExtractiveReader

        teacher = ExtractiveReader.from_pretrained(config.teacher)
        if teacher.has_adapters:
            teacher.merge_adapters()
        say(f"teacher: {config.teacher} ({teacher.fingerprint()})")
    final = train_phrase_model(model, train, out, None if config.query_only else config.phrase,
                               config.query, teacher, acc, say)
    if not acc.is_main_process:
        return final
    tuned = PhraseModel.load(final)
    if config.export_rank and not tuned.has_adapters:
        if config.query_only and source.has_adapters:
            adapter, report = export_query_adapter(source, tuned, config.export_rank)
        else:
            adapter, report = export_adapter(PhraseModel.build(model_config), tuned,
                                             config.export_rank)
        adapter.save(out / "adapter")
        write_json(out / "adapter_export.json", report)
        say(f"adapter: {out / 'adapter'} (rank {config.export_rank})")
    if config.eval_examples and heldout:
        scores = {"model_fingerprint": tuned.full_fingerprint(),
                  "sources": heldout_scores(tuned, heldout, config.eval_examples)}
        for source, score in scores["sources"].items():
            say(f"held-out {source}: EM {score['em']:.1f} F1 {score['f1']:.1f} "
                f"(chance EM {score['chance_em']:.1f} F1 {score['chance_f1']:.1f}, "
                f"{score['count']} questions, gold passage only)")
        write_json(out / "eval.json", scores)
    return final
