"""A FAISS inner-product index over encoded passages, with the metadata that ties it to its
encoder and its corpus.

Row i of the index is passage i of the PassageStore it was built from (`store.id_at(i)`), so
the index holds no ids; `check` refuses a store with another checksum, and a query encoder
with another fingerprint or dimension, naming both sides.

A saved index is a folder: `index.faiss` and `dense_index.json`. Each is written atomically and
the metadata last, recording the index file's size, so an interrupted save is detected on load
instead of serving a half-written index.
"""
from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from convqa.errors import ConfigError, ConvQAError, DataError
from convqa.io import load_format_json, write_json
from convqa.index_folder import finished_index_meta
from convqa.index_match import check_index_match

from .encode import VectorShards

META_FILE = "dense_index.json"
INDEX_FILE = "index.faiss"
VECTORS_DIR = "vectors"        # the encoded passages of a build, kept to resume it
FORMAT = "convqa-dense-index"
VERSION = 1
DEFAULT_NPROBE = 32       # IVF lists visited per query (faiss's default of 1 loses much recall)
DEFAULT_EF_SEARCH = 128   # HNSW candidate list per query (faiss's default is 16)
DEFAULT_TRAIN_SIZE = 100_000  # vectors an IVF/PQ index is trained on, at least 39 per list


def _faiss():
    import faiss

    return faiss


def make_index(factory: str, dim: int):
    """An empty inner-product FAISS index from a factory string; ConfigError when bad."""
    faiss = _faiss()
    try:
        return faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as exc:
        reason = str(exc).strip().splitlines()[-1].split(":")[-1].strip()
        raise ConfigError(f"bad FAISS factory string {factory!r} for {dim}-d vectors: {reason}") \
            from None


def _skip_polysemous_training(index) -> None:
    """IVF-PQ trains a polysemous code order by default: slow (seconds per sub-quantizer) and
    only useful for Hamming-filtered search, which we never use."""
    faiss = _faiss()
    try:
        ivf = faiss.downcast_index(faiss.extract_index_ivf(index))
    except (RuntimeError, TypeError, AttributeError):
        return
    if hasattr(ivf, "do_polysemous_training"):
        ivf.do_polysemous_training = False


def ivf_lists(index) -> int | None:
    """The number of IVF lists of `index`, None when it has none."""
    faiss = _faiss()
    try:
        return faiss.extract_index_ivf(index).nlist
    except (RuntimeError, TypeError, AttributeError):
        return None


def train_index(index, factory: str, count: int, sample: Callable[[np.ndarray], np.ndarray], *,
                train_size: int | None = None, seed: int = 0, what: str = "vectors",
                source: str = "the corpus") -> None:
    """Train `index` (if it needs it: IVF, PQ) on a seeded random sample of `train_size` of the
    `count` vectors (default: up to 100k), read with `sample(sorted rows)`. An IVF with more
    lists than `what` vectors `source` has is refused."""
    if index.is_trained:
        return
    _skip_polysemous_training(index)
    lists = ivf_lists(index) or 1
    if count < lists:
        raise ConfigError(f"factory {factory!r} needs at least {lists} {what} to train its "
                          f"{lists} lists; {source} has {count}: use fewer lists")
    size = min(count, train_size or max(DEFAULT_TRAIN_SIZE, 39 * lists))
    rows = np.sort(np.random.default_rng(seed).choice(count, size, replace=False))
    index.train(_as_matrix(sample(rows), index.d))


def add_batches(index, batches: Iterable[np.ndarray], count: int, desc: str,
                progress: bool = False) -> None:
    """Add the vectors of `batches` (`count` in all) to `index`, with a progress bar."""
    from tqdm.auto import tqdm

    with tqdm(total=count, desc=desc, unit=" vec", disable=not progress) as bar:
        for array in batches:
            index.add(_as_matrix(array, index.d))
            bar.update(len(array))


def search_defaults(index) -> dict[str, int | None]:
    """The search settings saved with an index: nprobe for IVF, efSearch for HNSW."""
    return {"nprobe": DEFAULT_NPROBE if ivf_lists(index) else None,
            "ef_search": DEFAULT_EF_SEARCH if hasattr(index, "hnsw") else None}


def _as_matrix(vectors: np.ndarray, dim: int | None = None) -> np.ndarray:
    array = np.ascontiguousarray(vectors, dtype=np.float32)
    if array.ndim != 2 or (dim is not None and array.shape[1] != dim):
        raise ConvQAError(f"expected a [n, {dim or 'dim'}] matrix of vectors, got shape "
                          f"{array.shape}")
    return array


