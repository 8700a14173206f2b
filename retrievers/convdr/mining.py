"""Rank-loss groups mined by the teacher: for each example a positive and the teacher's hard
negatives, all as the teacher's own passage embeddings (nothing is re-encoded).

The teacher retrieves the top `top_k` passages of its own dense index (built by `convqa index
--dense --model TEACHER`; its recorded fingerprint must be the teacher's) for the example's
rewrite, or, for an example without a rewrite, for the conversation text. Then:
- positives: the example's given positives: an id found in the index's passage store is that
  row; a positive given by text only (or whose id is not in the store but has a text) is encoded
  once by the teacher's passage tower ("extra" vectors); an id with no text that the store lacks
  cannot be used (counted as `positives_not_in_index`);
- pseudo-positives (`pseudo_positives`, off by default, recorded in the metadata): an example
  with a rewrite but no usable positive takes the teacher's top-1 on the rewrite as its
  positive. This is the teacher's judgement, not a label; it makes Rank trainable on data
  without gold passages (OR-QuAC train, CANARD);
- negatives: the top-k minus the positives, the example's `not_negatives` and any passage
  whose text equals a positive's text, best first.
An example left without a positive or without a negative gets no group; in multitask mode its
Rank term is masked (KD only), in rank mode it is not trained on.

    OUT/groups.jsonl   {"id", "positives": [keys], "negatives": [keys], "pseudo", "positive_ranks"}
    OUT/extra.npy      float32 teacher passage embeddings of text-only positives
    OUT/mining.json    provenance (teacher and index fingerprints, corpus checksum, k, pseudo,
                       examples digest) and counts; a rerun with the same provenance reuses it
A key >= 0 is a row of the teacher's index (= passage store position); a key < 0 is extra row
-1 - key.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from convqa.errors import ConfigError, ConvQAError, DataError
from convqa.io import iter_jsonl, load_json, require, write_json, write_jsonl
from convqa.types import Passage

from .data import ConvDRExample

GROUPS_FILE = "groups.jsonl"
EXTRA_FILE = "extra.npy"
MINING_META = "mining.json"
FORMAT = "convqa-convdr-groups"
VERSION = 1


@dataclass
class ConvDRMiningConfig:
    top_k: int = 50               # teacher candidates per example
    pseudo_positives: bool = False  # teacher's top-1 on the rewrite when no positive is given
    batch_size: int = 64

    def __post_init__(self) -> None:
        for name in ("top_k", "batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")


@dataclass
class Group:
    positives: list[int]
    negatives: list[int]
    pseudo: bool = False


def open_teacher_index(index_dir: str | os.PathLike, teacher_fingerprint: str,
                       passages: str | os.PathLike | None = None, mmap: bool = False):
    """(DenseIndex, PassageStore) of the teacher's index, checked to be the teacher's: same
    fingerprint, and the store the index was built over (unchanged)."""
    from convqa.corpus import PassageStore
    from retrievers.dense.index import DenseIndex

    index = DenseIndex.load(index_dir, mmap=mmap)
    if index.fingerprint != teacher_fingerprint:
        raise ConvQAError(
            f"{index_dir}: index built by encoder {index.meta.get('encoder')!r} (fingerprint "
            f"{index.fingerprint}), not by the ConvDR teacher (fingerprint "
            f"{teacher_fingerprint}); build it with `convqa index --dense --model TEACHER`")
    source = passages or index.meta.get("passages")
    if not source:
        raise ConfigError(f"{index_dir}: the index records no passage store; give one")
    store = PassageStore.open(Path(source))
    index.check(corpus_checksum=store.checksum)
    return index, store


class TeacherPassageVectors:
    """Teacher passage embeddings by key (see module doc): index rows are read from the index's
    `vectors/` shards (kept by `convqa index --dense`), or reconstructed from the FAISS index
    when those are gone; extra rows from an array."""

    def __init__(self, index_dir: str | os.PathLike, index=None,
                 extra: np.ndarray | None = None):
        from retrievers.dense.build import VECTORS_DIR
        from retrievers.dense.encode import VectorShards

        self.index = index
        self.extra = extra if extra is not None else np.zeros((0, 0), dtype=np.float32)
        self.shards = None
        folder = Path(index_dir) / VECTORS_DIR
        if folder.is_dir():
            shards = VectorShards.open(folder, require_complete=False)
            if shards.manifest.get("complete") and index is not None \
                    and shards.fingerprint == index.fingerprint and shards.count == index.count:
                self.shards = shards
        if self.shards is None and index is None:
            raise ConvQAError(f"{index_dir}: no usable vectors/ and no index to read from")

    @property
    def dim(self) -> int:
        return self.shards.dim if self.shards is not None else self.index.dim

    def get(self, keys: Sequence[int]) -> np.ndarray:
        keys = np.asarray(list(keys), dtype=np.int64)
        out = np.empty((len(keys), self.dim), dtype=np.float32)
        rows = keys >= 0
        if rows.any():
            out[rows] = self._rows(keys[rows])
        if (~rows).any():
            extra = -1 - keys[~rows]
            if extra.max() >= len(self.extra):
                raise ConvQAError(f"extra passage vector {int(extra.max())} does not exist "
                                  "(mining output damaged?)")
            out[~rows] = self.extra[extra]
        return out

    def _rows(self, rows: np.ndarray) -> np.ndarray:
        if self.shards is not None:
            return self.shards.rows(rows)
        try:
            return np.stack([self.index.index.reconstruct(int(r)) for r in rows])
        except RuntimeError as exc:
            raise ConvQAError(f"cannot read the teacher's passage vectors back from this index "
                              f"({str(exc).strip().splitlines()[-1]}); rebuild it with "
                              "`convqa index --dense` and keep its vectors/ folder") from None


def examples_digest(examples: Sequence[ConvDRExample]) -> str:
    digest = hashlib.sha256()
    for example in examples:
        digest.update(example.id.encode("utf-8") + b"\x00")
        for ref in example.positives:
            digest.update(repr((ref.id, ref.text, ref.title)).encode("utf-8"))
        digest.update(b"\x01" if example.has_rewrite else b"\x02")
        if example.not_negatives:
            digest.update(repr(sorted(example.not_negatives)).encode("utf-8"))
    return digest.hexdigest()


def provenance(teacher_fingerprint: str, index, store, examples: Sequence[ConvDRExample],
               config: ConvDRMiningConfig, query_digest: str) -> dict[str, Any]:
    return {"format": FORMAT, "version": VERSION, "teacher_fingerprint": teacher_fingerprint,
            "index_fingerprint": index.fingerprint, "corpus_checksum": store.checksum,
            "corpus_size": len(store), "k": config.top_k,
            "pseudo_positives": config.pseudo_positives, "examples": len(examples),
            "examples_sha256": examples_digest(examples), "queries_sha256": query_digest}


_SAME = ("format", "version", "teacher_fingerprint", "index_fingerprint", "corpus_checksum", "k",
         "pseudo_positives", "examples", "examples_sha256", "queries_sha256")


def mine_groups(teacher, examples: Sequence[ConvDRExample], query_vectors: np.ndarray,
                index_dir: str | os.PathLike, out_dir: str | os.PathLike,
                config: ConvDRMiningConfig | None = None, teacher_fingerprint: str | None = None,
                passages: str | os.PathLike | None = None, progress: bool = False
                ) -> dict[str, Any]:
    """Mine one group per example (see module doc) and write them to `out_dir`; returns the
    metadata. `query_vectors[i]` is the teacher's query embedding the top-k of example i is
    retrieved with (its rewrite's, or its conversation's when it has no rewrite)."""
    config = config or ConvDRMiningConfig()
    fingerprint = teacher_fingerprint or teacher.fingerprint()
    if len(query_vectors) != len(examples):
        raise ConfigError(f"{len(query_vectors)} query vectors for {len(examples)} examples")
    index, store = open_teacher_index(index_dir, fingerprint, passages)
    out = Path(out_dir)
    record = provenance(fingerprint, index, store, examples, config,
                        hashlib.sha256(np.ascontiguousarray(query_vectors, np.float32)
                                       .tobytes()).hexdigest())
    if (out / MINING_META).exists() and (out / GROUPS_FILE).exists():
        old = load_json(out / MINING_META)
        if isinstance(old, dict) and all(old.get(k) == record[k] for k in _SAME):
            return old
    scores, rows = index.search(np.ascontiguousarray(query_vectors, np.float32), config.top_k)
    extra_refs: dict[tuple[str, str], int] = {}
    records, counts = [], {"groups": 0, "pseudo": 0, "with_given_positive": 0,
                           "positives_not_in_index": 0, "no_positive": 0, "no_negative": 0,
                           "given_positive_in_top_k": 0}
    for example, ranked in zip(examples, rows):
        ranked = [int(r) for r in ranked if r >= 0]
        positives, texts = [], set()
        for ref in example.positives:
            if ref.id is not None and ref.id in store:
                positives.append(store.index(ref.id))
            elif ref.text:
                key = (ref.title, ref.text)
                positives.append(-1 - extra_refs.setdefault(key, len(extra_refs)))
                texts.add(ref.text.strip())
            else:
                counts["positives_not_in_index"] += 1
        positives = list(dict.fromkeys(positives))
        pseudo = False
        if positives:
            counts["with_given_positive"] += 1
        elif config.pseudo_positives and example.has_rewrite and ranked:
            positives, pseudo = [ranked[0]], True
        positive_ranks = [rank for rank, row in enumerate(ranked, 1) if row in positives]
        if positives and not pseudo and positive_ranks:
            counts["given_positive_in_top_k"] += 1
        taken = set(positives) | {store.index(pid) for pid in example.not_negatives
                                  if pid in store}
        negatives = [row for row in ranked if row not in taken
                     and not (texts and store.at(row).text.strip() in texts)]
        if not positives:
            counts["no_positive"] += 1
        elif not negatives:
            counts["no_negative"] += 1
        else:
            counts["groups"] += 1
            counts["pseudo"] += pseudo
        records.append({"id": example.id, "positives": positives, "negatives": negatives,
                        "pseudo": pseudo, "positive_ranks": positive_ranks})
    extra = _encode_extra(teacher, list(extra_refs), config.batch_size, progress)
    out.mkdir(parents=True, exist_ok=True)
    _save_array(out / EXTRA_FILE, extra)
    write_jsonl(out / GROUPS_FILE, records)
    record.update(counts=counts, extra_passages=len(extra_refs),
                  index=str(Path(index_dir).resolve()), corpus=str(Path(store.path).resolve()))
    write_json(out / MINING_META, record)
    return record


def _encode_extra(teacher, refs: list[tuple[str, str]], batch_size: int,
                  progress: bool) -> np.ndarray:
    from retrievers.dense.encode import encode_passages

    if not refs:
        return np.zeros((0, teacher.dim), dtype=np.float32)
    passages = [Passage(f"extra-{i}", text, title) for i, (title, text) in enumerate(refs)]
    return encode_passages(teacher, passages, batch_size)


def _save_array(path: Path, array: np.ndarray) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            np.save(handle, np.ascontiguousarray(array, np.float32), allow_pickle=False)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_groups(out_dir: str | os.PathLike, examples: Sequence[ConvDRExample]
                ) -> tuple[list[Group | None], np.ndarray]:
    """(one Group or None per example, in order; the extra vectors) from a mining output.
    Every example must have its line; a group needs a positive and a negative."""
    out = Path(out_dir)
    path = out / GROUPS_FILE
    by_id: dict[str, Group | None] = {}
    for line, data in iter_jsonl(path):
        example_id = require(data, "id", path, line, str)
        lists = []
        for name in ("positives", "negatives"):
            values = require(data, name, path, line, list)
            if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
                raise DataError("expected a list of integer keys", path, line, name)
            lists.append(values)
        pseudo = require(data, "pseudo", path, line, bool)
        by_id[example_id] = Group(lists[0], lists[1], pseudo) if all(lists) else None
    missing = [e.id for e in examples if e.id not in by_id]
    if missing:
        raise DataError(f"no group line for {len(missing)} examples (first: {missing[0]!r}); "
                        "mined for other examples?", path)
    extra = np.load(out / EXTRA_FILE, allow_pickle=False)
    return [by_id[e.id] for e in examples], extra
