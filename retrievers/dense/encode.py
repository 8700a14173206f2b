"""Encoding a passage corpus into vector shards: resumable, parallel under `accelerate`.

The corpus is cut into fixed row ranges (shards of `shard_size` passages, in store order;
convqa/corpus/shards.py, shared with the phrase dump).
Each shard is encoded by one process (shard i by process i % N), then written atomically
(temporary file, fsync, rename) as `shard-<start>-<end>.npy`, so a killed run loses at most the
shard each process was working on, and a rerun (with any number of processes) skips every shard
already present after checking its shape and dtype. `manifest.json` is written before encoding
starts (what encoder, which corpus, which precision) and marked complete at the end; a rerun
against another encoder or corpus is refused rather than mixing vectors.

Vectors are stored as float16 by default (half the disk of float32; for unit-length vectors the
rounding changes cosines by ~1e-6) or float32; the manifest records which.
"""
from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
import torch

from convqa.corpus import PassageStore
from convqa.corpus.shards import (MANIFEST, CorpusRows, ShardedFolder, ShardProcesses,
                                  check_resumable, eval_mode, shard_done)
from convqa.errors import ConfigError, ConvQAError, DataError
from convqa.io import write_json
from convqa.types import Passage

from convqa.precision import (AUTO, FP32, VECTOR_AGREEMENT, PrecisionChoice, autocast,
                              check_resumed_precision, choose_precision, min_cosine,
                              normalize_precision, prepare)

FORMAT = "convqa-dense-vectors"
VERSION = 1
DTYPES = ("float16", "float32")
_HEADER_FIELDS = ("fingerprint", "dim", "count", "corpus_checksum", "shard_size", "dtype")
_FP16_MAX = 65504.0

log = logging.getLogger(__name__)


def shard_name(start: int, end: int) -> str:
    return f"shard-{start:010d}-{end:010d}.npy"


def _pad(features: list[dict[str, list[int]]], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad token lists into tensors (CLS pooling needs [CLS] at position 0)."""
    length = max(len(f["input_ids"]) for f in features)
    batch = {"input_ids": torch.full((len(features), length), pad_id, dtype=torch.long),
             "attention_mask": torch.zeros((len(features), length), dtype=torch.long)}
    if "token_type_ids" in features[0]:
        batch["token_type_ids"] = torch.zeros((len(features), length), dtype=torch.long)
    for row, feature in enumerate(features):
        n = len(feature["input_ids"])
        batch["input_ids"][row, :n] = torch.tensor(feature["input_ids"])
        batch["attention_mask"][row, :n] = 1
        if "token_type_ids" in batch:
            batch["token_type_ids"][row, :n] = torch.tensor(feature["token_type_ids"])
    return batch


def encode_passages(model, passages: Sequence[Passage], batch_size: int = 32,
                    precision: str = FP32, sort: bool = True, bar=None) -> np.ndarray:
    """float32 `[len(passages), dim]` vectors in input order (no gradients).

    `sort` batches passages of similar token length together (longest first), which removes
    most padding; `bar` is an optional tqdm bar advanced per batch."""
    if not passages:
        return np.zeros((0, model.dim), dtype=np.float32)
    tokens = model.tokenize_passages(passages, padding=False)
    runner = prepare(model, precision)
    return encode_tokenized(runner.encode_passage, tokens, model.passage_tokenizer.pad_token_id,
                            model.dim, model.device, batch_size, precision, sort, bar)


def encode_queries(model, queries: Sequence[str], batch_size: int = 16,
                   precision: str = FP32, sort: bool = True) -> np.ndarray:
    """float32 `[len(queries), dim]` query vectors in input order, length-sorted batches."""
    if not queries:
        return np.zeros((0, model.dim), dtype=np.float32)
    tokens = model.tokenize_queries(queries, padding=False)
    runner = prepare(model, precision)
    return encode_tokenized(runner.encode_query, tokens, model.query_tokenizer.pad_token_id,
                            model.dim, model.device, batch_size, precision, sort)


def encode_tokenized(encode, tokens: dict[str, list[list[int]]], pad_id: int | None, dim: int,
                     device, batch_size: int, precision: str, sort: bool,
                     bar=None) -> np.ndarray:
    """Run `encode` over unpadded token lists in batches; vectors come back in input order."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
    if pad_id is None:
        raise ConfigError("the tokenizer has no padding token")
    keys = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in tokens]
    count = len(tokens["input_ids"])
    features = [{k: tokens[k][i] for k in keys} for i in range(count)]
    order = list(range(count))
    if sort:
        order.sort(key=lambda i: -len(features[i]["input_ids"]))
    out = np.empty((count, dim), dtype=np.float32)
    with torch.inference_mode(), autocast(precision, device):
        for begin in range(0, count, batch_size):
            rows = order[begin:begin + batch_size]
            vectors = encode(_pad([features[i] for i in rows], pad_id))
            out[rows] = vectors.float().cpu().numpy()
            if bar is not None:
                bar.update(len(rows))
    return out


