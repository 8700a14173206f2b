"""Storage of dumped phrase vectors: int8 quantization, the shard folder format, and reading
shards back one passage or one batch at a time.

A dump holds two *sides*, `start` and `end`: the vectors of the passage tokens whose filter
logit passed the side's threshold. Per side and shard (a fixed range of passage rows):

- `{side}_vectors.npy`: `[n, d]` float16, or int8 codes;
- `{side}_scale.npy`, `{side}_offset.npy`: `[n]` float32, int8 only (see `quantize_int8`);
- `{side}_pos.npy`: `[n, 4]` int32 = (passage row, token index, char start, char end), sorted
  by (row, token); char offsets index the passage *text*, end exclusive;
- `{side}_ptr.npy`: `[rows + 1]` int64, passage `start + k` owns vectors `ptr[k]:ptr[k+1]`;
- `shard.json`: counts, written last. A shard is a folder written under a temporary name and
  renamed into place, so it exists complete or not at all.

Vector `g` of a side (the FAISS row) is the g-th vector of the shards concatenated in row order.

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
class SideArrays:
    """One side of one shard, in memory (being written) or memory-mapped (being read)."""

    vectors: np.ndarray            # [n, d] float16 or int8
    pos: np.ndarray                # [n, 4] int32
    ptr: np.ndarray                # [rows + 1] int64
    scale: np.ndarray | None = None
    offset: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.pos)

    def floats(self, lo: int = 0, hi: int | None = None) -> np.ndarray:
        """float32 vectors `lo:hi` (dequantized for int8)."""
        hi = len(self) if hi is None else hi
        if self.vectors.dtype == np.int8:
            return dequantize_int8(self.vectors[lo:hi], self.scale[lo:hi], self.offset[lo:hi])
        return _float32(self.vectors[lo:hi])

    def take(self, index: np.ndarray) -> np.ndarray:
        """float32 vectors at local positions `index`."""
        if self.vectors.dtype == np.int8:
            return dequantize_int8(self.vectors[index], self.scale[index], self.offset[index])
        return _float32(self.vectors[index])

    def scores_at(self, index: np.ndarray, query: np.ndarray) -> np.ndarray:
        """Inner products of the vectors at local positions `index` with a float32 `query`,
        without materialising dequantized int8 vectors: `scale * (codes . q) + offset * sum(q)`."""
        if self.vectors.dtype == np.int8:
            codes = self.vectors[index].astype(np.float32)
            return (codes @ query) * self.scale[index] + self.offset[index] * query.sum()
        return _float32(self.vectors[index]) @ query

    @classmethod
    def _with_ptr(cls, vectors, pos, counts, dtype) -> "SideArrays":
        ptr = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=ptr[1:])
        if dtype == "int8":
            codes, scale, offset = quantize_int8(vectors)
            return cls(codes, pos, ptr, scale, offset)
        if dtype != "float16":
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
        if len(vectors) and np.abs(vectors).max() > _FP16_MAX:
            raise ValueError("phrase vectors exceed the float16 range; dump them as int8")
        return cls(vectors.astype(np.float16), pos, ptr)


def pack_side(vectors: np.ndarray, pos: np.ndarray, first_row: int, rows: int,
              dtype: str) -> SideArrays:
    """`SideArrays` for a shard of `rows` passages starting at global row `first_row`."""
    pos = np.asarray(pos, dtype=np.int32).reshape(-1, 4)
    local = pos[:, 0].astype(np.int64) - first_row
    if len(local) and (local.min() < 0 or local.max() >= rows or np.any(np.diff(local) < 0)):
        raise ValueError("phrase positions must be sorted by row and inside the shard")
    counts = np.bincount(local, minlength=rows)
    return SideArrays._with_ptr(np.asarray(vectors, dtype=np.float32), pos, counts, dtype)


def write_shard(folder: Path, start: int, end: int, sides: dict[str, SideArrays],
                info: dict) -> Path:
    """Write a shard folder atomically: a temporary sibling, renamed into place when complete
    (an older folder of the same name, e.g. damaged, is replaced)."""
    final = folder / shard_dir_name(start, end)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=folder))
    try:
        for side, arrays in sides.items():
            for name in ("vectors", "pos", "ptr", "scale", "offset"):
                value = getattr(arrays, name)
                if value is not None:
                    _save(tmp / f"{side}_{name}.npy", value)
        counts = {f"{side}_count": len(arrays) for side, arrays in sides.items()}
        with open(tmp / SHARD_META, "w", encoding="utf-8") as handle:
            json.dump({"rows": [start, end], **counts, **info}, handle)
            handle.flush()
            os.fsync(handle.fileno())
        if final.exists():
            shutil.rmtree(final)
        os.rename(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def _save(path: Path, array: np.ndarray) -> None:
    with open(path, "wb") as handle:
        np.save(handle, np.ascontiguousarray(array), allow_pickle=False)
        handle.flush()
        os.fsync(handle.fileno())


def read_shard(folder: Path, start: int, end: int, dim: int, dtype: str) -> dict[str, SideArrays]:
    """Both sides of a shard, memory-mapped and checked; DataError naming the damaged file."""
    path = folder / shard_dir_name(start, end)
    meta_path = path / SHARD_META
    if not meta_path.exists():
        raise DataError(f"shard missing or unfinished (rows {start}-{end})", path)
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DataError(f"damaged shard metadata: {exc}", meta_path) from None
    sides = {}
    for side in SIDES:
        count = meta.get(f"{side}_count")
        arrays = {}
        expect = {"vectors": ((count, dim), dtype), "pos": ((count, 4), "int32"),
                  "ptr": ((end - start + 1,), "int64")}
        if dtype == "int8":
            expect.update(scale=((count,), "float32"), offset=((count,), "float32"))
        for name, (shape, kind) in expect.items():
            file = path / f"{side}_{name}.npy"
            try:
                # copy-on-write: writable views (torch.from_numpy needs them), never written
                array = np.load(file, mmap_mode="c", allow_pickle=False)
            except (OSError, ValueError) as exc:
                raise DataError(f"damaged shard: {exc}", file) from None
            if array.shape != shape or array.dtype != np.dtype(kind):
                raise DataError(f"damaged shard: {array.shape} {array.dtype}, expected {shape} "
                                f"{kind}", file)
            # a plain ndarray view of the map: slicing a np.memmap costs ~10x more per call
            arrays[name] = np.asarray(array)
        if arrays["ptr"][-1] != count:
            raise DataError(f"damaged shard: ptr ends at {arrays['ptr'][-1]}, {count} vectors",
                            path / f"{side}_ptr.npy")
        sides[side] = SideArrays(**arrays)
    return sides


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
        return int(self.shards[0].vectors.shape[1])

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
            out[chosen] = self.shards[s].pos[local[chosen]]
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
        return arrays.pos[lo:hi], arrays.floats(lo, hi)

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
            positions.append(arrays.pos[index])
            scores.append(arrays.scores_at(index, query))
        if not positions:
            return np.zeros((0, 4), np.int32), np.zeros(0, np.float32)
        return np.concatenate(positions), np.concatenate(scores)

    def batches(self) -> Iterator[np.ndarray]:
        """float32 vectors shard by shard, in id order (never the whole side at once)."""
        for arrays in self.shards:
            yield arrays.floats()

    def nbytes(self) -> int:
        """Bytes these arrays take on disk (vectors, scale/offset, positions, pointers)."""
        total = 0
        for arrays in self.shards:
            for name in ("vectors", "pos", "ptr", "scale", "offset"):
                value = getattr(arrays, name)
                if value is not None:
                    total += value.nbytes
        return total



def _concatenated_ranges(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """`np.concatenate([np.arange(a, b) for a, b in zip(lo, hi)])` without the loop."""
    lengths = (hi - lo).astype(np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    starts = np.repeat(lo.astype(np.int64) - np.concatenate([[0], np.cumsum(lengths)[:-1]]),
                       lengths)
    return starts + np.arange(total, dtype=np.int64)
