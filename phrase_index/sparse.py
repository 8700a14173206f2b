"""The sparse side of phrase search: BM25 over the index's own passages, as a passage prior.

A phrase vector sees one passage; across 220,873 passages the phrase index finds the answer
passage less often than a passage retriever (docs/results/phrase.md). DenSPI pairs each dense
phrase vector with a sparse vector of its passage; here the sparse side is a BM25 index of the
same passage store, kept in the phrase index folder (`sparse/`), and for each query it

- proposes its best `passages` passages, every phrase of them a candidate beside the FAISS
  hits, and
- adds `weight * bm25(passage) / bm25(best passage)` to every phrase of every candidate
  passage: the query's best BM25 passage gains `weight`, a passage without a query word 0.

BM25's query is the conversation as the BM25 rows of the pipeline read it (`history`, default
`oldest_first`: q1 a1 ... q_t), not the phrase model's current-first rendering, whose window
drops the oldest turns, which name the topic (measured in docs/results/phrase.md, "The sparse
side's query"); `history="phrase"` gives BM25 the phrase model's text instead.

    from phrase_index.sparse import SparsePrior
    prior = SparsePrior.load("runs/phrase-index/sparse", store)
    priors = prior.priors([prior.query_text("when?", history)])
    search_phrases(index, q_start, q_end, 5, priors=priors)

The weight is on the scale of the phrase scores of the shipped model (DEFAULT_WEIGHT, measured
on TopiOCQA dev turns; docs/results/phrase.md, "BM25 as the sparse side"); 0 turns it off.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import numpy as np

from convqa.errors import ConfigError, DataError

from .search import PassagePrior

SPARSE_DIR = "sparse"     # inside a phrase index folder
DEFAULT_WEIGHT = 8.0
DEFAULT_PASSAGES = 20
DEFAULT_HISTORY = "oldest_first"
PHRASE_RENDERING = "phrase"  # `history` value: the phrase model's own query text


def check_settings(weight=None, passages=None, what: str = "sparse") -> tuple[float, int]:
    """(weight, passages) of a passage prior checked, None standing for the default: a weight
    >= 0 (0: off) and a positive passage count. `what` names the prior in the error."""
    weight = DEFAULT_WEIGHT if weight is None else weight
    passages = DEFAULT_PASSAGES if passages is None else passages
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight >= 0:
        raise ConfigError(f"{what} weight must be a number >= 0, got {weight!r}")
    if isinstance(passages, bool) or not isinstance(passages, int) or passages < 1:
        raise ConfigError(f"{what} passages must be a positive integer, got {passages!r}")
    return float(weight), passages


class SparsePrior:
    """BM25 over the phrase index's passages, turned into one `PassagePrior` per query."""

    def __init__(self, retriever, weight: float = DEFAULT_WEIGHT,
                 passages: int = DEFAULT_PASSAGES, history=DEFAULT_HISTORY):
        from convqa.history import build_history_strategy

        self.retriever = retriever
        self.weight, self.passages = check_settings(weight, passages)
        history = DEFAULT_HISTORY if history is None else history
        self.history = None if history == PHRASE_RENDERING else build_history_strategy(history)

    def query_text(self, question: str, history: Sequence) -> str | None:
        """BM25's query for `question` after the turns `history`; None: the phrase model's
        rendering is the query (`history="phrase"`)."""
        return None if self.history is None else self.history.format(question, list(history))

    @staticmethod
    def exists(folder: str | os.PathLike) -> bool:
        from retrievers.bm25 import META_FILE

        return (Path(folder) / META_FILE).is_file()

    @classmethod
    def load(cls, folder: str | os.PathLike, store, weight: float = DEFAULT_WEIGHT,
             passages: int = DEFAULT_PASSAGES, history=DEFAULT_HISTORY) -> "SparsePrior":
        """The BM25 index in `folder`, checked to be an index of `store` (one-line error)."""
        from retrievers.bm25 import BM25Retriever

        if not cls.exists(folder):
            raise DataError(f"no BM25 index here (build one with `convqa index --bm25 "
                            f"--passages {store.path} --out {folder}`)", folder)
        retriever = BM25Retriever.load(folder)
        retriever.check_store(store)
        return cls(retriever, weight, passages, history)

    def fingerprint(self) -> dict:
        return {"bm25": self.retriever.fingerprint(), "weight": self.weight,
                "passages": self.passages,
                "history": PHRASE_RENDERING if self.history is None else self.history.to_dict()}

    def priors(self, query_texts: Sequence[str]) -> list[PassagePrior]:
        """One prior per BM25 query text (`query_text`)."""
        nothing = PassagePrior(np.zeros(0, dtype=np.int64), _zeros)
        if self.weight == 0:
            return [nothing for _ in query_texts]
        out = []
        for scores in self.retriever.all_scores(query_texts):
            if scores is None or not len(scores) or float(scores.max()) <= 0:
                out.append(nothing)
                continue
            count = min(self.passages, len(scores))
            best = np.argpartition(-scores, count - 1)[:count]
            best = np.sort(best[scores[best] > 0]).astype(np.int64)
            out.append(PassagePrior(best, _scaled(scores, self.weight / float(scores.max()))))
        return out


def add_sparse_side(index_dir: str | os.PathLike, store, config=None,
                    show_progress: bool = False) -> bool:
    """A BM25 index of `store` (`config`: a `retrievers.bm25.BM25Config`, None: the defaults)
    in `index_dir`/sparse, unless one is there, which must then be an index of `store`
    (one-line error otherwise). True when it was built."""
    from retrievers.bm25 import BM25Retriever

    folder = Path(index_dir) / SPARSE_DIR
    if SparsePrior.exists(folder):
        SparsePrior.load(folder, store)  # refuses a BM25 index of another corpus
        return False
    BM25Retriever.build_from_store(store, config, show_progress=show_progress).save(folder)
    return True


def _zeros(rows: np.ndarray) -> np.ndarray:
    return np.zeros(len(rows), dtype=np.float32)


def _scaled(scores: np.ndarray, scale: float):
    def score(rows: np.ndarray) -> np.ndarray:
        return scores[rows] * np.float32(scale)
    return score