@dataclass
class VectorShards(ShardedFolder):
    """A finished (or partial) folder of encoded vectors, read shard by shard."""

    folder: Path
    manifest: dict[str, Any]

    FORMAT = FORMAT
    VERSION = VERSION
    WHAT = "an encoded-vectors folder"
    KIND = "encoded-vectors"
    JOB = "encoding"

    def shard(self, start: int, end: int) -> np.ndarray:
        """One shard memory-mapped, checked against the manifest; DataError when damaged."""
        path = self.folder / shard_name(start, end)
        if not path.exists():
            raise DataError(f"shard missing (rows {start}-{end})", path)
        try:
            array = np.load(path, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise DataError(f"damaged shard: {exc}", path) from None
        if array.shape != (end - start, self.dim) or array.dtype != np.dtype(self.dtype):
            raise DataError(f"damaged shard: {array.shape} {array.dtype}, expected "
                            f"{(end - start, self.dim)} {self.dtype}", path)
        return array

    def iter_arrays(self) -> Iterator[tuple[int, np.ndarray]]:
        """(first row, float32 array) per shard, in row order: never the whole corpus at once."""
        for start, end in self.ranges():
            yield start, np.asarray(self.shard(start, end), dtype=np.float32)

    def load(self) -> np.ndarray:
        """All vectors as one float32 `[count, dim]` array."""
        out = np.empty((self.count, self.dim), dtype=np.float32)
        for start, array in self.iter_arrays():
            out[start:start + len(array)] = array
        return out

    def rows(self, indices: Sequence[int]) -> np.ndarray:
        """float32 vectors of the given rows (e.g. a training sample), in the order given."""
        indices = np.asarray(indices, dtype=np.int64)
        out = np.empty((len(indices), self.dim), dtype=np.float32)
        for start, end in self.ranges():
            selected = np.nonzero((indices >= start) & (indices < end))[0]
            if len(selected):
                out[selected] = self.shard(start, end)[indices[selected] - start]
        return out


def _write_shard(folder: Path, start: int, end: int, array: np.ndarray) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{shard_name(start, end)}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as handle:
            np.save(handle, array, allow_pickle=False)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, folder / shard_name(start, end))
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _header(model, corpus: CorpusRows, shard_size: int, dtype: str) -> dict[str, Any]:
    return {"format": FORMAT, "version": VERSION,
            "encoder": model.source or model.config.model, "fingerprint": model.fingerprint(),
            "dim": model.dim, "count": len(corpus), "corpus_checksum": corpus.checksum,
            "shard_size": shard_size, "dtype": dtype, "pooling": model.config.pooling,
            "normalize": model.config.normalize}


def choose_passage_precision(model, passages: Sequence[Passage], batch_size: int,
                             requested: str = AUTO, **probe: Any) -> PrecisionChoice:
    """The precision to encode passages in: `requested`, or for `auto` the fastest candidate
    whose vectors for `passages` (a probe sample) agree with fp32 (convqa/precision.py)."""
    return choose_precision(
        lambda precision: encode_passages(model, passages, batch_size, precision),
        min_cosine, threshold=VECTOR_AGREEMENT, what="passage encoding", device=model.device,
        requested=requested, **probe)


def choose_query_precision(model, queries: Sequence[str], batch_size: int,
                           requested: str = AUTO, **probe: Any) -> PrecisionChoice:
    """As `choose_passage_precision`, for query vectors of `queries`."""
    return choose_precision(
        lambda precision: encode_queries(model, queries, batch_size, precision),
        min_cosine, threshold=VECTOR_AGREEMENT, what="query encoding", device=model.device,
        requested=requested, **probe)


