"""The phrase index: FAISS over the start and the end vectors of a phrase dump, tied to the model
and the corpus they came from.

A saved phrase index is a folder:
- `phrase_index.json`: model (path), its phrase fingerprint, corpus checksum and passage store,
  the two factories, vector counts and the bytes each part takes;
- `start/`, `end/`: one FAISS inner-product index per side, saved by the dense index code
  (`retrievers.dense.index.DenseIndex`: atomic writes, size check on load); FAISS row g is
  vector g of that side of the dump;
- the dump itself (`dump/` when built by `build_phrase_index`), which the search reads to score
  the other end of a phrase and to rescore candidates exactly (FAISS only proposes them, so a
  compressed IVF-PQ index loses recall but never distorts a score).

Small corpora get `Flat` (exact, 4 bytes per dimension per vector); above `flat_max` vectors per
side an IVF-PQ index (`IVF{lists},PQ{d/8}`: d/8 bytes per vector) is chosen; any FAISS factory
string overrides the choice.
"""
from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from convqa.errors import ConfigError, ConvQAError, DataError
from convqa.io import load_format_json, write_json
from convqa.index_folder import finished_index_meta
from convqa.index_match import check_index_match
from retrievers.dense.index import (FORMAT as DENSE_FORMAT, VERSION as DENSE_VERSION,
                                    DenseIndex, add_batches, make_index, search_defaults,
                                    train_index)

from .dump import PhraseDump
from .vectors import SIDES

META_FILE = "phrase_index.json"
FORMAT = "convqa-phrase-index"
VERSION = 1
FLAT_MAX = 500_000        # vectors per side up to which Flat is chosen (~0.75 GB fp32 at 384-d)
DUMP_DIR = "dump"


