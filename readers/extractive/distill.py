"""A teacher reader's targets for distilling a student reader (a large reader into the fast one).

    targets = build_teacher_targets(teacher, examples, "run/data/teacher.jsonl")
    # then: convqa train reader ... --teacher-targets run/data/teacher.jsonl --distill-weight 0.5

The teacher (a `SpanReader`) reads every passage of every answerable training example once
(its positives, then its negatives, in the example's order; an unanswerable example's passages,
and those of an example with a passage over `max_chars` characters, get empty targets and are
not read: `empty_targets`) with its own query formatting and precision, and keeps per passage
- `selection`: its selection logit (the highest over the passage's windows);
- `starts` / `ends`: its `top_k` most likely answer starts and ends as (character offset into
  the passage text, logit), each character position's highest logit over the windows that
  read it. A start offset is where a token begins, an end offset where one ends.

Characters, not tokens, because teacher and student need not share a tokenizer (MPNet and
MiniLM do not): the student maps each offset to the token of its own window that holds it
(`window_targets`). Targets are computed once, offline, so a CPU run pays for the large model
once and every student epoch reuses them.

The file is JSONL, one record per example (`{"id", "positives": [...], "negatives": [...]}`,
each passage `{"selection", "starts": [[char, logit], ...], "ends": [...]}`) beside a
FILE.json that names the teacher (fingerprint), `top_k` and the examples (ids digest);
convqa/training/teacher_file.py writes it resumably, one part per process.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import torch
from torch import Tensor

from convqa.errors import DataError
from convqa.example_records import ids_digest
from convqa.types import Passage

from .data import ReaderExample
from .inputs import ReaderFeatures

FORMAT = "convqa-reader-teacher-targets"
VERSION = 1


@dataclass(frozen=True, eq=False)
class PassageTargets:
    """What the teacher makes of one passage (see the module docstring). `starts` and `ends`
    are kept as [k, 2] float32 arrays of (character offset, logit): a run holds ~300k of them,
    and tuples of Python numbers would take gigabytes."""

    selection: float | None
    starts: np.ndarray
    ends: np.ndarray

    def __post_init__(self) -> None:
        for name in ("starts", "ends"):
            object.__setattr__(self, name, np.asarray(getattr(self, name),
                                                      dtype=np.float32).reshape(-1, 2))

    def to_dict(self) -> dict[str, Any]:
        return {"selection": None if self.selection is None else round(self.selection, 4),
                "starts": [[int(c), round(float(v), 4)] for c, v in self.starts],
                "ends": [[int(c), round(float(v), 4)] for c, v in self.ends]}

    @classmethod
    def from_dict(cls, data: Any, where: str) -> "PassageTargets":
        if not isinstance(data, dict):
            raise ValueError(f"{where}: expected an object")
        selection = data.get("selection")
        if selection is not None and not isinstance(selection, (int, float)):
            raise ValueError(f"{where}.selection: expected a number or null")
        positions = []
        for name in ("starts", "ends"):
            items = data.get(name)
            if not isinstance(items, list) or not all(
                    isinstance(i, list) and len(i) == 2 and isinstance(i[0], int) and i[0] >= 0
                    and isinstance(i[1], (int, float)) for i in items):
                raise ValueError(f"{where}.{name}: expected [[character offset, logit], ...]")
            positions.append([(int(c), float(v)) for c, v in items])
        return cls(None if selection is None else float(selection), *positions)


@dataclass(frozen=True)
class ExampleTargets:
    """The teacher's targets of one example's passages, in the example's order."""

    id: str
    positives: tuple[PassageTargets, ...]
    negatives: tuple[PassageTargets, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "positives": [p.to_dict() for p in self.positives],
                "negatives": [p.to_dict() for p in self.negatives]}

    @classmethod
    def from_dict(cls, data: Any, path: Path, line: int) -> "ExampleTargets":
        try:
            if not isinstance(data, dict) or not isinstance(data.get("id"), str):
                raise ValueError("id: expected a string")
            parts = []
            for name in ("positives", "negatives"):
                items = data.get(name)
                if not isinstance(items, list):
                    raise ValueError(f"{name}: expected a list")
                parts.append(tuple(PassageTargets.from_dict(item, f"{name}[{i}]")
                                   for i, item in enumerate(items)))
        except ValueError as exc:
            raise DataError(f"teacher targets: {exc}", path, line) from None
        return cls(data["id"], *parts)

    def passage(self, number: int) -> PassageTargets:
        """Passage `number` of the example: its positives first, then its negatives."""
        if number < len(self.positives):
            return self.positives[number]
        return self.negatives[number - len(self.positives)]


