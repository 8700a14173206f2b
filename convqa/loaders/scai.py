"""The SCAI-QReCC-21 shared-task files that come with QReCC's test split.

- ground truth (`ground-truth-sample.json` is a 3-turn sample of it): a JSON list of
  {Conversation_no, Turn_no, Truth_answer, Truth_passages, Truth_rewrite};
- run files (`gpt3_run.json`): {Conversation_no, Turn_no, Model_answer[, Model_rewrite,
  Model_passages {passage_id: score}]};
- the human-evaluated subset: `batch1-top1.csv` (conversation_no, turn_no, question, passage_ids,
  passages; the lists are Python list literals; one row per evaluated system, so a turn repeats)
  and `qa_batch1.csv` (id, question, gt, predicted, sas, model: answers of 20 systems with their
  semantic answer similarity to the gold answer).

`load_scai_subset` joins the last two (and the test qrels when present) into what an evaluation
needs: each turn's self-contained question (the human rewrite, since the conversations themselves
are not in these files), its gold answer, the candidate passages with their texts, and the gold
passage ids. Keys are "<conv>_<turn>" with the same optional `id_prefix` as `load_qrecc_qrels`.
"""
from __future__ import annotations

import ast
import csv
import io
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from ..errors import DataError
from ..io import read_text
from ..types import Passage, QueryId
from ._common import Source, get, get_id, get_str_list, get_turn_number, iter_records, type_name
from .qrecc import load_qrecc_qrels


@dataclass(frozen=True)
class ScaiTruth:
    answer: str
    rewrite: str
    passages: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ScaiRunTurn:
    answer: str | None = None
    rewrite: str | None = None
    passages: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class ScaiJudgedAnswer:
    """One system's answer to one turn with its SAS score (0..1) against the gold answer."""

    query_id: str
    question: str
    gold: str
    predicted: str
    sas: float
    model: str


@dataclass
class ScaiSubsetTurn:
    query_id: str
    rewrite: str  # the self-contained question the systems were evaluated on
    answer: str  # gold answer
    passage_ids: list[str]  # union of the evaluated systems' top passages, first seen first
    gold_passage_ids: list[str] | None = None  # from the test qrels; None when not given


@dataclass
class ScaiSubset:
    turns: list[ScaiSubsetTurn]
    passages: dict[str, Passage]  # every passage of `passage_ids`, with its text


def _query_key(record: Any, src: Source, id_prefix: str) -> tuple[str, Source]:
    conv = get_id(record, "Conversation_no", src)
    turn = get_turn_number(record, "Turn_no", src)
    return f"{id_prefix}{conv}_{turn}", src.within(f"conversation {conv} turn {turn}")


def load_scai_ground_truth(path: str | os.PathLike, id_prefix: str = "") -> dict[str, ScaiTruth]:
    truth: dict[str, ScaiTruth] = {}
    for src, record in iter_records(path):
        key, src = _query_key(record, src, id_prefix)
        if key in truth:
            raise src.error(f"turn {key} appears twice")
        truth[key] = ScaiTruth(answer=get(record, "Truth_answer", src, str),
                               rewrite=get(record, "Truth_rewrite", src, str),
                               passages=get_str_list(record, "Truth_passages", src))
    return truth


def load_scai_run(path: str | os.PathLike, id_prefix: str = "") -> dict[str, ScaiRunTurn]:
    run: dict[str, ScaiRunTurn] = {}
    for src, record in iter_records(path):
        key, src = _query_key(record, src, id_prefix)
        if key in run:
            raise src.error(f"turn {key} appears twice")
        passages = get(record, "Model_passages", src, dict, required=False, default={})
        for passage_id, score in passages.items():
            if isinstance(score, bool) or not isinstance(score, (int, float)):
                raise src.error(f"score of {passage_id!r} must be a number, got "
                                f"{type_name(score)}", "Model_passages")
        run[key] = ScaiRunTurn(answer=get(record, "Model_answer", src, str, required=False),
                               rewrite=get(record, "Model_rewrite", src, str, required=False),
                               passages={k: float(v) for k, v in passages.items()})
    return run


def _csv_rows(path: str | os.PathLike, columns: tuple[str, ...]) -> Iterator[tuple[Source, dict]]:
    reader = csv.reader(io.StringIO(read_text(path), newline=""))
    header = next(reader, None)
    if header is None:
        raise DataError("empty file, expected a CSV header", path, 1)
    for column in columns:
        if column not in header:
            raise DataError(f"CSV header lacks this column (has {', '.join(header)})", path, 1,
                            column)
    try:
        for values in reader:
            if not values:
                continue
            if len(values) != len(header):
                raise DataError(f"expected {len(header)} columns, got {len(values)}", path,
                                reader.line_num)
            yield Source(str(path), reader.line_num), dict(zip(header, values))
    except csv.Error as exc:
        raise DataError(f"malformed CSV ({exc})", path, reader.line_num) from None


