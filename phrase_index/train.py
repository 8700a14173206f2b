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
`train_phrase_model` runs both stages (OUT/phrase, OUT/query) and writes OUT/model. Beside
it: the query stage's frozen phrase matrix (frozen_pool.py), LoRA exports (export.py), the
in-passage check (in_passage.py) and one run as `convqa train phrase` does it (run.py).
"""
from __future__ import annotations

import math
import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from torch import Tensor

from convqa.errors import ConfigError, ConvQAError
from convqa.precision import BF16, autocast, training_precision_setting
from convqa.training.checkpoint import MODEL, load_tensors
from convqa.training.loop import StepTrainer, TrainResult, make_accelerator
from convqa.training.schedule import StepSchedule, check_counts

from .data import (PhraseBatch, PhraseExample, align_teacher_logits, conversation_batches,
                   make_phrase_batch)
from .frozen_pool import FrozenPhrases, digest_ids, pool_passages
from .losses import (LOSS_NAMES, PreBatchQueue, batch_span_loss, combine, distill_loss,
                     filter_loss, gather_gold, in_batch_negative_loss, pre_batch_negative_loss,
                     query_side_loss, span_loss, token_scores, turn_loss)
from .model import PhraseModel

STAGES = ("phrase", "query")
POOL_FILE = "frozen_pool.safetensors"   # the query stage's pool, kept for a resumed run
PHRASE_WEIGHTS = {"span": 1.0, "batch_span": 0.0, "distill": 1.0, "filter": 0.5,
                  "in_batch": 1.0, "pre_batch": 1.0, "turn": 0.5}
QUERY_WEIGHTS = {"query_side": 1.0, "turn": 0.5}

__all__ = ["PhraseTrainConfig", "PhraseTrainResult", "PhraseTrainer", "make_accelerator",
           "train_phrase_model", "train_stage"]


@dataclass
class PhraseTrainConfig(StepSchedule):
    lr: float = 5e-5
    checkpoint_every: int = 100       # optimizer steps; 0 = only at the end
    stage: str = "phrase"
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
    precision: str = "fp32"           # auto | fp32 | bf16; auto measures both at each start

    def __post_init__(self) -> None:
        if self.stage not in STAGES:
            raise ConfigError(f"stage must be one of {', '.join(STAGES)}, got {self.stage!r}")
        super().__post_init__()
        check_counts(self, ("run_length", "pool_passages", "start_candidates", "candidates"), 1)
        check_counts(self, ("pre_batch", "stride", "hard_negatives"), 0)
        if self.pool_store_passages is not None:
            check_counts(self, ("pool_store_passages",), 1)
        if self.pool_store is not None and self.stage != "query":
            raise ConfigError("pool_store is a query-stage setting (the frozen phrase pool)")
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
        return super().schedule_key(skip)


PhraseTrainResult = TrainResult  # the shared result type (convqa/training/loop.py)


def _digest(examples: Sequence[PhraseExample]) -> str:
    return digest_ids(example.id for example in examples)


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
            pool = pool_passages(self.examples, config.pool_passages, config.seed, config.pool_store,
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