def example_passages(example: ReaderExample) -> list[Passage]:
    """An example's passages in the order targets are kept: positives, then negatives."""
    return [p.passage for p in example.positives] + list(example.negatives)


def empty_targets(example: ReaderExample) -> ExampleTargets:
    """No targets for any of an example's passages, which the teacher does not read; the
    student learns the example from its gold label alone. Used for
    - an unanswerable example: the targets have no "none of them" slot, so the teacher's choice
      among passages that all lack the answer would teach the student to pick one;
    - an example with a passage longer than the teacher's `max_chars` (`too_long`)."""
    empty = PassageTargets(None, (), ())
    return ExampleTargets(example.id, tuple(empty for _ in example.positives),
                          tuple(empty for _ in example.negatives))


def too_long(example: ReaderExample, max_chars: int | None) -> bool:
    """Whether a passage of `example` is longer than `max_chars` characters. The student reads
    one window of each passage per step while the teacher reads all of them, so whole papers
    (COVID-QA's; docs/readers.md measures their share) cost the teacher far more than they
    teach; the example is then left to its gold label, whole, because the teacher's selection
    is a distribution over all of its passages."""
    return max_chars is not None and any(len(p.text) > max_chars
                                         for p in example_passages(example))


# ---------------------------------------------------------------------------------------------
# Reading with the teacher


def teacher_passage_targets(teacher: Any, query: str, passages: Sequence[Passage],
                            top_k: int = 20) -> list[PassageTargets]:
    """The targets of `passages` read against `query` by `teacher`, a `SpanReader` (its
    windows, batches and precision: `SpanReader.window_logits`; module docstring)."""
    if not passages:
        return []
    features, start, end, selection = teacher.window_logits(query, passages)
    out = []
    for number in range(len(passages)):
        windows = features.windows_of(number)
        out.append(PassageTargets(
            max(float(selection[w]) for w in windows) if selection is not None else None,
            _best_positions(features, windows, start, 0, top_k),
            _best_positions(features, windows, end, 1, top_k)))
    return out


def _best_positions(features: ReaderFeatures, windows: Sequence[int], logits: Tensor,
                    side: int, top_k: int) -> tuple[tuple[int, float], ...]:
    """The `top_k` highest-scoring character offsets (token starts for side 0, ends for 1) of a
    passage's windows, each offset's highest logit over the windows."""
    best: dict[int, float] = {}
    for window in windows:
        positions = torch.nonzero(features.context[window]).flatten()
        chars = features.offsets[window, positions, side].tolist()
        for char, value in zip(chars, logits[window, positions].tolist()):
            if char not in best or value > best[char]:
                best[char] = value
    ranked = sorted(best.items(), key=lambda item: (-item[1], item[0]))[:top_k]
    return tuple((int(c), float(v)) for c, v in ranked)


def _meta(teacher: Any, examples: Sequence[ReaderExample], top_k: int,
          max_chars: int | None) -> dict[str, Any]:
    meta = {"format": FORMAT, "version": VERSION, "teacher": teacher.model.fingerprint(),
            "teacher_model": teacher.config.model, "top_k": top_k,
            "examples": len(examples), "ids_sha256": ids_digest(examples)}
    if max_chars is not None:  # absent when everything is read, as in files made before it
        meta["max_chars"] = max_chars
    return meta


