"""What the training-example files of the extractive reader and the reranker share: checked
reading of one JSON record (each problem a DataError naming the file, line and field), a
JSONL file of records with unique ids, and the digest of a run's example ids that its
checkpoints are keyed by."""
from __future__ import annotations

import hashlib
import os
from typing import Any, Callable, Sequence

from convqa.errors import DataError
from convqa.io import iter_jsonl
from convqa.types import Passage


class RecordReader:
    """Reads the fields of record `line` of `path`."""

    def __init__(self, path: str | os.PathLike | None, line: int | None):
        self.path, self.line = path, line

    def fail(self, name: str | None, message: str) -> DataError:
        return DataError(message, self.path, self.line, name)

    def get(self, record: Any, name: str, types: type | tuple[type, ...], where: str = "",
            required: bool = True, default: Any = None) -> Any:
        """`record[name]`, of one of `types` (a bool is no int); `where` prefixes the field
        name in errors (e.g. "positives[0].")."""
        label = f"{where}{name}"
        if not isinstance(record, dict):
            raise self.fail(where.rstrip(".") or None, "expected a JSON object")
        if name not in record:
            if required:
                raise self.fail(label, "missing")
            return default
        value = record[name]
        wanted = types if isinstance(types, tuple) else (types,)
        if not isinstance(value, wanted) or isinstance(value, bool) and bool not in wanted:
            names = "/".join(t.__name__ for t in wanted)
            raise self.fail(label, f"expected {names}, got {type(value).__name__}")
        return value

    def passage(self, item: Any, where: str) -> Passage:
        """{"id", "text", "title" (optional)} as a Passage."""
        return Passage(str(self.get(item, "id", (str, int), where)),
                       self.get(item, "text", str, where),
                       self.get(item, "title", str, where, required=False, default=""))

    def question(self, data: Any) -> str:
        question = self.get(data, "question", str)
        if not question.strip():
            raise self.fail("question", "empty")
        return question

    def history(self, data: Any, required: bool) -> list[tuple[str, str | None]]:
        """"history": [[question, answer or null], ...], oldest first."""
        history = []
        for i, pair in enumerate(self.get(data, "history", list, required=required,
                                          default=[])):
            if (not isinstance(pair, list) or len(pair) != 2 or not isinstance(pair[0], str)
                    or not isinstance(pair[1], (str, type(None)))):
                raise self.fail(f"history[{i}]", "expected [question, answer or null]")
            history.append((pair[0], pair[1]))
        return history


def load_records(path: str | os.PathLike, parse: Callable[[Any, Any, int], Any]) -> list:
    """`parse(record, path, line)` of every line of a JSONL file; ids must be unique."""
    items = []
    seen: dict[str, int] = {}
    for line, data in iter_jsonl(path):
        item = parse(data, path, line)
        if item.id in seen:
            raise DataError(f"duplicate example id {item.id!r} (first on line "
                            f"{seen[item.id]})", path, line, "id")
        seen[item.id] = line
        items.append(item)
    return items


def ids_digest(examples: Sequence[Any]) -> str:
    """16 hex digits of the sha256 of the examples' ids, in order."""
    digest = hashlib.sha256()
    for example in examples:
        digest.update(example.id.encode() + b"\0")
    return digest.hexdigest()[:16]
