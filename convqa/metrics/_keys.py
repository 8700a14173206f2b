"""Query-id keys shared by the metrics: `str(QueryId)` strings, never question text."""
from __future__ import annotations

from typing import Any, Mapping

from convqa.errors import DataError
from convqa.types import QueryId


def query_key(key: Any, source: str) -> str:
    """`key` as a query-id string; QueryId is converted, anything else but str is an error."""
    if isinstance(key, QueryId):
        return str(key)
    if not isinstance(key, str):
        raise DataError(f"query ids must be strings like '31_2' (str(QueryId)), got {key!r}",
                        path=source)
    return key


def keyed_by_query(mapping: Mapping[Any, Any], source: str) -> dict[str, Any]:
    """A copy of `mapping` with string query-id keys; a key given twice is an error."""
    if not isinstance(mapping, Mapping):
        raise DataError(f"expected a mapping from query id, got {type(mapping).__name__}",
                        path=source)
    out: dict[str, Any] = {}
    for key, value in mapping.items():
        qid = query_key(key, source)
        if qid in out:
            raise DataError("query id given twice", path=source, field=qid)
        out[qid] = value
    return out