def build_teacher_targets(teacher: Any, examples: Sequence[ReaderExample],
                          path: str | os.PathLike, top_k: int = 20, progress: bool = True,
                          accelerator: Any = None, max_chars: int | None = None) -> Path:
    """Write (or finish, or keep) the targets of every example by `teacher` (a `SpanReader`:
    its own query formatting and precision) into `path` (convqa/training/teacher_file.py:
    resumable, shared by several processes). With `max_chars`, an example with a longer
    passage is not read (`too_long`)."""
    if max_chars is not None and max_chars < 1:
        raise ValueError(f"max_chars must be >= 1, got {max_chars}")
    from convqa.training.teacher_file import write_teacher_file

    if accelerator is not None:
        teacher.model.to(accelerator.device)

    def record_of(example: ReaderExample) -> dict[str, Any]:
        if example.unanswerable or too_long(example, max_chars):
            return empty_targets(example).to_dict()
        query = teacher.history.format(example.question, example.history_turns())
        targets = teacher_passage_targets(teacher, query, example_passages(example), top_k)
        return ExampleTargets(example.id, tuple(targets[:len(example.positives)]),
                              tuple(targets[len(example.positives):])).to_dict()

    return write_teacher_file(path, _meta(teacher, examples, top_k, max_chars), examples,
                              record_of, progress=progress, desc="teacher targets",
                              accelerator=accelerator)


@dataclass(frozen=True)
class TeacherTargets:
    """Loaded targets: by example id, with `key` naming the teacher and its examples."""

    path: Path
    key: str
    examples: dict[str, ExampleTargets]


def load_teacher_targets(path: str | os.PathLike, examples: Sequence[ReaderExample]
                         ) -> TeacherTargets:
    """The targets of `examples` from a finished file; every example must have targets that
    cover its passages (the same examples the teacher read)."""
    from convqa.training.teacher_file import read_teacher_file

    path = Path(path)
    targets, meta = read_teacher_file(path, ExampleTargets.from_dict,
                                      "convqa train reader-teacher")
    for example in examples:
        record = targets.get(example.id)
        if record is None:
            raise DataError(f"no teacher targets for example {example.id!r} (targets of other "
                            "examples? build them from this run's data)", path)
        if (len(record.positives), len(record.negatives)) != (len(example.positives),
                                                              len(example.negatives)):
            raise DataError(f"example {example.id!r}: targets for {len(record.positives)} + "
                            f"{len(record.negatives)} passages, the example has "
                            f"{len(example.positives)} + {len(example.negatives)}", path)
    key = f"{meta.get('teacher')}:{meta.get('top_k')}:{meta.get('ids_sha256')}" + (
        f":{meta['max_chars']}" if "max_chars" in meta else "")
    return TeacherTargets(path, key, targets)


# ---------------------------------------------------------------------------------------------
# Targets on the student's windows


def window_targets(features: ReaderFeatures, window: int, targets: PassageTargets,
                   temperature: float = 1.0) -> tuple[Tensor, Tensor]:
    """The teacher's start and end distributions (softmax of its kept logits / temperature)
    moved onto the student's `window`: each start offset goes to the window's text token that
    holds it, each end offset to the token that ends there or holds it. Offsets outside the
    window's text are dropped and nothing is renormalised: a row sums to the teacher's
    probability inside the window, so a window the teacher finds no answer in teaches little
    (all zeros: nothing). [length] float tensors."""
    length = features.length
    mask = features.context[window]
    out = []
    for side, items in ((0, targets.starts), (1, targets.ends)):
        target = torch.zeros(length)
        if len(items) and bool(mask.any()):
            positions = torch.nonzero(mask).flatten()
            begins = features.offsets[window, positions, 0]
            finishes = features.offsets[window, positions, 1]
            chars = torch.from_numpy(items[:, 0]).long()
            probs = torch.softmax(torch.from_numpy(items[:, 1]).float() / temperature, 0)
            if side == 0:
                holds = (begins[None, :] <= chars[:, None]) & (chars[:, None] < finishes[None, :])
            else:
                holds = (begins[None, :] < chars[:, None]) & (chars[:, None] <= finishes[None, :])
            found = holds.any(1)
            token = holds.float().argmax(1)  # the first token that holds it
            target.index_add_(0, positions[token[found]], probs[found])
        out.append(target)
    return out[0], out[1]


def selection_targets(targets: Iterable[PassageTargets | None]) -> Tensor:
    """The teacher's selection logits of a question's passages (-inf for padding or a passage
    without one), [N]."""
    return torch.tensor([float("-inf") if t is None or t.selection is None else t.selection
                         for t in targets])
