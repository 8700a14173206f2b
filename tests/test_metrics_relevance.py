"""QReCC span relevance: hand-computed cases near the 0.8 threshold, a brute-force oracle, the
official heuristic's quirks, and real SCAI-QReCC passages."""
from __future__ import annotations

import ast
import csv
import json
import random

import pytest

from conftest import shared_file
from convqa.errors import DataError
from convqa.metrics import (
    answer_tokens,
    best_span,
    evaluate_run,
    f1,
    qrels_from_spans,
    span_relevance,
)
from convqa.types import Passage

FOX = "Yesterday a quick brown fox jumped over it."
FIVE = "alpha beta gamma delta epsilon"


@pytest.mark.parametrize("method", ["exact", "qrecc"])
def test_clear_positive(method):
    # gold [quick brown fox jumps] (n=4); span "quick brown fox": c=3, w=3 -> P=1, R=3/4,
    # F1 = 2 * 0.75 / 1.75 = 6/7 = 0.857 >= 0.8
    assert span_relevance(FOX, "the quick brown fox jumps", method=method)
    span, score = best_span(FOX, "the quick brown fox jumps", method=method)
    assert span == "quick brown fox" and score == pytest.approx(6 / 7)


@pytest.mark.parametrize("method", ["exact", "qrecc"])
def test_exactly_at_threshold(method):
    # gold n=5; passage [alpha beta gamma zeta delta]: the whole passage has c=4, w=5 ->
    # F1 = 8/10 = 0.8; shorter spans: "alpha beta gamma" 6/8, "alpha beta gamma zeta" 6/9
    passage = "alpha beta gamma zeta delta"
    assert best_span(passage, FIVE, method=method)[1] == pytest.approx(0.8)
    assert span_relevance(passage, FIVE, 0.8, method=method)
    assert not span_relevance(passage, FIVE, 0.81, method=method)


def test_just_below_threshold_and_a_span_the_heuristic_misses():
    # passage [alpha beta zeta gamma eta delta]: whole (c=4, w=6) -> 8/11 = 0.727 is the best;
    # "alpha beta zeta gamma" 6/9, "alpha beta" 4/7, "gamma eta delta" 4/8
    passage = "alpha beta zeta gamma eta delta"
    assert best_span(passage, FIVE, method="exact")[1] == pytest.approx(8 / 11)
    assert not span_relevance(passage, FIVE, 0.8, method="exact")
    assert span_relevance(passage, FIVE, 0.7, method="exact")
    # QReCC's heuristic only looks inside a 5-token window (n + int(0.05 n)): its best sub-span
    # is "alpha beta zeta gamma" (6/9) or, in the other window, 6/10 -> below 0.7
    assert best_span(passage, FIVE, method="qrecc")[1] <= 2 / 3 + 1e-12
    assert not span_relevance(passage, FIVE, 0.7, method="qrecc")


def test_heuristic_quirks():
    # character substring: "art" is inside "party" -> the official script says F1 = 1
    assert span_relevance("A party tonight.", "art", method="qrecc")
    assert not span_relevance("A party tonight.", "art", method="exact")
    # a passage shorter than the window (4 tokens < 5) gets no window: 0 under the heuristic,
    # while the exact search finds "alpha beta gamma delta": c=4, w=4 -> 8/9
    short = "alpha beta gamma delta"
    assert not span_relevance(short, FIVE, method="qrecc")
    assert best_span(short, FIVE, method="exact")[1] == pytest.approx(8 / 9)
    # an empty answer is never relevant; one that normalizes to nothing matches everywhere in the
    # official script (the empty string is a substring of any passage) but not in `exact`
    assert not span_relevance(FOX, "", method="qrecc")
    assert not span_relevance(FOX, "", method="exact")
    assert span_relevance(FOX, "The", method="qrecc")
    assert not span_relevance(FOX, "The", method="exact")


def _oracle_best(passage: str, answer: str, max_width: int | None = None) -> float:
    """Brute force: F1 (answer.f1 on the joined text) of every contiguous token window."""
    tokens = answer_tokens(passage)
    if not answer_tokens(answer):
        return 0.0
    widths = range(1, (max_width or len(tokens)) + 1)
    return max((f1(" ".join(tokens[i:i + w]), answer) for w in widths
                for i in range(len(tokens) - w + 1)), default=0.0)


def test_exact_search_matches_brute_force():
    rng = random.Random(7)
    vocab = "cat dog the a sat on mat red blue big ran far home park U.S. don't x-ray".split()
    for _ in range(300):
        answer = " ".join(rng.choice(vocab) for _ in range(rng.randint(1, 10)))
        words: list[str] = []
        for _ in range(rng.randint(0, 25)):
            if rng.random() < 0.3:
                words += answer.split()[rng.randint(0, 3):]
            else:
                words.append(rng.choice(vocab))
        passage = " ".join(words)
        oracle = _oracle_best(passage, answer)
        assert best_span(passage, answer, method="exact")[1] == pytest.approx(oracle, abs=1e-12)
        for threshold in (0.5, 0.8, 1.0):
            relevant = span_relevance(passage, answer, threshold, method="exact")
            assert relevant == (oracle >= threshold)


