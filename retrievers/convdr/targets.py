"""The teacher's embeddings of the rewrites: KD's targets, computed once and cached.

The teacher is frozen, so its embedding of a rewrite never changes during training: encoding
the rewrites once and reading the array back every epoch (and on every resume) costs one pass
of the teacher's query tower instead of one per step.

    FOLDER/targets.npy    float32 [n, dim], row i = the teacher's query embedding of text i
    FOLDER/targets.json   teacher fingerprint, count, sha256 of the texts, precision

A cache is reused only when the teacher fingerprint and the texts are the same; the array is
written atomically before its metadata, so a killed run recomputes rather than reads half a file.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import Sequence

import numpy as np

from convqa.errors import ConfigError
from convqa.io import load_json, write_json

TARGETS_FILE = "targets.npy"
TARGETS_META = "targets.json"
FORMAT = "convqa-convdr-targets"
VERSION = 1
_CHUNK = 1024


def texts_digest(texts: Sequence[str]) -> str:
    digest = hashlib.sha256()
    for text in texts:
        digest.update(text.encode("utf-8") + b"\x00")
    return digest.hexdigest()


def encode_teacher_queries(teacher, texts: Sequence[str], batch_size: int = 64,
                           precision: str = "fp32", progress: bool = False
                           ) -> tuple[np.ndarray, str]:
    """(float32 [n, dim] teacher query embeddings, precision used). `precision` auto measures
    the candidates on a sample and keeps the fastest that agrees with fp32 (convqa/precision.py);
    fp32 by default, since these are training targets."""
    from retrievers.dense.encode import choose_query_precision, encode_queries

    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ConfigError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    texts = list(texts)
    if texts:
        precision = choose_query_precision(teacher, texts[:batch_size], batch_size,
                                           precision).precision
    out = np.empty((len(texts), teacher.dim), dtype=np.float32)
    from tqdm.auto import tqdm

    with tqdm(total=len(texts), desc="teacher: rewrites", unit=" q",
              disable=not progress) as bar:
        for start in range(0, len(texts), _CHUNK):
            chunk = texts[start:start + _CHUNK]
            out[start:start + len(chunk)] = encode_queries(teacher, chunk, batch_size, precision)
            bar.update(len(chunk))
    return out, precision


def teacher_targets(teacher, texts: Sequence[str], folder: str | os.PathLike,
                    batch_size: int = 64, precision: str = "fp32", progress: bool = False,
                    fingerprint: str | None = None) -> np.ndarray:
    """The teacher's embeddings of `texts`, from `folder` when cached for this teacher and
    these texts, else computed and cached. `fingerprint`: the teacher's, if already known."""
    folder = Path(folder)
    fingerprint = fingerprint or teacher.fingerprint()
    record = {"format": FORMAT, "version": VERSION, "teacher_fingerprint": fingerprint,
              "count": len(texts), "texts_sha256": texts_digest(texts), "dim": teacher.dim}
    cached = load_targets(folder, record)
    if cached is not None:
        return cached
    vectors, precision = encode_teacher_queries(teacher, texts, batch_size, precision, progress)
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{TARGETS_FILE}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as handle:
            np.save(handle, vectors, allow_pickle=False)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, folder / TARGETS_FILE)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    write_json(folder / TARGETS_META, {**record, "precision": precision})
    return vectors


def load_targets(folder: str | os.PathLike, expected: dict) -> np.ndarray | None:
    """The cached array when its metadata matches `expected` (and its shape), else None."""
    folder = Path(folder)
    if not (folder / TARGETS_META).exists() or not (folder / TARGETS_FILE).exists():
        return None
    meta = load_json(folder / TARGETS_META)
    if not isinstance(meta, dict) or any(meta.get(k) != v for k, v in expected.items()):
        return None
    try:
        array = np.load(folder / TARGETS_FILE, allow_pickle=False)
    except (OSError, ValueError):
        return None
    if array.shape != (expected["count"], expected["dim"]) or array.dtype != np.float32:
        return None
    return array
