"""Phrase search: the best phrases of the whole corpus for a pair of query vectors, no reader.

A phrase (i, j) of a passage, tokens i..j with `j - i < max_answer_tokens`, scores
`q_start . h_start[i] + q_end . h_end[j]`. Two passes propose phrases:

- start-first: the `candidates` start vectors of highest `q_start . h` (FAISS), each paired with
  every end vector of the same passage within the answer length (j >= i);
- end-first: the same from the end side, each paired with the start vectors before it.

The end-first pass finds answers whose start token alone ranks low (a weak start, a strong
end). Both passes are evaluated per passage at once: the phrases of a passage that either pass
proposes are scored from the dump's stored vectors (exact; FAISS scores, possibly from PQ codes,
only choose candidates), so a phrase found by both passes gets one identical score and appears
once: results are deduplicated by (passage, start token, end token).

A `PassagePrior` per query (phrase_index/sparse.py: BM25 over the same passages;
phrase_index/dense_prior.py: a dense passage retriever's best passages; `plus` sums them) adds its
passages as a third source, every phrase of them a candidate, and a per-passage score to every
phrase, as DenSPI adds a sparse score to the dense one.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np

from convqa.errors import ConfigError, ConvQAError
from convqa.types import Answer, Passage

from .index import PhraseIndex

if TYPE_CHECKING:
    from .compact import CompactPhraseIndex

PASSES = ("start", "end")
DEFAULT_CANDIDATES = 64     # FAISS hits per pass and query
DEFAULT_MAX_ANSWER_TOKENS = 10


@dataclass(frozen=True)
class PhraseSpan:
    """A scored phrase: passage row, token span (inclusive), character span (end exclusive);
    `score` is `start_score + end_score + passage_score` (the prior's, 0 without one)."""

    row: int
    start_token: int
    end_token: int
    char_start: int
    char_end: int
    score: float
    start_score: float
    end_score: float
    passage_score: float = 0.0


@dataclass(frozen=True)
class PassagePrior:
    """One query's passage-level evidence: `rows`, passages whose every phrase is a candidate
    beside the FAISS hits, and `score(rows)`, the weighted score each phrase of a passage
    gains."""

    rows: np.ndarray
    scores: Callable[[np.ndarray], np.ndarray]

    def plus(self, other: "PassagePrior") -> "PassagePrior":
        """Both priors at once: the passages of either are candidates, and a phrase gains
        both priors' scores (the sparse and the dense side, phrase_index/dense_prior.py)."""
        first, second = self.scores, other.scores
        rows = np.union1d(np.asarray(self.rows, dtype=np.int64),
                          np.asarray(other.rows, dtype=np.int64))
        return PassagePrior(rows, lambda asked: first(asked) + second(asked))


def _matrix(vectors: np.ndarray, dim: int, what: str) -> np.ndarray:
    array = np.ascontiguousarray(vectors, dtype=np.float32)
    if array.ndim == 1:
        array = array[None, :]
    if array.ndim != 2 or array.shape[1] != dim:
        raise ConvQAError(f"{what} query vectors must be [n, {dim}], got shape {array.shape}")
    return array


def _positive(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ConfigError(f"{name} must be a positive int, got {value!r}")
    return int(value)


_TOKEN_KEY = 1 << 20  # (row, token) -> row * _TOKEN_KEY + token; passages are far shorter


def _keys(pos: np.ndarray) -> np.ndarray:
    return pos[:, 0].astype(np.int64) * _TOKEN_KEY + pos[:, 1]


def _score_query(index: "PhraseIndex | CompactPhraseIndex", proposed: dict[str, np.ndarray], q_start: np.ndarray,
                 q_end: np.ndarray, max_tokens: int, prior: PassagePrior | None = None
                 ) -> tuple[np.ndarray, ...]:
    """Every phrase of the proposed passages that a pass proposes: (rows, starts, ends,
    char starts, char ends, start scores, end scores, passage scores).

    `proposed[side]` holds the `[n, 4]` positions of that pass's FAISS hits. The passages of
    all hits are scored at once: their kept start and end tokens, sorted by (row, token), are
    paired by binary search (end j of the same row with i <= j < i + max_tokens), and a pair is
    kept when its start was a start hit or its end an end hit, or its passage is one of the
    prior's rows."""
    hit_rows = np.concatenate([p[:, 0] for p in proposed.values()])
    prior_rows = np.asarray(prior.rows, dtype=np.int64) if prior is not None else \
        np.zeros(0, dtype=np.int64)
    rows = np.unique(np.concatenate([hit_rows.astype(np.int64), prior_rows]))
    start_pos, start_scores, end_pos, end_scores = index.gather(rows, q_start, q_end)
    start_keys, end_keys = _keys(start_pos), _keys(end_pos)
    lo = np.searchsorted(end_keys, start_keys, side="left")
    hi = np.searchsorted(end_keys, start_keys + max_tokens, side="left")
    counts = hi - lo
    a = np.repeat(np.arange(len(start_keys)), counts)
    b = np.repeat(lo - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts) + \
        np.arange(int(counts.sum()))
    start_hit = np.isin(start_keys, _keys(proposed["start"])) if "start" in proposed else \
        np.zeros(len(start_keys), dtype=bool)
    end_hit = np.isin(end_keys, _keys(proposed["end"])) if "end" in proposed else \
        np.zeros(len(end_keys), dtype=bool)
    keep = start_hit[a] | end_hit[b]
    if len(prior_rows):
        keep |= np.isin(start_pos[a, 0], prior_rows)
    a, b = a[keep], b[keep]
    phrase_rows = start_pos[a, 0]
    if prior is None:
        passage_scores = np.zeros(len(a), dtype=np.float32)
    else:  # one lookup per passage, spread over its phrases
        unique_rows, inverse = np.unique(phrase_rows, return_inverse=True)
        passage_scores = np.asarray(prior.scores(unique_rows), dtype=np.float32)[inverse]
    return (phrase_rows, start_pos[a, 1], end_pos[b, 1], start_pos[a, 2], end_pos[b, 3],
            start_scores[a], end_scores[b], passage_scores)


def search_phrases(index: "PhraseIndex | CompactPhraseIndex", q_start: np.ndarray, q_end: np.ndarray, k: int = 10, *,
                   candidates: int | None = None, max_answer_tokens: int | None = None,
                   passes: Sequence[str] = PASSES,
                   priors: Sequence[PassagePrior] | None = None) -> list[list[PhraseSpan]]:
    """The `k` best phrases per query (rows of `q_start` / `q_end`), best first; ties go to
    the earlier passage, then the earlier span. `priors`, one per query, add passages and
    passage scores (`PassagePrior`)."""
    k = _positive("k", k)
    candidates = _positive("candidates", candidates or max(DEFAULT_CANDIDATES, k))
    max_tokens = _positive("max_answer_tokens", max_answer_tokens or index.max_answer_tokens
                           or DEFAULT_MAX_ANSWER_TOKENS)
    passes = tuple(passes)
    if not passes or any(p not in PASSES for p in passes) or len(set(passes)) != len(passes):
        raise ConfigError(f"passes must be a non-empty subset of {PASSES}, got {passes!r}")
    q_start = _matrix(q_start, index.dim, "start")
    q_end = _matrix(q_end, index.dim, "end")
    if len(q_start) != len(q_end):
        raise ConvQAError(f"{len(q_start)} start but {len(q_end)} end query vectors")
    if priors is not None and len(priors) != len(q_start):
        raise ConvQAError(f"{len(priors)} passage priors for {len(q_start)} queries")
    hits = {side: index.search_side(side, q_start if side == "start" else q_end, candidates)[1]
            for side in passes}
    results = []
    for q in range(len(q_start)):
        proposed = {side: index.side_positions(side, hits[side][q][hits[side][q] >= 0])
                    for side in passes}
        prior = priors[q] if priors is not None else None
        results.append(_top(_score_query(index, proposed, q_start[q], q_end[q], max_tokens,
                                         prior), k))
    return results


def _top(columns: tuple[np.ndarray, ...], k: int) -> list[PhraseSpan]:
    rows, starts, ends, char_starts, char_ends, start_scores, end_scores, passage_scores = columns
    if len(rows) == 0:
        return []
    scores = start_scores.astype(np.float64) + end_scores + passage_scores
    chosen = np.arange(len(scores))
    if len(scores) > k:  # sort only what can make the top k (ties at the k-th score kept)
        kth = np.partition(scores, len(scores) - k)[len(scores) - k]
        chosen = np.nonzero(scores >= kth)[0]
    order = chosen[np.lexsort((ends[chosen], starts[chosen], rows[chosen], -scores[chosen]))][:k]
    return [PhraseSpan(int(rows[i]), int(starts[i]), int(ends[i]), int(char_starts[i]),
                       int(char_ends[i]), float(scores[i]), float(start_scores[i]),
                       float(end_scores[i]), float(passage_scores[i])) for i in order]


class PhraseSearcher:
    """Phrase search over an index and its passage store, answers as `convqa.types.Answer`."""

    def __init__(self, index: PhraseIndex, store, candidates: int | None = None,
                 max_answer_tokens: int | None = None):
        index.check(corpus_checksum=store.checksum)
        if len(store) != index.count:
            raise ConvQAError(f"the passage store has {len(store)} passages, the phrase index "
                              f"{index.count}")
        self.index = index
        self.store = store
        self.candidates = candidates
        self.max_answer_tokens = max_answer_tokens

    def spans(self, q_start: np.ndarray, q_end: np.ndarray, k: int = 10,
              priors: Sequence[PassagePrior] | None = None) -> list[list[PhraseSpan]]:
        return search_phrases(self.index, q_start, q_end, k, candidates=self.candidates,
                              max_answer_tokens=self.max_answer_tokens, priors=priors)

    def search(self, q_start: np.ndarray, q_end: np.ndarray, k: int = 10) -> list[list[Answer]]:
        """The `k` best answers per query: text, score, passage id, character offsets into the
        passage text and the passage as evidence."""
        return [self.answers(spans) for spans in self.spans(q_start, q_end, k)]

    def answers(self, spans: Sequence[PhraseSpan]) -> list[Answer]:
        passages: dict[int, Passage] = {}
        out = []
        for span in spans:
            if span.row not in passages:
                passages[span.row] = self.store.at(span.row)
            passage = passages[span.row]
            out.append(Answer(passage.text[span.char_start:span.char_end], span.score,
                              passage.id, span.char_start, span.char_end, passage))
        return out
