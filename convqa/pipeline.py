"""Retriever (+ reader) answering in a conversation: the API behind `convqa answer`.

    >>> pipe = Pipeline.from_config("pipeline.yaml")               # doctest: +SKIP
    >>> result = pipe.answer("Who directed Casablanca?", history=[])  # doctest: +SKIP
    >>> result.passages[0].title                                    # doctest: +SKIP

The embedded default with the shipped models is `convqa.front.paths.default_pipeline()`.
Until a reader is configured the pipeline is retrieval-only: `result.answer` is None and the
evidence is the ranked passages.
"""
from __future__ import annotations

import inspect
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol, Sequence

from .config import load_yaml
from .errors import ConfigError, ConvQAError
from .registry import HISTORY_STRATEGIES, READERS, RERANKERS, RETRIEVERS
from .types import Answer, Hit, Passage, RerankedHit, Turn

# the keys of a pipeline config (YAML or dict)
PIPELINE_KEYS = ("passages", "retriever", "history", "reranker", "reader", "top_k")
# the `timings_ms` stage of a cascade's second reranker (0 on a turn that skips it)
SECOND_RERANK_STAGE = "rerank_second"


def read_passages(reader: Any, question: str, history: Sequence[Turn],
                  passages: Sequence[Passage], hits: Sequence[Hit],
                  always_answer: bool = False, reranked: bool | None = None
                  ) -> Answer | None:
    """`reader.read` of retrieved passages, with the retriever's scores for a reader that
    weighs them in (`reads_retriever_scores`, e.g. the extractive reader with a fusion).
    `always_answer`: a reader that can answer "no answer in the collection" (`abstains`) is
    told not to (evaluation on questions that all have an answer). `reranked`: the hits are a
    reranker's (None: when they are `RerankedHit`s), told to a reader that decodes those its
    own way (`reads_reranked`)."""
    options: dict[str, Any] = {}
    if getattr(reader, "reads_retriever_scores", False):
        options["scores"] = [hit.score for hit in hits[:len(passages)]]
    if reranked is None:
        reranked = bool(hits) and isinstance(hits[0], RerankedHit)
    if reranked and getattr(reader, "reads_reranked", False):
        options["reranked"] = True
    if always_answer and getattr(reader, "abstains", False):
        options["always_answer"] = True
    return reader.read(question, history, passages, **options)


@dataclass
class PipelineResult:
    question: str
    query_text: str
    hits: list[Hit]
    passages: list[Passage]
    answer: Answer | None = None
    timings_ms: dict[str, float] = field(default_factory=dict)


# The kinds of answering path: a retriever (+ reader), or a phrase index that answers alone.
RETRIEVER_READER = "retriever"
PHRASE_INDEX = "phrase index"


class Answerer(Protocol):
    """What every answering path offers its callers (CLI, demo, serve, evaluation): `Pipeline`
    here, `phrase_index.answerer.PhrasePipeline` for a phrase index. `kind` says which
    (RETRIEVER_READER or PHRASE_INDEX); `history_strategy` formats the conversation."""

    kind: ClassVar[str]
    top_k: int

    @property
    def history_strategy(self) -> Any: ...

    def answer(self, question: str, history: Sequence[Turn] = (), top_k: int | None = None
               ) -> PipelineResult: ...