def choose_factory(count: int, dim: int, flat_max: int = FLAT_MAX) -> str:
    """`Flat` up to `flat_max` vectors, else IVF-PQ with up to 4 sqrt(n) lists (a power of two,
    at least 39 training vectors each) and d/8 sub-quantizers of 8 bits (the largest divisor of d
    not above d/8)."""
    if count <= flat_max:
        return "Flat"
    lists = 2 ** math.floor(math.log2(max(16.0, 4 * math.sqrt(count))))
    while lists > 16 and count < 39 * lists:
        lists //= 2
    m = max(k for k in range(1, max(1, dim // 8) + 1) if dim % k == 0)
    return f"IVF{lists},PQ{m}"


def check_built(folder: Path) -> Path:
    """The metadata file of a phrase index folder (plain or compact), or one line saying what
    the folder is instead (convqa/index_folder.py)."""
    return finished_index_meta(folder, META_FILE, DUMP_DIR, "phrase")


def side_index_meta(index, factory: str, dump: PhraseDump, side: str, count: int
                    ) -> dict[str, Any]:
    """The DenseIndex metadata of a FAISS index over phrase vectors of `dump` (`side`: start,
    end, or both for the compact index's single index)."""
    import faiss

    return {"format": DENSE_FORMAT, "version": DENSE_VERSION, "factory": factory,
            "metric": "inner_product", "encoder": dump.manifest.get("model"),
            "fingerprint": dump.fingerprint, "dim": dump.dim, "count": count,
            "corpus_checksum": dump.corpus_checksum, "vector_dtype": dump.dtype,
            "faiss_version": faiss.__version__, "phrase_side": side, **search_defaults(index)}


class IndexMeta:
    """What both kinds of phrase index (this one and compact.CompactPhraseIndex) read from
    their `meta`, and the check of a model and a passage store against it."""

    meta: dict[str, Any]

    @property
    def count(self) -> int:
        """Passages covered."""
        return int(self.meta["count"])

    @property
    def dim(self) -> int:
        return int(self.meta["dim"])

    @property
    def fingerprint(self) -> str:
        return str(self.meta["fingerprint"])

    @property
    def max_answer_tokens(self) -> int | None:
        value = self.meta.get("max_answer_tokens")
        return int(value) if value is not None else None

    def check(self, fingerprint: str | None = None, corpus_checksum: str | None = None,
              model_name: str | None = None) -> None:
        """ConvQAError unless the model and the passage store are the index's."""
        check_index_match("phrase index", "model", self.meta, self.fingerprint, fingerprint,
                          model_name, corpus_checksum)


def _build_side(dump: PhraseDump, side: str, factory: str, train_size: int | None, seed: int,
                progress: bool) -> DenseIndex:
    vectors = dump.side(side)
    count, dim = vectors.count, dump.dim
    if count == 0:
        raise ConvQAError(f"the phrase dump {dump.folder} kept no {side} vectors (filter "
                          f"threshold {dump.manifest.get(f'{side}_threshold')}); dump again "
                          "with a lower threshold or a larger keep fraction")
    index = make_index(factory, dim)
    train_index(index, factory, count, vectors.vectors, train_size=train_size, seed=seed,
                what=f"{side} vectors", source="the dump")
    add_batches(index, vectors.batches(), count, f"FAISS {factory} ({side})", progress)
    meta = side_index_meta(index, factory, dump, side, count)
    return DenseIndex(index, meta)


class PhraseIndex(IndexMeta):
    """Two FAISS indexes (start, end) over a phrase dump; `build`, `save`, `load`, `check`."""

    def __init__(self, dump: PhraseDump, sides: dict[str, DenseIndex], meta: dict[str, Any]):
        self.dump = dump
        self.sides = sides
        self.meta = meta

    @classmethod
    def build(cls, dump: PhraseDump | str | os.PathLike, factory: str | None = None, *,
              flat_max: int = FLAT_MAX, train_size: int | None = None, seed: int = 0,
              passages: str | None = None, progress: bool = False) -> "PhraseIndex":
        """FAISS indexes of both sides of a finished dump; `factory` None chooses by size
        (`choose_factory`), the same factory string is used for both sides otherwise."""
        began = time.perf_counter()
        if not isinstance(dump, PhraseDump):
            dump = PhraseDump.open(dump)
        factories = {side: factory or choose_factory(dump.side(side).count, dump.dim, flat_max)
                     for side in SIDES}
        sides = {side: _build_side(dump, side, factories[side], train_size, seed, progress)
                 for side in SIDES}
        manifest = dump.manifest
        meta = {"format": FORMAT, "version": VERSION, "model": manifest.get("model"),
                "fingerprint": dump.fingerprint, "corpus_checksum": dump.corpus_checksum,
                "passages": passages, "count": dump.count, "dim": dump.dim,
                "dtype": dump.dtype, "factory": factories,
                "vectors": {side: sides[side].count for side in SIDES},
                "max_answer_tokens": manifest.get("max_answer_tokens"),
                "build_seconds": round(time.perf_counter() - began, 2)}
        return cls(dump, sides, meta)

    # -- saving and loading ---------------------------------------------------------------
    def save(self, folder: str | os.PathLike) -> None:
        """Write `start/`, `end/` then `phrase_index.json` (last, so a half-saved index is
        never loaded). The dump is referenced, relative to `folder` when inside it."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        for side in SIDES:
            self.sides[side].save(folder / side)
        dump_path = Path(self.dump.folder).resolve()
        try:
            dump_ref = str(dump_path.relative_to(folder.resolve()))
        except ValueError:
            dump_ref = str(dump_path)
        index_bytes = {side: int(self.sides[side].meta["index_bytes"]) for side in SIDES}
        dump_bytes = self.dump.nbytes()
        total = dump_bytes + sum(index_bytes.values())
        self.meta.update({"dump": dump_ref, "bytes": {"dump": dump_bytes, **index_bytes,
                                                      "total": total},
                          "bytes_per_passage": round(total / max(1, self.count), 1)})
        write_json(folder / META_FILE, self.meta)

    @classmethod
    def load(cls, folder: str | os.PathLike, mmap: bool = False) -> "PhraseIndex":
        """Open a saved phrase index (its dump memory-mapped); `mmap` maps Flat indexes too."""
        folder = Path(folder)
        path = check_built(folder)
        meta = load_format_json(path, FORMAT, VERSION, "phrase index")
        dump_ref = meta.get("dump")
        if not isinstance(dump_ref, str):
            raise DataError("missing or not a string", path, None, "dump")
        dump = PhraseDump.open(folder / dump_ref)
        sides = {side: DenseIndex.load(folder / side, mmap=mmap) for side in SIDES}
        for side in SIDES:
            side_meta = sides[side].meta
            expected = dump.side(side).count
            if side_meta.get("fingerprint") != dump.fingerprint or sides[side].count != expected:
                raise DataError(f"the {side} index ({sides[side].count} vectors, fingerprint "
                                f"{side_meta.get('fingerprint')}) does not match the dump "
                                f"({expected} vectors, fingerprint {dump.fingerprint}); "
                                "rebuild the index", folder / side)
        if meta.get("fingerprint") != dump.fingerprint:
            raise DataError(f"index fingerprint {meta.get('fingerprint')} differs from its "
                            f"dump's {dump.fingerprint}; rebuild the index", path)
        return cls(dump, sides, meta)

    # -- use ------------------------------------------------------------------------------
    def bytes_per_passage(self) -> float:
        """Dump + both FAISS indexes, per passage (as recorded by `save`; computed for an
        index not saved yet)."""
        if "bytes_per_passage" in self.meta:
            return float(self.meta["bytes_per_passage"])
        import faiss

        index_bytes = sum(faiss.serialize_index(self.sides[s].index).size for s in SIDES)
        return (self.dump.nbytes() + index_bytes) / max(1, self.count)

    def set_nprobe(self, nprobe: int | None) -> None:
        for side in SIDES:
            self.sides[side].set_search_params(nprobe=nprobe)

    @property
    def nprobe(self) -> int | None:
        """IVF lists each side visits per query (None for flat side indexes)."""
        return self.sides[SIDES[0]].meta.get("nprobe")

    def search_side(self, side: str, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """FAISS (scores, vector ids) `[n, k]` of one side; ids are -1 where fewer than k."""
        return self.sides[side].search(queries, k)

    def side_positions(self, side: str, ids: np.ndarray) -> np.ndarray:
        """`[n, 4]` int32 (row, token, char start, char end) of a side's vector ids."""
        return self.dump.side(side).positions(ids)

    def gather(self, rows: np.ndarray, q_start: np.ndarray, q_end: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(start pos, start scores, end pos, end scores) of every kept token of the passages
        `rows` (sorted, unique), in (row, token) order, scored from the dump's vectors."""
        start_pos, start_scores = self.dump.side("start").gather_scores(rows, q_start)
        end_pos, end_scores = self.dump.side("end").gather_scores(rows, q_end)
        return start_pos, start_scores, end_pos, end_scores


def build_phrase_index(model, store, out_dir: str | os.PathLike, *, dtype: str = "float16",
                       factory: str | None = None, flat_max: int = FLAT_MAX,
                       start_threshold: float | None = None, end_threshold: float | None = None,
                       keep_fraction: float | None = None, batch_size: int = 16,
                       shard_size: int = 512, precision: str = "auto",
                       accelerator=None, train_size: int | None = None,
                       progress: bool = True) -> PhraseIndex:
    """Dump `store` with `model` into `out_dir/dump` (resumable, sharded, parallel under
    `accelerate launch`), then build and save the FAISS indexes in `out_dir`. A rerun resumes
    the dump and rebuilds the FAISS part. Returns the loaded index (on every process)."""
    from .dump import dump_corpus

    accelerator, store, out = build_inputs(model, store, out_dir, accelerator)
    dump = dump_corpus(model, store, out / DUMP_DIR, dtype=dtype, start_threshold=start_threshold,
                       end_threshold=end_threshold, keep_fraction=keep_fraction,
                       batch_size=batch_size,
                       shard_size=shard_size, precision=precision, accelerator=accelerator,
                       progress=progress)
    rank = accelerator.process_index if accelerator is not None else 0
    if rank == 0:
        index = PhraseIndex.build(dump, factory, flat_max=flat_max, train_size=train_size,
                                  passages=str(Path(store.path).resolve()), progress=progress)
        index.meta["model"] = _source_name(model.source)
        index.save(out)
    if accelerator is not None:
        accelerator.wait_for_everyone()
    return PhraseIndex.load(out)


def build_inputs(model, store, out_dir: str | os.PathLike, accelerator=None):
    """(accelerator, passage store, output folder) of a phrase index build, checked: the
    launched accelerator unless one is given, the store opened, the folder not a file, the
    model saved (the index records where to load it from)."""
    from convqa.corpus import PassageStore

    from convqa.corpus.shards import launched_accelerator

    accelerator = accelerator if accelerator is not None else launched_accelerator()
    if not isinstance(store, PassageStore):
        store = PassageStore.open(store)
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ConvQAError(f"{out}: exists and is not a folder")
    if model.source is None:
        raise ConfigError("the phrase model has no folder (save it first): the index records "
                          "where to load it from")
    return accelerator, store, out


def _source_name(source: str) -> str:
    """An absolute path for a local folder, else the name as given."""
    return str(Path(source).resolve()) if Path(source).is_dir() else source
