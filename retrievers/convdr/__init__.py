"""ConvDR: a conversational query encoder distilled from an ad hoc teacher.

The student reads the conversation; a frozen teacher dual encoder reads the human rewrite of the
same turn; the student learns to put its embedding where the teacher puts the rewrite (KD, MSE),
optionally with a ranking loss over a positive and teacher-mined negatives (Rank), or both
(multitask). Passages stay the teacher's: the teacher's passage index is searched unchanged.

- `model`: the `ConvDR` student (query tower + reference to the frozen teacher), save/load;
- `data`: examples from CANARD, OR-QuAC, CAsT-19 or JSONL; held-out split by conversation;
- `loss`: the KD, Rank and multitask losses;
- `targets`: the teacher's embeddings of the rewrites, computed once and cached;
- `mining`: teacher negatives (and optional pseudo-positives) from the teacher's index;
- `train`: the accelerate training loop with resumable checkpoints;
- `run`: examples -> targets -> mining -> training -> fidelity, resumable as a whole;
- `fidelity`: how close student(conversation) lands to teacher(rewrite), with baselines;
- `retriever`: the registered `convdr` retriever over the teacher's index;
- `orquac_bench`: a small retrieval benchmark over the OR-QuAC Wikipedia blocks.

Names are exported lazily so that importing the package does not import torch.
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "ConvDR": "model", "ConvDRConfig": "model",
    "ConvDRExample": "data", "PassageRef": "data", "load_examples_jsonl": "data",
    "save_examples_jsonl": "data", "split_heldout": "data", "build_examples": "data",
    "kd_loss": "loss", "rank_loss": "loss", "convdr_loss": "loss",
    "ConvDRTrainConfig": "train", "train_convdr": "train",
    "ConvDRRunConfig": "run", "run_convdr": "run",
    "similarity_stats": "fidelity",
    "ConvDRRetriever": "retriever", "ConvDRRetrieverConfig": "retriever",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
