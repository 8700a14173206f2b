"""Retrieval metrics on hand-computed rankings (arithmetic in the comments) and on QReCC qrels."""
from __future__ import annotations

import ast
import csv
import json
import math

import pytest

from conftest import shared_file
from convqa.errors import DataError
from convqa.metrics import (
    evaluate_run,
    hits_at_k,
    ndcg_at_k,
    ranked_ids,
    recall_at_k,
    reciprocal_rank,
)
from convqa.types import Hit

QRELS = {
    "q1": {"a": 1, "b": 1, "c": 1},  # three relevant; c is never retrieved
    "q2": {"x": 1},
    "q3": {"z": 0},                  # judged, nothing relevant -> an "empty" query
    "q4": {"m": 1},                  # not in the run
}
RUN = {
    "q1": ["n1", "a", "n2", "b", "n3"],                                    # relevant at 2, 4
    "q2": [Hit("n1", 3.0, 1), Hit("n2", 2.0, 2), Hit("x", 1.0, 3)],        # relevant at 3
    "q3": ["z", "y"],
    "q5": ["a"],                                                           # not evaluated
}


def test_per_query_values():
    report = evaluate_run(RUN, QRELS, ks=(1, 3, 10), ndcg_ks=())
    q1, q2 = report.per_query["q1"], report.per_query["q2"]
    # q1: first relevant at rank 2 -> RR 1/2; top1 none; top3 {a} -> 1/3; top10 (> 5 retrieved)
    #     {a, b} -> 2/3; hits 0, 1, 1
    assert q1 == pytest.approx({"mrr": 0.5, "recall@1": 0.0, "hits@1": 0.0, "recall@3": 1 / 3,
                                "hits@3": 1.0, "recall@10": 2 / 3, "hits@10": 1.0})
    # q2: rank 3 -> RR 1/3; recall = hits = 0, 1, 1
    assert q2 == pytest.approx({"mrr": 1 / 3, "recall@1": 0.0, "hits@1": 0.0, "recall@3": 1.0,
                                "hits@3": 1.0, "recall@10": 1.0, "hits@10": 1.0})
    assert set(report.per_query["q3"].values()) == {0.0}
    assert set(report.per_query["q4"].values()) == {0.0}


def test_averages_with_and_without_empty_queries():
    report = evaluate_run(RUN, QRELS, ks=(1, 3, 10), ndcg_ks=())
    counts = (report.num_queries, report.num_empty, report.num_missing, report.ignored)
    assert counts == (3, 1, 1, 1)
    assert report.empty == ["q3"] and report.missing == ["q4"]
    # dropped: q1, q2, q4 (q4 missing from the run counts as 0)
    #   mrr = (1/2 + 1/3 + 0) / 3 = 5/18; recall@3 = (1/3 + 1 + 0) / 3 = 4/9
    #   recall@10 = (2/3 + 1 + 0) / 3 = 5/9; hits@3 = hits@10 = 2/3; @1 = 0
    assert report.metrics == pytest.approx({"mrr": 5 / 18, "recall@1": 0.0, "hits@1": 0.0,
                                            "recall@3": 4 / 9, "hits@3": 2 / 3,
                                            "recall@10": 5 / 9, "hits@10": 2 / 3})
    # counted as 0: q3 joins -> denominators 4: mrr = (5/6) / 4 = 5/24; recall@3 = (4/3)/4 = 1/3
    #   recall@10 = (5/3) / 4 = 5/12; hits@3 = hits@10 = 2/4
    assert report.metrics_with_empty == pytest.approx({"mrr": 5 / 24, "recall@1": 0.0,
                                                       "hits@1": 0.0, "recall@3": 1 / 3,
                                                       "hits@3": 0.5, "recall@10": 5 / 12,
                                                       "hits@10": 0.5})
    assert report.summary(include_empty=True) == report.metrics_with_empty
    summary = report.to_dict()
    assert summary["num_empty"] == 1 and "per_query" not in summary


