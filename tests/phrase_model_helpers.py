"""Shared by tests/test_phrase_*.py: tiny random phrase models with MiniLM's tokenizer."""
from __future__ import annotations

from pathlib import Path

from reader_helpers import bert_config, one_thread, save_tiny_encoder  # noqa: F401 (re-exported)


def phrase_config(**overrides):
    from phrase_index.model import PhraseModelConfig

    base = dict(base="tiny-random-bert", max_passage_tokens=64, max_query_tokens=32,
                max_answer_tokens=6, max_title_tokens=8)
    return PhraseModelConfig(**{**base, **overrides})


def tiny_phrase_model(seed: int = 0, dropout: float = 0.0, **overrides):
    """A random 2-layer, 32-d BERT phrase model (separate query tower unless overridden)."""
    from phrase_index.model import PhraseModel

    return PhraseModel.from_config_random(phrase_config(**overrides), bert_config(dropout),
                                          seed=seed)


def tiny_base(folder: Path, seed: int = 0) -> Path:
    """A plain tiny HF checkpoint on disk, to build phrase models (and LoRA bases) from."""
    return save_tiny_encoder(folder, seed)


def tiny_phrase_index(root: Path, store: Path, seed: int = 0) -> Path:
    """`convqa index --phrase` (the production command) over the passage store `store` with a
    saved tiny random model: returns the index folder `root/phrase-index`. For tests of what
    uses a phrase index (demo, evaluation); its answers are random but real phrases."""
    from convqa.front.cli.main import main

    root.mkdir(parents=True, exist_ok=True)
    tiny_phrase_model(seed=seed).save(root / "model")
    with one_thread():
        status = main(["index", "--phrase", "--model", str(root / "model"), "--passages",
                       str(store), "--out", str(root / "phrase-index"), "--quiet",
                       "--batch-size", "8", "--overwrite"])
    assert status == 0, f"convqa index --phrase failed ({status})"
    return root / "phrase-index"
