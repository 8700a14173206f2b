"""SQuAD-format reading comprehension files (v1.1, v2.0, and datasets shipped in that format such
as SQuADShifts and COVID-QA): {"data": [{"title", "paragraphs": [{"context", "qas": [{"id",
"question", "answers": [{"text", "answer_start"}], "is_impossible"?, "plausible_answers"?}]}]}]}.

Every answer's character offset is checked against the context, since a reader trained on a
wrong offset learns the wrong span silently. `strict=True` raises a DataError naming the question
id and the field path (`data[i].paragraphs[j].qas[k].answers[m]`); `strict=False` moves the offset
to the occurrence of the text nearest the given one, drops the answer when the text does not occur
at all (and the question when it has no answer left), and counts all of it in `SquadReport`.
Question ids are strings (COVID-QA writes numbers); a missing title (COVID-QA) is "".
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ..errors import DataError
from ._common import DataWarning, Source, get, get_id, load_json_object


class SquadAnswer(NamedTuple):
    text: str
    start: int  # character offset into the context

    @property
    def end(self) -> int:
        """Exclusive end offset: `context[start:end] == text`."""
        return self.start + len(self.text)


@dataclass
class SquadExample:
    id: str
    title: str
    context: str
    question: str
    answers: list[SquadAnswer] = field(default_factory=list)
    is_impossible: bool = False
    plausible_answers: list[SquadAnswer] = field(default_factory=list)  # v2.0 unanswerables


@dataclass
class SquadReport:
    """What loading found: `mismatched` answers had an offset not matching their text; of those,
    `repaired` got the nearest occurrence and `dropped_answers` had none (lenient mode only)."""

    questions: int = 0
    answers: int = 0
    mismatched: int = 0
    repaired: int = 0
    dropped_answers: int = 0
    dropped_questions: int = 0


@dataclass
class SquadData:
    examples: list[SquadExample]
    report: SquadReport


def load_squad(path: str | os.PathLike, strict: bool = True) -> list[SquadExample]:
    """The examples of a SQuAD file; in lenient mode a DataWarning tells how many offsets were
    repaired or answers dropped (use `read_squad` to get the counts)."""
    data = read_squad(path, strict)
    report = data.report
    if report.mismatched:
        warnings.warn(f"{path}: {report.mismatched} answer offset(s) did not match their text: "
                      f"{report.repaired} repaired, {report.dropped_answers} answer(s) and "
                      f"{report.dropped_questions} question(s) dropped", DataWarning, stacklevel=2)
    return data.examples


def read_squad(path: str | os.PathLike, strict: bool = True) -> SquadData:
    root = load_json_object(path)
    src = Source(str(path))
    articles = get(root, "data", src, list)
    examples: list[SquadExample] = []
    report = SquadReport()
    ids: set[str] = set()
    for a, article in enumerate(articles):
        where = f"data[{a}]"
        title = _get(article, "title", src, where, str, required=False) or ""
        for p, paragraph in enumerate(_get(article, "paragraphs", src, where, list)):
            where_p = f"{where}.paragraphs[{p}]"
            context = _get(paragraph, "context", src, where_p, str)
            for q, qa in enumerate(_get(paragraph, "qas", src, where_p, list)):
                where_q = f"{where_p}.qas[{q}]"
                example = _example(qa, title, context, src, where_q, strict, report)
                if example.id in ids:
                    raise DataError(f"question id {example.id} appears twice", path,
                                    field=f"{where_q}.id")
                ids.add(example.id)
                if example.answers or example.is_impossible or not qa["answers"]:
                    examples.append(example)
                else:  # every answer was dropped
                    report.dropped_questions += 1
    return SquadData(examples, report)


def _get(record: Any, name: str, src: Source, where: str, types, required: bool = True):
    """`get` with errors naming the JSON path of the field."""
    try:
        return get(record, name, src, types, required=required)
    except DataError as exc:
        raise DataError(exc.message, exc.path, exc.line,
                        f"{where}.{exc.field}" if exc.field else where) from None


def _example(qa: Any, title: str, context: str, src: Source, where: str, strict: bool,
             report: SquadReport) -> SquadExample:
    try:
        qid = get_id(qa, "id", src)
    except DataError as exc:
        raise DataError(exc.message, exc.path, exc.line, f"{where}.{exc.field or 'id'}") from None
    question = _get(qa, "question", src, where, str)
    impossible = _get(qa, "is_impossible", src, where, bool, required=False) or False
    report.questions += 1
    answers = _answers(qa, "answers", qid, context, src, where, strict, report)
    plausible = _answers(qa, "plausible_answers", qid, context, src, where, strict, report)
    return SquadExample(qid, title, context, question, answers, impossible, plausible)


def _answers(qa: dict, name: str, qid: str, context: str, src: Source, where: str, strict: bool,
             report: SquadReport) -> list[SquadAnswer]:
    items = _get(qa, name, src, where, list, required=name == "answers")
    answers = []
    for m, item in enumerate(items or []):
        where_a = f"{where}.{name}[{m}]"
        text = _get(item, "text", src, where_a, str)
        start = _get(item, "answer_start", src, where_a, int)
        report.answers += 1
        if 0 <= start and context[start:start + len(text)] == text:
            answers.append(SquadAnswer(text, start))
            continue
        report.mismatched += 1
        found = context[start:start + len(text)] if 0 <= start < len(context) else ""
        if strict:
            raise DataError(f"question id {qid}: answer {text!r} does not match the context at "
                            f"offset {start} ({found!r}); use strict=False to repair offsets",
                            src.path, field=where_a)
        nearest = _nearest(context, text, start)
        if nearest is None:
            report.dropped_answers += 1
        else:
            report.repaired += 1
            answers.append(SquadAnswer(text, nearest))
    return answers


def _nearest(context: str, text: str, start: int) -> int | None:
    """Offset of the occurrence of `text` closest to `start`, or None."""
    if not text:
        return None
    best = None
    position = context.find(text)
    while position != -1:
        if best is None or abs(position - start) < abs(best - start):
            best = position
        position = context.find(text, position + 1)
    return best
