"""Which hits a cross-encoder rescores, learned: a fixed number of pairs per turn, the hits most
likely to reach the reranker's best 5.

On a large collection a gap (shortlist.py) keeps the hits near the retriever's best and the
word matches (word_matches.py) add a few of the siblings it leaves out; both are rules. Here
three things every hit has are weighed by a logistic model fitted on training turns, of
whether the hit reaches the reranker's best `TARGET_RANK` when every hit is rescored:

    score_i = w_retriever * z_i + w_words * m_i + w_lead * lead_i

z_i the hit's retriever score and m_i its word match with the question (word_matches.py), each
standardised over the turn's top_n; lead_i is 1 for the first passage of its article (an id
`"{article}#0"`, as `convqa data` and `convqa index` number an article's passages; 0 for
other ids). A turn rescores its first `at_least` hits and the `pairs - at_least` others that
score best (the reranker's `rescore_pairs` option), so its cost is the same on every turn.

The weights are recorded in the reranker's folder ("shortlist_weights" in convqa_reranker.json)
for the retriever they were fitted behind (`fusion.retriever_key`), by
`python -m convqa.front.tools.rescore_gaps --learn --write`.

    >>> features = hit_features([9.0, 8.0, 7.0, 6.0], [0.0, 0.0, 3.0, 0.0],
    ...                         ["a#3", "a#1", "a#2", "b#0"])
    >>> learned_shortlist(features, {"retriever": 1.0, "words": 1.0, "lead": 2.0}, 3, 1)
    [0, 2, 3]
"""
from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from convqa.errors import ConfigError

from .fusion import standardised

FEATURES = ("retriever", "words", "lead")
SHORTLIST_KEY = "shortlist_weights"
TARGET_RANK = 5  # what a hit must reach in the reranker's order to count as worth rescoring
L2 = 1.0         # the fit's ridge penalty (features are standardised; it only steadies them)


def is_lead(passage_id: str) -> bool:
    """Whether `passage_id` names the first passage of its article (`"{article}#0"`)."""
    _, sep, number = passage_id.rpartition("#")
    return bool(sep) and number == "0"


def hit_features(retriever_scores: Sequence[float], match_scores: Sequence[float],
                 passage_ids: Sequence[str]) -> np.ndarray:
    """[hits, len(FEATURES)]: each hit's standardised retriever score, standardised word
    match, and whether it leads its article."""
    if not len(retriever_scores) == len(match_scores) == len(passage_ids):
        raise ConfigError(f"{len(retriever_scores)} retriever scores, {len(match_scores)} word "
                          f"matches and {len(passage_ids)} passage ids: one each per hit")
    return np.array([standardised([float(s) for s in retriever_scores]),
                     standardised([float(s) for s in match_scores]),
                     [float(is_lead(pid)) for pid in passage_ids]], dtype=float).T


def learned_shortlist(features: np.ndarray, weights: Mapping[str, float], pairs: int,
                      at_least: int) -> list[int]:
    """Indices (in the given order) of the hits to rescore: the first `at_least` and the
    `pairs - at_least` others with the best weighted features (ties: the earlier hit)."""
    vector = np.array([float(weights[name]) for name in FEATURES])
    scores = features @ vector
    first = list(range(min(at_least, len(scores))))
    others = sorted(range(len(first), len(scores)), key=lambda i: (-scores[i], i))
    return sorted(first + others[:max(pairs - len(first), 0)])


def training_rows(turns: Iterable[Sequence[Any]], at_least: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """(features, labels) of the hits after each turn's first `at_least`, a label telling
    whether the hit is in the reranker's best `TARGET_RANK`. `turns`: as
    shortlist.gap_scores takes them, with every hit's word match."""
    rows, labels = [], []
    for retrieved, order, _relevant, matches in turns:
        ids = [pid for pid, _ in retrieved]
        features = hit_features([s for _, s in retrieved], matches, ids)
        best = set(order[:TARGET_RANK])
        for i in range(at_least, len(ids)):
            rows.append(features[i])
            labels.append(float(ids[i] in best))
    if not rows:
        raise ConfigError("no hits past the first rescore_at_least to fit the shortlist on")
    return np.array(rows), np.array(labels)


def fit_weights(features: np.ndarray, labels: np.ndarray, l2: float = L2,
                steps: int = 50) -> dict[str, float]:
    """The logistic model's feature weights (its bias, the same for every hit, does not change
    a turn's order and is dropped), by Newton's method with a ridge penalty."""
    if labels.min() == labels.max():
        raise ConfigError("every hit has the same label: the shortlist cannot be fitted "
                          "(score more turns, or a larger top_n)")
    x = np.hstack([features, np.ones((len(features), 1))])
    w = np.zeros(x.shape[1])
    penalty = np.diag([l2] * features.shape[1] + [0.0])
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-(x @ w)))
        gradient = x.T @ (p - labels) + penalty @ w
        hessian = (x * (p * (1 - p))[:, None]).T @ x + penalty
        step = np.linalg.solve(hessian, gradient)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return {name: round(float(v), 4) for name, v in zip(FEATURES, w[:-1])}


def weights_from_block(block: Any, where: Any) -> dict[str, dict[str, float]]:
    """{retriever key: weights} of a folder's "shortlist_weights" block, checked: every entry
    has a finite number for each of FEATURES (a bad one names the file and the entry)."""
    if not isinstance(block, Mapping):
        raise ConfigError(f"{where}: '{SHORTLIST_KEY}' must be a mapping")
    out = {}
    for key, entry in block.items():
        if not isinstance(entry, Mapping):
            raise ConfigError(f"{where}: '{SHORTLIST_KEY}.{key}' must be a mapping of weights")
        weights = {}
        for name in FEATURES:
            value = entry.get(name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value):
                raise ConfigError(f"{where}: '{SHORTLIST_KEY}.{key}.{name}' must be a number, "
                                  f"got {value!r}")
            weights[name] = float(value)
        out[str(key)] = weights
    return out
