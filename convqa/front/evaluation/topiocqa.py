"""Evaluation on an official TopiOCQA file (dev or train, either release) with a passage store.

    result = evaluate_topiocqa_retrieval("topiocqa_dev.json", "collection/passages",
                                         {"name": "bm25", "index": "collection/indexes/bm25"},
                                         history="oldest_first")

The benchmark folders of `convqa data topiocqa-wiki` are our stand-in for TopiOCQA's own
collection; this module is for the real thing (or any collection with the same ids), so the
numbers are comparable with the papers'. Every turn of the file is a query (the history
strategy renders its conversation so far); the run is cached as in `evaluate_retrieval`, and
reranked as there when a `reranker` is given.

Relevance levels (`levels`, default: "passage" when the file has gold passages, else "article"):
- "passage": the turn's `Gold_passage.id` (later releases; DPR-IHN's Table 2 on TopiOCQA). An id
  is looked up in the store as written, then without / with the "wiki:" prefix that TopiOCQA's
  DPR files put before the collection's numeric ids. Turns with an empty gold id (unanswerable)
  are not scored; gold ids absent from the store are counted in `gold.not_in_store` and their
  turns left out; when none is in the store the collection is the wrong one: a DataError.
- "article": every passage of the store whose title (the part before " [SEP] ", as in
  TopiOCQA's "title [SEP] section") equals the turn's `Topic`, case-insensitively; the first
  release has no gold passages, so this is its only level. It needs one pass over the store's
  titles (minutes for TopiOCQA's 25.7M passages).
Question types (first / no-switch / switch) follow the benchmark's rule
(`convqa.benchmark.labelled_turns.question_types`).

End to end (`evaluate_topiocqa_answers`), every turn is scored, unanswerable ones included, as
the official evaluation does: EM / F1 under TopiOCQA's convention against the main answer and
any `Additional_answers`.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Any, Sequence

from convqa.benchmark.labelled_turns import question_types, topic_key
from convqa.corpus import PassageStore
from convqa.errors import ConfigError, DataError
from convqa.types import Conversation

from .answers import TOP_KS, read_run_and_score, run_cache
from .retrieval import KS, _open_reranker, retrieve_cached, score_levels

LEVELS = ("passage", "article")
TITLE_SEPARATOR = " [SEP] "
WIKI_PREFIX = "wiki:"
SPLIT = "all"  # every turn of the file is a query


@dataclass(frozen=True)
class OfficialTurn:
    """One turn of an official file, with what evaluation needs."""

    conversation_id: str
    turn: int
    question: str
    answers: list[str]
    topic: str
    question_type: str
    gold_passage_id: str | None  # None: the file has none for this turn

    @property
    def qid(self) -> str:
        return f"{self.conversation_id}_{self.turn}"


OfficialTurns = tuple[list[OfficialTurn], dict[str, Conversation]]


def load_official_turns(path: str | os.PathLike) -> OfficialTurns:
    """The turns of an official TopiOCQA file (loaded and checked by `load_topiocqa`)."""
    from convqa.loaders.topiocqa import load_topiocqa, topiocqa_answers

    conversations = load_topiocqa(path)
    turns: list[OfficialTurn] = []
    for conversation in conversations:
        topics = [str(t.meta.get("topic") or "") for t in conversation.turns]
        for number, (turn, qtype) in enumerate(zip(conversation.turns, question_types(topics)),
                                               start=1):
            gold = turn.meta.get("gold_passage") or {}
            turns.append(OfficialTurn(conversation.id, number, turn.question,
                                      topiocqa_answers(turn), topics[number - 1], qtype,
                                      gold.get("id") or None))
    return turns, {c.id: c for c in conversations}


def file_digest(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return "topiocqa-file:sha256:" + digest.hexdigest()


def resolve_passage_id(pid: str, store: PassageStore) -> str | None:
    """`pid` as the store spells it (as given, without or with "wiki:"), or None."""
    candidates = [pid, pid[len(WIKI_PREFIX):] if pid.startswith(WIKI_PREFIX) else WIKI_PREFIX + pid]
    return next((c for c in candidates if c in store), None)


def article_title(title: str) -> str:
    """The article part of a TopiOCQA passage title ("Paris [SEP] Geography" -> "Paris")."""
    return title.split(TITLE_SEPARATOR, 1)[0]


def passage_qrels(turns: Sequence[OfficialTurn], store: PassageStore,
                  path: str | os.PathLike) -> tuple[dict[str, dict[str, int]], dict[str, int]]:
    """({qid: {gold id: 1}} for turns whose gold passage is in the store, counts)."""
    relevance: dict[str, dict[str, int]] = {}
    with_gold = missing = 0
    for turn in turns:
        if not turn.gold_passage_id:
            continue
        with_gold += 1
        pid = resolve_passage_id(turn.gold_passage_id, store)
        if pid is None:
            missing += 1
        else:
            relevance[turn.qid] = {pid: 1}
    if with_gold and not relevance:
        raise DataError(f"none of the {with_gold} gold passage ids is in the passage store "
                        f"{store.path} (a different collection?)", path)
    return relevance, {"turns_with_gold": with_gold, "not_in_store": missing}


def article_qrels(turns: Sequence[OfficialTurn], store: PassageStore,
                  progress: bool = True) -> dict[str, dict[str, int]]:
    """{qid: {passage id: 1}} over every store passage of the turn's topic article."""
    from tqdm.auto import tqdm

    wanted = {topic_key(t.topic) for t in turns if topic_key(t.topic)}
    by_topic: dict[str, list[str]] = {}
    for passage in tqdm(store, total=len(store), desc="titles", unit=" p", disable=not progress):
        key = topic_key(article_title(passage.title))
        if key in wanted:
            by_topic.setdefault(key, []).append(passage.id)
    return {t.qid: {pid: 1 for pid in by_topic[topic_key(t.topic)]}
            for t in turns if topic_key(t.topic) in by_topic}


