"""The compact phrase index: a whole Wikipedia-sized corpus in a few GB, memory-mapped.

The dump-based index (index.py) keeps a 392-byte int8 vector per token plus two FAISS indexes:
~42 KB per passage, 9 GB for 220k passages. This one keeps, per kept token:

- an `m`-byte product-quantization code (codec.py, OPQ-rotated), from which start and end
  scores are computed exactly for those codes by table lookups (48 bytes by default);
- its entry in one FAISS IVF-PQ index over every kept token (start and end share the vector,
  so one index serves both sides; a smaller code, 16 bytes + FAISS's 8-byte id), which only
  proposes candidates;
- its position: token index (uint16), character span (uint16 or uint32 pair) and which sides
  keep it (uint8 bits: 1 start, 2 end); `ptr.npy` (int64 `[passages + 1]`) gives each
  passage's token range, tokens being stored passage by passage.

So ~80 bytes per token, and a filter (the model's start/end filter logits stored in the dump,
thresholded here, `keep_fraction` or fixed thresholds) decides how many tokens per passage
are kept. Everything is memory-mapped on load: the query process reads the IVF lists it
probes and the codes of the passages it scores.

Folder: `phrase_index.json` (format `convqa-phrase-compact-index`), `codec/`, `search/` (a
`retrievers.dense.index.DenseIndex`), `tokens/` (codes, token, chars, sides, ptr).

How one is built from a dump: compact_build.py.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from convqa.errors import DataError
from convqa.io import load_format_json
from retrievers.dense.index import DenseIndex

from .codec import PQCodec
from .index import IndexMeta, check_built
from .vectors import _concatenated_ranges

FORMAT = "convqa-phrase-compact-index"
VERSION = 1
META_FILE = "phrase_index.json"
SIDE_BITS = {"start": 1, "end": 2}
TOKEN_ARRAYS = ("codes", "token", "chars", "sides")  # per kept token, with ptr per passage


def open_tokens(folder: Path, meta: dict[str, Any]) -> dict[str, np.ndarray]:
    """The token arrays, memory-mapped, each checked against the shape and type the metadata
    promises (a damaged file is a DataError naming it)."""
    tokens = folder / "tokens"
    total, m, count = int(meta["tokens"]), int(meta["code_bytes"]), int(meta["count"])
    expect = {"codes": ((total, m), "uint8"), "token": ((total,), "uint16"),
              "chars": ((total, 2), meta.get("chars_dtype", "uint32")),
              "sides": ((total,), "uint8"), "ptr": ((count + 1,), "int64")}
    arrays = {}
    for name, (shape, dtype) in expect.items():
        path = tokens / f"{name}.npy"
        try:
            array = np.load(path, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise DataError(f"damaged compact phrase index: {exc}", path) from None
        if array.shape != shape or array.dtype != np.dtype(dtype):
            raise DataError(f"damaged compact phrase index: {array.shape} {array.dtype}, "
                            f"expected {shape} {dtype}", path)
        arrays[name] = np.asarray(array)
    if arrays["ptr"][-1] != total:
        raise DataError(f"damaged compact phrase index: ptr ends at {arrays['ptr'][-1]}, "
                        f"{total} tokens", tokens / "ptr.npy")
    return arrays


class CompactPhraseIndex(IndexMeta):
    """Search side of a compact phrase index (same interface as `index.PhraseIndex`)."""

    # FAISS hits fetched per side hit wanted: the IVF holds both sides' tokens
    OVERFETCH = 2

    def __init__(self, folder: Path, meta: dict[str, Any], search: DenseIndex, codec: PQCodec,
                 tokens: dict[str, np.ndarray]):
        self.folder = Path(folder)
        self.meta = meta
        self.search = search
        self.codec = codec
        self.tokens = tokens

    @classmethod
    def load(cls, folder: str | os.PathLike, mmap: bool = True) -> "CompactPhraseIndex":
        """Open a compact index; the IVF lists and token arrays are memory-mapped unless
        `mmap` is False (then the IVF is read into memory)."""
        folder = Path(folder)
        path = check_built(folder)
        meta = load_format_json(path, FORMAT, VERSION, "compact phrase index")
        search = DenseIndex.load(folder / "search", mmap=mmap)
        if search.count != meta.get("tokens") or search.fingerprint != meta.get("fingerprint"):
            raise DataError(f"the search index ({search.count} tokens, fingerprint "
                            f"{search.fingerprint}) does not match {META_FILE} "
                            f"({meta.get('tokens')} tokens); rebuild the index", folder)
        return cls(folder, meta, search, PQCodec.load(folder / "codec"),
                   open_tokens(folder, meta))

    # -- the interface search.py uses (with IndexMeta's) ----------------------------------
    def bytes_per_passage(self) -> float:
        return float(self.meta["bytes_per_passage"])

    def set_nprobe(self, nprobe: int | None) -> None:
        self.search.set_search_params(nprobe=nprobe)

    @property
    def nprobe(self) -> int | None:
        """IVF lists visited per query (None for a flat search index)."""
        return self.search.meta.get("nprobe")

    def search_side(self, side: str, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The best `k` tokens of `side` per query (FAISS scores, token ids; -1 padded)."""
        scores, ids = self.search.search(queries, k * self.OVERFETCH)
        bit = SIDE_BITS[side]
        ok = ids >= 0
        ok[ok] = (self.tokens["sides"][ids[ok]] & bit) > 0
        out_ids = np.full((len(ids), k), -1, dtype=np.int64)
        out_scores = np.full((len(ids), k), -np.inf, dtype=np.float32)
        for q in range(len(ids)):
            chosen = np.nonzero(ok[q])[0][:k]
            out_ids[q, :len(chosen)] = ids[q, chosen]
            out_scores[q, :len(chosen)] = scores[q, chosen]
        return out_scores, out_ids

    def _rows_of(self, ids: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.tokens["ptr"], ids, side="right") - 1

    def side_positions(self, side: str, ids: np.ndarray) -> np.ndarray:
        """`[n, 4]` int32 (row, token, char start, char end) of token ids."""
        ids = np.asarray(ids, dtype=np.int64)
        out = np.empty((len(ids), 4), dtype=np.int32)
        out[:, 0] = self._rows_of(ids)
        out[:, 1] = self.tokens["token"][ids]
        out[:, 2:4] = self.tokens["chars"][ids]
        return out

    def gather(self, rows: np.ndarray, q_start: np.ndarray, q_end: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(start pos, start scores, end pos, end scores) of every kept token of the passages
        `rows` (sorted, unique), in (row, token) order; scores from the codes."""
        ptr = self.tokens["ptr"]
        rows = np.asarray(rows, dtype=np.int64)
        ids = _concatenated_ranges(ptr[rows], ptr[rows + 1])
        pos = np.empty((len(ids), 4), dtype=np.int32)
        pos[:, 0] = np.repeat(rows, ptr[rows + 1] - ptr[rows])
        pos[:, 1] = self.tokens["token"][ids]
        pos[:, 2:4] = self.tokens["chars"][ids]
        codes = self.tokens["codes"][ids]
        sides = self.tokens["sides"][ids]
        out = []
        for side, query in (("start", q_start), ("end", q_end)):
            keep = (sides & SIDE_BITS[side]) > 0
            out += [pos[keep], self.codec.scores(codes[keep], query)]
        return tuple(out)  # type: ignore[return-value]
