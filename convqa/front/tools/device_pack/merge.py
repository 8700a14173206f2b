"""A convqa reader or reranker folder (or a shipped model's alias) saved with full weights:
LoRA adapters merged, the tokenizer files beside them, so the folder needs no base model to
load. Carried to a GPU machine (which lacks the default model's package) or sent back from one
(where the base of its adapters was a path that exists only there)."""
from __future__ import annotations

import os
from pathlib import Path

from convqa.errors import DataError
from convqa.models import resolve_model


def reader_or_reranker(folder: Path) -> tuple[type, str]:
    """(model class, its metadata file) of an extractive reader or cross-encoder reranker
    folder; DataError naming the folder for anything else."""
    from readers.extractive.model import META_FILE as READER_META, ExtractiveReader
    from retrievers.rerank.model import META_FILE as RERANKER_META, CrossEncoder

    kinds = {READER_META: ExtractiveReader, RERANKER_META: CrossEncoder}
    found = [(cls, meta) for meta, cls in kinds.items() if (folder / meta).is_file()]
    if len(found) != 1:
        raise DataError(f"not a convqa reader or reranker folder (no {READER_META} or "
                        f"{RERANKER_META})", folder)
    return found[0]


def merge_model(model: str, out: str | os.PathLike) -> dict:
    folder = Path(resolve_model(model))
    cls, _ = reader_or_reranker(folder)
    loaded = cls.from_pretrained(folder)
    adapters = loaded.has_adapters
    if adapters:
        loaded.merge_adapters()
    loaded.save_pretrained(out, adapter_only=False)
    return {"kind": cls.__name__, "merged_adapters": adapters,
            "fingerprint": loaded.fingerprint()}
