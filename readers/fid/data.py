"""FiD examples and the tensors the model reads.

Examples file (JSONL, one object per line; `.gz` read transparently):

    {"id": "31_2", "question": "how far away is it?",
     "history": [["what is alpha centauri?", "the closest star system"]],
     "answers": ["4.37 light-years"],
     "passages": [{"id": "A#1", "title": "Alpha Centauri", "text": "It lies 4.37 ..."}, ...]}

`history` holds the earlier turns oldest first as [question, answer] pairs (answer may be null);
`passages` are the retrieved passages, best first (the reader keeps the first `n_passages`).
Every problem is reported as a DataError naming the file, the line and the field.

Tensors (`collate`): each (question, passage) pair is one input text (the template filled in),
tokenized with the tokenizer's own special tokens and cut to `max_length`; a batch of B questions
with up to n passages gives `input_ids`/`attention_mask` [B, n, L] and `passage_mask` [B, n]
(False for the empty slots of a question with fewer passages than the widest one). A question
with no passage at all gets one slot with an empty title and text, so it is still answered from
the question alone. Labels are the answer's tokens plus the tokenizer's eos token, padded with
-100 (ignored by the loss); no token id is written here, they all come from the tokenizer.
"""
from __future__ import annotations

import os
import string
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from convqa.errors import ConfigError, DataError
from convqa.io import iter_jsonl, require, write_jsonl
from convqa.types import Passage, Turn

TEMPLATE_FIELDS = ("question", "title", "text")
IGNORE_INDEX = -100  # label positions the loss skips (the library's convention)
_EMPTY = Passage("", "", "")


@dataclass
class FiDExample:
    id: str
    question: str
    history: list[Turn] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)
    passages: list[Passage] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "question": self.question,
                "history": [[t.question, t.answer] for t in self.history],
                "answers": list(self.answers), "passages": [p.to_dict() for p in self.passages]}


# -- reading ------------------------------------------------------------------------------------
def load_examples(path: str | os.PathLike, require_answers: bool = True) -> list[FiDExample]:
    """All examples of a JSONL(.gz) file; ids must be unique. `require_answers=False` accepts
    examples without gold answers (to generate for them)."""
    examples: list[FiDExample] = []
    seen: dict[str, int] = {}
    for line, record in iter_jsonl(path):
        example = parse_example(record, path, line, require_answers)
        if example.id in seen:
            raise DataError(f"duplicate example id {example.id!r} (first on line "
                            f"{seen[example.id]})", path, line, "id")
        seen[example.id] = line
        examples.append(example)
    if not examples:
        raise DataError("no examples", path)
    return examples


def write_examples(path: str | os.PathLike, examples: Sequence[FiDExample]) -> int:
    return write_jsonl(path, (e.to_dict() for e in examples))


def parse_example(record: Any, path: str | os.PathLike | None = None, line: int | None = None,
                  require_answers: bool = True) -> FiDExample:
    """One example from its JSON object, checked field by field."""
    def fail(message: str, name: str) -> DataError:
        return DataError(message, path, line, name)

    example_id = require(record, "id", path, line, (str, int))
    if isinstance(example_id, bool):
        raise fail("expected str/int, got bool", "id")
    question = require(record, "question", path, line, str)
    if not question.strip():
        raise fail("empty question", "question")
    if not isinstance(record.get("history", []), (list, type(None))):
        raise fail("expected a list of [question, answer] pairs", "history")
    history = []
    for index, pair in enumerate(record.get("history") or []):
        name = f"history[{index}]"
        if not isinstance(pair, list) or len(pair) != 2:
            raise fail("expected a [question, answer] pair", name)
        if not isinstance(pair[0], str):
            raise fail(f"question must be a string, got {type(pair[0]).__name__}", name)
        if pair[1] is not None and not isinstance(pair[1], str):
            raise fail(f"answer must be a string or null, got {type(pair[1]).__name__}", name)
        history.append(Turn(pair[0], pair[1]))
    answers = record.get("answers", [])
    if require_answers or "answers" in record:
        answers = require(record, "answers", path, line, list)
        if require_answers and not answers:
            raise fail("no gold answer", "answers")
        for index, answer in enumerate(answers):
            if not isinstance(answer, str):
                raise fail(f"expected a string, got {type(answer).__name__}", f"answers[{index}]")
    passages = require(record, "passages", path, line, list)
    return FiDExample(str(example_id), question, history, list(answers),
                      [_parse_passage(p, path, line, f"passages[{i}]")
                       for i, p in enumerate(passages)])


