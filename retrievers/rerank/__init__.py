"""Cross-encoder reranking: the retriever's top passages rescored on (conversation, passage),
so the passage that answers can rise above its siblings of the same article.

- `model`: `CrossEncoder` (build, from_pretrained, save_pretrained, LoRA, fingerprint);
- `card`: the model card every saved folder carries;
- `reranker`: the `cross_encoder` component of the RERANKERS registry (`rerank`, `rerank_turn`);
- `data`: training examples (JSONL format) from a TopiOCQA x Wikipedia benchmark and from
  SQuAD-format files, and the one-file examples export;
- `train`: the listwise loss, the accelerate trainer and the held-out MRR / Hits@1;
- `run`: one resumable run, examples -> training -> held-out scores (`convqa train reranker`
  and `convqa train reranker-examples`: convqa/front/cli/train_reranker.py).

Names are exported lazily so that importing the package does not import torch.
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "CrossEncoder": "model", "CrossEncoderConfig": "model",
    "CrossEncoderReranker": "reranker", "CrossEncoderRerankerOptions": "reranker",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
