"""The logits a cross-encoder reranker gave (query, passage) pairs, kept on disk so a job that
reranks the same turns again scores no pair twice.

The training-turn jobs (reranker fusion, cascade, reader decoding, rescore gaps) cache whole
reranked turns under a key that holds the retriever's scores, because the fusion and the
shortlist use them. Those scores move in their last digits with the query encoder's precision,
which `auto` chooses per thread count and CPU, so a rerun on another thread count misses that
cache although every logit is the same. The memo sits under it: the ranking is recomputed
from the current scores, and only the pairs never scored are sent to the model.

    memo = LogitMemo.open(cache_dir, reranker)
    with memo.serving(reranker):
        ranked = reranker.rerank_turn(question, history, hits, passages)
    memo.save()
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from convqa.io import load_json, write_json
from convqa.types import Passage

MEMO_VERSION = 1


def stage_key(stage: Any) -> str:
    """What one stage's logits depend on: its weights, pair format and requested precision
    (not its top_n, fusion weight or shortlist, which only choose among the logits)."""
    settings = {"model": stage.model.fingerprint(), "config": dataclasses.asdict(stage.config),
                "precision": stage.options.precision}
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()
                          ).hexdigest()[:24]


def pair_key(query: str, passage: Passage) -> str:
    """A (query, passage) pair by its text, so another store with the same id cannot match."""
    text = json.dumps([query, passage.title, passage.text], ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def stages(reranker: Any) -> list[Any]:
    """The reranker and its second stage, if it has one."""
    second = getattr(reranker, "second", None)
    return [reranker] + ([second] if second is not None else [])


@dataclasses.dataclass
class LogitMemo:
    """Logits by stage key and pair key; `path` None keeps them in memory only."""

    path: Path | None
    logits: dict[str, dict[str, float]]
    added: int = 0     # pairs scored by a model since the last save
    served: int = 0    # pairs answered from the memo

    @classmethod
    def open(cls, cache_dir: str | Path | None, reranker: Any) -> "LogitMemo":
        """The memo of `reranker`'s stages in `cache_dir` (empty when there is none yet)."""
        if cache_dir is None:
            return cls(None, {})
        keys = sorted(stage_key(s) for s in stages(reranker))
        name = hashlib.sha256(json.dumps([MEMO_VERSION, keys]).encode()).hexdigest()[:24]
        path = Path(cache_dir) / f"logits-{name}.json"
        stored = load_json(path) if path.is_file() else {}
        logits = stored.get("logits", {}) if stored.get("version") == MEMO_VERSION else {}
        return cls(path, {k: dict(logits.get(k, {})) for k in keys})

    @contextmanager
    def serving(self, reranker: Any) -> Iterator["LogitMemo"]:
        """Within the block every stage's `score` answers known pairs from the memo and scores
        only the others (in one batch, as before), remembering them. A memo kept nowhere
        (`path` None) changes nothing."""
        if self.path is None:
            yield self
            return
        patched = []
        for stage in stages(reranker):
            known = self.logits.setdefault(stage_key(stage), {})
            stage.score = self._memoized(stage.score, known)
            patched.append(stage)
        try:
            yield self
        finally:
            for stage in patched:
                del stage.score   # the class's method again

    def _memoized(self, score: Callable[[str, Sequence[Passage]], list[float]],
                  known: dict[str, float]) -> Callable[[str, Sequence[Passage]], list[float]]:
        """`score` answering the pairs in `known` from it and adding the others."""

        def memoized(query: str, passages: Sequence[Passage]) -> list[float]:
            keys = [pair_key(query, p) for p in passages]
            missing = [i for i, k in enumerate(keys) if k not in known]
            self.served += len(keys) - len(missing)
            if missing:
                for i, logit in zip(missing, score(query, [passages[i] for i in missing])):
                    known[keys[i]] = float(logit)
                self.added += len(missing)
            return [known[k] for k in keys]

        return memoized

    def save(self) -> None:
        """Write the memo (atomically) when it learned pairs since it was opened."""
        if self.path is not None and self.added:
            write_json(self.path, {"version": MEMO_VERSION, "logits": self.logits}, indent=None)
            self.added = 0
