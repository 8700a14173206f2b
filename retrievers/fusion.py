"""Reciprocal-rank fusion (Cormack et al., 2009): combine rankings by 1/(k + rank) per list.

A passage's fused score is `sum_i w_i / (k + rank_i)` over the lists it appears in (rank
1-based; a list it is absent from adds nothing); k=60 by default, as in the paper. RRF needs no
score calibration, so BM25 and dense scores of different scales fuse without tuning.

Ties (equal fused scores) are broken by the best rank in any list, then by passage id, so the
output never depends on dictionary order.

    >>> from convqa.types import Hit
    >>> bm25 = [Hit("a", 12.0, 1), Hit("b", 9.5, 2)]
    >>> dense = [Hit("b", 0.81, 1), Hit("c", 0.77, 2)]
    >>> [(hit.passage_id, round(hit.score, 4)) for hit in reciprocal_rank_fusion([bm25, dense])]
    [('b', 0.0325), ('a', 0.0164), ('c', 0.0161)]

As a retriever:

    retriever = RETRIEVERS.build({"name": "rrf", "retrievers": [
        {"name": "bm25", "index": "idx/bm25"}, {"name": "dense", "index": "idx/dense"}]})

`fuse_runs` fuses whole runs ({qid: hits}), e.g. BM25 on q_t with a dense retriever on X_t,
where each side was retrieved with its own history strategy.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from convqa.errors import ConfigError
from convqa.registry import RETRIEVERS
from convqa.types import Hit

from .base import Retriever

DEFAULT_K = 60


def reciprocal_rank_fusion(rankings: Sequence[Sequence[Hit]], k: float = DEFAULT_K,
                           weights: Sequence[float] | None = None,
                           top: int | None = None) -> list[Hit]:
    """Fuse ranked lists of one query into one, best first (score = fused RRF score)."""
    _check_k(k)
    if weights is None:
        weights = [1.0] * len(rankings)
    if len(weights) != len(rankings):
        raise ConfigError(f"rrf: {len(weights)} weights for {len(rankings)} rankings")
    scores: dict[str, float] = {}
    best: dict[str, int] = {}
    for ranking, weight in zip(rankings, weights):
        seen: set[str] = set()
        for hit in ranking:
            if hit.passage_id in seen:  # a list naming a passage twice counts it once
                continue
            seen.add(hit.passage_id)
            scores[hit.passage_id] = scores.get(hit.passage_id, 0.0) + weight / (k + hit.rank)
            best[hit.passage_id] = min(best.get(hit.passage_id, hit.rank), hit.rank)
    order = sorted(scores, key=lambda pid: (-scores[pid], best[pid], pid))
    if top is not None:
        order = order[:top]
    return [Hit(pid, scores[pid], rank) for rank, pid in enumerate(order, start=1)]


def fuse_runs(runs: Sequence[Mapping[str, Sequence[Hit]]], k: float = DEFAULT_K,
              weights: Sequence[float] | None = None,
              top: int | None = None) -> dict[str, list[Hit]]:
    """Fuse runs {qid: hits} query by query; a query missing from a run contributes nothing."""
    qids = list(dict.fromkeys(qid for run in runs for qid in run))
    return {qid: reciprocal_rank_fusion([run.get(qid, []) for run in runs], k, weights, top)
            for qid in qids}


@dataclass
class RRFConfig:
    retrievers: list[Any] = field(default_factory=list)  # specs: "name" or {"name": ..., ...}
    k: float = DEFAULT_K                                  # the RRF constant
    weights: list[float] | None = None                    # one per retriever; default all 1
    depth: int = 100  # hits taken from each retriever (at least the k asked for)


@RETRIEVERS.register("rrf", config=RRFConfig)
class RRFRetriever(Retriever):
    """Retrieves with every sub-retriever, then fuses their rankings."""

    def __init__(self, retrievers: Sequence[Retriever], k: float = DEFAULT_K,
                 weights: Sequence[float] | None = None, depth: int = 100,
                 specs: Sequence[Any] | None = None):
        if len(retrievers) < 2:
            raise ConfigError(f"rrf: needs at least two retrievers, got {len(retrievers)}")
        _check_k(k)
        if weights is not None and len(weights) != len(retrievers):
            raise ConfigError(f"rrf: {len(weights)} weights for {len(retrievers)} retrievers")
        if depth < 1:
            raise ConfigError(f"rrf: depth must be at least 1, got {depth}")
        self.retrievers = list(retrievers)
        self.k = k
        self.weights = list(weights) if weights is not None else None
        self.depth = depth
        self.specs = list(specs) if specs is not None else None

    @classmethod
    def from_config(cls, config: RRFConfig) -> "RRFRetriever":
        if len(config.retrievers) < 2:
            raise ConfigError("rrf: option 'retrievers' needs at least two retriever specs, got "
                              f"{len(config.retrievers)}")
        built = [RETRIEVERS.build(spec) for spec in config.retrievers]
        return cls(built, config.k, config.weights, config.depth, config.retrievers)

    def retrieve_batch(self, queries: Sequence[str], k: int = 10) -> list[list[Hit]]:
        if k < 1:
            raise ConfigError(f"rrf: k must be at least 1, got {k}")
        depth = max(k, self.depth)
        per_retriever = [r.retrieve_batch(queries, depth) for r in self.retrievers]
        return [reciprocal_rank_fusion([hits[i] for hits in per_retriever], self.k,
                                       self.weights, top=k)
                for i in range(len(queries))]

    def fingerprint(self) -> str:
        """Hash of the fusion settings and of each sub-retriever's fingerprint (or spec)."""
        parts = []
        for index, retriever in enumerate(self.retrievers):
            fingerprint = getattr(retriever, "fingerprint", None)
            if callable(fingerprint):
                parts.append(fingerprint())
            else:
                parts.append(self.specs[index] if self.specs else type(retriever).__name__)
        data = json.dumps({"k": self.k, "weights": self.weights, "depth": self.depth,
                           "parts": parts}, sort_keys=True, default=str)
        return "sha256:" + hashlib.sha256(data.encode()).hexdigest()


def _check_k(k: float) -> None:
    if isinstance(k, bool) or not isinstance(k, (int, float)) or k < 0:
        raise ConfigError(f"rrf: k must be a number >= 0, got {k!r}")