def _parse_passage(data: Any, path, line, name: str) -> Passage:
    if not isinstance(data, dict):
        raise DataError(f"expected an object {{id, title, text}}, got {type(data).__name__}",
                        path, line, name)
    for key, types in (("id", (str, int)), ("text", str), ("title", (str, type(None)))):
        if key not in data:
            if key == "title":
                continue
            raise DataError("missing", path, line, f"{name}.{key}")
        if not isinstance(data[key], types) or isinstance(data[key], bool):
            raise DataError(f"expected a string, got {type(data[key]).__name__}", path, line,
                            f"{name}.{key}")
    return Passage(str(data["id"]), data["text"], data.get("title") or "")


# -- the input template -------------------------------------------------------------------------
def check_template(template: str) -> None:
    """A template names only {question}, {title} and {text}, and needs {question} and {text}."""
    if not isinstance(template, str):
        raise ValueError(f"template must be a string, got {template!r}")
    try:
        names = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as exc:
        raise ValueError(f"template {template!r}: {exc}") from None
    unknown = sorted(names - set(TEMPLATE_FIELDS))
    if unknown:
        raise ValueError(f"template {template!r}: unknown field {{{unknown[0]}}} "
                         f"(fields: {', '.join('{' + f + '}' for f in TEMPLATE_FIELDS)})")
    for needed in ("question", "text"):
        if needed not in names:
            raise ValueError(f"template {template!r} has no {{{needed}}}")


def format_input(template: str, question: str, passage: Passage) -> str:
    return template.format(question=question, title=passage.title, text=passage.text)


# -- tensors ------------------------------------------------------------------------------------
def special_token_id(tokenizer: Any, name: str) -> int:
    """`tokenizer.{name}_token_id`, or a ConfigError if the tokenizer has none."""
    value = getattr(tokenizer, f"{name}_token_id", None)
    if value is None:
        raise ConfigError(f"the tokenizer has no {name} token (a T5-style tokenizer is needed)")
    return int(value)


def collate(tokenizer: Any, template: str, questions: Sequence[str],
            passages: Sequence[Sequence[Passage]], n_passages: int, max_length: int,
            answers: Sequence[str] | None = None, answer_max_length: int = 32
            ) -> dict[str, torch.Tensor]:
    """The model's tensors for formatted `questions` and their ranked `passages` (see the
    module docstring); `labels` only when `answers` are given."""
    if len(questions) != len(passages):
        raise ValueError(f"{len(questions)} questions but {len(passages)} passage lists")
    if not questions:
        raise ValueError("an empty batch")
    kept = [list(ps[:n_passages]) for ps in passages]
    width = max(max(len(ps) for ps in kept), 1)
    texts, present = [], []
    for question, ps in zip(questions, kept):
        slots = ps or [_EMPTY]
        present.append([True] * len(slots) + [False] * (width - len(slots)))
        texts.extend(format_input(template, question, p) for p in slots)
        texts.extend([""] * (width - len(slots)))
    encoded = tokenizer(texts, truncation=True, max_length=max_length, padding=True,
                        return_tensors="pt")
    batch, length = len(questions), encoded["input_ids"].shape[-1]
    input_ids = encoded["input_ids"].reshape(batch, width, length)
    attention_mask = encoded["attention_mask"].reshape(batch, width, length).clone()
    passage_mask = torch.tensor(present, dtype=torch.bool)
    # an empty slot still shows the encoder one token (a row with nothing to attend to is
    # ill-defined); the fused mask hides the whole slot from the decoder
    attention_mask[..., 0] |= (~passage_mask).to(attention_mask.dtype)
    result = {"input_ids": input_ids, "attention_mask": attention_mask,
              "passage_mask": passage_mask}
    if answers is not None:
        result["labels"] = encode_answers(tokenizer, answers, answer_max_length)
    return result


def encode_answers(tokenizer: Any, answers: Sequence[str], max_length: int) -> torch.Tensor:
    """[B, T] label ids: the answer's tokens (at most `max_length` - 1), then eos, then -100."""
    if max_length < 2:
        raise ValueError(f"answer max length must be at least 2, got {max_length}")
    eos = special_token_id(tokenizer, "eos")
    ids = tokenizer(list(answers), add_special_tokens=False, truncation=True,
                    max_length=max_length - 1)["input_ids"]
    rows = [list(row) + [eos] for row in ids]
    width = max(len(row) for row in rows)
    labels = torch.full((len(rows), width), IGNORE_INDEX, dtype=torch.long)
    for index, row in enumerate(rows):
        labels[index, :len(row)] = torch.tensor(row, dtype=torch.long)
    return labels