def test_mrr_cutoff():
    report = evaluate_run(RUN, QRELS, ks=(), ndcg_ks=(), mrr_k=2)
    # q1 first relevant at rank 2 <= 2 -> 1/2; q2 at rank 3 > 2 -> 0; q4 0 -> (1/2) / 3 = 1/6
    assert report.metrics == pytest.approx({"mrr@2": 1 / 6})


def test_explicit_query_set():
    report = evaluate_run(RUN, QRELS, ks=(1,), ndcg_ks=(), queries=["q1", "q3", "q6"])
    # q6 has no qrels (empty) and no run entry (missing); q2, q4 are not evaluated; q2, q5 ignored
    assert report.empty == ["q3", "q6"] and report.missing == ["q6"] and report.ignored == 2
    # dropped: q1 only -> mrr 1/2; with empty: (1/2 + 0 + 0) / 3 = 1/6
    assert report.metrics["mrr"] == pytest.approx(0.5)
    assert report.metrics_with_empty["mrr"] == pytest.approx(1 / 6)


def test_ndcg_graded_trec_eval_style():
    grades = {"d1": 3, "d2": 2, "d3": 0, "d4": 1, "d5": 2}  # d5 never retrieved
    ranking = ["d3", "d1", "d4", "d2"]
    # DCG@3 = 0/log2(2) + 3/log2(3) + 1/log2(4); ideal gains 3, 2, 2 (then 1):
    # IDCG@3 = 3/log2(2) + 2/log2(3) + 2/log2(4) = 3 + 1.26186 + 1
    dcg3 = 3 / math.log2(3) + 1 / 2
    idcg3 = 3 + 2 / math.log2(3) + 2 / 2
    assert ndcg_at_k(ranking, grades, 3) == pytest.approx(dcg3 / idcg3)
    assert dcg3 / idcg3 == pytest.approx(0.45474, abs=1e-5)  # 2.39279 / 5.26186
    # k = 10 beyond the ranking: DCG adds d2 at rank 4 (2/log2(5)); ideal adds the 1 at rank 4
    dcg10 = dcg3 + 2 / math.log2(5)
    idcg10 = idcg3 + 1 / math.log2(5)
    assert ndcg_at_k(ranking, grades, 10) == pytest.approx(dcg10 / idcg10)
    assert ndcg_at_k(["d1", "d2", "d5", "d4"], grades, 4) == pytest.approx(1.0)  # ideal order
    assert ndcg_at_k(ranking, {"d1": 0, "d2": -1}, 3) == 0.0  # nothing relevant
    report = evaluate_run({"q": ranking}, {"q": grades}, ks=(), ndcg_ks=(3,))
    assert report.metrics["ndcg@3"] == pytest.approx(dcg3 / idcg3)


def test_single_query_functions():
    ranked = ["n", "a", "b"]
    assert reciprocal_rank(ranked, {"b"}) == pytest.approx(1 / 3)
    assert reciprocal_rank(ranked, {"b"}, k=2) == 0.0
    assert reciprocal_rank(ranked, set()) == 0.0
    assert recall_at_k(ranked, {"a", "z"}, 100) == 0.5       # 1 of 2 relevant, k > length
    assert recall_at_k(ranked, set(), 3) == 0.0
    assert hits_at_k(ranked, {"a"}, 1) == 0.0 and hits_at_k(ranked, {"a"}, 2) == 1.0


def test_duplicates_count_once_and_order_is_as_given():
    # ["a", "a", "x", "b"] -> ["a", "x", "b"]: top 2 holds a only -> recall@2 = 1/2
    # (counting the copy would give 2/2)
    assert ranked_ids(["a", "a", "x", "b"]) == ["a", "x", "b"]
    report = evaluate_run({"q": ["a", "a", "x", "b"]}, {"q": {"a": 1, "b": 1}}, ks=(2,), ndcg_ks=())
    assert report.metrics["recall@2"] == pytest.approx(0.5)
    # tied scores: the given order decides (b first -> RR 1), scores are not re-sorted
    hits = [Hit("b", 1.0, 1), Hit("a", 1.0, 2)]
    assert evaluate_run({"q": hits}, {"q": {"b": 1}}, ks=(), ndcg_ks=()).metrics["mrr"] == 1.0


