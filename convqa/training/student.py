"""The settings the reader's and the reranker's trainers share beyond the optimizer schedule:
both can learn from a larger model's scores, score held-out questions while they train, build
their batches in worker processes, sort them into length buckets and continue another run's
schedule. One base, so the two configs cannot drift apart in what these settings mean."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from convqa.errors import ConfigError
from convqa.precision import training_precision_setting
from convqa.training.loader import loader_workers_setting
from convqa.training.schedule import StepSchedule, check_counts

_DISTILLATION = ("distill_weight", "distill_temperature")


@dataclass
class StudentSchedule(StepSchedule):
    precision: str = "fp32"           # auto | fp32 | bf16; auto measures both at the start
    length_pool: int = 64             # global batches sorted by length together; 0: no buckets
    eval_every: int = 0               # optimizer steps between held-out scores; 0: none
    start_step: int = 0               # continue this schedule at that step (weights given)
    loader_workers: int | str = "auto"  # batch-building processes; auto: 0 on CPU, <= 4 on GPU
    distill_weight: float = 0.0       # share of the teacher's loss (distill.py); 0: none
    distill_temperature: float = 1.0  # softmax temperature of both sides of that loss

    def __post_init__(self) -> None:
        super().__post_init__()
        check_counts(self, ("length_pool", "eval_every", "start_step"), 0)
        self.precision = training_precision_setting(self.precision, self.bf16)
        self.loader_workers = loader_workers_setting(self.loader_workers)
        _check_distillation(self.distill_weight, self.distill_temperature)

    def schedule_key(self, skip: tuple[str, ...] = ()) -> dict[str, Any]:
        """The settings a checkpoint must share with the run that resumes it: not `skip`
        (what changes nothing learned: the held-out scores, how forward passes are chunked),
        and a run without a teacher keeps the key it had before distillation existed."""
        skip = ("eval_every",) + tuple(skip) + (() if self.distill_weight else _DISTILLATION)
        return super().schedule_key(skip)


def _check_distillation(weight: Any, temperature: Any) -> None:
    if isinstance(weight, bool) or not 0.0 <= weight <= 1.0:
        raise ConfigError(f"distill_weight must be in [0, 1], got {weight!r}")
    if isinstance(temperature, bool) or not temperature > 0:
        raise ConfigError(f"distill_temperature must be > 0, got {temperature!r}")
