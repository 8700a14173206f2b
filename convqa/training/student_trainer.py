"""What the reader's and the reranker's trainers share beyond the loop (the trainer side of
`StudentSchedule`): a teacher's file is given exactly when the run distills, a fixed held-out
sample is scored at the run's first step and every `eval_every` steps (each process its share,
the main process logging the whole, so the numbers are those one process would give), and
training.json names the model's adapters and fingerprint."""
from __future__ import annotations

import os
import time
from typing import Any, Sequence

from convqa.errors import ConvQAError
from convqa.training.loop import StepTrainer
from convqa.training_log import append_log


class StudentTrainer(StepTrainer):
    """Subclasses set `curve_sample` (empty: no held-out curve) and say how a process scores
    its share of it (`score_share`) and how the gathered shares become one log entry
    (`summarize_curve`); `teacher_what` names the teacher's file in errors."""

    teacher_what = "a teacher's file"

    def __init__(self, model: Any, out: str | os.PathLike, config: Any, accelerator: Any,
                 info: dict[str, Any] | None, teacher: Any = None):
        if bool(config.distill_weight) != (teacher is not None):
            raise ConvQAError(
                f"distillation needs both {self.teacher_what} and a distill weight above 0"
                if teacher is None else
                f"{self.teacher_what} given with distill weight 0: nothing would learn from them")
        self.teacher = teacher
        self.curve_sample: Sequence[Any] = []
        super().__init__(model, out, config, accelerator, info)

    def score_share(self, model: Any, share: Sequence[Any]) -> list[Any]:
        """This process's part of the held-out scores, as a list (gathered by concatenation)."""
        raise NotImplementedError

    def summarize_curve(self, gathered: list[Any], seconds: float) -> dict[str, Any]:
        """One log entry from every process's parts."""
        raise NotImplementedError

    def on_start(self, model, step: int) -> None:
        if self.curve_sample and step == self.config.start_step:
            self.log_heldout(model, step)

    def after_step(self, model, step: int, total: int) -> None:
        if self.curve_sample and (step % self.config.eval_every == 0 or step == total):
            self.log_heldout(model, step)

    def log_heldout(self, model, step: int) -> None:
        """Score the held-out sample into log.jsonl as `{"step", "heldout"}`."""
        from accelerate.utils import gather_object

        acc = self.accelerator
        started = time.perf_counter()
        share = self.curve_sample[acc.process_index::acc.num_processes]
        gathered = gather_object(self.score_share(acc.unwrap_model(model), share))
        if acc.is_main_process:
            scores = self.summarize_curve(gathered, time.perf_counter() - started)
            append_log(self.out, {"step": step, "heldout": scores})
        acc.wait_for_everyone()

    def final_record(self, model, run: dict[str, Any]) -> dict[str, Any]:
        return {**run, "lora": model.has_adapters, "model_fingerprint": model.fingerprint(),
                "config": self.config_record(), **self.info}
