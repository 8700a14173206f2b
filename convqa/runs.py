"""Run files: the ranked passages a retriever returned for each query (docs/run_format.md).

JSONL (default), one query a line, in query order:

    {"qid": "31_2", "query": "who was he? [SEP] ...", "hits": [
        {"passage_id": "1234#0", "score": 17.2, "rank": 1}, ...]}

`qid` is `str(QueryId)` ("{conversation_id}_{turn}"); `query` is the text the retriever was
given (after the history strategy) and may be absent; `hits` are best first, ranks 1, 2, 3, ...
A query with no hits (e.g. a_{t-1} at turn 1) has `"hits": []`.

TREC (`.trec`), for trec_eval and other toolkits: `qid Q0 passage_id rank score tag` a line.

Reading checks every line and reports the first problem as one DataError naming the file, the
line and the field; a run is never half-read. `retrieve_all` makes a run in memory from a
retriever and {qid: query text}.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable, Mapping, NamedTuple, Sequence

from convqa.errors import ConfigError, ConvQAError, DataError
from convqa.io import atomic_write, iter_jsonl, iter_lines, require
from convqa.turn_journal import TurnJournal
from convqa.types import Hit

FORMATS = ("jsonl", "trec")


class Run(NamedTuple):
    hits: dict[str, list[Hit]]   # qid -> hits, best first, in file order
    queries: dict[str, str]      # qid -> query text, where the file has it


def run_format(path: str | os.PathLike) -> str:
    """'trec' for *.trec / *.trec.txt, else 'jsonl'."""
    name = Path(path).name.lower()
    return "trec" if name.endswith(".trec") or name.endswith(".trec.txt") else "jsonl"


def write_run(path: str | os.PathLike, hits: Mapping[str, Sequence[Hit]],
              queries: Mapping[str, str] | None = None, format: str | None = None,
              tag: str = "convqa") -> int:
    """Write atomically; returns the number of queries. `format` defaults from the name."""
    format = format or run_format(path)
    if format not in FORMATS:
        raise DataError(f"unknown run format {format!r} (expected {', '.join(FORMATS)})", path)
    with atomic_write(path) as handle:
        for qid, ranking in hits.items():
            if format == "jsonl":
                row: dict[str, Any] = {"qid": qid}
                if queries is not None and qid in queries:
                    row["query"] = queries[qid]
                row["hits"] = [{"passage_id": h.passage_id, "score": h.score, "rank": h.rank}
                               for h in ranking]
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
            else:
                for h in ranking:
                    handle.write(f"{qid} Q0 {h.passage_id} {h.rank} {h.score:.6f} {tag}\n")
    return len(hits)


def read_run(path: str | os.PathLike, format: str | None = None) -> Run:
    """Read a run file written by `write_run` (or any TREC run)."""
    format = format or run_format(path)
    if format == "trec":
        return _read_trec(Path(path))
    if format != "jsonl":
        raise DataError(f"unknown run format {format!r} (expected {', '.join(FORMATS)})", path)
    hits: dict[str, list[Hit]] = {}
    queries: dict[str, str] = {}
    for line, record in iter_jsonl(path):
        qid = require(record, "qid", path, line, str)
        if qid in hits:
            raise DataError(f"query {qid!r} appears twice", path, line, "qid")
        raw = require(record, "hits", path, line, list)
        hits[qid] = _hits(raw, path, line)
        if "query" in record:
            queries[qid] = require(record, "query", path, line, str)
    return Run(hits, queries)


def _hits(raw: Iterable[Any], path: str | os.PathLike, line: int) -> list[Hit]:
    out: list[Hit] = []
    for index, item in enumerate(raw):
        where = f"hits[{index}]"
        if not isinstance(item, dict):
            raise DataError(f"expected an object, got {type(item).__name__}", path, line, where)
        pid = item.get("passage_id")
        score = item.get("score")
        rank = item.get("rank")
        if not isinstance(pid, str) or not pid:
            raise DataError("expected a non-empty string", path, line, f"{where}.passage_id")
        if isinstance(score, bool) or not isinstance(score, (int, float)):
            raise DataError(f"expected a number, got {score!r}", path, line, f"{where}.score")
        if isinstance(rank, bool) or not isinstance(rank, int) or rank != index + 1:
            raise DataError(f"expected rank {index + 1} (ranks count 1, 2, 3, ...), got "
                            f"{rank!r}", path, line, f"{where}.rank")
        out.append(Hit(pid, float(score), rank))
    return out


def _read_trec(path: Path) -> Run:
    hits: dict[str, list[Hit]] = {}
    for line, text in iter_lines(path):
        if not text.strip():
            continue
        cols = text.split()
        if len(cols) != 6:
            raise DataError(f"expected 6 columns (qid Q0 passage_id rank score tag), got "
                            f"{len(cols)}", path, line)
        qid, _, pid, rank_text, score_text, _ = cols
        try:
            rank, score = int(rank_text), float(score_text)
        except ValueError:
            raise DataError(f"rank must be an integer and score a number, got {rank_text!r} "
                            f"and {score_text!r}", path, line) from None
        ranking = hits.setdefault(qid, [])
        if rank != len(ranking) + 1:
            raise DataError(f"query {qid!r}: expected rank {len(ranking) + 1}, got {rank} "
                            "(lines of a query must be consecutive, in rank order)", path, line)
        ranking.append(Hit(pid, score, rank))
    return Run(hits, {})


def retrieve_all(retriever, queries: dict[str, str], k: int, batch_size: int = 64,
                 progress: bool = True, desc: str = "retrieve",
                 journal: TurnJournal | None = None) -> dict[str, list[Hit]]:
    """{qid: top-k hits}, in batches; empty queries get no hits without asking the retriever.
    With a `journal` (convqa/turn_journal.py) the queries an earlier, stopped run retrieved are
    taken from it and each finished batch is added to it."""
    from tqdm.auto import tqdm

    if batch_size < 1:
        raise ConfigError(f"batch size must be at least 1, got {batch_size}")
    run: dict[str, list[Hit]] = {qid: [] for qid in queries}
    journal = journal or TurnJournal.beside(None)
    done = journal.done()
    for qid, record in done.items():
        if qid in run:
            run[qid] = [Hit.from_dict(hit) for hit in record["hits"]]
    todo = [(qid, text) for qid, text in queries.items() if text.strip() and qid not in done]
    asked = sum(1 for text in queries.values() if text.strip())
    with journal, tqdm(total=asked, initial=asked - len(todo), desc=desc, unit=" q",
                       disable=not progress) as bar:
        for start in range(0, len(todo), batch_size):
            batch = todo[start:start + batch_size]
            results = retriever.retrieve_batch([text for _, text in batch], k)
            if len(results) != len(batch):
                raise ConvQAError(f"retriever returned {len(results)} rankings for "
                                  f"{len(batch)} queries")
            for (qid, _), hits in zip(batch, results):
                run[qid] = list(hits)
                journal.add({"qid": qid, "hits": [hit.to_dict() for hit in hits]})
            bar.update(len(batch))
    return run