class DenseIndex:
    """`build` from encoded shards or an array, `save`/`load`, `search`, `check`."""

    def __init__(self, index, meta: dict[str, Any]):
        self.index = index
        self.meta = meta
        self.set_search_params(meta.get("nprobe"), meta.get("ef_search"))

    # -- building -------------------------------------------------------------------------
    @classmethod
    def build(cls, vectors: str | os.PathLike | VectorShards | np.ndarray, factory: str = "Flat",
              *, encoder: str | None = None, fingerprint: str | None = None,
              corpus_checksum: str | None = None, train_size: int | None = None,
              seed: int = 0, progress: bool = False) -> "DenseIndex":
        """An inner-product index of `vectors` (a folder written by `encode_corpus`, or a
        `[n, d]` array with the encoder/corpus metadata given as keywords).

        Indexes that need training (IVF, PQ) are trained on a random sample of `train_size`
        vectors (default: up to 100k); vectors are added shard by shard."""
        start_time = time.perf_counter()
        if isinstance(vectors, (str, os.PathLike)):
            vectors = VectorShards.open(vectors)
        if isinstance(vectors, VectorShards):
            manifest = vectors.manifest
            count, dim, dtype = vectors.count, vectors.dim, vectors.dtype
            encoder = encoder or manifest.get("encoder")
            fingerprint = fingerprint or vectors.fingerprint
            corpus_checksum = corpus_checksum or vectors.corpus_checksum
            batches = (array for _, array in vectors.iter_arrays())
            sample = vectors.rows
        else:
            array = _as_matrix(vectors)
            count, dim, dtype = array.shape[0], array.shape[1], str(np.asarray(vectors).dtype)
            batches = iter([array])
            sample = lambda rows: array[rows]  # noqa: E731
        if count == 0:
            raise ConvQAError("cannot index an empty set of vectors")
        index = make_index(factory, dim)
        train_index(index, factory, count, sample, train_size=train_size, seed=seed)
        add_batches(index, batches, count, f"FAISS {factory}", progress)
        faiss = _faiss()
        meta = {"format": FORMAT, "version": VERSION, "factory": factory,
                "metric": "inner_product", "encoder": encoder, "fingerprint": fingerprint,
                "dim": dim, "count": count, "corpus_checksum": corpus_checksum,
                "vector_dtype": dtype, "faiss_version": faiss.__version__,
                **search_defaults(index), "build_seconds": round(time.perf_counter() - start_time, 2)}
        return cls(index, meta)

    # -- saving and loading ---------------------------------------------------------------
    def save(self, folder: str | os.PathLike, **extra: Any) -> None:
        """Write `index.faiss` then `dense_index.json` (with `extra` fields), each atomically."""
        faiss = _faiss()
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{INDEX_FILE}.", suffix=".tmp", dir=folder)
        os.close(fd)
        try:
            faiss.write_index(self.index, tmp)
            with open(tmp, "rb") as handle:
                os.fsync(handle.fileno())
            size = os.path.getsize(tmp)
            os.replace(tmp, folder / INDEX_FILE)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self.meta.update(extra)
        self.meta["index_bytes"] = size
        write_json(folder / META_FILE, self.meta)

    @staticmethod
    def read_meta(folder: str | os.PathLike) -> dict[str, Any]:
        """The metadata of a saved index, checked against its index file (not loaded)."""
        folder = Path(folder)
        meta_path = finished_index_meta(folder, META_FILE, VECTORS_DIR, "dense")
        meta = load_format_json(meta_path, FORMAT, VERSION, "dense index")
        file = folder / INDEX_FILE
        if not file.exists() or file.stat().st_size != meta.get("index_bytes"):
            raise DataError(f"{INDEX_FILE} is missing or does not match {META_FILE} "
                            "(interrupted save?); rebuild the index", file)
        return meta

    @classmethod
    def load(cls, folder: str | os.PathLike, mmap: bool = False) -> "DenseIndex":
        """Open a saved index; `mmap` maps a Flat index instead of reading it into memory."""
        faiss = _faiss()
        meta = cls.read_meta(folder)
        file = Path(folder) / INDEX_FILE
        flags = faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY if mmap else 0
        try:
            index = faiss.read_index(str(file), flags)
        except RuntimeError as exc:
            raise DataError(f"cannot read FAISS index: {str(exc).strip().splitlines()[-1]}",
                            file) from None
        if index.ntotal != meta.get("count") or index.d != meta.get("dim"):
            raise DataError(f"index holds {index.ntotal} x {index.d}, metadata says "
                            f"{meta.get('count')} x {meta.get('dim')}", file)
        return cls(index, meta)

    # -- use ------------------------------------------------------------------------------
    @property
    def count(self) -> int:
        return int(self.index.ntotal)

    @property
    def dim(self) -> int:
        return int(self.index.d)

    @property
    def fingerprint(self) -> str | None:
        return self.meta.get("fingerprint")

    def set_search_params(self, nprobe: int | None = None, ef_search: int | None = None) -> None:
        faiss = _faiss()
        space = faiss.ParameterSpace()
        if nprobe is not None and ivf_lists(self.index):
            space.set_index_parameter(self.index, "nprobe", int(nprobe))
            self.meta["nprobe"] = int(nprobe)
        if ef_search is not None and hasattr(self.index, "hnsw"):
            space.set_index_parameter(self.index, "efSearch", int(ef_search))
            self.meta["ef_search"] = int(ef_search)

    def search(self, query_vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores `[n, k]` float32, row indices `[n, k]` int64); -1 where fewer than k.

        FAISS parallelises over queries, so a few queries get at most one OpenMP thread each:
        idle threads spinning cost a single query ~10x its time on a busy 2-core machine
        (measured 5 ms vs 0.5 ms on 12k x 384 Flat). The thread count is restored after."""
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ConfigError(f"k must be a positive int, got {k!r}")
        queries = _as_matrix(query_vectors, self.dim)
        faiss = _faiss()
        threads = faiss.omp_get_max_threads()
        if len(queries) >= threads:
            return self.index.search(queries, min(k, self.count))
        faiss.omp_set_num_threads(max(1, len(queries)))
        try:
            return self.index.search(queries, min(k, self.count))
        finally:
            faiss.omp_set_num_threads(threads)

    def check(self, fingerprint: str | None = None, dim: int | None = None,
              corpus_checksum: str | None = None, encoder_name: str | None = None) -> None:
        """ConvQAError unless the query encoder and the passage store match this index."""
        if dim is not None and dim != self.dim:
            raise ConvQAError(f"dense index (built with encoder {self.meta.get('encoder')!r}, "
                              f"fingerprint {self.fingerprint}) has {self.dim}-d vectors but "
                              f"encoder {encoder_name!r} (fingerprint {fingerprint}) makes "
                              f"{dim}-d vectors")
        check_index_match("dense index", "encoder", self.meta, self.fingerprint, fingerprint,
                          encoder_name, corpus_checksum)
