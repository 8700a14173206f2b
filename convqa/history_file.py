"""Reading a user's earlier turns from a file (`convqa answer --history FILE`).

Accepted forms, chosen so people can paste what they already have:
- JSON list of objects `{"question": ..., "answer": ...}` (answer optional);
- JSON list of strings alternating question, answer, ... (TopiOCQA's `Context` field);
- JSON object `{"turns": [...]}` (a saved `Conversation`);
- JSONL, one `{"question": ..., "answer": ...}` object a line.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .errors import DataError
from .io import iter_jsonl, load_json
from .types import Turn


def load_history(path: str | os.PathLike) -> list[Turn]:
    path = Path(path)
    if path.suffix == ".jsonl":
        return [_turn(obj, path, line, f"line {line}") for line, obj in iter_jsonl(path)]
    data = load_json(path)
    if isinstance(data, dict):
        if "turns" not in data:
            raise DataError("expected a list of turns or an object with 'turns'", path, field="turns")
        data = data["turns"]
    if not isinstance(data, list):
        raise DataError(f"expected a list of turns, got {type(data).__name__}", path)
    if all(isinstance(item, str) for item in data):
        return [Turn(question=data[i].strip(),
                     answer=data[i + 1].strip() if i + 1 < len(data) else None)
                for i in range(0, len(data), 2)]
    return [_turn(item, path, None, f"turns[{i}]") for i, item in enumerate(data)]


def _turn(item: Any, path: Path, line: int | None, where: str) -> Turn:
    if not isinstance(item, dict):
        raise DataError(f"{where}: expected an object with 'question', got {type(item).__name__}",
                        path, line)
    question = item.get("question")
    if not isinstance(question, str) or not question.strip():
        raise DataError(f"{where}: missing or empty", path, line, "question")
    answer = item.get("answer")
    if answer is not None and not isinstance(answer, str):
        raise DataError(f"{where}: expected a string", path, line, "answer")
    return Turn(question=question.strip(), answer=answer.strip() if answer else answer)
