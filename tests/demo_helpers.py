"""A small real pipeline for the demo tests: BM25 over the passages of ~40 film articles of the
vital-article summaries (real Wikipedia text, installed with convqa), optionally with the
shipped extractive reader. Building the index takes well under a second."""
from __future__ import annotations

import socket
from pathlib import Path

FILM_ARTICLES = 40
FIRST_QUESTION = "Who directed 2001: A Space Odyssey?"
FOLLOW_UP = "When was it released?"
FILM_TITLE = "2001: A Space Odyssey"


def free_port() -> int:
    """A port of 127.0.0.1 that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def film_passages():
    from convqa.benchmark.vital import read_vital_articles
    from convqa.corpus import article_passages

    articles = [a for a in read_vital_articles() if "film" in a.text[:300].lower()]
    return [p for a in articles[:FILM_ARTICLES] for p in article_passages(a.id, a.title, a.text)]


def build_film_config(folder: Path) -> dict:
    """Write the passage store and BM25 index under `folder`; the pipeline config (no reader)."""
    from convqa.corpus import PassageStore
    from retrievers.bm25 import BM25Retriever

    passages = film_passages()
    PassageStore.build(passages, folder / "passages", progress=False)
    BM25Retriever.build(passages).save(folder / "bm25")
    return {"passages": str(folder / "passages"),
            "retriever": {"name": "bm25", "index": str(folder / "bm25")},
            "history": {"name": "current_first"}, "top_k": 5}


READER = {"name": "extractive", "model": "convqa-reader"}  # precision auto: measured here
