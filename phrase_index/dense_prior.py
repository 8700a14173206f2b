"""The dense side of phrase search: a passage retriever's best passages as a passage prior.

A phrase vector sees one passage, and the phrase index finds the answer passage of a turn less
often than DPR-IHN does (docs/results/phrase.md, "A dense passage prior"). A dense index of the
same passage store, kept in the phrase index folder (`dense/`, `convqa index --phrase
--dense-prior`), lends the phrase search that passage ranking: for each query

- the retriever's best `passages` passages are candidates, every phrase of them, and
- every phrase of such a passage gains `weight * (score - worst) / (best - worst)` of the
  retriever's scores over those passages: its best passage gains `weight`, the `passages`-th
  0, a passage outside them nothing (all equal: each gains `weight`).

It sums with the BM25 side (phrase_index/sparse.py) through `PassagePrior.plus`. The retriever
reads the conversation as the pipeline's dense rows do (`history`, default `oldest_first`).

    from phrase_index.dense_prior import DensePrior
    prior = DensePrior.load("runs/phrase-index/dense", store)
    priors = prior.priors([prior.query_text("when?", history)])
    search_phrases(index, q_start, q_end, 5, priors=priors)

The weight is on the scale of the shipped model's phrase scores; DEFAULT_WEIGHT was chosen on
the vital corpus's 728 train turns (convqa/front/tools/phrase_dense_prior.py); 0 turns it off.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Sequence

import numpy as np

from convqa.errors import ConfigError, DataError

from .search import PassagePrior
from .sparse import check_settings

DENSE_DIR = "dense"     # inside a phrase index folder
DEFAULT_WEIGHT = 8.0
DEFAULT_PASSAGES = 20
DEFAULT_HISTORY = "oldest_first"
DEFAULT_MODEL = "convqa-dpr-ihn"
# 1 byte per dimension (81 MiB for 220,873 passages of 384 dims); an exhaustive scan up to
# IVF_FROM passages, above that an IVF of 1,024 lists (220,873 passages, one thread: 15 ms ->
# 0.9 ms per query at its default nprobe 32; docs/results/phrase.md, "A dense passage prior")
SMALL_FACTORY, LARGE_FACTORY, IVF_FROM = "SQ8", "IVF1024,SQ8", 100_000


def default_factory(passages: int) -> str:
    """The dense side's FAISS factory for a store of `passages` passages."""
    return LARGE_FACTORY if passages >= IVF_FROM else SMALL_FACTORY


def check_dense_settings(weight=None, passages=None) -> tuple[float, int]:
    """(weight, passages) checked, None standing for this side's defaults."""
    return check_settings(DEFAULT_WEIGHT if weight is None else weight,
                          DEFAULT_PASSAGES if passages is None else passages, what="dense")


def scaled_prior(rows: np.ndarray, scores: np.ndarray, weight: float) -> PassagePrior:
    """The prior of one query's retrieved `rows` (store rows) and their retriever `scores`:
    min-max scaled to [0, weight]; a lookup by binary search in the sorted rows."""
    rows = np.asarray(rows, dtype=np.int64)
    scores = np.asarray(scores, dtype=np.float32)
    if not len(rows):
        return PassagePrior(rows, lambda asked: np.zeros(len(asked), dtype=np.float32))
    spread = float(scores.max() - scores.min())
    scaled = (scores - scores.min()) / spread if spread > 1e-6 else np.ones_like(scores)
    order = np.argsort(rows, kind="stable")
    rows, scaled = rows[order], (scaled[order] * np.float32(weight)).astype(np.float32)

    def score(asked: np.ndarray) -> np.ndarray:
        asked = np.asarray(asked, dtype=np.int64)
        at = np.minimum(np.searchsorted(rows, asked), len(rows) - 1)
        return np.where(rows[at] == asked, scaled[at], np.float32(0)).astype(np.float32)
    return PassagePrior(rows, score)


