"""Checking one passage record: the rules every passage reader shares.

A passage needs a non-empty string (or integer) id and a non-empty text; the title is optional.
`SeenIds` finds duplicate ids in a stream by remembering each id with the line (or row) it was
first seen on.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import DataError
from ..io import require
from ..types import Passage


class SeenIds:
    """Remembers ids and the line they were first seen on, to report duplicates."""

    def __init__(self, enabled: bool, unit: str = "line"):
        self._first: dict[str, int] | None = {} if enabled else None
        self._unit = unit

    def add(self, pid: str, path: Path, line: int, field: str = "id") -> None:
        if self._first is None:
            return
        first = self._first.setdefault(pid, line)
        if first != line:
            raise DataError(f"duplicate id {pid!r} (first on {self._unit} {first})",
                            path, line, field)


def id_value(value: Any, path: Path, line: int, field: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise DataError(f"expected a string or integer id, got {type(value).__name__}",
                        path, line, field)
    pid = str(value)
    if not pid.strip():
        raise DataError("empty id", path, line, field)
    return pid


def text_value(value: Any, path: Path, line: int, field: str) -> str:
    if not isinstance(value, str):
        raise DataError(f"expected a string, got {type(value).__name__}", path, line, field)
    if not value.strip():
        raise DataError("empty text", path, line, field)
    return value


def title_value(value: Any, path: Path, line: int, field: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise DataError(f"expected a string, got {type(value).__name__}", path, line, field)
    return value


def passage_from_record(record: Any, path: Path, line: int) -> Passage:
    """A `Passage` from one JSON object (`id`/`_id`, `text`/`contents`, optional `title`)."""
    if not isinstance(record, dict):
        raise DataError(f"expected a JSON object, got {type(record).__name__}", path, line)
    id_field = "id" if "id" in record or "_id" not in record else "_id"
    text_field = "text" if "text" in record or "contents" not in record else "contents"
    pid = id_value(require(record, id_field, path, line), path, line, id_field)
    text = text_value(require(record, text_field, path, line), path, line, text_field)
    title = title_value(record.get("title"), path, line, "title")
    return Passage(id=pid, text=text, title=title)
