"""An on-disk passage collection with random access by id, for corpora far larger than memory.

A store is a folder:
- `passages.jsonl`: one `{"id", "title", "text"}` object a line, in the order they were given;
  passage `i` of the store is line `i + 1` (dense indexes use this order for their rows);
- `offsets.npy`: int64 byte offsets, `count + 1` of them, passage `i` is bytes
  `offsets[i]:offsets[i+1]`;
- `ids.bin` + `id_offsets.npy`: the ids as UTF-8, concatenated in store order;
- `id_order.npy`: int64 store positions sorted by id (UTF-8 byte order), for binary search;
- `meta.json`: format, version, count, `sha256:` checksum of passages.jsonl, max_words.

Opening maps these files (numpy memmap, mmap) instead of reading them, so an open store costs
almost no memory and several processes share the page cache; a lookup is a binary search of
~log2(count) id comparisons plus one JSON line parse. Ids are kept in a compact byte blob rather
than a dict, which for 221k passages would cost ~30 MB per process.

`build` writes everything into a temporary sibling folder and renames it into place only when
complete, so a failure (bad passage, duplicate id, full disk, Ctrl-C) leaves no store behind and
an older store at the same path untouched.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import mmap
import os
import shutil
import tempfile
from array import array
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np

from ..errors import ConvQAError, DataError
from ..io import load_format_json, load_json, write_json
from ..types import Passage

FORMAT = "convqa-passage-store"
VERSION = 1
PASSAGES, OFFSETS, IDS, ID_OFFSETS, ID_ORDER, META = (
    "passages.jsonl", "offsets.npy", "ids.bin", "id_offsets.npy", "id_order.npy", "meta.json")


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):  # not supported everywhere; best effort
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _check_passage(passage: Any, store: Path, number: int) -> bytes:
    """The JSONL line for `passage` (number is 1-based), or a DataError saying what is wrong."""
    if not isinstance(passage, Passage):
        raise DataError(f"passage {number}: expected a Passage, got {type(passage).__name__}",
                        store)
    for field in ("id", "text"):
        value = getattr(passage, field)
        if not isinstance(value, str) or not value.strip():
            raise DataError(f"passage {number}: empty or not a string", store, None, field)
    if not isinstance(passage.title, str):
        raise DataError(f"passage {number}: not a string", store, None, "title")
    try:
        return (json.dumps(passage.to_dict(), ensure_ascii=False) + "\n").encode("utf-8")
    except UnicodeEncodeError:
        raise DataError(f"passage {number} ({passage.id!r}): not encodable as UTF-8",
                        store) from None


def _write_files(passages: Iterable[Passage], folder: Path, store: Path,
                 progress: bool) -> tuple[int, str]:
    """Write passages, offsets and ids into `folder`; returns (count, sha256 hex)."""
    from tqdm.auto import tqdm

    digest = hashlib.sha256()
    offsets, id_offsets = array("q", [0]), array("q", [0])
    ids: list[str] = []
    total = len(passages) if hasattr(passages, "__len__") else None
    bar = tqdm(passages, total=total, desc=f"passage store {store.name}", unit=" passages",
               disable=not progress)
    with open(folder / PASSAGES, "wb") as out, open(folder / IDS, "wb") as id_out:
        for number, passage in enumerate(bar, start=1):
            line = _check_passage(passage, store, number)
            out.write(line)
            digest.update(line)
            offsets.append(offsets[-1] + len(line))
            pid = passage.id.encode("utf-8")
            id_out.write(pid)
            id_offsets.append(id_offsets[-1] + len(pid))
            ids.append(passage.id)
        for handle in (out, id_out):
            handle.flush()
            os.fsync(handle.fileno())
    bar.close()
    # Python compares str by code point, which is the UTF-8 byte order that lookups use.
    order = sorted(range(len(ids)), key=ids.__getitem__)
    for before, after in zip(order, order[1:]):
        if ids[before] == ids[after]:
            first, second = sorted((before, after))
            raise DataError(f"duplicate passage id {ids[after]!r} (passages {first + 1} and "
                            f"{second + 1})", store, None, "id")
    np.save(folder / OFFSETS, np.frombuffer(offsets, dtype=np.int64))
    np.save(folder / ID_OFFSETS, np.frombuffer(id_offsets, dtype=np.int64))
    np.save(folder / ID_ORDER, np.asarray(order, dtype=np.int64))
    return len(ids), digest.hexdigest()


STORE_FILES = frozenset((PASSAGES, OFFSETS, IDS, ID_OFFSETS, ID_ORDER, META))


def _is_store(path: Path) -> bool:
    """True for a store, even a damaged one (only store files in it): safe to replace."""
    if not path.is_dir():
        return False
    if set(os.listdir(path)) <= STORE_FILES:
        return True
    try:
        return load_json(path / META).get("format") == FORMAT
    except (ConvQAError, AttributeError):
        return False


def _install(folder: Path, path: Path, overwrite: bool) -> None:
    """Rename the finished `folder` to `path`, replacing an existing store if allowed."""
    if not path.exists():
        os.rename(folder, path)
    else:
        if not overwrite:
            raise ConvQAError(f"{path}: already exists; pass overwrite=True to replace it")
        if not _is_store(path):
            raise ConvQAError(f"{path}: exists and is not a passage store; not replacing it")
        old = Path(tempfile.mkdtemp(prefix=f".{path.name}.old-", dir=path.parent))
        os.rename(path, old / "store")
        os.rename(folder, path)
        shutil.rmtree(old, ignore_errors=True)
    _fsync_dir(path.parent)


class PassageStore:
    """Read access to a built store; use `PassageStore.build` / `PassageStore.open`."""

    def __init__(self, path: Path, meta: dict[str, Any]):
        self.path = path
        self.meta = meta
        self._count = meta["count"]
        self._offsets = self._array(OFFSETS, self._count + 1)
        self._id_offsets = self._array(ID_OFFSETS, self._count + 1)
        self._order = self._array(ID_ORDER, self._count)
        self._data = self._map(PASSAGES, int(self._offsets[-1]))
        self._ids = self._map(IDS, int(self._id_offsets[-1]))

    # -- building and opening -------------------------------------------------------------
    @classmethod
    def build(cls, passages: Iterable[Passage], path: str | os.PathLike, progress: bool = True,
              max_words: int | None = None, overwrite: bool = False,
              source: str | None = None) -> "PassageStore":
        """Write `passages` (streamed once) as a store at `path` and open it.

        `max_words` and `source` are recorded in meta.json for the record. Fails without leaving
        anything behind on a bad passage, a duplicate id, or an existing `path` (unless
        `overwrite` and it is a store).
        """
        path = Path(path)
        if path.exists() and not overwrite:
            raise ConvQAError(f"{path}: already exists; pass overwrite=True to replace it")
        if path.exists() and not _is_store(path):
            raise ConvQAError(f"{path}: exists and is not a passage store; not replacing it")
        path.parent.mkdir(parents=True, exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
        try:
            count, checksum = _write_files(passages, folder, path, progress)
            write_json(folder / META, {
                "format": FORMAT, "version": VERSION, "count": count,
                "checksum": f"sha256:{checksum}", "max_words": max_words, "source": source,
                "bytes": (folder / PASSAGES).stat().st_size})
            _install(folder, path, overwrite)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        return cls.open(path)

    @classmethod
    def open(cls, path: str | os.PathLike) -> "PassageStore":
        """Open a store built by `build`; a missing or inconsistent file is a DataError."""
        path = Path(path)
        if not path.is_dir():
            raise DataError("not a passage store (expected a folder with meta.json)", path)
        meta = load_format_json(path / META, FORMAT, VERSION, "passage store")
        count = meta.get("count")
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise DataError("expected a non-negative integer", path / META, None, "count")
        return cls(path, meta)

    def _array(self, name: str, length: int) -> np.ndarray:
        file = self.path / name
        try:
            values = np.load(file, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise DataError(f"cannot read store array: {exc}", file) from None
        if values.dtype != np.int64 or values.shape != (length,):
            raise DataError(f"expected {length} int64 values, found {values.shape} {values.dtype}"
                            " (store damaged?)", file)
        return values

    def _map(self, name: str, size: int) -> mmap.mmap | bytes:
        file = self.path / name
        try:
            actual = file.stat().st_size
            if actual != size:
                raise DataError(f"is {actual} bytes, the index says {size} (store damaged?)", file)
            if size == 0:
                return b""  # mmap cannot map an empty file
            with open(file, "rb") as handle:
                return mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        except OSError as exc:
            raise DataError(f"cannot read: {exc}", file) from None

    # -- access ---------------------------------------------------------------------------
    @property
    def checksum(self) -> str:
        """`sha256:<hex>` of passages.jsonl: indexes record it to detect a changed corpus."""
        return self.meta["checksum"]

    def __len__(self) -> int:
        return self._count

    def id_at(self, index: int) -> str:
        """Id of the passage at store position `index` (0-based)."""
        if not 0 <= index < self._count:
            raise IndexError(f"passage index {index} out of range for {self._count} passages")
        start, end = self._id_offsets[index], self._id_offsets[index + 1]
        return self._ids[start:end].decode("utf-8")

    def at(self, index: int) -> Passage:
        """The passage at store position `index` (0-based), e.g. a dense index row."""
        if not 0 <= index < self._count:
            raise IndexError(f"passage index {index} out of range for {self._count} passages")
        line = self._data[self._offsets[index]:self._offsets[index + 1]]
        return Passage.from_dict(json.loads(line))

    def index(self, pid: str) -> int:
        """Store position of passage `pid`; KeyError when absent."""
        key = pid.encode("utf-8")
        lo, hi = 0, self._count
        while lo < hi:  # leftmost position whose id is >= key
            mid = (lo + hi) // 2
            position = int(self._order[mid])
            if self._ids[self._id_offsets[position]:self._id_offsets[position + 1]] < key:
                lo = mid + 1
            else:
                hi = mid
        if lo < self._count:
            position = int(self._order[lo])
            if self._ids[self._id_offsets[position]:self._id_offsets[position + 1]] == key:
                return position
        raise KeyError(pid)

    def get(self, pid: str) -> Passage:
        """The passage with id `pid`; KeyError when absent."""
        return self.at(self.index(pid))

    __getitem__ = get

    def __contains__(self, pid: object) -> bool:
        if not isinstance(pid, str):
            return False
        try:
            self.index(pid)
        except KeyError:
            return False
        return True

    def __iter__(self) -> Iterator[Passage]:
        """All passages in store order, read sequentially (nothing is held)."""
        with open(self.path / PASSAGES, "rb") as handle:
            for line in handle:
                yield Passage.from_dict(json.loads(line))

    def ids(self) -> Iterator[str]:
        """All ids in store order, without parsing the passages."""
        for index in range(self._count):
            yield self.id_at(index)

    def verify(self) -> None:
        """Recompute the checksum of passages.jsonl; DataError if it differs from meta.json."""
        digest = hashlib.sha256()
        with open(self.path / PASSAGES, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        if f"sha256:{digest.hexdigest()}" != self.checksum:
            raise DataError("checksum differs from meta.json: the passages were changed",
                            self.path / PASSAGES)

    def close(self) -> None:
        for mapped in (self._data, self._ids):
            if isinstance(mapped, mmap.mmap):
                mapped.close()

    def __enter__(self) -> "PassageStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PassageStore({str(self.path)!r}, {self._count} passages)"
