"""Which of the retriever's top_n hits a cross-encoder rescores: a cross-encoder costs the same
for every pair, so a hit the retriever scores far below its best is worth rescoring only if it
can still come out on top.

    z_i = hit i's retriever score, standardised over the top_n hits (as the fusion does)
    rescore hit i  <=>  i < at_least  or  max(z) - z_i <= within

`within` (the reranker's `rescore_within` option) is in standard deviations of the retriever's
scores, so one value suits retrievers of any scale; None rescores every hit. `at_least` (the
`rescore_at_least` option) keeps the first hits whatever their scores, so that a reader or a
second stage after the reranker has its passages. Hits left out are not returned: a turn whose
retriever is sure of its best costs a few pairs instead of top_n.

    >>> shortlist([9.0, 8.9, 8.8, 5.0, 4.0, 3.0], within=1.0, at_least=2)
    [0, 1, 2]
    >>> shortlist([9.0, 8.9, 8.8, 5.0, 4.0, 3.0], within=None, at_least=2)
    [0, 1, 2, 3, 4, 5]
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Sequence

from convqa.errors import ConfigError

from .fusion import is_weight, standardised
from .word_matches import with_word_matches


def shortlist(retriever_scores: Sequence[float], within: float | None,
              at_least: int = 1, word_matches: int = 0,
              match_scores: Callable[[], Sequence[float]] | None = None) -> list[int]:
    """Indices (in the given order) of the hits to rescore. With `word_matches` (the
    `rescore_word_matches` option) also that many of the hits the gap leaves out, those whose
    words best match the question (word_matches.py); `match_scores` gives every hit's match,
    asked for only when the gap leaves some out."""
    if within is None:
        return list(range(len(retriever_scores)))
    z = standardised([float(s) for s in retriever_scores])
    best = max(z, default=0.0)
    kept = [i for i, zi in enumerate(z) if i < at_least or best - zi <= within]
    if word_matches and len(kept) < len(z):
        if match_scores is None:
            raise ConfigError("word matches need each retrieved hit's match score")
        kept = with_word_matches(kept, match_scores(), word_matches)
    return kept


def check_within(value: Any) -> float | None:
    """The `rescore_within` option: None or a finite number >= 0; ValueError otherwise."""
    if value is None:
        return None
    if not is_weight(value):
        raise ValueError(f"rescore_within must be a number >= 0 or null, got {value!r}")
    return float(value)


# the gaps `gap_scores` tries, in standard deviations of the retriever's scores
GAPS = (0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0)


def gap_scores(turns: Iterable[Sequence[Any]], gaps: Sequence[float] = GAPS,
               at_least: int = 5, word_matches: int = 0
               ) -> dict[float | None, dict[str, float]]:
    """For rescoring every hit (key None) and each gap: the answer passages' Hits@1 and Hits@5
    and the mean number of pairs rescored per turn. `turns`: each turn's retrieved top_n as
    (passage id, retriever score) in retriever order, the reranker's order of all of them
    (every one rescored), the turn's answer passage ids and, with `word_matches` (the
    `rescore_word_matches` option: a gap's shortlist also keeps that many of the hits it leaves
    out, word_matches.py), each retrieved hit's word match with the question. A shortlist keeps
    the rescored hits' scores (the fusion standardises over all top_n), so its ranking is the
    full one without the hits left out: comparing gaps scores no pair twice."""
    turns = [tuple(t) for t in turns]
    if not turns:
        raise ConfigError("no turns to score the rescoring gaps on")
    for retrieved, order, *rest in turns:
        if sorted(order) != sorted(pid for pid, _ in retrieved):
            raise ConfigError(f"the reranked hits ({len(order)}) are not the retrieved ones "
                              f"({len(retrieved)}): score the gaps on a reranker's whole "
                              "top_n")
        if word_matches and (len(rest) < 2 or len(rest[1]) != len(retrieved)):
            raise ConfigError("word matches need each retrieved hit's match score")
    return {gap: shortlist_hits(turns, lambda retrieved, matches, gap=gap: shortlist(
                [s for _, s in retrieved], gap, at_least, word_matches, lambda: matches[0]))
            for gap in (None, *gaps)}


def shortlist_hits(turns: Sequence[Sequence[Any]],
                   kept_of: Callable[[Sequence[Any], Sequence[Any]], Sequence[int]]
                   ) -> dict[str, float]:
    """The answer passages' Hits@1 and Hits@5 and the mean pairs per turn when each turn
    rescores the hits `kept_of(retrieved, [its word matches] or [])` names (turns as
    `gap_scores` takes them): the full ranking without the hits left out."""
    hits1 = hits5 = pairs = 0
    for retrieved, order, relevant, *matches in turns:
        kept_ids = {retrieved[i][0] for i in kept_of(retrieved, matches)}
        ranked = [pid for pid in order if pid in kept_ids]
        pairs += len(kept_ids)
        hits1 += bool(ranked) and ranked[0] in relevant
        hits5 += any(pid in relevant for pid in ranked[:5])
    return {"hits@1": hits1 / len(turns), "hits@5": hits5 / len(turns),
            "pairs": pairs / len(turns)}


def choose_gap(benchmarks: Sequence[Mapping[Any, Mapping[str, float]]], baseline: Any = None
               ) -> Any:
    """The gap that rescores fewest pairs (mean over `benchmarks`, each `gap_scores`) among
    those whose Hits@1 and Hits@5 are at least the `baseline` setting's on every benchmark
    (None: rescoring every hit); on a tie the first in the benchmarks' order (the smallest
    gap), the baseline last. Keys may be any settings, e.g. (gap, word matches); the baseline
    itself when no other setting is as good for fewer pairs."""
    if not benchmarks:
        raise ConfigError("no benchmarks to choose the rescoring gap on")
    keys = [key for key in benchmarks[0] if key != baseline] + [baseline]
    fine = [key for key in keys if all(round(b[key][m] - b[baseline][m], 9) >= 0
                                       for b in benchmarks for m in ("hits@1", "hits@5"))]
    return min(fine, key=lambda key: (sum(b[key]["pairs"] for b in benchmarks),
                                      keys.index(key)))
