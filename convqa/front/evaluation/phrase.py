"""Phrase-index rows of the evaluation tables: a PRO-ConvQA phrase index answers a turn on its
own, so a systems-file row may name one instead of a retriever and a reader:

    - label: "PRO-ConvQA phrase index"
      phrase_index: {index: "{corpus}/indexes/phrase-v2", nprobe: 64}

Options (checked by `convqa.front.paths.phrase_spec`, opened by its `build`): `index` (a folder of
`convqa index --phrase`; required), `model` (default: the one the index records), `passages`
(default: the target's passage store, so that hits carry the benchmark's ids; the index checks that
it is its corpus), `nprobe` (IVF indexes) and `candidates` (FAISS hits per search pass,
phrase_index/search.py), `sparse_weight`, `sparse_passages` and `sparse_history` (the BM25 side of
an index built with `--sparse`, phrase_index/sparse.py; weight 0 leaves it out; the history strategy
of BM25's query, "phrase" for the phrase model's text), `dense_index`, `dense_weight`,
`dense_passages` and `dense_history` (the dense passage retriever of an index built with
`--dense-prior`, or the dense index `dense_index`, phrase_index/dense_prior.py; weight 0 leaves it
out), `overlap_weight` (the question-overlap penalty, phrase_index/overlap.py; 0: none) and
`precision` of the query encoder (default `auto`; what it chose is recorded as `query_precision`). A
string is short for `{index: ...}`. The phrase model formats the conversation itself, so such a row
has no `history` either.

The row goes through the same machinery as a retriever + reader row (runs cached by
configuration, predictions cached next to the run), with one adapter, `PhraseSystem`, in both
roles:
- retriever: the query is the phrase model's own rendering of the conversation (with BM25's,
  `PhraseQueries`); the ranking is
  the passages of the best phrases, each passage once (so fewer than k may come back) ->
  Hits@k / MRR;
- reader: the best phrase of the whole index answers the turn, as `convqa answer
  --phrase-index` does (the passages it is handed are not used); it is scored once, as @1, and
  its time per question is the whole answer (query encoding + search).
Its `fingerprint()` covers the index (every field of its metadata: phrase fingerprint, corpus
checksum, factory, vector counts, build time...), the model with its query side and the search
options, so a rebuilt index or a query-side fine-tuned model is never served a stale cache.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Sequence

from convqa.history import HistoryStrategy

from ..paths import PhraseIndexPath, build, phrase_spec

TOP_KS = (1,)  # the one prediction of a phrase row: its best phrase
CACHE_VERSION = 1


class PhraseQueries(HistoryStrategy):
    """The retrieval queries of a phrase row: `PhrasePipeline.format_query`, so BM25's query
    (the sparse side's own history strategy) travels with the phrase model's text."""

    def __init__(self, pipeline: Any):
        strategy = pipeline.model.history_strategy
        super().__init__(strategy.config, strategy.tokenizer)
        self.registered_name = strategy.registered_name
        self.pipeline = pipeline

    def _format(self, question: str, history: Sequence[Any]) -> str:
        return self.pipeline.format_query(question, history)

    def to_dict(self) -> dict[str, Any]:
        data = self.pipeline.model.history_strategy.to_dict()
        if self.pipeline.sparse is not None:
            data["sparse_history"] = self.pipeline.sparse.fingerprint()["history"]
        if self.pipeline.dense is not None:
            data["dense_history"] = self.pipeline.dense.fingerprint()["history"]
        return data


class PhraseSystem:
    """A `PhrasePipeline` as the retriever and the reader of an evaluation row (module doc)."""

    def __init__(self, pipeline: Any, spec: dict[str, Any]):
        self.pipeline = pipeline
        self.spec = {"phrase_index": spec}  # what the row was built from (cache keys, JSON)
        self.history = PhraseQueries(pipeline)  # formats the retrieval queries
        self._fingerprint: str | None = None

    @classmethod
    def load(cls, spec: Any, passages: str | os.PathLike | None = None) -> "PhraseSystem":
        """Open the index of `spec` (placeholders resolved) with `passages` as the default
        passage store."""
        spec = phrase_spec(spec)
        return cls(build(PhraseIndexPath.from_options(spec, passages)), spec)

    def fingerprint(self) -> str:
        """What the run and the predictions depend on (module doc); computed once."""
        if self._fingerprint is None:
            pipe = self.pipeline
            options = self.spec["phrase_index"]
            fields = {"version": CACHE_VERSION, "index": pipe.index.meta,
                      "model": pipe.model.full_fingerprint(),
                      "candidates": options.get("candidates"),
                      "nprobe": options.get("nprobe"), "top_k": pipe.top_k,
                      "precision": options.get("precision") or "auto",
                      "sparse": pipe.sparse.fingerprint() if pipe.sparse else None,
                      "overlap_weight": pipe.overlap_weight}
            if pipe.dense is not None:  # absent, not null: older rows keep their caches
                fields["dense"] = pipe.dense.fingerprint()
            data = json.dumps(fields, sort_keys=True, default=str)
            self._fingerprint = "phrase:" + hashlib.sha256(data.encode()).hexdigest()[:24]
        return self._fingerprint

    def retrieve_batch(self, queries: Sequence[str], k: int = 10) -> list[list[Any]]:
        """The passages of the best phrases for query texts made by `self.history`."""
        return [result.hits for result in self.pipeline.answer_queries(list(queries), k)]

    def read(self, question: str, history: Sequence[Any], passages: Sequence[Any] = ()):
        """The best phrase of the index for the turn (`passages` are not used)."""
        return self.pipeline.answer(question, history).answer

    def describe(self) -> dict[str, Any]:
        """What a result records about the row instead of a retriever and a reader."""
        index = Path(self.spec["phrase_index"]["index"])
        meta = self.pipeline.index.meta
        return {"retriever": None, "reader": None, **self.spec,
                "phrase_index_meta": {"folder": str(index), "fingerprint": meta.get("fingerprint"),
                                      "corpus_checksum": meta.get("corpus_checksum"),
                                      "model": str(self.pipeline.model.source)},
                "query_precision": self.query_precision()}

    def query_precision(self) -> dict[str, Any] | None:
        """The query encoder's precision and, under `auto`, the probe behind it; None when no
        query was encoded (every prediction came from the cache)."""
        pipe = self.pipeline
        if pipe.precision is None:
            return None
        choice = pipe.precision_choice
        return choice.to_dict() if choice is not None else {"precision": pipe.precision}


def scores_at(result: dict[str, Any], k: int) -> dict[str, Any] | None:
    """The `by_k` entry of an end-to-end result at `k` passages read. A phrase-index row has
    one entry, its best phrase ("1"), which stands for it at every k (per-type columns, plots);
    None when a reader row lacks `k`."""
    by_k = result["by_k"]
    if str(k) in by_k:
        return by_k[str(k)]
    if result.get("phrase_index") is not None and by_k:
        return next(iter(by_k.values()))
    return None
