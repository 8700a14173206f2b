"""What a long evaluation step has done so far, turn by turn, so that a stopped run resumes.

Reading 405 full-collection turns through two rerankers and a reader takes minutes on a CPU,
the large family's rows most of an hour; a step that kept its results only at the end lost all
of them to a Ctrl-C. A journal sits beside the file the step writes when it finishes
(`FILE.part`, so the same key names both): each turn's record is appended and flushed as soon
as it is made, a rerun of the same step reads the turns done and does only the others, and the
finished file replaces the journal.

    journal = TurnJournal.beside(final_file)          # final_file None: kept nowhere
    done = journal.done()                             # {qid: record} of an earlier run
    with journal:                                     # closed however the step ends
        journal.add({"qid": "31_2", ...})
    journal.finish()                                  # after the final file is written

A run killed while writing leaves a torn last line: it is dropped (that turn is done again);
any other unreadable line is a one-line error naming the file and line.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from convqa.errors import DataError

SUFFIX = ".part"


class TurnJournal:
    """Records of finished turns, keyed by their `qid`, appended to `path`; with `path` None
    the journal is kept nowhere (nothing done, nothing added), for a step whose result is not
    kept either, so callers need no second code path."""

    def __init__(self, path: Path | None):
        self.path = path
        self._handle: Any = None

    @classmethod
    def beside(cls, final: str | os.PathLike | None) -> "TurnJournal":
        return cls(None if final is None else Path(f"{final}{SUFFIX}"))

    def done(self) -> dict[str, dict[str, Any]]:
        """The records an earlier run of the same step appended, by qid."""
        if self.path is None or not self.path.is_file():
            return {}
        lines = self.path.read_text(encoding="utf-8").split("\n")
        records: dict[str, dict[str, Any]] = {}
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                qid = record["qid"]
            except (json.JSONDecodeError, KeyError, TypeError):
                if number == len(lines):  # no newline after it: cut short by a kill
                    break
                raise DataError(f"line {number}: not a journal record (delete the file to "
                                "start the step over)", self.path) from None
            records[str(qid)] = record
        if lines[-1].strip():  # a torn last line: keep the file readable for appending
            self._rewrite(records)
        return records

    def add(self, record: dict[str, Any]) -> None:
        if self.path is None:
            return
        if self._handle is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._handle = open(self.path, "a", encoding="utf-8")
        self._handle.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._handle.flush()

    def finish(self) -> None:
        """The step's file is written: the journal goes."""
        self.close()
        if self.path is not None:
            self.path.unlink(missing_ok=True)

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def __enter__(self) -> "TurnJournal":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _rewrite(self, records: dict[str, dict[str, Any]]) -> None:
        from convqa.io import write_jsonl

        write_jsonl(self.path, records.values())
