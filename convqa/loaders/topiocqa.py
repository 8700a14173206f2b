"""TopiOCQA conversations from the official JSON list of turns (plain or .gz).

Each record is one turn: `Conversation_no, Turn_no, Context, Question, Answer, Topic,
Topic_section, is_nq`; later releases add `Rationale`, `Gold_passage` ({id, title, text}) and, for
dev, `Additional_answers` (strings, or objects with an `Answer` key as the official evaluation
script reads them). A JSON Lines file of the same records also loads.

Conversation ids are `str(Conversation_no)`, turns are ordered by `Turn_no` (which must run 1..n).
`Context` is not trusted: history is the earlier turns, and `Context` is compared with them
(`context="check"` raises on a difference, "warn" warns once per file, "ignore" skips it).

`Turn.meta` keys:
- `topic` (str; "" when the turn has no topic, e.g. an unanswerable first turn), `topic_section`
  (str), `is_nq` (bool: the question was seeded from Natural Questions);
- only when the file has them: `rationale` (str), `gold_passage` (dict with str `id`, `title`,
  `text`), `additional_answers` (list[str]).
Answers are kept verbatim, including the official "UNANSWERABLE".
"""
from __future__ import annotations

import os
from typing import Any

from ..types import Conversation, Turn
from ._common import (ContextChecker, ContextMode, Source, TurnRow, get, get_id, get_str_list,
                      get_turn_number, iter_records, type_name)

UNANSWERABLE = "UNANSWERABLE"


def load_topiocqa(path: str | os.PathLike,
                  context: ContextMode = "check") -> list[Conversation]:
    """All conversations of a TopiOCQA file, in order of first appearance."""
    checker = ContextChecker(context, "Context")
    rows = [_row(record, src) for src, record in iter_records(path)]
    return checker.conversations(rows, path)


def topiocqa_answers(turn: Turn) -> list[str]:
    """Every gold answer of a turn: the main `Answer` first, then `Additional_answers`
    (duplicates kept, as the official leave-one-out evaluation counts them)."""
    answers = [] if turn.answer is None else [turn.answer]
    return answers + list(turn.meta.get("additional_answers", []))


def _row(record: Any, src: Source) -> TurnRow:
    conv_id = get_id(record, "Conversation_no", src)
    number = get_turn_number(record, "Turn_no", src)
    src = src.within(f"conversation {conv_id} turn {number}")
    meta: dict[str, Any] = {
        "topic": get(record, "Topic", src, str),
        "topic_section": get(record, "Topic_section", src, str),
        "is_nq": get(record, "is_nq", src, bool),
    }
    rationale = get(record, "Rationale", src, str, required=False)
    if rationale is not None:
        meta["rationale"] = rationale
    if record.get("Gold_passage") is not None:
        meta["gold_passage"] = _gold_passage(record, src)
    if record.get("Additional_answers") is not None:
        meta["additional_answers"] = _additional_answers(record, src)
    turn = Turn(question=get(record, "Question", src, str), answer=get(record, "Answer", src, str),
                meta=meta)
    return TurnRow(conv_id, number, turn, src, get_str_list(record, "Context", src, required=False))


def _gold_passage(record: dict, src: Source) -> dict[str, str]:
    passage = get(record, "Gold_passage", src, dict)
    inner = src.within("Gold_passage")
    return {"id": get_id(passage, "id", inner), "title": get(passage, "title", inner, str),
            "text": get(passage, "text", inner, str)}


def _additional_answers(record: dict, src: Source) -> list[str]:
    answers = []
    for i, item in enumerate(get(record, "Additional_answers", src, list)):
        if isinstance(item, str):
            answers.append(item)
        elif isinstance(item, dict):
            answers.append(get(item, "Answer", src.within(f"Additional_answers[{i}]"), str))
        else:
            raise src.error(f"expected string or object with 'Answer', got "
                            f"{type_name(item)}", f"Additional_answers[{i}]")
    return answers