@pytest.mark.parametrize("run, qrels, message", [
    ({"q": "abc"}, {"q": {"a": 1}}, "field 'q': a ranking must be a list"),
    ({"q": [Hit("a", 1.0, 2), Hit("b", 0.5, 1)]}, {"q": {"a": 1}}, "not in rank order"),
    ({"q": [1, 2]}, {"q": {"a": 1}}, "entries must be Hit or str"),
    ({"q": ["a"]}, {"q": ["a"]}, "qrels: field 'q': qrels of a query must map"),
    ({"q": ["a"]}, {"q": {"a": "1"}}, "must be passage id -> number"),
    ({1: ["a"]}, {"q": {"a": 1}}, "run: query ids must be strings"),
])
def test_bad_input(run, qrels, message):
    with pytest.raises(DataError) as err:
        evaluate_run(run, qrels)
    assert message in str(err.value)


def test_bad_cutoff():
    with pytest.raises(DataError, match="positive integers"):
        evaluate_run({}, {}, ks=(0,))
    with pytest.raises(DataError, match="positive integers"):
        evaluate_run({}, {}, mrr_k=-1)


def _read_json(relative: str):
    return json.loads(shared_file(relative).read_text(encoding="utf-8"))


def test_real_qrecc_qrels_both_conventions():
    """QReCC test qrels: conversation 1, turns 1-8 (the official-format sample lists which turns
    have gold passages: 2, 3, 7, 8; turns 1, 4, 5, 6 have none)."""
    qrels = _read_json("qrecc/qrecc_test_qrels_binary.json")
    sample = shared_file("qrecc/qrecc_test_conv1_turns1-8.jsonl").read_text(encoding="utf-8")
    turns = [json.loads(line) for line in sample.splitlines()]
    queries = [f"1_{t['Turn_no']}" for t in turns]
    # each query retrieves a wrong passage first, then its gold passages (from the jsonl)
    run = {f"1_{t['Turn_no']}": ["wrong"] + t["Passages"] for t in turns}
    report = evaluate_run(run, qrels, ks=(1, 10), ndcg_ks=(), queries=queries)
    assert report.empty == ["1_1", "1_4", "1_5", "1_6"]
    # 4 gold turns, each with its gold at rank 2: MRR 1/2, hits@1 0, hits@10 1
    assert report.metrics == pytest.approx({"mrr": 0.5, "recall@1": 0.0, "hits@1": 0.0,
                                            "recall@10": 1.0, "hits@10": 1.0})
    # with the 4 empty turns as 0: (4 * 1/2) / 8 = 1/4 and hits@10 = 4/8
    assert report.metrics_with_empty["mrr"] == pytest.approx(0.25)
    assert report.metrics_with_empty["hits@10"] == pytest.approx(0.5)
    assert report.ignored == 0


def test_real_qrecc_annotation_pool_as_ranking():
    """SCAI batch1-top1.csv lists 7 pooled passages for turn 1_10; its qrecc test gold
    (…physicianassistantedu.org/pa-vs-np/_p0) is the 6th -> RR 1/6, hits@5 0, hits@10 1."""
    qrels = _read_json("qrecc/qrecc_test_qrels_binary.json")
    with shared_file("qrecc/batch1-top1.csv").open(encoding="utf-8") as handle:
        row = next(r for r in csv.DictReader(handle)
                   if (r["conversation_no"], r["turn_no"]) == ("1", "10"))
    ids = ast.literal_eval(row["passage_ids"])
    report = evaluate_run({"1_10": ids}, {"1_10": qrels["1_10"]}, ks=(5, 10), ndcg_ks=())
    assert report.metrics == pytest.approx({"mrr": 1 / 6, "recall@5": 0.0, "hits@5": 0.0,
                                            "recall@10": 1.0, "hits@10": 1.0})
