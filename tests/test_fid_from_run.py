"""FiD examples from the tiny benchmark (tests/fixtures/benchmark) and a hand-written run."""
from __future__ import annotations

import pytest

from convqa.errors import DataError
from convqa.front.evaluation import write_run
from convqa.types import Hit
from readers.fid.data import load_examples, write_examples
from readers.fid.from_run import examples_from_run

from test_eval_retrieval import bench  # noqa: F401  (the fixture)


def test_examples_carry_question_history_answers_and_top_n(bench, tmp_path):  # noqa: F811
    run = tmp_path / "run.jsonl"
    write_run(run, {"3_2": [Hit("40#0", 2.0, 1), Hit("10#0", 1.0, 2), Hit("20#0", 0.5, 3)],
                    "3_4": [Hit("30#1", 1.0, 1)]})
    examples = list(examples_from_run(bench, run, n=2, split="dev", answerable_only=True))
    by_id = {e.id: e for e in examples}
    assert sorted(by_id) == ["3_2", "3_4", "3_5"]
    assert [p.id for p in by_id["3_2"].passages] == ["40#0", "10#0"]
    assert by_id["3_5"].passages == []  # not in the run: answered from the question alone
    assert len(by_id["3_4"].history) == 3 and by_id["3_4"].answers
    write_examples(tmp_path / "fid.jsonl", examples)
    again = load_examples(tmp_path / "fid.jsonl")
    assert [e.to_dict() for e in again] == [e.to_dict() for e in examples]


def test_unknown_passage_is_a_clear_error(bench, tmp_path):  # noqa: F811
    run = tmp_path / "run.jsonl"
    write_run(run, {"3_2": [Hit("elsewhere#9", 1.0, 1)]})
    with pytest.raises(DataError, match="elsewhere#9"):
        list(examples_from_run(bench, run, n=5, split="dev"))
