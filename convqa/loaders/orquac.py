"""OR-QuAC question files and the OR-QuAC / CANARD sample records.

The TSVs `orquac_<split>.<kind>.tsv` hold `qid<TAB>text`, qid = "<QuAC dialog id>_q#<n>" with n
0-based. Kinds: `question` (required), `rewrite`, `answer` (the rewrite, a space, then the answer;
an unanswerable question has nothing after the space) and `history` (earlier questions and answers
joined by "|", then "[Q] " and the question). The dev files have all four, train only question and
rewrite, so train turns have no answers and their history is the earlier questions.

Turns are grouped into one conversation per dialog (id = QuAC dialog id, as CANARD's
`QuAC_dialog_id`), turn number n+1. Every kind present must cover the same qids. `history.tsv` is
compared with the turns built (`context="check"` raises on a difference, "warn", "ignore").

Unanswerable questions: `answer.tsv` leaves them empty while `history.tsv` (and CANARD) write
"I don't know."; turns use the history spelling so that a history built from them is the one the
dataset was made with, and `meta["answerable"]` says which is which.

`Turn.meta` keys: `qid` (the OR-QuAC id), `answerable` (bool, only when an answer file is read).

Measured on the shared dev files: questions, rewrites and histories are identical to CANARD dev
(same 3,430 qids); answers equal the answers in CANARD's histories, and `answer.tsv` adds the
last turn of each of the 490 dialogs, which CANARD lacks.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import DataError
from ..io import iter_jsonl
from ..types import Conversation, Turn
from ._common import ContextChecker, ContextMode, Source, TurnRow, get, iter_tsv
from .canard import NO_ANSWER

KINDS = ("question", "rewrite", "answer", "history")
_QID = re.compile(r"^(?P<dialog>.+)_q#(?P<turn>\d+)$")


def parse_orquac_qid(qid: str) -> tuple[str, int]:
    """("<dialog id>", 1-based turn) of an OR-QuAC qid; ValueError when it is not one."""
    match = _QID.match(qid)
    if not match:
        raise ValueError(f"not an OR-QuAC question id '<dialog>_q#<n>': {qid!r}")
    return match["dialog"], int(match["turn"]) + 1


def read_orquac_tsv(path: str | os.PathLike) -> dict[str, tuple[Source, str]]:
    """{qid: (where, text)} of one OR-QuAC TSV; repeated or malformed qids are errors."""
    rows: dict[str, tuple[Source, str]] = {}
    for src, (qid, text) in iter_tsv(path, 2):
        try:
            parse_orquac_qid(qid)
        except ValueError as exc:
            raise src.error(str(exc), "qid") from None
        if qid in rows:
            raise src.error(f"qid {qid} appears twice (first at line {rows[qid][0].line})")
        rows[qid] = (src, text)
    return rows


def orquac_paths(directory: str | os.PathLike, split: str) -> dict[str, Path]:
    """The TSVs of `split` that exist in `directory`, by kind."""
    directory = Path(directory)
    found = {kind: directory / f"orquac_{split}.{kind}.tsv" for kind in KINDS}
    return {kind: path for kind, path in found.items() if path.exists()}


def load_orquac(directory: str | os.PathLike, split: str = "dev",
                context: ContextMode = "check") -> list[Conversation]:
    """Conversations of one OR-QuAC split from `orquac_<split>.*.tsv` in `directory`."""
    paths = orquac_paths(directory, split)
    if "question" not in paths:
        raise DataError("file not found", Path(directory) / f"orquac_{split}.question.tsv")
    if "answer" in paths and "rewrite" not in paths:
        raise DataError("an answer file needs the rewrite file next to it (each answer line "
                        "starts with the rewrite)", paths["answer"])
    tables = {kind: read_orquac_tsv(path) for kind, path in paths.items()}
    questions = tables["question"]
    for kind, table in tables.items():
        _same_qids(questions, table, paths["question"], paths[kind])

    rows = []
    for qid, (src, question) in questions.items():
        dialog, number = parse_orquac_qid(qid)
        turn = Turn(question=question, meta={"qid": qid})
        if "rewrite" in tables:
            turn.rewrite = tables["rewrite"][qid][1]
        if "answer" in tables:
            answer_src, text = tables["answer"][qid]
            answer = _strip_rewrite(text, turn.rewrite, answer_src)
            turn.answer = answer if answer else NO_ANSWER
            turn.meta["answerable"] = bool(answer)
        history, history_src = None, None
        if "history" in tables:
            history_src, text = tables["history"][qid]
            history = _history_prefix(text, question, history_src)
        rows.append(TurnRow(dialog, number, turn, src, history, history_src))

    checker = ContextChecker(context, "history", render=_joined_history)
    return checker.conversations(rows, paths.get("history", paths["question"]))


def _same_qids(questions: dict, table: dict, questions_path: Path, path: Path) -> None:
    for qid, (src, _) in table.items():
        if qid not in questions:
            raise src.error(f"qid {qid} is not in {questions_path.name}", "qid")
    if len(table) != len(questions):
        missing = next(qid for qid in questions if qid not in table)
        raise DataError(f"has no line for qid {missing} of {questions_path.name} "
                        f"({len(questions) - len(table)} missing)", path)


def _strip_rewrite(text: str, rewrite: str | None, src: Source) -> str:
    prefix = f"{rewrite} "
    if not text.startswith(prefix) and text != rewrite:
        raise src.error("an answer line must start with the question's rewrite and a space",
                        "answer")
    return text[len(prefix):]


def _history_prefix(text: str, question: str, src: Source) -> str:
    suffix = f"[Q] {question}"
    if not text.endswith(suffix):
        raise src.error("a history line must end with '[Q] ' and the question", "history")
    return text[: -len(suffix)]


def _joined_history(turns: list[Turn]) -> str:
    return "|".join(part for turn in turns for part in (turn.question, turn.answer or ""))


@dataclass(frozen=True)
class OrConvQASample:
    """One row of `orconvqa_sample.jsonl`: a question with its history and a passage labelled
    for it (label 1 = the passage holds the answer)."""

    question: str
    rewrite: str
    history: list[tuple[str, str]]  # (question, answer), oldest first
    passage: str
    label: int


_SAMPLE_TURN = re.compile(r"^\[Q\]: (?P<q>.*?)  \[A\]: (?P<a>.*)$", re.S)


def load_orconvqa_sample(path: str | os.PathLike) -> list[OrConvQASample]:
    """Rows of `orconvqa_sample.jsonl`; `history` is "[Q]: q  [A]: a" turns joined by " ||| "."""
    samples = []
    for line, record in iter_jsonl(path):
        src = Source(str(path), line)
        history_text = get(record, "history", src, str)
        history = []
        for part in history_text.split(" ||| ") if history_text else []:
            match = _SAMPLE_TURN.match(part)
            if not match:
                raise src.error("expected '[Q]: question  [A]: answer' turns joined by ' ||| '",
                                "history")
            history.append((match["q"], match["a"]))
        samples.append(OrConvQASample(get(record, "question", src, str),
                                      get(record, "rewrite", src, str), history,
                                      get(record, "passage", src, str),
                                      get(record, "label", src, int)))
    return samples


@dataclass(frozen=True)
class ConvIRQuadruple:
    """One row of `canard_convir_sample_quadruples_top3.jsonl`: a conversational query with a
    positive and a (retrieved, hard) negative passage for ranking training."""

    utterance: str
    context: list[str]  # earlier questions of the dialog, oldest first
    pos_passage: str
    neg_passage: str


def load_convir_quadruples(path: str | os.PathLike) -> list[ConvIRQuadruple]:
    """Rows of the CANARD ConvIR quadruple file; `context` is earlier questions joined by "|"."""
    rows = []
    for line, record in iter_jsonl(path):
        src = Source(str(path), line)
        context = get(record, "context", src, str)
        rows.append(ConvIRQuadruple(get(record, "utterance", src, str),
                                    context.split("|") if context else [],
                                    get(record, "pos_passage", src, str),
                                    get(record, "neg_passage", src, str)))
    return rows
