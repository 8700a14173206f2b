"""Storage of dumped phrase vectors: int8 quantization, the shard folder format, and reading
shards back one passage or one batch at a time.

A dump holds two *sides*, `start` and `end`: the passage tokens whose filter logit passed the
side's threshold. The phrase model uses one vector per token as both its start and its end
representation, so a token kept on both sides would be stored twice; instead each shard (a fixed
range of passage rows) holds one *token table* and two lists of references into it:

- `tokens_vectors.npy`: `[u, d]` float16, or int8 codes; `tokens_scale.npy`,
  `tokens_offset.npy`: `[u]` float32, int8 only (see `quantize_int8`);
- `tokens_pos.npy`: `[u, 4]` int32 = (passage row, token index, char start, char end); char
  offsets index the passage *text*, end exclusive;
- `{side}_ref.npy`: `[n]` int32, the token-table rows of the side's vectors, in (row, token)
  order;
- `{side}_ptr.npy`: `[rows + 1]` int64, passage `start + k` owns side vectors `ptr[k]:ptr[k+1]`;
- `{side}_logits.npy`: `[n]` float16, the filter logit of each of the side's vectors (dumps
  from before they were stored lack it), so a compact index can filter a dump afterwards;
- `shard.json`: counts, written last. A shard is a folder written under a temporary name and
  renamed into place, so it exists complete or not at all.

A token kept on both sides is stored once when its two vectors are identical (always, for our
model); a model with distinct start and end vectors gets two table rows, so the format serves
both. Vector `g` of a side (the FAISS row) is the g-th side vector of the shards in row order.

int8 is per-vector min/max (asymmetric) quantization: `x ~ offset + scale * code` with
`scale = (max - min) / 255`, so each component is off by at most `scale / 2`, and 8 bytes of
scale and offset per vector (384 + 8 bytes against 768 for float16). Measured on 6,946 MiniLM
token vectors of 96 vital passages: relative L2 error mean 0.71%, max 1.1%, cosine to float32
>= 0.99994, and the best of 6,946 tokens for 32 query-like vectors unchanged. A per-dimension
scale and offset (one pair for the whole dump) does worse on the same vectors (mean 2.2%, max
11%): token vectors differ in range more than dimensions do.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from convqa.errors import DataError

SIDES = ("start", "end")
DTYPES = ("float16", "int8")
SHARD_META = "shard.json"
POS_FIELDS = ("row", "token", "char_start", "char_end")
_TOKEN_KEY = 1 << 20  # (row, token) -> row * _TOKEN_KEY + token; passages are far shorter
_FP16_MAX = 65504.0


def shard_dir_name(start: int, end: int) -> str:
    return f"shard-{start:010d}-{end:010d}"


def _float32(array: np.ndarray) -> np.ndarray:
    """float16 -> float32 through torch, whose vectorised conversion is ~7x numpy's."""
    import torch

    return torch.from_numpy(np.ascontiguousarray(array)).float().numpy()


