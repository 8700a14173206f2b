"""The model card (README.md) every saved reranker folder carries: what the model is, how to
load it, and, for a trained one, what it was trained on and how it scored on held-out
questions, so a folder copied anywhere still says what it is."""
from __future__ import annotations

from typing import Any, Mapping

CARD_FILE = "README.md"


def model_card(meta: Mapping[str, Any], facts: Mapping[str, Any]) -> str:
    """Markdown from the folder's metadata and the training facts (may be empty)."""
    config = meta["config"]
    encoder = (f"LoRA adapter over {config['model']}" if meta.get("adapter")
               else f"all weights, started from {config['model']}")
    if config.get("encoder_layers"):
        encoder += f" (first {config['encoder_layers']} layers)"
    lines = [
        "# Cross-encoder passage reranker", "",
        "Rescores a retriever's top passages for a conversation: the query (the conversation "
        "formatted by its history strategy) and `title [SEP] passage text` are read together "
        f"by one encoder, and a linear head on its {config['pooling']} vector gives the "
        "relevance logit.", "",
        "    from retrievers.rerank import CrossEncoder",
        '    model = CrossEncoder.from_pretrained("THIS_FOLDER")', "",
        "or as a component: `{name: cross_encoder, model: THIS_FOLDER, top_n: 20}`.", "",
        "## Model", "",
        f"- Encoder: {encoder}; head: Linear({meta['hidden_size']}, 1).",
        f"- Input: query up to {config['max_query_length']} tokens, title up to "
        f"{config['max_title_length']}, {config['max_length']} tokens per pair in all.",
        f"- History strategy: {_spec(config.get('history'))}.",
        fingerprint_line(meta["fingerprint"]),
    ]
    data = facts.get("data") or {}
    if data:
        lines += ["", "## Training data", ""]
        for source, counts in sorted(data.items()):
            parts = [f"{label} {counts.get(f'{split}_examples', 0):,} questions "
                     f"({counts.get(f'{split}_article_negatives', 0):,} same-article and "
                     f"{counts.get(f'{split}_mined_negatives', 0):,} mined negatives)"
                     for split, label in (("train", "trained on"), ("heldout", "held out"))]
            lines.append(f"- {source}: {'; '.join(parts)}")
    training = facts.get("training") or {}
    if training:
        lines += ["", "## Training", "",
                  "- " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in training.items())]
    heldout = facts.get("heldout") or {}
    if heldout:
        lines += ["", "## Held-out ranking", "",
                  "The positive among its stored candidates (answer passage or gold paragraph "
                  "against same-article and mined negatives):", "",
                  "| source | questions | candidates (mean) | MRR | Hits@1 |",
                  "|---|---:|---:|---:|---:|"]
        for source, row in sorted(heldout.get("sources", {}).items()):
            lines.append(f"| {source} | {row['count']} | {row['candidates']:.1f} | "
                         f"{row['mrr']:.3f} | {row['hits@1']:.1f} |")
    return "\n".join(lines) + "\n"


def fingerprint_line(fingerprint: str, trained: str | None = None) -> str:
    """The card's fingerprint line. An exported folder's fingerprint differs from the trained
    model's it came from (`trained`), which the line then names beside it."""
    if trained is None:
        return f"- Fingerprint: {fingerprint}."
    return f"- Fingerprint: {fingerprint} (the adapter as stored; the trained model: {trained})."


def _spec(history: Any) -> str:
    if history is None:
        return "the reader's default (current question first)"
    if isinstance(history, dict):
        extra = ", ".join(f"{k} {v}" for k, v in history.items()
                          if k in ("max_tokens", "window"))
        return f"{history.get('name')}" + (f" ({extra})" if extra else "")
    return str(history)


def rewrite_card(folder: Any, meta: Mapping[str, Any], facts: Mapping[str, Any]) -> None:
    """Replace the card of a saved folder (atomically) from its metadata `meta`, e.g. once
    held-out scores exist."""
    from pathlib import Path

    from convqa.io import atomic_write

    with atomic_write(Path(folder) / CARD_FILE) as handle:
        handle.write(model_card(meta, facts))
