"""QReCC conversations and gold passages from the official files.

Conversations: `qrecc_train.json` / `qrecc_test.json` (a JSON list of turns: `Context, Question,
Rewrite, Answer, Answer_URL, Conversation_no, Turn_no, Conversation_source`, and `Passages` in
releases that have it) or the same records as JSON Lines (those may lack `Context`).
Gold passages: `qrecc_{train,test}_qrels_binary.json`, {"<conv>_<turn>": {passage_id: 1}}.

Ids. Conversation numbers restart in every split (train and test both have a conversation 1),
and the qrels keys are unqualified "<conv>_<turn>". By default ids are `str(Conversation_no)`, so
`str(QueryId)` matches the qrels of the same split. When conversations of several splits are used
together, pass the same `id_prefix` (e.g. "train/") to `load_qrecc` and `load_qrecc_qrels`: ids
become "train/1" and keys "train/1_3".

`Turn.meta` keys (present when the file has the field): `source` (Conversation_source: "trec",
"quac" or "nq"), `answer_url` (str), `passages` (list of gold passage ids).

The SCAI-QReCC-21 files (ground truth, run files, the evaluated subset with passage texts) are read
by `convqa.loaders.scai`.
"""
from __future__ import annotations

import os
from typing import Any

from ..errors import DataError
from ..types import Conversation, QueryId, Turn
from ._common import (ContextChecker, ContextMode, Source, TurnRow, get, get_id, get_str_list,
                      get_turn_number, iter_records, load_json_object, type_name)


def load_qrecc(path: str | os.PathLike, id_prefix: str = "",
               context: ContextMode = "check") -> list[Conversation]:
    """All conversations of a QReCC file (JSON list or JSON Lines), in order of first appearance.
    `context`: what to do when a turn's `Context` differs from the earlier turns ("check" raises,
    "warn", "ignore"); history always comes from the earlier turns."""
    checker = ContextChecker(context, "Context")
    rows = [_row(record, src, id_prefix) for src, record in iter_records(path)]
    return checker.conversations(rows, path)


def _row(record: Any, src: Source, id_prefix: str) -> TurnRow:
    conv_id = id_prefix + get_id(record, "Conversation_no", src)
    number = get_turn_number(record, "Turn_no", src)
    src = src.within(f"conversation {conv_id} turn {number}")
    meta: dict[str, Any] = {}
    for field, key in (("Conversation_source", "source"), ("Answer_URL", "answer_url")):
        value = get(record, field, src, str, required=False)
        if value is not None:
            meta[key] = value
    passages = get_str_list(record, "Passages", src, required=False)
    if passages is not None:
        meta["passages"] = passages
    turn = Turn(question=get(record, "Question", src, str),
                answer=get(record, "Answer", src, str, required=False),
                rewrite=get(record, "Rewrite", src, str, required=False), meta=meta)
    return TurnRow(conv_id, number, turn, src, get_str_list(record, "Context", src, required=False))


def load_qrecc_qrels(path: str | os.PathLike, id_prefix: str = "") -> dict[str, dict[str, int]]:
    """{"<conv>_<turn>": {passage_id: relevance}} from a QReCC qrels JSON file; keys are checked
    to be query ids and get `id_prefix` in front (see the module note on ids)."""
    data = load_json_object(path)
    qrels: dict[str, dict[str, int]] = {}
    for key, judged in data.items():
        try:
            QueryId.parse(key)
        except ValueError:
            raise DataError("key is not a query id '<conversation>_<turn>'", path,
                            field=key) from None
        if not isinstance(judged, dict):
            raise DataError(f"expected an object of passage ids, got {type_name(judged)}", path,
                            field=key)
        for passage_id, relevance in judged.items():
            if isinstance(relevance, bool) or not isinstance(relevance, int):
                raise DataError(f"relevance of passage {passage_id!r} must be an integer, got "
                                f"{type_name(relevance)}", path, field=key)
        qrels[id_prefix + key] = dict(judged)
    return qrels
