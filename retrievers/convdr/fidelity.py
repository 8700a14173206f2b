"""Fidelity: how close the student's embedding of the conversation lands to the teacher's
embedding of the human rewrite, the quantity KD optimises, on examples the student never saw.

For each example with a rewrite, against t = teacher(rewrite) (the teacher's query tower):
- `student`: s = student(conversation text);
- `zero_shot`: the untrained student, i.e. the teacher's query tower reading the conversation
  text (same input and length as the student): the baseline training must beat;
- `question_only`: the teacher on the raw question q_t alone (no context at all).
Each reports the mean cosine, `mse` (mean over examples and dimensions of (a - t)^2, torch's
MSELoss; for unit vectors (2 - 2 cos) / dim) and `sq_l2` (mean ||a - t||^2, the KD loss).
Results are given overall and per source.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from convqa.errors import ConvQAError

from .data import ConvDRExample


def similarity_stats(vectors: np.ndarray, targets: np.ndarray) -> dict[str, float]:
    """Mean cosine, element-wise MSE and squared L2 distance between paired rows."""
    a = np.asarray(vectors, dtype=np.float64)
    b = np.asarray(targets, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 2:
        raise ValueError(f"paired [n, d] arrays needed, got {a.shape} and {b.shape}")
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    cosine = (a * b).sum(1) / np.maximum(norms, 1e-12)
    squared = ((a - b) ** 2)
    return {"cosine": round(float(cosine.mean()), 6), "mse": float(squared.mean()),
            "sq_l2": round(float(squared.sum(1).mean()), 6)}


def select_examples(examples: Sequence[ConvDRExample], max_examples: int | None = None,
                    seed: int = 0) -> list[ConvDRExample]:
    """The examples with a rewrite; at most `max_examples` of them, a seeded sample kept in
    input order."""
    usable = [e for e in examples if e.has_rewrite]
    if max_examples is not None and len(usable) > max_examples:
        keep = np.sort(np.random.default_rng(seed).choice(len(usable), max_examples,
                                                          replace=False))
        usable = [usable[i] for i in keep]
    return usable


def fidelity(model, examples: Sequence[ConvDRExample], history: Any = "questions_only",
             batch_size: int = 32, max_examples: int | None = None, seed: int = 0
             ) -> dict[str, Any]:
    """Fidelity of `model` (a ConvDR) on the examples with rewrites (see module doc). An
    example's student input is its `query` when set, else `history` applied to its turn."""
    from convqa.history import build_history_strategy
    from retrievers.dense.encode import encode_queries

    chosen = select_examples(examples, max_examples, seed)
    if not chosen:
        raise ConvQAError("no example with a rewrite to measure fidelity on")
    strategy = None
    queries = []
    for example in chosen:
        if example.query is None:
            strategy = strategy or build_history_strategy(history)
            queries.append(strategy.format(example.question, example.history))
        else:
            queries.append(example.query)
    was_training = model.training
    model.eval()
    try:
        encode = lambda encoder, texts: encode_queries(encoder, texts, batch_size)  # noqa: E731
        targets = encode(model.teacher, [e.rewrite for e in chosen])
        outputs = {"student": encode(model.as_dual_encoder(), queries),
                   "zero_shot": encode(model.zero_shot_encoder(), queries),
                   "question_only": encode(model.teacher, [e.question for e in chosen])}
    finally:
        model.train(was_training)
    result: dict[str, Any] = {"count": len(chosen)}
    result.update({name: similarity_stats(vectors, targets) for name, vectors in outputs.items()})
    sources = sorted({e.source for e in chosen})
    result["by_source"] = {}
    for source in sources:
        rows = np.array([i for i, e in enumerate(chosen) if e.source == source])
        result["by_source"][source] = {"count": len(rows), **{
            name: similarity_stats(vectors[rows], targets[rows])
            for name, vectors in outputs.items()}}
    result["teacher_fingerprint"] = model.teacher_fingerprint
    return result