def test_qrels_from_spans():
    run = {"1_1": ["p1", "p2", "p3"], "1_2": ["p2", "p1"], "1_3": ["p1"], "2_1": ["p3"]}
    passages = {"p1": Passage("p1", FOX), "p2": "Nothing to see here.",
                "p3": Passage("p3", "alpha beta gamma zeta delta")}
    answers = {"1_1": "the quick brown fox jumps", "1_2": "",
               "1_3": ["nothing", "quick brown fox"], "9_9": "x"}
    qrels = qrels_from_spans(run, passages, answers, method="exact")
    # 1_1: p1 holds "quick brown fox" (6/7); p2 and p3 share no token with the answer
    # 1_2: empty answer -> judged, none relevant; 1_3: the second answer is verbatim in p1
    # 2_1 has no answer and 9_9 no run: not judged
    assert qrels == {"1_1": {"p1": 1, "p2": 0, "p3": 0}, "1_2": {"p2": 0, "p1": 0},
                     "1_3": {"p1": 1}}
    assert qrels_from_spans(run, passages, answers) == qrels  # qrecc heuristic agrees here
    assert qrels_from_spans(run, passages, answers, depth=1)["1_1"] == {"p1": 1}
    report = evaluate_run(run, qrels, ks=(1,), ndcg_ks=())
    # 1_1 and 1_3 have the relevant passage at rank 1; 1_2 is empty -> 1.0 dropped, 2/3 with it
    assert report.metrics["mrr"] == 1.0
    assert report.metrics_with_empty["mrr"] == pytest.approx(2 / 3)


def test_bad_relevance_input():
    with pytest.raises(DataError, match="field 'zzz': retrieved passage is not in the passage"):
        qrels_from_spans({"1_1": ["zzz"]}, {}, {"1_1": "x"})
    with pytest.raises(DataError, match="field '1_1': answer must be a string or a list"):
        qrels_from_spans({"1_1": ["p"]}, {"p": "x"}, {"1_1": 5})
    with pytest.raises(DataError, match="field 'p': passage must be a Passage"):
        qrels_from_spans({"1_1": ["p"]}, {"p": 3}, {"1_1": "x"})
    with pytest.raises(DataError, match="threshold"):
        span_relevance(FOX, "fox", threshold=0.0)
    with pytest.raises(DataError, match="unknown span method"):
        span_relevance(FOX, "fox", method="fuzzy")


def test_real_scai_passages():
    """SCAI-QReCC-21 pooled passages: 1_10's gold answer is verbatim in the passage that QReCC's
    test qrels name as its gold (…/pa-vs-np/_p0); 17_3's answer is verbatim in its first
    passage."""
    gold = {r["id"]: r["gt"] for r in
            csv.DictReader(shared_file("qrecc/qa_batch1.csv").open(encoding="utf-8"))}
    with shared_file("qrecc/batch1-top1.csv").open(encoding="utf-8") as handle:
        rows = {f"{r['conversation_no']}_{r['turn_no']}": r for r in csv.DictReader(handle)}
    qrels_path = shared_file("qrecc/qrecc_test_qrels_binary.json")
    qrels = json.loads(qrels_path.read_text(encoding="utf-8"))
    lookup: dict[str, str] = {}
    run: dict[str, list[str]] = {}
    for qid in ("1_10", "17_3"):
        ids = ast.literal_eval(rows[qid]["passage_ids"])
        lookup.update(zip(ids, ast.literal_eval(rows[qid]["passages"])))
        run[qid] = ids
    for method in ("exact", "qrecc"):
        judged = qrels_from_spans(run, lookup, {q: gold[q] for q in run}, method=method)
        for qid, labels in judged.items():
            verbatim = {pid for pid in labels if gold[qid] in lookup[pid]}
            assert verbatim and {pid for pid, rel in labels.items() if rel} >= verbatim
        assert judged["1_10"][next(iter(qrels["1_10"]))] == 1
    # the exact search agrees with brute force on these real passages (widths up to 2n suffice:
    # F1 >= 0.8 needs w <= 1.5n)
    answer = gold["1_10"]
    cap = 2 * len(answer_tokens(answer))
    for pid in run["1_10"]:
        oracle = _oracle_best(lookup[pid], answer, max_width=cap)
        assert span_relevance(lookup[pid], answer, method="exact") == (oracle >= 0.8)
