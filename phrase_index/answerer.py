"""Answering with the phrase index: the same `answer()` as `convqa.pipeline.Pipeline`, so the
CLI (`convqa answer --phrase-index DIR`), the demo and the evaluation scripts use it unchanged.

    >>> import tempfile
    >>> from convqa.corpus import PassageStore
    >>> from convqa.types import Passage
    >>> from phrase_index.index import build_phrase_index
    >>> from phrase_index.model import PhraseModel
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     store = PassageStore.build([
    ...         Passage("2001#0", "2001: A Space Odyssey is a 1968 epic science fiction film "
    ...                 "produced and directed by Stanley Kubrick.", "2001: A Space Odyssey"),
    ...         Passage("Jupiter#0", "Jupiter is the fifth planet from the Sun and the largest "
    ...                 "in the Solar System.", "Jupiter")], f"{tmp}/passages", progress=False)
    ...     index = build_phrase_index(PhraseModel.load("convqa-phrase"), store, f"{tmp}/index",
    ...                                progress=False)
    ...     pipe = PhrasePipeline.from_folder(f"{tmp}/index")
    ...     film = pipe.answer("Who directed 2001: A Space Odyssey?", [])    # PipelineResult
    ...     planet = pipe.answer("Which planet is the largest in the Solar System?", [])
    >>> film.answer.text, film.answer.passage_id, planet.answer.text
    ('Stanley Kubrick', '2001#0', 'Jupiter')

The conversation is formatted by the model's history strategy, encoded into a start and an end
query vector, and the best phrases of the whole corpus are found by `phrase_index.search`; there
is no reader. `hits` are the passages of the best phrases (each passage once, ranked by its best
phrase), so retrieval metrics apply too. When the index folder holds a BM25 index of its
passages (`sparse/`, `convqa index --phrase --sparse`), its scores join the phrase scores
(phrase_index/sparse.py); `sparse_weight=0` answers from the phrase vectors alone. A dense
index of its passages (`dense/`, `convqa index --phrase --dense-prior`) adds a passage
retriever's best passages the same way (phrase_index/dense_prior.py; `dense_weight=0`: not
used). BM25 and the retriever read their own rendering of the conversation: `format_query`
returns a `PhraseQuery`, the phrase model's text carrying theirs as `sparse_text` and
`dense_text`. The best phrases are re-ranked by how much of
the current question they repeat (phrase_index/overlap.py; `overlap_weight=0`: not at all).
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, ClassVar, Sequence

import numpy as np
import torch

from convqa.errors import ConfigError, ConvQAError
from convqa.pipeline import PHRASE_INDEX, PipelineResult
from convqa.precision import (VECTOR_AGREEMENT, MeasuredPrecision, PrecisionChoice,
                              PrecisionOnFirstUse, autocast, choose_precision, min_cosine, prepare)
from convqa.types import Answer, Hit, Turn

from .index import PhraseIndex
from .load import load_phrase_index
from .overlap import POOL as OVERLAP_POOL
from .overlap import check_weight as check_overlap_weight
from .overlap import rerank
from .search import PhraseSearcher


PROBE_QUERIES = 16  # queries the `auto` precision probe times each candidate on


class PhraseQuery(str):
    """The phrase model's query text, with the sparse and dense sides' queries and the current
    question of the same turn.

    A `str`, so evaluation runs, caches and results treat it as the query text they record;
    `sparse_text` and `dense_text` (None: BM25 / the dense retriever read the phrase text) and
    `question` (for the question-overlap penalty, phrase_index/overlap.py; None: no penalty)
    travel with it into `answer_queries`."""

    sparse_text: str | None
    question: str | None
    dense_text: str | None

    def __new__(cls, text: str, sparse_text: str | None = None, question: str | None = None,
                dense_text: str | None = None) -> "PhraseQuery":
        query = super().__new__(cls, text)
        query.sparse_text = sparse_text
        query.question = question
        query.dense_text = dense_text
        return query

    def __reduce__(self):  # pickles (multiprocessing) keep what travels with the text
        return PhraseQuery, (str(self), self.sparse_text, self.question, self.dense_text)


class PhrasePipeline(MeasuredPrecision):
    """Phrase model (query side) + phrase index + passage store."""

    kind: ClassVar[str] = PHRASE_INDEX

    def __init__(self, model, index: PhraseIndex, store, top_k: int = 5,
                 candidates: int | None = None, max_answer_tokens: int | None = None,
                 precision: str = "auto", sparse=None, overlap_weight: float | None = None,
                 dense=None):
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            raise ConfigError(f"top_k must be a positive int, got {top_k!r}")
        index.check(fingerprint=model.fingerprint(), model_name=model.source)
        self.model = model.eval()
        self.index = index
        self.store = store
        self.passages = store  # as Pipeline: the store answers .get(passage_id)
        self.top_k = top_k
        self.searcher = PhraseSearcher(index, store, candidates, max_answer_tokens)
        self.sparse = sparse  # a SparsePrior, or None: phrase scores alone
        self.dense = dense    # a DensePrior, or None: no dense passage retriever
        # both sides read the conversation the same way (the default, oldest first): format once
        self._dense_reads_sparse_text = (
            sparse is not None and dense is not None and sparse.history is not None
            and sparse.history.to_dict() == dense.history.to_dict())
        self.overlap_weight = check_overlap_weight(overlap_weight)
        self._precision = PrecisionOnFirstUse(precision, "phrase query precision")
        self.format_query("warm up", [])  # load the history tokenizer now, not in turn one

    @classmethod
    def from_folder(cls, index_dir: str | os.PathLike, model: str | os.PathLike | None = None,
                    passages: str | os.PathLike | None = None, *, top_k: int = 5,
                    candidates: int | None = None, nprobe: int | None = None,
                    device: str = "cpu", mmap: bool = False,
                    precision: str = "auto", sparse_weight: float | None = None,
                    sparse_passages: int | None = None, sparse_history=None,
                    overlap_weight: float | None = None,
                    dense_index: str | os.PathLike | None = None,
                    dense_weight: float | None = None, dense_passages: int | None = None,
                    dense_history=None) -> "PhrasePipeline":
        """Open a folder made by `convqa index --phrase`: the model and passage store it
        records (or the ones given), checked against the index (one-line error otherwise).
        Its `sparse/` BM25 index, when there, is used with `sparse_weight` (default
        `sparse.DEFAULT_WEIGHT`; 0: not used), BM25 reading the conversation as `sparse_history`
        formats it (default `sparse.DEFAULT_HISTORY`; "phrase": the phrase model's text).
        Its `dense/` index (or the dense index `dense_index`), when there, is used with
        `dense_weight` (default `dense_prior.DEFAULT_WEIGHT`; 0: not used), `dense_passages`
        and `dense_history` likewise; its query encoder runs in `precision` too.
        `overlap_weight`: the question-overlap penalty (default `overlap.DEFAULT_WEIGHT`; 0:
        none)."""
        from convqa.corpus import PassageStore

        from .model import PhraseModel
        from .dense_prior import DensePrior, check_dense_settings, dense_folder
        from .sparse import SPARSE_DIR, SparsePrior, check_settings

        weight, passage_count = check_settings(sparse_weight, sparse_passages)
        sparse_dir = Path(index_dir) / SPARSE_DIR
        has_sparse = SparsePrior.exists(sparse_dir)
        if sparse_weight and not has_sparse:
            raise ConfigError(f"phrase index {index_dir} has no BM25 index for sparse_weight "
                              f"{sparse_weight} (add one: convqa index --phrase --sparse ...)")
        dense_settings = check_dense_settings(dense_weight, dense_passages)
        dense_dir = dense_folder(index_dir, dense_index)
        has_dense = DensePrior.exists(dense_dir)
        if dense_weight and not has_dense:
            raise ConfigError(f"phrase index {index_dir} has no dense index for dense_weight "
                              f"{dense_weight} (add one: convqa index --phrase --dense-prior "
                              "...)")

        index = load_phrase_index(index_dir, mmap=mmap)
        model_name = model or index.meta.get("model")
        store_path = passages or index.meta.get("passages")
        if not model_name:
            raise ConfigError(f"phrase index {index_dir} records no model; pass one")
        if not store_path:
            raise ConfigError(f"phrase index {index_dir} records no passage store; pass one")
        phrase_model = PhraseModel.load(Path(model_name)).for_inference(device, "phrase index")
        index.set_nprobe(nprobe)
        store = PassageStore.open(Path(store_path))
        sparse = None
        if weight > 0 and has_sparse:
            sparse = SparsePrior.load(sparse_dir, store, weight, passage_count, sparse_history)
        dense = None
        if dense_settings[0] > 0 and has_dense:
            dense = DensePrior.load(dense_dir, store, *dense_settings, dense_history,
                                    precision=precision, device=device)
        return cls(phrase_model, index, store, top_k, candidates, precision=precision,
                   sparse=sparse, overlap_weight=overlap_weight, dense=dense)

    @property
    def history_strategy(self) -> Any:
        """The phrase model's own: it formats the conversation (no retriever's strategy)."""
        return self.model.history_strategy

    def format_query(self, question: str, history: Sequence[Turn]) -> PhraseQuery:
        """The phrase model's query text, carrying the sparse and dense sides' and the
        question (`PhraseQuery`)."""
        history = list(history)
        sparse_text = self.sparse.query_text(question, history) if self.sparse else None
        dense_text = None
        if self._dense_reads_sparse_text:
            dense_text = sparse_text
        elif self.dense:
            dense_text = self.dense.query_text(question, history)
        return PhraseQuery(self.model.format_query(question, history), sparse_text, question,
                           dense_text)

    def encode(self, query_texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """float32 start and end query vectors `[n, d]`, in the precision chosen on the first
        call (`auto`: the fastest candidate that agrees with fp32; convqa/precision.py)."""
        texts = list(query_texts)

        def run(precision: str, batch) -> torch.Tensor:
            vectors = prepare(self.model, precision).encode_queries(batch["input_ids"],
                                                                    batch["attention_mask"])
            return torch.cat([vectors.start.float(), vectors.end.float()], dim=-1)

        def choose() -> PrecisionChoice:
            # the probe runs each candidate 3+ times: on a sample, not on a whole evaluation
            # batch (a slow candidate, bf16 without native support, took minutes on 405 queries)
            sample = self.model.tokenize_queries(texts[:PROBE_QUERIES])
            return choose_precision(
                lambda precision: run(precision, sample), min_cosine,
                threshold=VECTOR_AGREEMENT, what="phrase queries", device=self.model.device,
                remember=self.index.meta.get("fingerprint"))

        precision = self._precision.resolve(choose)
        with torch.inference_mode(), autocast(precision, self.model.device):
            both = run(precision, self.model.tokenize_queries(texts)).cpu().numpy()
        half = both.shape[1] // 2
        return np.ascontiguousarray(both[:, :half]), np.ascontiguousarray(both[:, half:])

    def answer(self, question: str, history: Sequence[Turn] = (), top_k: int | None = None
               ) -> PipelineResult:
        return self.answer_batch([question], [history], top_k)[0]

    def answer_batch(self, questions: Sequence[str], histories: Sequence[Sequence[Turn]],
                     top_k: int | None = None) -> list[PipelineResult]:
        """Several conversations at once (one encoder pass, one FAISS call per side); the
        timings of each result are the batch's divided by its size."""
        if len(questions) != len(histories):
            raise ConvQAError(f"{len(questions)} questions but {len(histories)} histories")
        questions = [(q or "").strip() for q in questions]
        if any(not q for q in questions):
            raise ConvQAError("the question is empty")
        began = time.perf_counter()
        texts = [self.format_query(q, h) for q, h in zip(questions, histories)]
        history_ms = _since(began) / len(questions)
        results = self.answer_queries(texts, top_k, questions)
        for result in results:
            result.timings_ms = {"history": history_ms, **result.timings_ms}
        return results

    def answer_queries(self, query_texts: Sequence[str], top_k: int | None = None,
                       questions: Sequence[str] | None = None) -> list[PipelineResult]:
        """Answer query texts already made by `format_query` (the evaluation formats a whole
        benchmark first); `questions` only labels the results. A plain string is also BM25's
        and the dense retriever's query; a `PhraseQuery` gives them its `sparse_text` and
        `dense_text` and the question-overlap penalty its `question` (a plain string gets no
        penalty)."""
        k = top_k or self.top_k
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ConfigError(f"top_k must be a positive int, got {k!r}")
        texts = list(query_texts)
        if not texts:
            return []
        questions = list(questions) if questions is not None else texts
        timings: dict[str, float] = {}
        began = time.perf_counter()
        q_start, q_end = self.encode(texts)
        timings["encode"] = _since(began)
        priors = None
        if self.sparse is not None:
            began = time.perf_counter()
            priors = self.sparse.priors([getattr(t, "sparse_text", None) or t for t in texts])
            timings["sparse"] = _since(began)
        if self.dense is not None:
            began = time.perf_counter()
            dense = self.dense.priors([getattr(t, "dense_text", None) or t for t in texts])
            priors = dense if priors is None else [s.plus(d) for s, d in zip(priors, dense)]
            timings["dense"] = _since(began)
        began = time.perf_counter()
        spans = self.searcher.spans(q_start, q_end, self.phrase_pool(k), priors)
        timings["search"] = _since(began)
        began = time.perf_counter()
        answers = self.ranked_answers(spans, [getattr(t, "question", None) for t in texts])
        timings["fetch"] = _since(began)
        share = {stage: ms / len(texts) for stage, ms in timings.items()}
        return [_result(q, str(t), a, k, share) for q, t, a in zip(questions, texts, answers)]

    def phrase_pool(self, k: int) -> int:
        """Phrases to search for `k` passages: more than k, as several phrases may share a
        passage, and at least `overlap.POOL` when the question-overlap penalty re-ranks them."""
        return max(4 * k, OVERLAP_POOL) if self.overlap_weight else 4 * k

    def ranked_answers(self, spans: Sequence[Sequence], questions: Sequence[str | None]
                       ) -> list[list[Answer]]:
        """Each query's phrases (`searcher.spans`) as answers, re-ranked by the question-overlap
        penalty against its question (None: not re-ranked)."""
        return [rerank(self.searcher.answers(found), question or "", self.overlap_weight)
                for found, question in zip(spans, questions)]


def _result(question: str, query_text: str, answers: list[Answer], k: int,
            timings: dict[str, float]) -> PipelineResult:
    hits, passages, seen = [], [], set()
    for answer in answers:
        if answer.passage_id in seen:
            continue
        seen.add(answer.passage_id)
        hits.append(Hit(answer.passage_id, answer.score, len(hits) + 1))
        passages.append(answer.evidence)
        if len(hits) == k:
            break
    return PipelineResult(question, query_text, hits, passages, answers[0] if answers else None,
                          dict(timings))


def _since(began: float) -> float:
    return (time.perf_counter() - began) * 1000
