"""The dual-encoder training loop under `accelerate`: one CPU process to many GPUs, same code.

    accelerate launch --num_processes 4 -m convqa.front.cli.main train dpr ...   # or plain `convqa`

- Batches: `batch_size` examples per process per micro-step; the global batch is
  batch_size x processes, every query is scored against all its passages (loss.py).
  Each process builds its own slice of the global batch from the seeded order (data.py), so no
  data is sent between processes except the passage embeddings and their ids.
- AdamW, linear warm-up then linear decay to 0, gradient clipping, gradient accumulation
  (DDP syncs only on the last micro-step), optional bf16 autocast (CPU or GPU; the loss and the
  embeddings' pooling stay fp32).
- The loop itself is convqa/training/loop.py, shared by every convqa trainer: checkpoints
  every `checkpoint_every` optimizer steps into OUT/checkpoint (the model via `save_pretrained`,
  safetensors), so a rerun after a kill resumes from it and produces the same weights as an
  uninterrupted run (tests/test_training_trainer.py).
- Logs: OUT/log.jsonl, one line per optimizer step (step, epoch, loss, lr, seconds,
  filled_negatives); a progress bar with the loss on the main process. The finished model is
  OUT/model plus OUT/training.json.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import torch

from convqa.errors import ConfigError, ConvQAError
from convqa.training.loop import StepTrainer, TrainResult
from convqa.training.schedule import StepSchedule, check_counts

from .data import POSITIVE_CHOICES, ExampleSet, PassageLookup, make_batch
from .loss import default_scale, dpr_loss, passage_key


@dataclass
class TrainConfig(StepSchedule):
    hard_negatives: int = 0         # n per example, drawn from the mined top-k
    scale: float | None = None      # None: 20 for normalising encoders, 1 otherwise (loss.py)
    mask_false_negatives: bool = True
    positive_choice: str = "random"  # "random" | "first" positive per example and epoch

    def __post_init__(self) -> None:
        super().__post_init__()
        check_counts(self, ("hard_negatives",), 0)
        if self.scale is not None and not self.scale > 0:
            raise ConfigError(f"scale must be positive, got {self.scale!r}")
        if self.positive_choice not in POSITIVE_CHOICES:
            raise ConfigError(f"positive_choice must be one of {', '.join(POSITIVE_CHOICES)}, "
                              f"got {self.positive_choice!r}")


class Trainer(StepTrainer):
    """Trains `model` (a DualEncoder, or anything with its tokenize_* / forward / save and
    load methods) on `examples`, writing to `out`."""

    def __init__(self, model: torch.nn.Module, examples: ExampleSet, lookup: PassageLookup,
                 out: str | os.PathLike, config: TrainConfig,
                 negatives: Mapping[str, Sequence[str]] | None = None,
                 accelerator: Any = None, info: Mapping[str, Any] | None = None):
        if config.hard_negatives and negatives is None:
            raise ConfigError(f"hard_negatives={config.hard_negatives} needs mined negatives")
        super().__init__(model, out, config, accelerator, info)
        self.examples = examples
        self.lookup = lookup
        self.negatives = negatives
        self.scale = config.scale
        self.last_logits_shape: tuple[int, ...] = ()  # (local queries, global passages)

    def num_examples(self) -> int:
        return len(self.examples)

    def before_optimizer(self) -> None:
        if self.config.scale is None:
            self.scale = default_scale(bool(getattr(self.model.config, "normalize", False)))

    def make_batch(self, indices, epoch: int):
        config = self.config
        return make_batch(self.examples, indices, self.lookup, config.seed, epoch,
                          config.hard_negatives, self.negatives, config.positive_choice)

    def batch_counts(self, batch) -> dict[str, int]:
        return {"filled_negatives": batch.filled}

    def compute_loss(self, model, batch):
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
        loss, logits = dpr_loss(q.float(), p.float(), batch.group_size, self.scale, rows, keys,
                                acc.gather, acc.process_index, acc.num_processes,
                                lambda t: acc.reduce(t, "sum"))
        self.last_logits_shape = tuple(logits.shape)
        return loss, {"loss": loss.detach().float()}

    def final_record(self, model, run: dict[str, Any]) -> dict[str, Any]:
        return {**run, "scale": self.scale, "config": self.config_record(), **self.info}


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
