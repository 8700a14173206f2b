"""convqa/front/tools/phrase_dense_prior.py: the dense passage prior at each weight, summed with BM25's
at its own (the prior itself: tests/test_phrase_dense_side.py)."""
from __future__ import annotations

from importlib import import_module

import numpy as np

from phrase_index.dense_prior import scaled_prior
from phrase_index.search import PassagePrior


def test_the_dense_prior_adds_its_passages_and_weighted_scores_to_bm25s():
    script = import_module("convqa.front.tools.phrase_dense_prior")
    sparse = PassagePrior(np.array([1, 2]), lambda rows: rows.astype(np.float32) / 10)
    dense = scaled_prior(np.array([2, 5, 9]), np.array([3.0, 2.0, 1.0]), weight=1.0)
    prior = script.combined(sparse, dense, sparse_weight=8.0, dense_weight=4.0)
    assert prior.rows.tolist() == [1, 2, 5, 9]
    np.testing.assert_allclose(prior.scores(np.array([1, 2, 5, 9])),
                               [0.8, 1.6 + 4.0, 4.0 + 2.0, 7.2], rtol=1e-6)
    off = script.combined(sparse, dense, sparse_weight=8.0, dense_weight=0.0)
    assert off.rows.tolist() == [1, 2]
    np.testing.assert_allclose(off.scores(np.array([1, 2])), [0.8, 1.6], rtol=1e-6)


class _Index:
    def __init__(self):
        self.asked = []

    def search(self, vectors, k):
        self.asked.append((vectors.shape, k))
        return np.zeros((len(vectors), k)), np.zeros((len(vectors), k), dtype=np.int64)


class _Retriever:
    def __init__(self):
        self.index, self.encoded = _Index(), []

    def encode_queries(self, texts):
        self.encoded.append(list(texts))
        return np.ones((len(texts), 4), dtype=np.float32)


class _Prior:
    passages = 3

    def __init__(self):
        self.retriever, self.warmed = _Retriever(), []

    def priors(self, texts):
        self.warmed.append(list(texts))


def test_bench_dense_side_times_each_turn_alone():
    script = import_module("convqa.front.tools.bench_dense_side")
    prior = _Prior()
    row = script.stage_ms(prior, ["a", "b", "c"])
    assert prior.warmed == [["a"]]
    assert prior.retriever.encoded == [["a"], ["b"], ["c"]]
    assert prior.retriever.index.asked == [((1, 4), 3)] * 3
    assert set(row) == {"encode_ms", "search_ms"} and min(row.values()) >= 0
