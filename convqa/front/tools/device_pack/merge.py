"""A convqa reader or reranker folder (or a shipped model's alias) saved with full weights:
LoRA adapters merged, the tokenizer files beside them, so the folder needs no base model to
load. Carried to a GPU machine (which lacks the default model's package) or sent back from one
(where the base of its adapters was a path that exists only there)."""
from __future__ import annotations

import os
from pathlib import Path

from convqa.errors import DataError
from convqa.models import resolve_model


def merge_model(model: str, out: str | os.PathLike) -> dict:
    from readers.extractive.model import META_FILE as READER_META, ExtractiveReader
    from retrievers.rerank.model import META_FILE as RERANKER_META, CrossEncoder

    folder = Path(resolve_model(model))
    kinds = {READER_META: ExtractiveReader, RERANKER_META: CrossEncoder}
    found = [cls for meta, cls in kinds.items() if (folder / meta).is_file()]
    if len(found) != 1:
        raise DataError(f"not a convqa reader or reranker folder (no {READER_META} or "
                        f"{RERANKER_META})", folder)
    loaded = found[0].from_pretrained(folder)
    adapters = loaded.has_adapters
    if adapters:
        loaded.merge_adapters()
    loaded.save_pretrained(out, adapter_only=False)
    return {"kind": found[0].__name__, "merged_adapters": adapters,
            "fingerprint": loaded.fingerprint()}
