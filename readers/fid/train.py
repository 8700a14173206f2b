"""Training and evaluating the FiD reader under `accelerate`: one CPU process to many GPUs, same
code, with the conventions of the dual-encoder trainer (retrievers/training/trainer.py).

    accelerate launch --num_processes 4 -m convqa.front.cli.main train fid ...   # or plain `convqa`

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

import os
from dataclasses import asdict, dataclass
from typing import Any, Callable, Mapping, Sequence

import torch

from convqa.errors import ConfigError, ConvQAError, DataError
from convqa.metrics.answer import score_answers
from convqa.training.loop import StepTrainer, TrainResult
from convqa.training.schedule import StepSchedule, example_rng

from .data import FiDExample
from .model import FiDReader

__all__ = ["FiDTrainConfig", "FiDTrainer", "evaluate_fid", "train_fid"]


@dataclass
class FiDTrainConfig(StepSchedule):
    batch_size: int = 2             # examples (questions) per process per micro-step
    lr: float = 1e-4                # FiD's
    weight_decay: float = 0.01
    max_grad_norm: float | None = 1.0


class FiDTrainer(StepTrainer):
    """Trains `reader` on `examples`, writing to `out` (see the module docstring)."""

    progress_label = "training FiD"

    def __init__(self, reader: FiDReader, examples: Sequence[FiDExample],
                 out: str | os.PathLike, config: FiDTrainConfig, accelerator: Any = None,
                 info: Mapping[str, Any] | None = None):
        for example in examples:
            if not example.answers:
                raise DataError("no gold answer to train on", field=f"example {example.id}")
        super().__init__(reader, out, config, accelerator, info)
        self.examples = list(examples)
        self.questions = [reader.format_question(e.question, e.history) for e in self.examples]

    def schedule(self) -> dict[str, Any]:
        """Training settings plus the reader settings that change what is learned."""
        reader = self.model.config
        return {"train": self.config.schedule_key(),
                "reader": {**reader.answer_settings(),
                           "answer_max_length": reader.answer_max_length},
                "adapters": self.model.has_adapters}

    def recorded_schedule(self, record: Mapping[str, Any]) -> Any:
        return record.get("schedule")

    def num_examples(self) -> int:
        return len(self.examples)

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        params = super().trainable_parameters()
        if not params:
            raise ConfigError("the FiD reader has no trainable parameters (loaded LoRA "
                              "adapters are frozen: call train_adapters())")
        return params

    def make_batch(self, indices, epoch: int) -> dict[str, torch.Tensor]:
        """One answer per example, drawn per (seed, epoch, example) when there are several."""
        chosen = [self.examples[int(i)] for i in indices]
        answers = []
        for index, example in zip(indices, chosen):
            pick = int(example_rng(self.config.seed, epoch, int(index)).integers(
                len(example.answers))) if len(example.answers) > 1 else 0
            answers.append(example.answers[pick])
        batch = self.model.tokenize([self.questions[int(i)] for i in indices],
                                    [e.passages for e in chosen], answers)
        return {k: v.to(self.accelerator.device) for k, v in batch.items()}

    def compute_loss(self, model, batch: dict[str, torch.Tensor]):
        with torch.autocast(device_type=self.accelerator.device.type, dtype=torch.bfloat16,
                            enabled=self.config.bf16):
            loss = model(**batch)
        return loss.float(), {"loss": loss.detach().float()}

    def final_record(self, model, run: dict[str, Any]) -> dict[str, Any]:
        return {**run, "base_model": model.config.model, "fingerprint": model.fingerprint(),
                "config": asdict(self.config), "schedule": self.schedule(), **self.info}


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