def _csv_query_key(row: dict, src: Source, id_prefix: str,
                   conv_col: str = "conversation_no", turn_col: str = "turn_no") -> str:
    conv, turn = row[conv_col].strip(), row[turn_col].strip()
    if not conv:
        raise src.error("empty", conv_col)
    if not turn.isdigit():
        raise src.error(f"expected a turn number, got {turn!r}", turn_col)
    return f"{id_prefix}{conv}_{int(turn)}"


def _literal_str_list(row: dict, column: str, src: Source) -> list[str]:
    try:
        value = ast.literal_eval(row[column])
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        raise src.error("expected a Python list literal of strings", column) from None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise src.error("expected a list of strings", column)
    return value


def load_scai_judged_answers(path: str | os.PathLike,
                             id_prefix: str = "") -> list[ScaiJudgedAnswer]:
    """`qa_batch1.csv`: every judged (turn, system) answer, in file order."""
    answers = []
    for src, row in _csv_rows(path, ("id", "question", "gt", "predicted", "sas", "model")):
        try:
            QueryId.parse(row["id"])
        except ValueError:
            raise src.error("expected '<conversation>_<turn>'", "id") from None
        try:
            sas = float(row["sas"])
        except ValueError:
            raise src.error(f"expected a number, got {row['sas']!r}", "sas") from None
        answers.append(ScaiJudgedAnswer(id_prefix + row["id"], row["question"], row["gt"],
                                        row["predicted"], sas, row["model"]))
    return answers


def load_scai_top_passages(path: str | os.PathLike, id_prefix: str = ""
                           ) -> tuple[dict[str, str], dict[str, list[str]], dict[str, Passage]]:
    """`batch1-top1.csv` -> (question of each turn, its passage ids in first-seen order without
    repeats, every passage by id). Repeated rows of a turn must agree on the question, and a
    passage id must always come with the same text."""
    questions: dict[str, str] = {}
    passage_ids: dict[str, list[str]] = {}
    passages: dict[str, Passage] = {}
    columns = ("conversation_no", "turn_no", "question", "passage_ids", "passages")
    for src, row in _csv_rows(path, columns):
        key = _csv_query_key(row, src, id_prefix)
        if questions.setdefault(key, row["question"]) != row["question"]:
            raise src.error(f"turn {key} has a different question than on an earlier row",
                            "question")
        ids = _literal_str_list(row, "passage_ids", src)
        texts = _literal_str_list(row, "passages", src)
        if len(ids) != len(texts):
            raise src.error(f"{len(ids)} passage ids but {len(texts)} passages", "passages")
        seen = passage_ids.setdefault(key, [])
        for passage_id, text in zip(ids, texts):
            known = passages.setdefault(passage_id, Passage(passage_id, text))
            if known.text != text:
                raise src.error(f"passage {passage_id!r} has a different text than on an "
                                f"earlier row", "passages")
            if passage_id not in seen:
                seen.append(passage_id)
    return questions, passage_ids, passages


def load_scai_subset(directory: str | os.PathLike, id_prefix: str = "",
                     passages_file: str = "batch1-top1.csv", answers_file: str = "qa_batch1.csv",
                     qrels_file: str | None = "qrecc_test_qrels_binary.json") -> ScaiSubset:
    """The human-evaluated SCAI-QReCC-21 turns with gold answers, candidate passages and (when the
    qrels file is in `directory`) gold passage ids. Both CSVs must cover the same turns."""
    directory = Path(directory)
    questions, passage_ids, passages = load_scai_top_passages(directory / passages_file,
                                                              id_prefix)
    gold: dict[str, str] = {}
    answers_path = directory / answers_file
    for judged in load_scai_judged_answers(answers_path, id_prefix):
        if gold.setdefault(judged.query_id, judged.gold) != judged.gold:
            raise DataError(f"turn {judged.query_id} has two different gold answers",
                            answers_path, field="gt")
        if judged.query_id in questions and questions[judged.query_id] != judged.question:
            raise DataError(f"turn {judged.query_id}: question differs from {passages_file}",
                            answers_path, field="question")
    if set(gold) != set(questions):
        only = sorted(set(gold) ^ set(questions))
        raise DataError(f"{answers_file} and {passages_file} cover different turns (e.g. "
                        f"{', '.join(only[:5])})", answers_path)
    qrels = None
    if qrels_file is not None and (directory / qrels_file).exists():
        qrels = load_qrecc_qrels(directory / qrels_file, id_prefix)
    turns = [ScaiSubsetTurn(key, questions[key], gold[key], passage_ids[key],
                            None if qrels is None else
                            [pid for pid, rel in qrels.get(key, {}).items() if rel > 0])
             for key in questions]
    return ScaiSubset(turns, passages)
