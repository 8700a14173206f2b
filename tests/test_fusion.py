"""Reciprocal-rank fusion: scores worked out by hand, tie order, weights, the registered `rrf`
retriever over two real BM25 indexes, whole-run fusion, bad configs."""
from __future__ import annotations

import pytest

from convqa.errors import ConfigError
from convqa.specs import build_retriever
from convqa.types import Hit, Passage
from retrievers.base import Retriever
from retrievers.bm25 import BM25Config, BM25Retriever
from retrievers.fusion import RRFRetriever, fuse_runs, reciprocal_rank_fusion


def ranking(*ids: str) -> list[Hit]:
    return [Hit(pid, 100.0 - rank, rank) for rank, pid in enumerate(ids, start=1)]


def test_hand_computed_fusion():
    # A = x y z, B = y w x, k = 60:
    #   y: 1/62 + 1/61 = 0.0325224    x: 1/61 + 1/63 = 0.0322664
    #   w: 1/62        = 0.0161290    z: 1/63        = 0.0158730
    fused = reciprocal_rank_fusion([ranking("x", "y", "z"), ranking("y", "w", "x")])
    assert [(h.passage_id, h.rank) for h in fused] == [("y", 1), ("x", 2), ("w", 3), ("z", 4)]
    assert [h.score for h in fused] == pytest.approx(
        [1 / 62 + 1 / 61, 1 / 61 + 1 / 63, 1 / 62, 1 / 63])
    # k = 0: y = 1/2 + 1 = 1.5, x = 1 + 1/3 = 1.333, w = 1/2, z = 1/3.
    fused0 = reciprocal_rank_fusion([ranking("x", "y", "z"), ranking("y", "w", "x")], k=0)
    assert [h.passage_id for h in fused0] == ["y", "x", "w", "z"]
    assert fused0[0].score == pytest.approx(1.5) and fused0[1].score == pytest.approx(4 / 3)
    assert [h.passage_id for h in reciprocal_rank_fusion(
        [ranking("x", "y", "z"), ranking("y", "w", "x")], top=2)] == ["y", "x"]


def test_weights_scores_are_ignored_and_ties_are_ordered():
    # Weight 3 on B: y = 1/62 + 3/61 = 0.0653, x = 1/61 + 3/63 = 0.0640, w = 3/62 = 0.0484,
    # z = 1/63 = 0.0159.
    fused = reciprocal_rank_fusion([ranking("x", "y", "z"), ranking("y", "w", "x")],
                                   weights=[1, 3])
    assert [h.passage_id for h in fused] == ["y", "x", "w", "z"]
    assert fused[2].score == pytest.approx(3 / 62)
    # Only ranks count: scores a billion times larger change nothing.
    loud = [Hit("x", 1e9, 1), Hit("y", 1e8, 2), Hit("z", 1e7, 3)]
    quiet = [Hit("x", 0.3, 1), Hit("y", 0.2, 2), Hit("z", 0.1, 3)]
    assert (reciprocal_rank_fusion([loud, ranking("y", "w", "x")])
            == reciprocal_rank_fusion([quiet, ranking("y", "w", "x")]))
    # Equal fused scores: the better best rank first, then the passage id.
    tied = reciprocal_rank_fusion([ranking("q", "p"), ranking("p", "q")])
    assert [h.passage_id for h in tied] == ["p", "q"]  # both 1/61 + 1/62, both best rank 1
    # A passage listed twice in one ranking counts once, at its first rank.
    dup = reciprocal_rank_fusion([[Hit("a", 1, 1), Hit("a", 1, 2)], ranking("b")])
    assert [h.score for h in dup] == pytest.approx([1 / 61, 1 / 61])
    assert reciprocal_rank_fusion([[], []]) == []


def test_fuse_runs_query_by_query():
    runs = [{"1_1": ranking("a", "b"), "1_2": ranking("c")}, {"1_1": ranking("b")}]
    fused = fuse_runs(runs)
    assert list(fused) == ["1_1", "1_2"]
    assert [h.passage_id for h in fused["1_1"]] == ["b", "a"]  # b: 1/62 + 1/61 > a: 1/61
    assert [(h.passage_id, h.score) for h in fused["1_2"]] == [("c", pytest.approx(1 / 61))]


PASSAGES = [Passage("a", "apple banana"), Passage("b", "banana cherry cherry"),
            Passage("c", "durian banana banana banana"), Passage("d", "elderberry")]


def test_registered_rrf_over_two_bm25_indexes(tmp_path):
    for name, preset in (("one", "default"), ("two", "qrecc")):
        BM25Retriever.build(PASSAGES, BM25Config(preset=preset)).save(tmp_path / name)
    subs = [{"name": "bm25", "index": str(tmp_path / n), "backend": "numpy"}
            for n in ("one", "two")]
    fused = build_retriever({"name": "rrf", "retrievers": subs})
    assert isinstance(fused, RRFRetriever) and fused.k == 60
    queries = ["banana cherry", "elderberry", "nothing"]
    each = [build_retriever(s).retrieve_batch(queries, 100) for s in subs]
    got = fused.retrieve_batch(queries, 2)
    for i in range(len(queries)):
        assert got[i] == reciprocal_rank_fusion([each[0][i], each[1][i]], top=2)
    assert [h.passage_id for h in got[1]] == ["d"] and got[2] == []
    # The fingerprint follows the sub-indexes and the fusion settings.
    again = build_retriever({"name": "rrf", "retrievers": subs})
    assert again.fingerprint() == fused.fingerprint()
    assert build_retriever({"name": "rrf", "retrievers": subs, "k": 10}).fingerprint() \
        != fused.fingerprint()


class Fixed(Retriever):
    def __init__(self, ids):
        self.ids = ids
        self.asked: list[int] = []

    def retrieve_batch(self, queries, k=10):
        self.asked.append(k)
        return [ranking(*self.ids[:k]) for _ in queries]


def test_depth_and_bad_configs():
    one, two = Fixed(list("abcdef")), Fixed(list("fedcba"))
    fused = RRFRetriever([one, two], depth=4)
    assert len(fused.retrieve("q", k=2)) == 2 and one.asked == [4]  # depth >= k asked
    fused.retrieve("q", k=6)
    assert one.asked[-1] == 6
    with pytest.raises(ConfigError, match="at least two retrievers"):
        RRFRetriever([one])
    with pytest.raises(ConfigError, match="2 weights for 3 retrievers"):
        RRFRetriever([one, two, one], weights=[1, 2])
    with pytest.raises(ConfigError, match="k must be a number >= 0"):
        RRFRetriever([one, two], k=-1)
    with pytest.raises(ConfigError, match="at least two retriever specs"):
        build_retriever({"name": "rrf", "retrievers": [{"name": "bm25", "index": "x"}]})
    with pytest.raises(ConfigError, match="unknown retriever 'telepathy'"):
        build_retriever({"name": "rrf", "retrievers": ["telepathy", "bm25"]})
    with pytest.raises(ConfigError, match="unknown option 'kk'"):
        build_retriever({"name": "rrf", "kk": 3})