def quantize_int8(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(codes int8 `[n, d]`, scale float32 `[n]`, offset float32 `[n]`) with
    `dequantize_int8(codes, scale, offset) ~ vectors` to within `scale / 2` per component."""
    x = np.asarray(vectors, dtype=np.float32)
    if x.ndim != 2:
        raise ValueError(f"expected [n, d] vectors, got shape {x.shape}")
    if len(x) == 0:
        return (np.zeros(x.shape, np.int8), np.zeros(0, np.float32), np.zeros(0, np.float32))
    low, high = x.min(axis=1), x.max(axis=1)
    scale = (high - low) / 255.0
    scale = np.where(scale > 0, scale, 1.0).astype(np.float32)  # constant vector: codes all 0
    codes = np.rint((x - low[:, None]) / scale[:, None]) - 128.0
    codes = np.clip(codes, -128, 127).astype(np.int8)
    offset = (low + 128.0 * scale).astype(np.float32)
    return codes, scale, offset


def dequantize_int8(codes: np.ndarray, scale: np.ndarray, offset: np.ndarray) -> np.ndarray:
    return codes.astype(np.float32) * scale[:, None] + offset[:, None]


@dataclass
class TokenArrays:
    """The token table of one shard: vectors (float16, or int8 codes with scale and offset) and
    their (row, token, char start, char end) positions."""

    vectors: np.ndarray            # [u, d] float16 or int8
    pos: np.ndarray                # [u, 4] int32
    scale: np.ndarray | None = None
    offset: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.pos)

    def take(self, index: np.ndarray) -> np.ndarray:
        """float32 vectors at table rows `index` (dequantized for int8)."""
        if self.vectors.dtype == np.int8:
            return dequantize_int8(self.vectors[index], self.scale[index], self.offset[index])
        return _float32(self.vectors[index])

    def scores_at(self, index: np.ndarray, query: np.ndarray) -> np.ndarray:
        """Inner products of the vectors at table rows `index` with a float32 `query`, without
        materialising dequantized int8 vectors: `scale * (codes . q) + offset * sum(q)`."""
        if self.vectors.dtype == np.int8:
            codes = self.vectors[index].astype(np.float32)
            return (codes @ query) * self.scale[index] + self.offset[index] * query.sum()
        return _float32(self.vectors[index]) @ query

    def arrays(self) -> dict[str, np.ndarray]:
        return {name: value for name in ("vectors", "pos", "scale", "offset")
                if (value := getattr(self, name)) is not None}

    @classmethod
    def quantized(cls, vectors: np.ndarray, pos: np.ndarray, dtype: str) -> "TokenArrays":
        if dtype == "int8":
            codes, scale, offset = quantize_int8(vectors)
            return cls(codes, pos, scale, offset)
        if dtype != "float16":
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
        if len(vectors) and np.abs(vectors).max() > _FP16_MAX:
            raise ValueError("phrase vectors exceed the float16 range; dump them as int8")
        return cls(vectors.astype(np.float16), pos)


@dataclass
class SideArrays:
    """One side of one shard: references into the shard's token table, per passage."""

    tokens: TokenArrays
    ref: np.ndarray                # [n] int32: table rows, (row, token) order
    ptr: np.ndarray                # [rows + 1] int64
    logits: np.ndarray | None = None  # [n] float16 filter logits (None: an older dump)

    def __len__(self) -> int:
        return len(self.ref)

    def floats(self, lo: int = 0, hi: int | None = None) -> np.ndarray:
        """float32 vectors `lo:hi` of this side (dequantized for int8)."""
        return self.tokens.take(self.ref[lo:hi])

    def take(self, index: np.ndarray) -> np.ndarray:
        """float32 vectors at side positions `index`."""
        return self.tokens.take(self.ref[index])

    def scores_at(self, index: np.ndarray, query: np.ndarray) -> np.ndarray:
        return self.tokens.scores_at(self.ref[index], query)

    def positions(self, index: np.ndarray | slice) -> np.ndarray:
        """`[m, 4]` (row, token, char start, char end) at side positions `index`."""
        return self.tokens.pos[self.ref[index]]


def pack_shard(sides: dict[str, tuple[np.ndarray, ...]], first_row: int, rows: int,
               dtype: str) -> tuple[TokenArrays, dict[str, SideArrays]]:
    """The token table and the side references of a shard of `rows` passages starting at global
    row `first_row`, from per-side float32 `(vectors [n, d], pos [n, 4][, logits [n]])` sorted
    by (row, token). A (row, token) kept on several sides with bitwise-equal vectors is stored
    once."""
    keyed, counts, side_logits = [], {}, {}
    for side, (vectors, pos, *rest) in sides.items():
        if rest and rest[0] is not None:
            side_logits[side] = np.asarray(rest[0], dtype=np.float16).reshape(-1)
        vectors = np.asarray(vectors, dtype=np.float32)
        pos = np.asarray(pos, dtype=np.int32).reshape(-1, 4)
        local = pos[:, 0].astype(np.int64) - first_row
        if len(local) and (local.min() < 0 or local.max() >= rows):
            raise ValueError("phrase positions must be inside the shard")
        keys = local * _TOKEN_KEY + pos[:, 1]
        if np.any(np.diff(keys) <= 0):
            raise ValueError("phrase positions must be sorted by row and token, each once")
        keyed.append((side, vectors, pos, keys))
        counts[side] = np.bincount(local, minlength=rows)
    table_vectors, table_pos, table_keys, refs = [], [], [], {}
    size = 0
    for side, vectors, pos, keys in keyed:
        ref = np.full(len(keys), -1, dtype=np.int64)
        if size:  # reuse an identical vector already in the table for this (row, token)
            known = np.concatenate(table_keys)
            order = np.argsort(known, kind="stable")
            at = np.minimum(np.searchsorted(known[order], keys), len(known) - 1)
            candidate = order[at]
            same = known[candidate] == keys
            stored = np.concatenate(table_vectors)
            same[same] = np.all(stored[candidate[same]] == vectors[same], axis=1)
            ref[same] = candidate[same]
        new = ref < 0
        ref[new] = size + np.arange(int(new.sum()))
        size += int(new.sum())
        table_vectors.append(vectors[new])
        table_pos.append(pos[new])
        table_keys.append(keys[new])
        refs[side] = ref
    dim = keyed[0][1].shape[1] if keyed and keyed[0][1].ndim == 2 else 0
    vectors = np.concatenate(table_vectors) if table_vectors else np.zeros((0, dim), np.float32)
    pos = np.concatenate(table_pos) if table_pos else np.zeros((0, 4), np.int32)
    keys = np.concatenate(table_keys) if table_keys else np.zeros(0, np.int64)
    order = np.argsort(keys, kind="stable")  # passage-contiguous table: local reads
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    tokens = TokenArrays.quantized(vectors[order], pos[order], dtype)
    out = {}
    for side, _, _, _ in keyed:
        ptr = np.zeros(rows + 1, dtype=np.int64)
        np.cumsum(counts[side], out=ptr[1:])
        out[side] = SideArrays(tokens, rank[refs[side]].astype(np.int32), ptr,
                               side_logits.get(side))
    return tokens, out


def write_shard(folder: Path, start: int, end: int, tokens: TokenArrays,
                sides: dict[str, SideArrays], info: dict) -> Path:
    """Write a shard folder atomically: a temporary sibling, renamed into place when complete
    (an older folder of the same name, e.g. damaged, is replaced)."""
    final = folder / shard_dir_name(start, end)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=folder))
    try:
        for name, value in tokens.arrays().items():
            save_array(tmp / f"tokens_{name}.npy", value)
        for side, arrays in sides.items():
            save_array(tmp / f"{side}_ref.npy", arrays.ref)
            save_array(tmp / f"{side}_ptr.npy", arrays.ptr)
            if arrays.logits is not None:
                save_array(tmp / f"{side}_logits.npy", arrays.logits)
        counts = {f"{side}_count": len(arrays) for side, arrays in sides.items()}
        with open(tmp / SHARD_META, "w", encoding="utf-8") as handle:
            json.dump({"rows": [start, end], "tokens_count": len(tokens), **counts, **info},
                      handle)
            handle.flush()
            os.fsync(handle.fileno())
        if final.exists():
            shutil.rmtree(final)
        os.rename(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def save_array(path: Path, array: np.ndarray) -> None:
    """Write one .npy file and fsync it (no pickles)."""
    with open(path, "wb") as handle:
        np.save(handle, np.ascontiguousarray(array), allow_pickle=False)
        handle.flush()
        os.fsync(handle.fileno())


@dataclass
class Shard:
    """A shard read back: its token table and both sides."""

    tokens: TokenArrays
    sides: dict[str, SideArrays]

    def nbytes(self) -> int:
        """Bytes of every array (token table, references, pointers): the shard's size on disk
        less the .npy headers and shard.json."""
        return (sum(a.nbytes for a in self.tokens.arrays().values())
                + sum(s.ref.nbytes + s.ptr.nbytes + (0 if s.logits is None else s.logits.nbytes)
                      for s in self.sides.values()))


def _load(file: Path, shape: tuple, kind: str) -> np.ndarray:
    try:
        # copy-on-write: writable views (torch.from_numpy needs them), never written
        array = np.load(file, mmap_mode="c", allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise DataError(f"damaged shard: {exc}", file) from None
    if array.shape != shape or array.dtype != np.dtype(kind):
        raise DataError(f"damaged shard: {array.shape} {array.dtype}, expected {shape} {kind}",
                        file)
    # a plain ndarray view of the map: slicing a np.memmap costs ~10x more per call
    return np.asarray(array)


def read_shard(folder: Path, start: int, end: int, dim: int, dtype: str) -> Shard:
    """A shard, memory-mapped and checked; DataError naming the damaged file."""
    path = folder / shard_dir_name(start, end)
    meta_path = path / SHARD_META
    if not meta_path.exists():
        raise DataError(f"shard missing or unfinished (rows {start}-{end})", path)
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        size = int(meta["tokens_count"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DataError(f"damaged shard metadata: {exc!r}", meta_path) from None
    expect = {"vectors": ((size, dim), dtype), "pos": ((size, 4), "int32")}
    if dtype == "int8":
        expect.update(scale=((size,), "float32"), offset=((size,), "float32"))
    tokens = TokenArrays(**{name: _load(path / f"tokens_{name}.npy", shape, kind)
                            for name, (shape, kind) in expect.items()})
    sides = {}
    for side in SIDES:
        count = meta.get(f"{side}_count")
        ref = _load(path / f"{side}_ref.npy", (count,), "int32")
        ptr = _load(path / f"{side}_ptr.npy", (end - start + 1,), "int64")
        if ptr[-1] != count:
            raise DataError(f"damaged shard: ptr ends at {ptr[-1]}, {count} vectors",
                            path / f"{side}_ptr.npy")
        if count and (ref.min() < 0 or ref.max() >= size):
            raise DataError(f"damaged shard: references outside the {size}-row token table",
                            path / f"{side}_ref.npy")
        logits_file = path / f"{side}_logits.npy"
        logits = _load(logits_file, (count,), "float16") if logits_file.exists() else None
        sides[side] = SideArrays(tokens, ref, ptr, logits)
    return Shard(tokens, sides)


class DumpSide:
    """One side (start or end) of a whole dump: shards seen as one array of vectors."""

    def __init__(self, shards: Sequence[SideArrays], ranges: Sequence[tuple[int, int]]):
        self.shards = list(shards)
        self.ranges = list(ranges)
        self.shard_size = ranges[0][1] - ranges[0][0] if ranges else 1
        counts = np.array([len(s) for s in self.shards], dtype=np.int64)
        self.bases = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)

    @property
    def count(self) -> int:
        return int(self.bases[-1])

    @property
    def dim(self) -> int:
        return int(self.shards[0].tokens.vectors.shape[1])

    def _locate(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if len(ids) and (ids.min() < 0 or ids.max() >= self.count):
            raise IndexError(f"vector id out of range for {self.count} vectors")
        shard = np.searchsorted(self.bases, ids, side="right") - 1
        return shard, ids - self.bases[shard]

    def positions(self, ids: Sequence[int] | np.ndarray) -> np.ndarray:
        """`[n, 4]` int32 (row, token, char start, char end) of global vector ids."""
        ids = np.asarray(ids, dtype=np.int64)
        out = np.empty((len(ids), 4), dtype=np.int32)
        shard, local = self._locate(ids)
        for s in np.unique(shard):
            chosen = shard == s
            out[chosen] = self.shards[s].positions(local[chosen])
        return out

    def vectors(self, ids: Sequence[int] | np.ndarray) -> np.ndarray:
        """float32 `[n, d]` vectors of global ids (dequantized), in the order given."""
        ids = np.asarray(ids, dtype=np.int64)
        out = np.empty((len(ids), self.dim), dtype=np.float32)
        shard, local = self._locate(ids)
        for s in np.unique(shard):
            chosen = shard == s
            out[chosen] = self.shards[s].take(local[chosen])
        return out

    def _span(self, row: int) -> tuple[SideArrays, int, int]:
        s = row // self.shard_size
        arrays = self.shards[s]
        k = row - self.ranges[s][0]
        return arrays, int(arrays.ptr[k]), int(arrays.ptr[k + 1])

    def passage(self, row: int) -> tuple[np.ndarray, np.ndarray]:
        """(pos `[m, 4]`, float32 vectors `[m, d]`) of the kept tokens of passage `row`."""
        arrays, lo, hi = self._span(row)
        return arrays.positions(slice(lo, hi)), arrays.floats(lo, hi)

    def gather_scores(self, rows: np.ndarray, query: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(pos `[m, 4]`, inner products `[m]` with `query`) of every kept token of the
        passages `rows` (sorted, unique), in (row, token) order: one gather per shard."""
        rows = np.asarray(rows, dtype=np.int64)
        shard_of = rows // self.shard_size
        positions, scores = [], []
        for s in np.unique(shard_of):
            arrays = self.shards[s]
            local = rows[shard_of == s] - self.ranges[s][0]
            index = _concatenated_ranges(arrays.ptr[local], arrays.ptr[local + 1])
            positions.append(arrays.positions(index))
            scores.append(arrays.scores_at(index, query))
        if not positions:
            return np.zeros((0, 4), np.int32), np.zeros(0, np.float32)
        return np.concatenate(positions), np.concatenate(scores)

    def batches(self) -> Iterator[np.ndarray]:
        """float32 vectors shard by shard, in id order (never the whole side at once)."""
        for arrays in self.shards:
            yield arrays.floats()


def _concatenated_ranges(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """`np.concatenate([np.arange(a, b) for a, b in zip(lo, hi)])` without the loop."""
    lengths = (hi - lo).astype(np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    starts = np.repeat(lo.astype(np.int64) - np.concatenate([[0], np.cumsum(lengths)[:-1]]),
                       lengths)
    return starts + np.arange(total, dtype=np.int64)
