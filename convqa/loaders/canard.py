"""CANARD question rewrites as conversations.

The official file is a JSON list of questions: `History` (article title, section title, then the
earlier questions and answers of the QuAC dialog, alternating), `Question`, `Rewrite`,
`QuAC_dialog_id` and `Question_no` (1-based). Questions are grouped into one conversation per
dialog (id = `QuAC_dialog_id`), ordered by `Question_no`, which must run 1..n.

Answers come from the History of the dialog's last question, so the last turn's answer is not in
the file (`None`); OR-QuAC's `answer.tsv` has it (see `convqa.loaders.orquac`). Unanswerable QuAC
questions appear as "I don't know." in History. Every row's History is compared with the turns
built (`context="check"` raises on a difference, "warn" warns once per file, "ignore").

`Turn.meta` keys: `title` and `section` (the Wikipedia article and section the dialog is about,
the same in every turn of a dialog), `qid` (the OR-QuAC question id "<dialog>_q#<n-1>"),
`answerable` (bool; absent for the last turn, whose answer is unknown).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ..errors import DataError
from ..io import load_json
from ..types import Conversation, Turn
from ._common import (ContextChecker, ContextMode, Source, TurnRow, get, get_id, get_str_list,
                      get_turn_number, group_rows, iter_records)

NO_ANSWER = "I don't know."  # how CANARD and OR-QuAC histories write an unanswerable turn


def orquac_qid(dialog_id: str, turn: int) -> str:
    """OR-QuAC's id of turn `turn` (1-based) of a QuAC dialog."""
    return f"{dialog_id}_q#{turn - 1}"


def load_canard(path: str | os.PathLike,
                context: ContextMode = "check") -> list[Conversation]:
    """All dialogs of a CANARD file, in order of first appearance."""
    checker = ContextChecker(context, "History")
    rows = [_row(record, src) for src, record in iter_records(path)]
    conversations = []
    for conv_id, conv_rows in group_rows(rows):
        last = conv_rows[-1]
        title, section, *flat = last.context
        if len(flat) != 2 * (len(conv_rows) - 1):
            raise last.source.error(
                f"expected title, section and {2 * (len(conv_rows) - 1)} earlier questions and "
                f"answers, got {len(last.context)} entries", "History")
        for i, row in enumerate(conv_rows):
            row.turn.meta.update(title=title, section=section)
            if i < len(conv_rows) - 1:
                row.turn.answer = flat[2 * i + 1]
                row.turn.meta["answerable"] = row.turn.answer != NO_ANSWER
        conversation = Conversation(conv_id, [row.turn for row in conv_rows])
        for row in conv_rows:
            if row.context[:2] != [title, section]:
                raise row.source.error(
                    f"title and section {row.context[:2]} differ from those of the dialog's "
                    f"last question {[title, section]}", "History")
            row.context = row.context[2:]
        checker.check(conversation, conv_rows)
        conversations.append(conversation)
    checker.finish(path)
    return conversations


def _row(record: Any, src: Source) -> TurnRow:
    dialog = get_id(record, "QuAC_dialog_id", src)
    number = get_turn_number(record, "Question_no", src)
    src = src.within(f"dialog {dialog} question {number}")
    history = get_str_list(record, "History", src)
    if len(history) < 2:
        raise src.error("expected at least the article title and the section title", "History")
    turn = Turn(question=get(record, "Question", src, str),
                rewrite=get(record, "Rewrite", src, str), meta={"qid": orquac_qid(dialog, number)})
    return TurnRow(dialog, number, turn, src, history)


@dataclass(frozen=True)
class RewritePair:
    """Two crowd workers' rewrites of the same question (CANARD `multiple_refs.json`)."""

    first: str
    second: str


def load_canard_multiple_refs(path: str | os.PathLike) -> list[RewritePair]:
    data = load_json(path)
    if not isinstance(data, list):
        raise DataError("expected a JSON list of [rewrite, rewrite] pairs", path)
    pairs = []
    for i, item in enumerate(data):
        if not (isinstance(item, list) and len(item) == 2
                and all(isinstance(text, str) for text in item)):
            raise DataError("expected a pair of strings", path, field=f"[{i}]")
        pairs.append(RewritePair(*item))
    return pairs
