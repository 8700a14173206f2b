"""A teacher reranker's scores for distilling a student reranker (the large cross-encoder into
the fast one).

    build_teacher_scores(teacher, examples, "run/data/teacher-scores.jsonl")
    # then: convqa train reranker ... --teacher-scores run/data/teacher-scores.jsonl

The teacher (a `CrossEncoderReranker`, its own query formatting and precision) scores every
candidate of every training example once: its positives, article negatives and mined
negatives, in the example's order. The student's listwise softmax over the candidates a step
draws then learns the teacher's softmax over the same candidates beside the positive's target
(train.py). Scores are computed once, offline, so the large model is paid for once.

File: JSONL, `{"id", "positives": [...], "article_negatives": [...], "mined_negatives": [...]}`
per example, with FILE.json naming the teacher's fingerprint and the examples; written
resumably by one or several processes (convqa/training/teacher_file.py).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from convqa.errors import DataError
from convqa.example_records import ids_digest

from .data import NEGATIVE_KINDS, RerankExample

FORMAT = "convqa-reranker-teacher-scores"
VERSION = 1
KINDS = ("positives",) + NEGATIVE_KINDS
COMMAND = "convqa train reranker-teacher"


@dataclass(frozen=True)
class TeacherScores:
    """The teacher's logits of one example's candidates, by kind, in the example's order."""

    id: str
    positives: tuple[float, ...]
    article_negatives: tuple[float, ...]
    mined_negatives: tuple[float, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, **{kind: [round(v, 4) for v in getattr(self, kind)]
                                  for kind in KINDS}}

    @classmethod
    def from_dict(cls, data: Any, path: Path, line: int) -> "TeacherScores":
        if not isinstance(data, dict) or not isinstance(data.get("id"), str):
            raise DataError("teacher scores: id: expected a string", path, line)
        values = []
        for kind in KINDS:
            items = data.get(kind)
            if not isinstance(items, list) or not all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) for v in items):
                raise DataError(f"teacher scores: {kind}: expected a list of numbers", path,
                                line)
            values.append(tuple(float(v) for v in items))
        return cls(data["id"], *values)

    def score(self, kind: str, number: int) -> float:
        return getattr(self, kind)[number]


@dataclass(frozen=True)
class TeacherScoreSet:
    """Loaded scores by example id, with `key` naming the teacher and its examples."""

    path: Path
    key: str
    examples: dict[str, TeacherScores]


def teacher_scores(teacher: Any, example: RerankExample) -> TeacherScores:
    """The teacher's logits of every candidate of `example`."""
    query = teacher.query_text(example.question, example.history_turns())
    groups = [list(example.positives), list(example.article_negatives),
              list(example.mined_negatives)]
    scores = teacher.score(query, [p for group in groups for p in group])
    out, begin = [], 0
    for group in groups:
        out.append(tuple(float(s) for s in scores[begin:begin + len(group)]))
        begin += len(group)
    return TeacherScores(example.id, *out)


def build_teacher_scores(teacher: Any, examples: Sequence[RerankExample],
                         path: str | os.PathLike, progress: bool = True,
                         accelerator: Any = None) -> Path:
    """Write (or finish, or keep) the teacher's scores of every example into `path`."""
    from convqa.training.teacher_file import write_teacher_file

    if accelerator is not None:
        teacher.model.to(accelerator.device)
    meta = {"format": FORMAT, "version": VERSION, "teacher": teacher.fingerprint(),
            "examples": len(examples), "ids_sha256": ids_digest(examples)}
    return write_teacher_file(path, meta, examples,
                              lambda example: teacher_scores(teacher, example).to_dict(),
                              progress=progress, desc="teacher scores", accelerator=accelerator)


def load_teacher_scores(path: str | os.PathLike, examples: Sequence[RerankExample]
                        ) -> TeacherScoreSet:
    """The scores of `examples` from a finished file; each must cover its candidates."""
    from convqa.training.teacher_file import read_teacher_file

    path = Path(path)
    scores, meta = read_teacher_file(path, TeacherScores.from_dict, COMMAND)
    for example in examples:
        record = scores.get(example.id)
        if record is None:
            raise DataError(f"no teacher scores for example {example.id!r} (scores of other "
                            "examples? build them from this run's examples)", path)
        for kind in KINDS:
            if len(getattr(record, kind)) != len(getattr(example, kind)):
                raise DataError(f"example {example.id!r}: {len(getattr(record, kind))} teacher "
                                f"scores of {kind}, the example has "
                                f"{len(getattr(example, kind))}", path)
    return TeacherScoreSet(path, f"{meta.get('teacher')}:{meta.get('ids_sha256')}", scores)
