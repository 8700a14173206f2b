"""Dense retrieval: dual encoder (`model`), sharded corpus encoding (`encode`), FAISS index
(`index`), one-call index building (`build`) and the registered `dense` retriever (`retriever`).

Names are exported lazily so that importing the package (e.g. to register the retriever) does
not import torch or faiss.
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "DualEncoder": "model", "DualEncoderConfig": "model",
    "encode_corpus": "encode", "encode_passages": "encode", "VectorShards": "encode",
    "passages_checksum": "encode",
    "DenseIndex": "index",
    "build_dense_index": "build", "load_encoder": "build",
    "DenseRetriever": "retriever", "DenseRetrieverConfig": "retriever",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
