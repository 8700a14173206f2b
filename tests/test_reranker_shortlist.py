"""retrievers/rerank/shortlist.py: which retriever hits a reranker rescores (`rescore_within`),
the Hits and pairs of each gap from one full rescoring, the gap the rule picks, and the tool
that reports them on benchmark turns."""
from __future__ import annotations

import json

import pytest

from convqa.errors import ConfigError
from reader_helpers import single_thread  # noqa: F401 (autouse fixture)
from reranker_helpers import rescore_gaps_args
from retrievers.rerank.shortlist import check_within, choose_gap, gap_scores, shortlist


def test_hits_far_below_the_best_are_left_out_but_the_first_are_kept():
    scores = [9.0, 8.9, 8.8, 5.0, 4.0, 3.0]
    assert shortlist(scores, None) == [0, 1, 2, 3, 4, 5]
    assert shortlist(scores, 1.0, at_least=1) == [0, 1, 2]
    assert shortlist(scores, 0.0, at_least=4) == [0, 1, 2, 3]
    assert shortlist(scores, 10.0) == [0, 1, 2, 3, 4, 5]
    # standardised: the same shortlist whatever the retriever's scale
    assert shortlist([100 * s for s in scores], 1.0, at_least=1) == [0, 1, 2]
    assert shortlist([5.0, 5.0, 5.0], 0.0, at_least=1) == [0, 1, 2]  # no spread: all tie
    assert shortlist([], 1.0) == []
    for bad in (-0.5, float("nan"), True, "1"):
        with pytest.raises(ValueError, match="rescore_within must be"):
            check_within(bad)
    assert check_within(2) == 2.0 and check_within(None) is None


def turn(order, relevant):
    """Six retrieved hits a..f with falling scores (a, b, c close; d, e, f far below)."""
    retrieved = list(zip("abcdef", [9.0, 8.9, 8.8, 5.0, 4.0, 3.0]))
    return retrieved, list(order), set(relevant)


def test_each_gaps_hits_come_from_the_full_ranking_without_the_hits_left_out():
    turns = [turn("dabcef", "a"),    # the reranker lifts a far hit over the answer
             turn("eabcdf", "e"),    # ... and there it was right
             turn("bacdef", "b")]
    scores = gap_scores(turns, gaps=(0.5, 5.0), at_least=1)
    assert scores[None] == {"hits@1": 2 / 3, "hits@5": 1.0, "pairs": 6.0}
    # gap 0.5 keeps a, b, c: the first turn gains, the second loses its answer entirely
    assert scores[0.5] == {"hits@1": 2 / 3, "hits@5": 2 / 3, "pairs": 3.0}
    assert scores[5.0] == scores[None]
    # the fewest pairs among the gaps that lose neither Hits@1 nor Hits@5 anywhere
    assert choose_gap([scores]) == 5.0
    kept_all = gap_scores([turns[0], turns[2]], gaps=(0.5, 5.0), at_least=1)
    assert choose_gap([kept_all]) == 0.5
    assert choose_gap([kept_all, scores]) == 5.0  # the other benchmark would lose at 0.5
    assert choose_gap([gap_scores(turns, gaps=(0.5,), at_least=1)]) is None
    with pytest.raises(ConfigError, match="not the retrieved ones"):
        gap_scores([turn("abc", "a")])
    with pytest.raises(ConfigError, match="no turns"):
        gap_scores([])


def test_the_tool_reports_every_gap_from_one_rescoring(tmp_path, capsys):
    from convqa.front.tools.rescore_gaps import main

    _, args = rescore_gaps_args(tmp_path)
    assert main(args) == 0
    report = json.loads((tmp_path / "r.json").read_text())
    scores = report["benchmarks"][0]["scores"]
    assert report["benchmarks"][0]["turns"] > 0 and scores["all"]["pairs"] <= 4
    assert scores["0.5"]["pairs"] <= scores["4"]["pairs"] <= scores["all"]["pairs"]
    gaps = {None if k == "all" else float(k): v for k, v in scores.items()}
    assert report["chosen"] == choose_gap([gaps])
    assert "H@1" in capsys.readouterr().out
    cached = sorted((tmp_path / "cache").glob("rerank-*.json"))
    stamps = [path.stat().st_mtime_ns for path in cached]
    assert len(cached) == 1 and main(args) == 0  # scored once: the second run reads the cache
    assert [path.stat().st_mtime_ns for path in cached] == stamps
    assert main(["--reranker", str(tmp_path / "reranker"), "--benchmark", str(tmp_path / "none"),
                 "--retriever", "bm25", "--quiet"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:")