def evaluate_topiocqa_retrieval(path: str | os.PathLike, passages: str | os.PathLike,
                                retriever: Any, history: Any = "oldest_first",
                                levels: Sequence[str] | None = None, k: int = 100,
                                ks: Sequence[int] = KS,
                                cache_dir: str | os.PathLike | None = None,
                                batch_size: int = 64, progress: bool = True,
                                label: str | None = None, use_cache: bool = True,
                                data: OfficialTurns | None = None, reranker: Any = None
                                ) -> dict[str, Any]:
    """Retrieve (and rerank) for every turn of the file and score at each level (see module
    doc). `data`: `load_official_turns(path)` when already loaded. Returns a dict shaped like
    `evaluate_retrieval`'s, plus `gold` (counts)."""
    if k < max(ks):
        raise ConfigError(f"k={k} is smaller than the largest cutoff {max(ks)}")
    if levels is not None and any(level not in LEVELS for level in levels):
        raise ConfigError(f"unknown level in {list(levels)} (expected {', '.join(LEVELS)})")
    turns, conversations = data if data is not None else load_official_turns(path)
    if not turns:
        raise DataError("no turns", path)
    has_gold = any(t.gold_passage_id for t in turns)
    if levels is None:
        levels = ("passage",) if has_gold else ("article",)
    if "passage" in levels and not has_gold:
        raise DataError("level 'passage' needs gold passages (Gold_passage, later releases); "
                        "this file has none: use level 'article'", path)
    with PassageStore.open(passages) as store:
        relevance: dict[str, dict[str, dict[str, int]]] = {}
        gold: dict[str, int] = {}
        if "passage" in levels:
            relevance["passage"], gold = passage_qrels(turns, store, path)
        if "article" in levels:
            relevance["article"] = article_qrels(turns, store, progress)
    reranking = _open_reranker(reranker, retriever)
    depth = max(k, reranking.top_n) if reranking is not None else k
    result = retrieve_cached(
        file_digest(path), SPLIT, [t.qid for t in turns],
        lambda strategy: {t.qid: strategy.format_turn(conversations[t.conversation_id], t.turn)
                          for t in turns},
        retriever, history, depth, cache_dir, batch_size, progress, label, use_cache)
    types = {t.qid: t.question_type for t in turns}
    out = {
        "label": label, "benchmark": str(path), "corpus": str(passages), "split": SPLIT,
        "retriever": result.config["retriever"], "history": result.config["history"],
        "k": depth, "ks": list(ks), "run_key": result.key,
        "run_file": str(result.path) if result.path is not None else None,
        "cached": result.cached, "timing": result.timing, "gold": gold,
    }
    hits = result.hits
    if reranking is not None:
        reranked = reranking.run(result, turns, conversations, passages, progress, label)
        out.update(reranked.fields(reranking, result))
        hits = reranked.hits
    out["levels"] = score_levels(hits, relevance, types, ks)
    return out


def evaluate_topiocqa_answers(path: str | os.PathLike, passages: str | os.PathLike,
                              retriever: Any, reader: Any, history: Any = "oldest_first",
                              top_ks: Sequence[int] = TOP_KS,
                              cache_dir: str | os.PathLike | None = None, progress: bool = True,
                              label: str | None = None, use_cache: bool = True,
                              data: OfficialTurns | None = None, reranker: Any = None
                              ) -> dict[str, Any]:
    """Retrieve (and rerank), read the top k for each k, score every turn of the file (see
    module doc). Returns a dict shaped like `evaluate_answers`'s."""
    if not top_ks or any(k < 1 for k in top_ks):
        raise ConfigError(f"top_ks must be positive, got {list(top_ks)}")
    data = data if data is not None else load_official_turns(path)
    with run_cache(cache_dir, use_cache) as cache:
        retrieval = evaluate_topiocqa_retrieval(path, passages, retriever, history, levels=(),
                                                k=max(100, max(top_ks)), cache_dir=cache,
                                                progress=progress, label=label, use_cache=True,
                                                data=data, reranker=reranker)
        turns, conversations = data
        out = read_run_and_score(retrieval, turns, conversations, passages, reader, top_ks,
                                 progress, use_cache,
                                 {"label": label, "benchmark": str(path), "split": SPLIT,
                                  "convention": "topiocqa"})
    return out


__all__ = ["LEVELS", "OfficialTurn", "evaluate_topiocqa_answers",
           "evaluate_topiocqa_retrieval", "load_official_turns"]