class Pipeline:
    """A retriever, its history strategy, the passage store and optionally a reader."""

    kind: ClassVar[str] = RETRIEVER_READER

    def __init__(self, retriever, history, passages, reader=None, top_k: int = 5,
                 config: dict | None = None, reranker=None):
        self.retriever = retriever
        self.reranker = reranker
        self.history = history
        self.passages = passages
        self.reader = reader
        self.top_k = top_k
        self.config = config or {}
        self._check_depth(top_k)
        # whether the reranker reports its second stage's time (a registered one need not)
        self._reranker_times_stages = reranker is not None and "timings" in inspect.signature(
            reranker.rerank_turn).parameters
        self.history.format("warm up", [])  # load the tokenizer now, not inside the first turn

    @property
    def history_strategy(self) -> Any:
        return self.history

    @classmethod
    def from_config(cls, config: dict[str, Any] | str | os.PathLike) -> "Pipeline":
        from .corpus import PassageStore

        if not isinstance(config, dict):
            config = load_yaml(config)
        for key in ("passages", "retriever"):
            if not config.get(key):
                raise ConfigError(f"pipeline config: missing '{key}'")
        unknown = set(config) - set(PIPELINE_KEYS)
        if unknown:
            raise ConfigError(f"pipeline config: unknown key '{sorted(unknown)[0]}'")
        retriever = RETRIEVERS.build(config["retriever"])
        history = HISTORY_STRATEGIES.build(config.get("history") or "current_first")
        reader = READERS.build(config["reader"]) if config.get("reader") else None
        reranker = RERANKERS.build(config["reranker"]) if config.get("reranker") else None
        if hasattr(reranker, "for_retriever"):  # its calibrated weight for this retriever
            reranker.for_retriever(config["retriever"])
        top_k = int(config.get("top_k", 5))
        if top_k < 1:
            raise ConfigError("pipeline config: 'top_k' must be at least 1")
        store = PassageStore.open(Path(config["passages"]))
        return cls(retriever, history, store, reader, top_k, dict(config), reranker)

    def _check_depth(self, k: int) -> None:
        """Refuse a top_k deeper than the reranker hands on: the reader would read fewer
        passages than asked for without a word."""
        returned = getattr(self.reranker, "returned", None)
        if returned is None or k <= returned:
            return
        limit = getattr(self.reranker, "returned_by", "the reranker's top_n")
        deeper = getattr(self.reranker, "read_deeper", f"raise {limit}")
        raise ConfigError(f"top_k {k} is more than the {returned} passages the reranker "
                          f"returns ({limit}): lower top_k or {deeper}")

    def _rerank(self, question: str, history: list[Turn], hits: list[Hit],
                passages: list[Passage], stages: dict[str, float]) -> list[RerankedHit]:
        """The reranker's order of the turn; `stages` gets its second stage's ms when it
        reports one."""
        if self._reranker_times_stages:
            return self.reranker.rerank_turn(question, history, hits, passages, timings=stages)
        return self.reranker.rerank_turn(question, history, hits, passages)

    def answer(self, question: str, history: Sequence[Turn] = (), top_k: int | None = None
               ) -> PipelineResult:
        question = (question or "").strip()
        if not question:
            raise ConvQAError("the question is empty")
        k = top_k or self.top_k
        self._check_depth(k)
        timings: dict[str, float] = {}
        start = time.perf_counter()
        query_text = self.history.format(question, list(history))
        timings["history"] = (time.perf_counter() - start) * 1000
        start = time.perf_counter()
        depth = max(k, self.reranker.options.top_n) if self.reranker is not None else k
        hits = self.retriever.retrieve(query_text, depth)
        timings["retrieve"] = (time.perf_counter() - start) * 1000
        start = time.perf_counter()
        passages = [self.passages.get(hit.passage_id) for hit in hits]
        timings["fetch"] = (time.perf_counter() - start) * 1000
        if self.reranker is not None:
            # retriever -> reranker -> reader: the reader sees the reranker's top k, in its
            # order and with its scores
            start = time.perf_counter()
            by_id = {hit.passage_id: passage for hit, passage in zip(hits, passages)}
            stages: dict[str, float] = {}
            hits = self._rerank(question, list(history), hits, passages, stages)[:k]
            passages = [by_id[hit.passage_id] for hit in hits]
            elapsed = (time.perf_counter() - start) * 1000
            # a cascade's second stage is a stage of its own: "rerank" + "rerank_second" is
            # still the whole reranking, so the stages add up to the turn
            if "second" in stages:
                timings["rerank"] = elapsed - stages["second"]
                timings[SECOND_RERANK_STAGE] = stages["second"]
            else:
                timings["rerank"] = elapsed
        answer = None
        if self.reader is not None:
            start = time.perf_counter()
            answer = read_passages(self.reader, question, list(history), passages, hits)
            timings["read"] = (time.perf_counter() - start) * 1000
        return PipelineResult(question, query_text, hits, passages, answer, timings)
