"""DPR bi-encoder training files: a JSON list (plain or .gz) of {question, answers,
positive_ctxs, negative_ctxs, hard_negative_ctxs}, each ctx {title, text, passage_id (or id),
score?, ...}. Files made for TopiOCQA/QReCC carry extra keys (dataset, conv_id, turn_id, ...).

Unknown keys are kept in `extra` so that load -> save keeps them; ids are strings; a missing
negative list is empty; `positive_ctxs` is required (training needs it). `save_dpr_biencoder`
writes atomically, ids under "passage_id" as the DPR files do.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from ..io import write_json
from ._common import Source, get, get_str_list, iter_json_array, type_name

CTX_LISTS = ("positive_ctxs", "negative_ctxs", "hard_negative_ctxs")
_ID_KEYS = ("passage_id", "id", "psg_id")


@dataclass
class DprContext:
    text: str
    title: str = ""
    id: str | None = None
    score: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. title_score, has_answer

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"title": self.title, "text": self.text}
        if self.id is not None:
            data["passage_id"] = self.id
        if self.score is not None:
            data["score"] = self.score
        data.update(self.extra)
        return data


@dataclass
class DprExample:
    question: str
    answers: list[str]
    positive_ctxs: list[DprContext]
    negative_ctxs: list[DprContext] = field(default_factory=list)
    hard_negative_ctxs: list[DprContext] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. dataset, conv_id, turn_id

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"question": self.question, "answers": list(self.answers)}
        for name in CTX_LISTS:
            data[name] = [ctx.to_dict() for ctx in getattr(self, name)]
        data.update(self.extra)
        return data


def load_dpr_biencoder(path: str | os.PathLike) -> list[DprExample]:
    return [_example(record, src) for src, record in iter_json_array(path)]


def save_dpr_biencoder(path: str | os.PathLike, examples: list[DprExample]) -> None:
    """Write `examples` as a DPR bi-encoder JSON list (temporary file, then rename)."""
    write_json(path, [example.to_dict() for example in examples], indent=None)


def _example(record: Any, src: Source) -> DprExample:
    question = get(record, "question", src, str)
    answers = get_str_list(record, "answers", src)
    lists = {name: _contexts(record, name, src) for name in CTX_LISTS}
    extra = {k: v for k, v in record.items() if k not in ("question", "answers", *CTX_LISTS)}
    return DprExample(question, answers, extra=extra, **lists)


def _contexts(record: dict, name: str, src: Source) -> list[DprContext]:
    items = get(record, name, src, list, required=name == "positive_ctxs", default=[])
    contexts = []
    for i, item in enumerate(items):
        where = src.within(f"{name}[{i}]")
        if not isinstance(item, dict):
            raise src.error(f"expected a passage object, got {type_name(item)}", f"{name}[{i}]")
        id_key = next((key for key in _ID_KEYS if item.get(key) is not None), None)
        passage_id = None if id_key is None else str(get(item, id_key, where, (str, int)))
        score = get(item, "score", where, (int, float, str), required=False)
        if isinstance(score, str):
            try:  # some released files write scores as strings
                score = float(score)
            except ValueError:
                raise where.error(f"expected a number, got {score!r}", "score") from None
        known = {"title", "text", "score", *([id_key] if id_key else [])}
        contexts.append(DprContext(
            text=get(item, "text", where, str),
            title=get(item, "title", where, str, required=False, default=""),
            id=passage_id, score=None if score is None else float(score),
            extra={k: v for k, v in item.items() if k not in known}))
    return contexts
