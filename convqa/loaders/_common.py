"""Shared machinery of the dataset loaders: where a record came from, typed field access, reading
top-level JSON lists record by record (so errors name a line), grouping turn rows into
conversations, and checking a file's own copy of the history against the earlier turns.

The official files repeat the history in every row (TopiOCQA/QReCC `Context`, CANARD `History`,
OR-QuAC `history.tsv`). The loaders never trust that copy: the history of turn t is turns 1..t-1
of the conversation. The copy is compared with them, and a difference is an error by default.
"""
from __future__ import annotations

import gzip
import json
import os
import re
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ..errors import DataError
from ..io import iter_jsonl, iter_lines, load_json, read_text
from ..types import Conversation, Turn

ContextMode = Literal["check", "warn", "ignore"]
CONTEXT_MODES = ("check", "warn", "ignore")

_JSON_NAMES = {str: "string", int: "integer", float: "number", bool: "boolean", list: "list",
               dict: "object", type(None): "null"}


class DataWarning(UserWarning):
    """A file is inconsistent in a way the loader could work around (see `context="warn"`)."""


@dataclass(frozen=True)
class Source:
    """Where a record is: file, 1-based line where known, and `item`, a human-readable position
    such as "element [12]" for files whose records share one line."""

    path: str
    line: int | None = None
    item: str | None = None

    def error(self, message: str, field: str | None = None) -> DataError:
        if self.item:
            message = f"{message} ({self.item})"
        return DataError(message, self.path, self.line, field)

    def describe(self) -> str:
        parts = [f"line {self.line}"] if self.line is not None else []
        return ", ".join(parts + ([self.item] if self.item else [])) or self.path

    def within(self, item: str) -> "Source":
        return Source(self.path, self.line, f"{self.item}, {item}" if self.item else item)


def type_name(value: Any) -> str:
    return _JSON_NAMES.get(type(value), type(value).__name__)


def _matches(value: Any, types: tuple[type, ...]) -> bool:
    if isinstance(value, bool) and bool not in types:
        return False  # JSON true is not a turn number
    if isinstance(value, int) and float in types:
        return True
    return isinstance(value, types)


def get(record: Any, name: str, src: Source, types: type | tuple[type, ...],
        required: bool = True, default: Any = None) -> Any:
    """`record[name]` checked against `types` (bool is never accepted as int); a missing optional
    field or an explicit null in it gives `default`."""
    if not isinstance(record, dict):
        raise src.error(f"expected a JSON object, got {type_name(record)}")
    if name not in record or (not required and record[name] is None):
        if required:
            raise src.error("missing", name)
        return default
    value = record[name]
    wanted = types if isinstance(types, tuple) else (types,)
    if not _matches(value, wanted):
        expected = " or ".join(_JSON_NAMES.get(t, t.__name__) for t in wanted)
        raise src.error(f"expected {expected}, got {type_name(value)}", name)
    return value


def get_str_list(record: Any, name: str, src: Source, required: bool = True) -> list[str] | None:
    """A list of strings; a bad element is named as `field[i]`."""
    values = get(record, name, src, list, required=required)
    if values is None:
        return None
    for i, value in enumerate(values):
        if not isinstance(value, str):
            raise src.error(f"expected string, got {type_name(value)}", f"{name}[{i}]")
    return values


def get_id(record: Any, name: str, src: Source, required: bool = True) -> str | None:
    """An identifier that the official files write as a number or a string; always a string."""
    value = get(record, name, src, (str, int), required=required)
    return None if value is None else str(value)


def get_turn_number(record: Any, name: str, src: Source) -> int:
    value = get(record, name, src, int)
    if value < 0:
        raise src.error(f"turn number must not be negative, got {value}", name)
    return value


_SPACE = re.compile(r"[ \t\n\r]*")


def iter_json_array(path: str | os.PathLike) -> Iterator[tuple[Source, Any]]:
    """(source, element) for each element of a file holding one JSON list (.gz read
    transparently). Elements are decoded one at a time so each knows its line."""
    text = read_text(path)
    decoder = json.JSONDecoder()
    pos = _SPACE.match(text, 0).end()
    line, counted = 1, 0

    def line_at(position: int) -> int:
        nonlocal line, counted
        line += text.count("\n", counted, position)
        counted = position
        return line

    if pos >= len(text) or text[pos] != "[":
        raise DataError("expected a JSON list of records", path, line_at(pos))
    pos = _SPACE.match(text, pos + 1).end()
    index = 0
    if pos < len(text) and text[pos] == "]":
        pos += 1
    else:
        while True:
            try:
                value, end = decoder.raw_decode(text, pos)
            except json.JSONDecodeError as exc:
                raise DataError(f"malformed JSON ({exc.msg}, column {exc.colno})", path,
                                exc.lineno) from None
            yield Source(str(path), line_at(pos), f"element [{index}]"), value
            index += 1
            pos = _SPACE.match(text, end).end()
            if pos < len(text) and text[pos] == ",":
                pos = _SPACE.match(text, pos + 1).end()
                continue
            if pos < len(text) and text[pos] == "]":
                pos += 1
                break
            raise DataError("malformed JSON (expected ',' or ']' after a list element)", path,
                            line_at(pos))
    pos = _SPACE.match(text, pos).end()
    if pos != len(text):
        raise DataError("malformed JSON (extra data after the list)", path, line_at(pos))


def _first_char(path: str | os.PathLike) -> str:
    """First non-blank character of a (possibly gzipped) file; "" when there is none or the file
    cannot be opened (the reader that follows reports why)."""
    path = Path(path)
    if not path.is_file():
        return ""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as handle:
            head = handle.read(4096)
    except (OSError, EOFError) as exc:
        raise DataError(f"cannot read: {exc}", path) from None
    head = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    return chr(head[0]) if head else ""


