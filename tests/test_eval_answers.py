"""End-to-end evaluation (retrieve, read, score) on the tiny benchmark of tests/fixtures.

Dev split = conversation 3 (see test_eval_retrieval.py); its answer-evaluable turns and where
the Scripted retriever (question_only history) ranks their answer passage:
    3_2 no-switch  answer passage 40#0 at rank 1
    3_4 switch     answer passage 30#0 at rank 3
    3_5 switch     answer passage 40#0 not retrieved
An oracle reader answers with the gold answer when an answer passage is among the passages it
is given, so EM at k is the share of turns with an answer passage in the top k, worked by hand:
k=1 1/3, k=5 2/3, k=20 2/3 (no-switch 1/1; switch 0/2, 1/2, 1/2).
"""
from __future__ import annotations

import pytest

from convqa.benchmark import load_labelled_turns
from convqa.errors import ConfigError, DataError
from convqa.front.evaluation.answers import evaluate_answers
from convqa.types import Answer

from test_eval_retrieval import RANKINGS, bench  # noqa: F401  (the fixture)
from test_eval_retrieval import Scripted as RetrievalScripted


class Scripted(RetrievalScripted):
    """The retrieval test's rankings, but only passages of the benchmark's store."""

    rankings = dict(RANKINGS, **{"back to apples: where do they grow?": ["10#0", "20#0"]})

    def retrieve_batch(self, queries, k=10):
        from convqa.types import Hit

        return [[Hit(pid, 1.0 / rank, rank) for rank, pid in
                 enumerate(self.rankings.get(q, [])[:k], start=1)] for q in queries]

    def fingerprint(self) -> str:
        return "scripted-answers-v1"


class Elsewhere(Scripted):
    rankings = {q: ["nowhere#0"] for q in RANKINGS}

    def fingerprint(self) -> str:
        return "elsewhere-v1"


class Oracle:
    """Answers with the gold answer of the question if a given passage is an answer passage."""

    def __init__(self, bench_dir):
        turns = load_labelled_turns(bench_dir).turns
        self.gold = {t.question: (t.answers[0], set(t.answer_passage_ids)) for t in turns
                     if t.answer_evaluable}
        self.calls = 0

    def read(self, question, history, passages):
        self.calls += 1
        answer, pids = self.gold[question]
        for passage in passages:
            if passage.id in pids:
                return Answer(answer, 1.0, passage.id)
        return Answer("something else", 0.0, passages[0].id if passages else None)

    def fingerprint(self) -> str:
        return "oracle-v1"


def test_em_by_k_and_question_type(bench, tmp_path):  # noqa: F811
    oracle = Oracle(bench)
    result = evaluate_answers(bench, Scripted(), oracle, history="question_only",
                              top_ks=(1, 5, 20), cache_dir=tmp_path, progress=False)
    assert result["turns"] == 3 and oracle.calls == 9
    em = {k: result["by_k"][k]["groups"]["all"]["em"] for k in ("1", "5", "20")}
    assert em == pytest.approx({"1": 100 / 3, "5": 200 / 3, "20": 200 / 3})
    switch = {k: result["by_k"][k]["groups"]["switch"] for k in ("1", "5", "20")}
    assert [switch[k]["em"] for k in ("1", "5", "20")] == [0.0, 50.0, 50.0]
    assert switch["5"]["count"] == 2
    assert result["by_k"]["1"]["groups"]["no-switch"]["em"] == 100.0
    # F1 of a wrong answer is 0 here (no shared tokens), of a right one 100
    assert result["by_k"]["5"]["groups"]["all"]["f1"] == pytest.approx(200 / 3)
    assert result["by_k"]["1"]["reader_ms"]["p50"] >= 0.0


def test_reader_without_fingerprint_is_not_cached_and_bad_k(bench, tmp_path):  # noqa: F811
    oracle = Oracle(bench)
    oracle.fingerprint = None
    first = evaluate_answers(bench, Scripted(), oracle, history="question_only", top_ks=(5,),
                             cache_dir=tmp_path, progress=False)
    assert first["by_k"]["5"]["predictions"] is None and oracle.calls == 3
    with pytest.raises(ConfigError, match="top_ks"):
        evaluate_answers(bench, Scripted(), oracle, history="question_only", top_ks=(0,),
                         cache_dir=tmp_path, progress=False)


def test_predictions_are_cached_for_a_reader_spec(bench, tmp_path, monkeypatch):  # noqa: F811
    from convqa.registry import READERS

    made = []

    def build(spec):
        made.append(Oracle(bench))
        return made[-1]

    monkeypatch.setattr(READERS, "build", build)
    spec = {"name": "oracle"}
    one = evaluate_answers(bench, Scripted(), spec, history="question_only", top_ks=(5,),
                           cache_dir=tmp_path, progress=False)
    two = evaluate_answers(bench, Scripted(), spec, history="question_only", top_ks=(5,),
                           cache_dir=tmp_path, progress=False)
    assert not one["by_k"]["5"]["cached"] and two["by_k"]["5"]["cached"]
    assert made[0].calls == 3 and made[1].calls == 0
    assert two["by_k"]["5"]["groups"] == one["by_k"]["5"]["groups"]


def test_a_run_of_another_corpus_is_a_clear_error(bench, tmp_path):  # noqa: F811
    with pytest.raises(DataError, match="'nowhere#0' of the run is not in the benchmark"):
        evaluate_answers(bench, Elsewhere(), Oracle(bench), history="question_only",
                         top_ks=(1,), cache_dir=tmp_path, progress=False)
