"""scripts/phrase_dense_prior.py: the dense passage prior's scaling and its sum with BM25's."""
from __future__ import annotations

import numpy as np
from script_helpers import load_script

from convqa.types import Hit
from phrase_index.search import PassagePrior


class _Retriever:
    def __init__(self, hits):
        self.hits, self.asked = hits, []

    def retrieve_batch(self, queries, k):
        self.asked.append((list(queries), k))
        return [self.hits[q][:k] for q in queries]


class _Store:
    def index(self, pid: str) -> int:
        return int(pid.removeprefix("p"))


def test_dense_scores_are_min_max_scaled_over_the_top_passages():
    script = load_script("phrase_dense_prior")
    retriever = _Retriever({"q": [Hit("p7", 30.0, 1), Hit("p2", 20.0, 2), Hit("p9", 10.0, 3)],
                            "tie": [Hit("p4", 5.0, 1)]})
    tables = script.dense_tables(retriever, _Store(), ["q", "tie"], passages=2)
    assert retriever.asked == [(["q", "tie"], 2)]
    rows, table = tables[0]
    assert rows.tolist() == [7, 2] and table == {7: 1.0, 2: 0.0}
    assert tables[1][1] == {4: 0.0}   # one passage: no spread, no bonus


def test_the_dense_prior_adds_its_passages_and_weighted_scores_to_bm25s():
    script = load_script("phrase_dense_prior")
    sparse = PassagePrior(np.array([1, 2]), lambda rows: rows.astype(np.float32) / 10)
    dense = (np.array([2, 5]), {2: 1.0, 5: 0.5})
    prior = script.combined(sparse, dense, sparse_weight=8.0, dense_weight=4.0)
    assert prior.rows.tolist() == [1, 2, 5]
    np.testing.assert_allclose(prior.scores(np.array([1, 2, 5])), [0.8, 1.6 + 4.0, 4.0 + 2.0],
                               rtol=1e-6)
    off = script.combined(sparse, dense, sparse_weight=8.0, dense_weight=0.0)
    assert off.rows.tolist() == [1, 2]
    np.testing.assert_allclose(off.scores(np.array([1, 2])), [0.8, 1.6], rtol=1e-6)
