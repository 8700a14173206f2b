"""TREC CAsT 2019/2020 topics, resolved rewrites, and TREC qrels.

Topics JSON: a list of {number, title?, description?, turn: [{number, raw_utterance, ...}]}.
2020 turns add `manual_rewritten_utterance`, `automatic_rewritten_utterance` and
`manual_canonical_result_id` (the annotated 2020 file has `canonical_result_id`,
`query_turn_dependence`, `result_turn_dependence`). One conversation per topic (id =
str(number)), turns ordered by `number`, which must run 1..n. CAsT has no answers.

`Turn.rewrite` is the manual rewrite: from `rewrites_path` when given (the 2019
"annotated_resolved" TSV, `31_1<TAB>What is throat cancer?`; it wins over the JSON), else
`manual_rewritten_utterance`, else None.

`Turn.meta` keys (present when the file has them): `title`, `description` (topic-level, repeated
in every turn), `automatic_rewrite`, `canonical_result_id` (from `manual_canonical_result_id` or
`canonical_result_id`), `automatic_canonical_result_id`, `query_turn_dependence` (list of turn
numbers), `result_turn_dependence` (turn number). Other turn fields are ignored.
"""
from __future__ import annotations

import os
from typing import Any, Iterator

from ..errors import DataError
from ..types import Conversation, QueryId, Turn
from ..io import iter_lines
from ._common import (Source, TurnRow, get, get_id, get_turn_number, group_rows, iter_json_array,
                      iter_tsv)

_OPTIONAL_STR = (("automatic_rewritten_utterance", "automatic_rewrite"),
                 ("manual_canonical_result_id", "canonical_result_id"),
                 ("canonical_result_id", "canonical_result_id"),
                 ("automatic_canonical_result_id", "automatic_canonical_result_id"))


def load_cast_topics(path: str | os.PathLike,
                     rewrites_path: str | os.PathLike | None = None) -> list[Conversation]:
    """One conversation per topic, in file order; see the module note for the fields."""
    rewrites = load_cast_rewrites(rewrites_path) if rewrites_path is not None else None
    conversations = []
    seen: dict[str, Source] = {}
    for src, topic in iter_json_array(path):
        topic_id = get_id(topic, "number", src)
        if topic_id in seen:
            raise src.error(f"topic {topic_id} appears twice "
                            f"(first at {seen[topic_id].describe()})")
        seen[topic_id] = src
        topic_src = src.within(f"topic {topic_id}")
        topic_meta = {key: value for key in ("title", "description")
                      if (value := get(topic, key, topic_src, str, required=False)) is not None}
        rows = []
        for i, item in enumerate(get(topic, "turn", topic_src, list)):
            rows.append(_row(item, topic_id, topic_meta, topic_src.within(f"turn [{i}]")))
        turns = [row.turn for _, conv_rows in group_rows(rows) for row in conv_rows]
        conversations.append(Conversation(topic_id, turns))
    if rewrites is not None:
        _apply_rewrites(conversations, rewrites, rewrites_path)
    return conversations


def _row(item: Any, topic_id: str, topic_meta: dict, src: Source) -> TurnRow:
    number = get_turn_number(item, "number", src)
    meta: dict[str, Any] = dict(topic_meta)
    for field, key in _OPTIONAL_STR:
        value = get(item, field, src, str, required=False)
        if value is not None:
            meta.setdefault(key, value)
    dependence = get(item, "query_turn_dependence", src, list, required=False)
    if dependence is not None:
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in dependence):
            raise src.error("expected a list of turn numbers", "query_turn_dependence")
        meta["query_turn_dependence"] = dependence
    result_dependence = get(item, "result_turn_dependence", src, int, required=False)
    if result_dependence is not None:
        meta["result_turn_dependence"] = result_dependence
    turn = Turn(question=get(item, "raw_utterance", src, str),
                rewrite=get(item, "manual_rewritten_utterance", src, str, required=False),
                meta=meta)
    return TurnRow(topic_id, number, turn, src)


def load_cast_rewrites(path: str | os.PathLike) -> dict[str, str]:
    """{"<topic>_<turn>": rewrite} from a `qid<TAB>utterance` file (CRLF is fine)."""
    rewrites: dict[str, str] = {}
    for src, (key, text) in iter_tsv(path, 2):
        try:
            QueryId.parse(key)
        except ValueError as exc:
            raise src.error(str(exc), "qid") from None
        if key in rewrites:
            raise src.error(f"{key} appears twice")
        rewrites[key] = text.strip()
    return rewrites


def _apply_rewrites(conversations: list[Conversation], rewrites: dict[str, str],
                    path: str | os.PathLike) -> None:
    by_key = {str(qid): conv.turn(qid.turn) for conv in conversations for qid in conv.query_ids()}
    unknown = [key for key in rewrites if key not in by_key]
    if unknown:
        raise DataError(f"{len(unknown)} rewrite(s) for turns that are not in the topics file, "
                        f"e.g. {unknown[0]} (wrong topics file?)", path)
    for key, text in rewrites.items():
        by_key[key].rewrite = text


def load_trec_qrels(path: str | os.PathLike) -> dict[str, dict[str, int]]:
    """{query id: {doc id: relevance}} from a TREC qrels file (`qid iter docid rel`, any
    whitespace; the iteration column, "Q0" or "0", is ignored). A doc judged twice for a query
    must have the same relevance both times."""
    qrels: dict[str, dict[str, int]] = {}
    for src, line in _iter_fields(path):
        if len(line) != 4:
            raise src.error(f"expected 4 columns 'query iteration doc relevance', got {len(line)}")
        query, _, doc, rel = line
        try:
            relevance = int(rel)
        except ValueError:
            raise src.error(f"relevance must be an integer, got {rel!r}", "relevance") from None
        judged = qrels.setdefault(query, {})
        if judged.get(doc, relevance) != relevance:
            raise src.error(f"doc {doc} of query {query} judged twice with different relevance "
                            f"({judged[doc]} and {relevance})")
        judged[doc] = relevance
    return qrels


def _iter_fields(path: str | os.PathLike) -> Iterator[tuple[Source, list[str]]]:
    for number, text in iter_lines(path):
        if text.strip():
            yield Source(str(path), number), text.split()

