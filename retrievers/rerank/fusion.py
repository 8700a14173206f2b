"""How much of the retriever's opinion the reranker keeps: its final score of a passage is

    reranker logit + w * z,    z = the retriever's score standardised over the hits rescored

A cross-encoder trained on a few hundred steps can rank worse than a retriever trained with far
more compute (DPR-IHN on the vital collection) and better than a weak one (BM25 on the full
collection); one weight per retriever, chosen on *training* turns (`convqa train
reranker-fusion`, `choose_weight` here), keeps what each knows. Standardising makes the weight
independent of the retriever's scale (BM25's tens, a dense model's cosines). w = 0 is the
reranker alone; a large w keeps the retriever's order.

The weights live in the reranker's folder (`convqa_reranker.json`, "retriever_weights", read and
written by model.py `read_weights` / `write_weight`), keyed
by `retriever_key` of the retriever spec they were chosen after, so a pipeline or an eval row
that names the model and its retriever fuses as calibrated; a retriever without a weight gets
w = 0; the reranker's `retriever_weight` option overrides.
"""
from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Sequence

from convqa.errors import ConfigError, ConvQAError
from convqa.types import RerankedHit

# the weights `choose_weight` tries (0: the reranker alone)
WEIGHTS = (0.0, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0)
WEIGHTS_KEY = "retriever_weights"


def retriever_key(spec: Any) -> str | None:
    """What a weight is chosen for: the retriever's registry name, with its model when it has
    one (`bm25`, `dense:convqa-dpr-ihn`); a spec that names no model but an index that records
    its encoder (a dense index) has that encoder, so `{name: dense, index: DIR}` and
    `{name: dense, model: convqa-dpr-ihn, index: DIR}` share a weight. None for a retriever
    given built."""
    if isinstance(spec, str):
        return spec
    if isinstance(spec, Mapping) and isinstance(spec.get("name"), str):
        model = spec.get("model") or recorded_encoder(spec.get("index"))
        return f"{spec['name']}:{model}" if isinstance(model, str) and model else spec["name"]
    name = getattr(spec, "name", None)
    if isinstance(name, str):
        options = getattr(spec, "options", None) or {}
        return retriever_key({"name": name, **dict(options)})
    return None


def recorded_encoder(index: Any) -> str | None:
    """The encoder a dense index folder records (`DenseIndex.read_meta`), None for anything
    else (no folder, another kind of index, a damaged one: building it says why)."""
    from pathlib import Path

    from retrievers.dense.index import DenseIndex

    if not isinstance(index, (str, Path)) or not index or not Path(index).is_dir():
        return None
    try:
        encoder = DenseIndex.read_meta(index).get("encoder")
    except ConvQAError:
        return None
    return encoder if isinstance(encoder, str) and encoder else None


def standardised(scores: Sequence[float]) -> list[float]:
    """(score - mean) / standard deviation over `scores`; all zero when they do not vary."""
    return standardised_against(scores, scores)


def standardised_against(scores: Sequence[float], population: Sequence[float]) -> list[float]:
    """`scores` standardised with the mean and standard deviation of `population` (all zero
    when it does not vary)."""
    if not population:
        return [0.0] * len(scores)
    mean = sum(population) / len(population)
    spread = math.sqrt(sum((s - mean) ** 2 for s in population) / len(population))
    return [0.0 if spread == 0 else (s - mean) / spread for s in scores]


def fuse(hits: Sequence[RerankedHit], weight: float,
         population: Sequence[float] | None = None) -> list[RerankedHit]:
    """The reranked hits reordered by logit + weight * standardised retriever score (their new
    `score`), best first; ties keep the retriever's order. weight 0 returns them unchanged.
    `population`: the retriever scores to standardise against (default: the hits' own), so
    that hits left out of rescoring do not move the others' scores."""
    if not weight or not hits:
        return list(hits)
    scores = [hit.retriever_score for hit in hits]
    z = standardised_against(scores, scores if population is None else population)
    fused = [(hit.score + weight * zi, hit) for hit, zi in zip(hits, z)]
    fused.sort(key=lambda pair: (-pair[0], pair[1].retriever_rank))
    return [RerankedHit(hit.passage_id, score, rank, hit.retriever_score, hit.retriever_rank)
            for rank, (score, hit) in enumerate(fused, start=1)]


def is_weight(value: Any) -> bool:
    """A retriever weight: a finite number >= 0 (not a bool)."""
    return (not isinstance(value, bool) and isinstance(value, (int, float))
            and math.isfinite(value) and value >= 0)


def weight_scores(turns: Iterable[tuple[Sequence[RerankedHit], set[str]]],
                  weights: Sequence[float] = WEIGHTS) -> dict[float, dict[str, float]]:
    """For each weight, the mean reciprocal rank and Hits@1 of the answer passages (`turns`:
    each turn's reranked hits and its relevant passage ids) after fusing."""
    from convqa.metrics.retrieval import hits_at_k, reciprocal_rank

    turns = [(list(hits), relevant) for hits, relevant in turns]
    if not turns:
        raise ConfigError("no turns to choose the retriever weight on")
    out = {}
    for weight in weights:
        rankings = [([h.passage_id for h in fuse(hits, weight)], relevant)
                    for hits, relevant in turns]
        out[float(weight)] = {
            "mrr": sum(reciprocal_rank(r, rel) for r, rel in rankings) / len(rankings),
            "hits@1": sum(hits_at_k(r, rel, 1) for r, rel in rankings) / len(rankings)}
    return out


def choose_weight(scores: Mapping[float, Mapping[str, float]]) -> float:
    """The weight of the best MRR; on a tie the smallest (closest to the reranker alone)."""
    return min(scores, key=lambda w: (-round(scores[w]["mrr"], 9), w))


def numbers_from_block(block: Any, where: Any, block_key: str, field: str) -> dict[str, float]:
    """{key: number} of a folder's block of entries (`{key: {field: number, ...}}`, or bare
    numbers), each a number >= 0, checked: a bad entry names the file and the entry."""
    if not isinstance(block, Mapping):
        raise ConfigError(f"{where}: '{block_key}' must be a mapping")
    out = {}
    for key, entry in block.items():
        value = entry.get(field) if isinstance(entry, Mapping) else entry
        if not is_weight(value):
            raise ConfigError(f"{where}: '{block_key}.{key}.{field}' must be a number >= 0, "
                              f"got {value!r}")
        out[str(key)] = float(value)
    return out


def weights_from_block(block: Any, where: Any) -> dict[str, float]:
    """{retriever key: weight} of a folder's block, checked (a bad entry names the file)."""
    return numbers_from_block(block, where, WEIGHTS_KEY, "weight")