def iter_records(path: str | os.PathLike) -> Iterator[tuple[Source, Any]]:
    """Records of a JSON list file or of a JSON Lines file (one object per line), told apart by
    the first character; .gz works for both."""
    if _first_char(path) == "[":
        yield from iter_json_array(path)
        return
    for number, value in iter_jsonl(path):
        yield Source(str(path), number), value


def load_json_object(path: str | os.PathLike) -> dict[str, Any]:
    """A file holding one JSON object (qrels, SQuAD)."""
    value = load_json(path)
    if not isinstance(value, dict):
        raise DataError(f"expected a JSON object at the top level, got {type_name(value)}", path)
    return value


def iter_tsv(path: str | os.PathLike, columns: int) -> Iterator[tuple[Source, list[str]]]:
    """Non-blank lines split on tabs into exactly `columns` fields (the last takes any extra)."""
    for number, text in iter_lines(path):
        if not text.strip():
            continue
        parts = text.split("\t", columns - 1)
        if len(parts) != columns:
            raise DataError(f"expected {columns} tab-separated columns, got {len(parts)}", path,
                            number)
        yield Source(str(path), number), parts


@dataclass
class TurnRow:
    """One turn as read from a file, before it is placed in its conversation."""

    conversation_id: str
    number: int
    turn: Turn
    source: Source
    context: Any = None  # the file's own copy of the history, if it has one
    context_source: Source | None = None  # where that copy is, when not at `source`


def group_rows(rows: Iterable[TurnRow]) -> list[tuple[str, list[TurnRow]]]:
    """Rows grouped by conversation (in order of first appearance) and sorted by turn number,
    which must run 1, 2, 3, ... without gaps or repeats."""
    groups: dict[str, list[TurnRow]] = {}
    for row in rows:
        groups.setdefault(row.conversation_id, []).append(row)
    result = []
    for conv_id, conv_rows in groups.items():
        conv_rows.sort(key=lambda r: r.number)
        seen: dict[int, TurnRow] = {}
        for row in conv_rows:
            if row.number in seen:
                raise row.source.error(
                    f"conversation {conv_id} has turn {row.number} twice (first at "
                    f"{seen[row.number].source.describe()})")
            seen[row.number] = row
        expected = list(range(1, len(conv_rows) + 1))
        numbers = [row.number for row in conv_rows]
        if numbers != expected:
            culprit = next(row for row, want in zip(conv_rows, expected) if row.number != want)
            raise culprit.source.error(
                f"conversation {conv_id}: turn numbers must run 1..{len(conv_rows)} without gaps, "
                f"found {_short(numbers)}; the official files have every turn, so this file is "
                f"incomplete or was filtered")
        result.append((conv_id, conv_rows))
    return result


def _short(numbers: list[int], limit: int = 8) -> str:
    text = ", ".join(str(n) for n in numbers[:limit])
    return text + (", ..." if len(numbers) > limit else "")


def flat_history(turns: list[Turn]) -> list[str | None]:
    """q1, a1, q2, a2, ...: the way TopiOCQA, QReCC and CANARD spell a history."""
    flat: list[str | None] = []
    for turn in turns:
        flat.extend((turn.question, turn.answer))
    return flat


class ContextChecker:
    """Compares each row's own copy of the history with the earlier turns.

    mode "check": a difference raises DataError; "warn": one DataWarning per file with the count
    and the first difference; "ignore": no comparison. The history is always the earlier turns.
    """

    def __init__(self, mode: str, field: str,
                 render: Callable[[list[Turn]], Any] = flat_history):
        if mode not in CONTEXT_MODES:
            raise ValueError(f"context must be one of {CONTEXT_MODES}, got {mode!r}")
        self.mode = mode
        self.field = field
        self.render = render
        self.mismatches = 0
        self.first: str | None = None

    def check(self, conversation: Conversation, rows: list[TurnRow]) -> None:
        if self.mode == "ignore":
            return
        for row in rows:
            if row.context is None:
                continue
            expected = self.render(conversation.history(row.number))
            if row.context == expected:
                continue
            where = row.context_source or row.source
            message = (f"differs from the questions and answers of the earlier turns "
                       f"({_diff(row.context, expected)}); pass context='warn' or "
                       f"context='ignore' to load anyway (history always comes from the "
                       f"earlier turns)")
            if self.mode == "check":
                raise where.error(message, self.field)
            self.mismatches += 1
            if self.first is None:
                self.first = str(where.error(message, self.field))

    def conversations(self, rows: Iterable[TurnRow], path: str | os.PathLike) -> list[Conversation]:
        """Group `rows` into conversations (turn order checked), compare each row's history copy,
        and report mismatches for `path`."""
        result = []
        for conv_id, conv_rows in group_rows(rows):
            conversation = Conversation(conv_id, [row.turn for row in conv_rows])
            self.check(conversation, conv_rows)
            result.append(conversation)
        self.finish(path)
        return result

    def finish(self, path: str | os.PathLike) -> None:
        if self.mismatches:
            warnings.warn(f"{path}: {self.mismatches} turn(s) have a '{self.field}' that differs "
                          f"from the earlier turns; it was ignored. First: {self.first}",
                          DataWarning, stacklevel=3)


def _diff(found: Any, expected: Any) -> str:
    if isinstance(found, list) and isinstance(expected, list):
        if len(found) != len(expected):
            return f"{len(found)} entries, expected {len(expected)}"
        for i, (a, b) in enumerate(zip(found, expected)):
            if a != b:
                return f"entry {i} is {_clip(a)}, expected {_clip(b)}"
    return f"found {_clip(found)}, expected {_clip(expected)}"


def _clip(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 4] + "...'"
