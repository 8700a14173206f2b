"""Shared by tests/test_phrase_{search,dump,answer}.py: synthetic phrase dumps whose best phrase
is known by construction, and the passages they stand for."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from convqa.io import write_json
from convqa.types import Passage
from phrase_index import dump as dump_module
from phrase_index.vectors import pack_shard, write_shard
from convqa.corpus.shards import passages_checksum

WORD = 5  # token t of a synthetic passage is the word "t000".."t999" at chars 5t .. 5t+4


def synthetic_passages(count: int, tokens: int) -> list[Passage]:
    return [Passage(f"p{row}", " ".join(f"t{t:03d}" for t in range(tokens)), f"P{row}")
            for row in range(count)]


def token_chars(token: int) -> tuple[int, int]:
    return WORD * token, WORD * token + 4


def write_dump(folder: Path, start: np.ndarray, end: np.ndarray, passages: list[Passage], *,
               dtype: str = "float16", shard_size: int = 8, max_answer_tokens: int = 10,
               fingerprint: str = "synthetic", logits: dict[str, np.ndarray] | None = None
               ) -> Path:
    """A finished dump of `start[row, token]` / `end[row, token]` vectors (`[P, T, d]`), every
    token kept on both sides, written with the production shard code; `logits[side]` `[P, T]`
    are stored as the filter logits."""
    count, tokens, dim = start.shape
    folder.mkdir(parents=True)
    for lo in range(0, count, shard_size):
        hi = min(lo + shard_size, count)
        rows = np.repeat(np.arange(lo, hi), tokens)
        toks = np.tile(np.arange(tokens), hi - lo)
        pos = np.column_stack([rows, toks, WORD * toks, WORD * toks + 4]).astype(np.int32)
        table, sides = pack_shard({side: (vectors[lo:hi].reshape(-1, dim), pos,
                                          None if logits is None else logits[side][lo:hi].ravel())
                                   for side, vectors in (("start", start), ("end", end))},
                                  lo, hi - lo, dtype)
        write_shard(folder, lo, hi, table, sides, {"text_tokens": len(pos), "truncated": 0})
    write_json(folder / dump_module.MANIFEST, {
        "format": dump_module.FORMAT, "version": dump_module.VERSION, "model": None,
        "fingerprint": fingerprint, "dim": dim, "count": count,
        "corpus_checksum": passages_checksum(passages), "shard_size": shard_size,
        "dtype": dtype, "start_threshold": None, "end_threshold": None,
        "max_answer_tokens": max_answer_tokens, "complete": True})
    return folder


def planted_queries(count: int, tokens: int, dim: int, queries: int, seed: int, scale: float):
    """`queries` random unit query pairs, each with its phrase planted in its own passage:
    (start, end, q_start, q_end, [(row, start token, end token)] per query)."""
    rng = np.random.default_rng(seed)
    start, end = noise(count, tokens, dim, seed, scale), noise(count, tokens, dim, seed + 1, scale)
    q_start = rng.normal(size=(queries, dim)).astype(np.float32)
    q_end = rng.normal(size=(queries, dim)).astype(np.float32)
    q_start /= np.linalg.norm(q_start, axis=1, keepdims=True)
    q_end /= np.linalg.norm(q_end, axis=1, keepdims=True)
    rows = rng.choice(count, queries, replace=False)
    truth = []
    for q, row in enumerate(rows):
        i = int(rng.integers(0, tokens - 4))
        j = i + int(rng.integers(0, 4))
        start[row, i] += 1.5 * q_start[q]
        end[row, j] += 1.5 * q_end[q]
        truth.append((int(row), i, j))
    return start, end, q_start, q_end, truth


def noise(count: int, tokens: int, dim: int, seed: int = 0, scale: float = 0.05) -> np.ndarray:
    return (np.random.default_rng(seed).normal(size=(count, tokens, dim)) * scale
            ).astype(np.float32)


def unit(dim: int, axis: int) -> np.ndarray:
    vector = np.zeros(dim, dtype=np.float32)
    vector[axis] = 1.0
    return vector