class DensePrior:
    """A dense retriever over the phrase index's passages, one `PassagePrior` per query."""

    def __init__(self, retriever, weight: float = DEFAULT_WEIGHT,
                 passages: int = DEFAULT_PASSAGES, history=DEFAULT_HISTORY):
        from convqa.history import build_history_strategy

        self.retriever = retriever
        self.weight, self.passages = check_dense_settings(weight, passages)
        self.history = build_history_strategy(DEFAULT_HISTORY if history is None else history)

    def query_text(self, question: str, history: Sequence) -> str:
        """The retriever's query for `question` after the turns `history`."""
        return self.history.format(question, list(history))

    @staticmethod
    def exists(folder: str | os.PathLike) -> bool:
        from retrievers.dense.index import META_FILE

        return (Path(folder) / META_FILE).is_file()

    @classmethod
    def load(cls, folder: str | os.PathLike, store, weight: float = DEFAULT_WEIGHT,
             passages: int = DEFAULT_PASSAGES, history=DEFAULT_HISTORY,
             precision: str = "auto", device: str = "cpu") -> "DensePrior":
        """The dense index in `folder` with the encoder it records, checked to be an index of
        `store` (one-line error otherwise); `precision` and `device` of the query encoder."""
        from retrievers.dense.retriever import DenseRetriever, DenseRetrieverConfig

        if not cls.exists(folder):
            raise DataError("no dense index here (add one with `convqa index --phrase "
                            "--dense-prior ... --out` its phrase index)", folder)
        config = DenseRetrieverConfig(index=str(folder), passages=str(store.path),
                                      precision=precision, device=device)
        return cls(DenseRetriever.from_config(config), weight, passages, history)

    def fingerprint(self) -> dict:
        index = self.retriever.index
        return {"index": index.fingerprint, "factory": index.meta.get("factory"),
                "corpus_checksum": index.meta.get("corpus_checksum"), "weight": self.weight,
                "passages": self.passages, "history": self.history.to_dict()}

    def priors(self, query_texts: Sequence[str]) -> list[PassagePrior]:
        """One prior per query text (`query_text`)."""
        texts = list(query_texts)
        if self.weight == 0:
            return [scaled_prior(np.zeros(0), np.zeros(0), 0.0) for _ in texts]
        if not texts:
            return []
        vectors = self.retriever.encode_queries(texts)
        scores, rows = self.retriever.index.search(vectors, self.passages)
        return [scaled_prior(r[r >= 0], s[r >= 0], self.weight) for s, r in zip(scores, rows)]


def add_dense_side(index_dir: str | os.PathLike, store, model: str = DEFAULT_MODEL,
                   factory: str | None = None, precision: str = "auto",
                   drop_vectors: bool = False, show_progress: bool = False) -> bool:
    """A dense index of `store` by the dual encoder `model` in `index_dir`/dense (resumable:
    the encoding is sharded; `factory` None: `default_factory`), unless a finished one is
    there, which must then be an index of `store` (one-line error otherwise). `drop_vectors`:
    delete the encoded shards once the FAISS index is written (they only serve another
    factory). True when it was built."""
    from retrievers.dense.build import VECTORS_DIR, build_dense_index
    from retrievers.dense.index import DenseIndex

    folder = Path(index_dir) / DENSE_DIR
    if DensePrior.exists(folder):  # refuses another corpus's index (no encoder needed for it)
        DenseIndex.load(folder).check(corpus_checksum=store.checksum)
        built = False
    else:
        build_dense_index(model, store, folder, factory=factory or default_factory(len(store)),
                          precision=precision, progress=show_progress)
        built = True
    if drop_vectors and (folder / VECTORS_DIR).is_dir():
        shutil.rmtree(folder / VECTORS_DIR)
    return built


def dense_folder(index_dir: str | os.PathLike, dense_index: str | os.PathLike | None) -> Path:
    """Where a phrase index's dense side is: `dense_index` when given (one-line error when it
    is not a dense index), else `index_dir`/dense."""
    if dense_index is None:
        return Path(index_dir) / DENSE_DIR
    if not DensePrior.exists(dense_index):
        raise ConfigError(f"{dense_index}: not a dense index (`convqa index --dense`)")
    return Path(dense_index)
