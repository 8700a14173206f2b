"""Negatives from the gold article itself, for benchmark turns over a corpus that splits an
article into many passages (the full TopiOCQA x Wikipedia corpus: ~78 passages per topic
article). There the reader's hardest choice at test time is between passages of the right
article, and negatives of other articles (BM25 or dense, dense_negatives.py) never teach it.

    add_article_negatives(turns, "/tmp/bench/full", count=2)

For each turn: the passages of its gold article that hold no gold answer and are not among its
positives, ranked by the corpus's BM25 index for the conversation (then, past those BM25
returns, in a seeded random order), become the first `count` negatives; the example keeps as
many negatives as before (the last of its other negatives make room). Turns whose article is a
single passage (the vital corpus) are left as they are.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from convqa.benchmark.labelled_turns import article_id_of
from convqa.errors import ConfigError

from .data import BuildReport, ReaderExample, find_answer_spans

SEARCH_DEPTH = 200  # BM25 hits per turn searched for passages of its gold article


def add_article_negatives(examples: Sequence[ReaderExample], folder: str | os.PathLike,
                          count: int, history: Any = "current_first", seed: int = 0,
                          report: BuildReport | None = None) -> dict[str, int]:
    """Put up to `count` answer-free passages of each turn's gold article first among its
    negatives (`folder`: the benchmark the turns come from, with passages/ and indexes/bm25,
    or an in-memory BM25 of its store). Returns {"examples", "article_negatives"}."""
    from convqa.corpus import PassageStore
    from convqa.history import build_history_strategy
    from retrievers.bm25 import BM25Retriever

    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ConfigError(f"article negatives must be an integer >= 0, got {count!r}")
    counts = {"examples": 0, "article_negatives": 0}
    if not count or not examples:
        return counts
    folder = Path(folder)
    store = PassageStore.open(folder / "passages")
    articles = _article_passages(store)
    chosen = [e for e in examples if _candidates(e, articles)]
    if not chosen:
        return counts
    index = folder / "indexes" / "bm25"
    retriever = BM25Retriever.for_store(store, index)
    strategy = build_history_strategy(history)
    queries = [strategy.format(e.question, e.history_turns()) for e in chosen]
    rows = retriever.retrieve_batch(queries, k=SEARCH_DEPTH)
    for example, hits in zip(chosen, rows):
        candidates = _candidates(example, articles)
        ranked = [h.passage_id for h in hits if h.passage_id in candidates]
        rest = sorted(candidates - set(ranked))
        rng = np.random.default_rng([seed, _stable(example.id)])
        ranked += [rest[i] for i in rng.permutation(len(rest))]
        picked = []
        golds = example.golds()
        for pid in ranked:
            passage = store.get(pid)
            if not find_answer_spans(passage.text, golds):
                picked.append(passage)
                if len(picked) == count:
                    break
        if not picked:
            continue
        size = max(len(example.negatives), len(picked))
        ids = {p.id for p in picked}
        others = [p for p in example.negatives if p.id not in ids]
        example.negatives = picked + others[:size - len(picked)]
        counts["examples"] += 1
        counts["article_negatives"] += len(picked)
        if report is not None:
            report.add(example.source, f"{example.split}_article_negatives", len(picked))
    return counts


def _article_passages(store: Any) -> dict[str, list[str]]:
    """Passage ids by article id ("{article}#{n}")."""
    by_article: dict[str, list[str]] = {}
    for pid in store.ids():
        by_article.setdefault(article_id_of(pid), []).append(pid)
    return by_article


def _candidates(example: ReaderExample, articles: dict[str, list[str]]) -> set[str]:
    """The other passages of the example's gold article(s) (none for SQuAD-format examples,
    whose ids do not name an article)."""
    if not example.source.startswith("topiocqa-wiki:"):
        return set()
    positives = {p.passage.id for p in example.positives}
    gold = {article_id_of(pid) for pid in positives}
    return {pid for article in gold for pid in articles.get(article, ()) if pid not in positives}


def _stable(text: str) -> int:
    """A seed component from a string that does not depend on Python's hash salt."""
    import hashlib

    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