def encode_corpus(model, store_or_passages: PassageStore | Sequence[Passage],
                  out_dir: str | os.PathLike, batch_size: int = 32, precision: str = AUTO,
                  accelerator=None, *, shard_size: int = 1024, dtype: str = "float16",
                  progress: bool = True, check_size: int = 64) -> VectorShards:
    """Encode every passage with `model.encode_passage` into shards under `out_dir`; resume.

    `precision`: auto (the default: a probe of `check_size` passages spread over the corpus
    times fp32, bf16 and int8 and keeps the fastest whose vectors agree with fp32), or a fixed
    fp32 / bf16 / int8; batches are length-sorted. The choice and the probe's measurements are
    recorded in the manifest and kept on resume. Under `accelerate launch` (or with
    `accelerator` given) each
    process encodes its share of the shards on `accelerator.device`. The model is put in eval
    mode while encoding and restored after. Returns the finished `VectorShards`.
    """
    if dtype not in DTYPES:
        raise ConfigError(f"vector dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    precision = normalize_precision(precision)
    if isinstance(shard_size, bool) or not isinstance(shard_size, int) or shard_size < 1:
        raise ConfigError(f"shard_size must be a positive int, got {shard_size!r}")
    corpus = CorpusRows(store_or_passages)
    if len(corpus) == 0:
        raise ConvQAError("cannot encode an empty corpus")
    processes = ShardProcesses(model, accelerator)
    folder = Path(out_dir)
    with eval_mode(model):
        if processes.main:
            _start(model, corpus, folder, precision, batch_size, shard_size, dtype, check_size)
        processes.barrier()
        shards = VectorShards.open(folder, require_complete=False)
        precision = normalize_precision(shards.manifest["precision"], f"{folder}/{MANIFEST}")

        def work(start: int, end: int, bar) -> None:
            vectors = encode_passages(model, corpus.rows(start, end), batch_size, precision,
                                      sort=True, bar=bar)
            _write_shard(folder, start, end, _cast(vectors, dtype, start))

        count = processes.encode(
            shards.ranges(), lambda s, e: _valid(shards, s, e), work,
            f"encoding {len(corpus)} passages ({precision}, {processes.label})", progress)
        log.info("process %d/%d encoded %d shards", processes.rank, processes.world, count)
        processes.barrier()
        if processes.main:
            _finish(shards)
        processes.barrier()
    return VectorShards.open(folder)


def _start(model, corpus: CorpusRows, folder: Path, precision: str, batch_size: int,
           shard_size: int, dtype: str, check_size: int) -> None:
    """Main process: check or write the manifest header, clear leftovers of killed writes."""
    header = _header(model, corpus, shard_size, dtype)
    if (folder / MANIFEST).exists():
        old = VectorShards.open(folder, require_complete=False).manifest
        check_resumable(old, header, _HEADER_FIELDS, folder, "vectors")
        check_resumed_precision(old.get("precision"), precision, folder, "encoded")
        for leftover in folder.glob(".shard-*.tmp"):
            leftover.unlink(missing_ok=True)
        return
    if folder.exists() and any(folder.iterdir()):
        raise ConvQAError(f"{folder}: exists and is not an encoded-vectors folder")
    folder.mkdir(parents=True, exist_ok=True)
    choice = choose_passage_precision(model, corpus.spread(check_size), batch_size, precision)
    write_json(folder / MANIFEST, {**header, "precision": choice.precision,
                                   "precision_probe": choice.to_dict(), "complete": False})


def _valid(shards: VectorShards, start: int, end: int) -> bool:
    return shard_done(shards.folder / shard_name(start, end), lambda: shards.shard(start, end),
                      "re-encoding")


def _cast(vectors: np.ndarray, dtype: str, start: int) -> np.ndarray:
    if not np.isfinite(vectors).all():
        raise ConvQAError(f"the encoder produced non-finite vectors (rows from {start})")
    if dtype == "float16" and np.abs(vectors).max() > _FP16_MAX:
        raise ConvQAError(f"vectors exceed the float16 range (rows from {start}); "
                          "encode with dtype='float32'")
    return vectors.astype(dtype, copy=False)


def _finish(shards: VectorShards) -> None:
    for start, end in shards.ranges():
        shards.shard(start, end)  # raises if any process left its part undone
    expected = {shard_name(start, end) for start, end in shards.ranges()}
    stray = sorted(p.name for p in shards.folder.glob("shard-*.npy") if p.name not in expected)
    if stray:
        raise DataError(f"unexpected shard files {stray[:3]} (another shard size?)", shards.folder)
    write_json(shards.folder / MANIFEST, {**shards.manifest, "complete": True})
