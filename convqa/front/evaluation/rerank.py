"""The reranker stage of an evaluation row: each turn's first `top_n` hits of the retriever's
cached run rescored by a reranker (a RERANKERS component: the cross-encoder of
retrievers/rerank/), kept as a run of its own that the row is scored and read on.

    reranking = open_reranker({"name": "cross_encoder", "model": DIR, "top_n": 50})
    reranked = reranking.run(retrieved, turns, conversations, "bench/full/passages")

- Query: the conversation formatted the reranker's way (`rerank_turn(question, history, ...)`),
  as `convqa answer --rerank` does; not the retriever's query text.
- Order: per turn, the reranker's order of the retriever's first `top_n` hits (scored by its
  logits), then the retriever's other hits in the retriever's order, scored 1, 2, 3, ... below
  the last reranked one, so Hits@100 and MRR still count passages the reranker never saw and
  score order stays rank order. The reader reads the first min(k, top_n) (`read_depth`; after
  a `second_stage`, its top_n): like `convqa answer --rerank`, it reads only passages the
  reranker returns.
- Cache: next to the retriever's run, RUN.rerank-KEY.jsonl and RUN.rerank-KEY.json (what it
  depends on, and the timing); KEY hashes the retriever run's key and the reranker's spec and
  fingerprint (weights, pair length, query format, top_n, precision). A rerun reads the file;
  without a cached retriever run (`--no-cache`) nothing is cached and every turn is reranked.
  Until the file is written each reranked turn goes into RUN.rerank-KEY.jsonl.part
  (convqa/turn_journal.py): a stopped run resumes at the turn it stopped on.
- Timing: the reranker's milliseconds per turn (passages already read from the store), with the
  CPU's kernel level (torch.backends.cpu.get_cpu_capability()), device, threads and precision.
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, NamedTuple, Sequence

from convqa.errors import DataError
from convqa.io import load_json, write_json
from convqa.runs import read_run, write_run
from convqa.turn_journal import TurnJournal
from convqa.types import Hit

from ..paths import RerankerConfig
from .logit_memo import LogitMemo
from .run_cache import CachedRun, run_key
from .timing import percentiles

CACHE_VERSION = 1


class RerankedRun(NamedTuple):
    """A reranked run and where it came from."""

    hits: dict[str, list[Hit]]
    key: str | None              # None: not cached
    path: Path | None
    cached: bool
    timing: dict[str, Any]

    def fields(self, reranking: "Reranking", source: CachedRun) -> dict[str, Any]:
        """What a result row says about the stage: the reranked run replaces the retriever's
        as `run_file` (what the row is scored and read on), which stays as `retriever_run_*`."""
        return {"reranker": reranking.spec or type(reranking.model).__name__,
                "top_n": reranking.top_n, "reads": reranking.reads,
                "retriever_weight": getattr(reranking.model, "retriever_weight", None),
                "run_key": self.key, "run_file": str(self.path) if self.path else None,
                "cached": source.cached and self.cached, "retriever_run_key": source.key,
                "retriever_run_file": str(source.path) if source.path else None,
                "rerank": {"cached": self.cached, **self.timing}}


@dataclass(frozen=True)
class Reranking:
    """A built reranker with what describes it: `spec` (None when given built) and `top_n`."""

    spec: Any
    model: Any

    @property
    def top_n(self) -> int:
        return int(self.model.options.top_n)

    @property
    def reads(self) -> int:
        """Passages a reader after it can read: `top_n`, fewer after a `second_stage`."""
        return int(getattr(self.model, "returned", self.top_n))

    def run(self, source: CachedRun, turns: Sequence[Any], conversations: Mapping[str, Any],
            passages: str | Path, progress: bool = True, label: str | None = None,
            part: bool = False) -> RerankedRun:
        """The reranked run of `source` for `turns` (each with `qid`, `conversation_id`,
        `turn`, `question`), from the cache when it is there. `part`: `turns` are some of the
        source run's turns (an answer table reads only the answer-evaluable ones, a third of
        the full collection's): a cached reranking of the whole run serves them, otherwise only
        they are reranked and kept under a key of their own, which a whole run never reads."""
        fingerprint = getattr(self.model, "fingerprint", None)
        if source.path is None or not callable(fingerprint):  # nothing to key a cache on
            hits, timing = self._rerank_all(source, turns, conversations, passages, progress,
                                            label)
            return RerankedRun(hits, None, None, False, timing)
        config = {"version": CACHE_VERSION, "retriever_run": source.key, "top_n": self.top_n,
                  "reranker": self.spec or type(self.model).__name__,
                  "fingerprint": fingerprint()}
        cached = self._cached(source, run_key(config), turns, strict=not part)
        if part and cached is None:
            qids = "\n".join(sorted(t.qid for t in turns)).encode("utf-8")
            config["turns"] = hashlib.sha256(qids).hexdigest()[:16]
            cached = self._cached(source, run_key(config), turns, strict=True)
        if cached is not None:
            return cached
        key = run_key(config)
        path = self._path(source, key)
        journal = TurnJournal.beside(path)
        hits, timing = self._rerank_all(source, turns, conversations, passages, progress, label,
                                        journal)
        write_run(path, hits)
        write_json(path.with_suffix(".json"),
                   {"config": config, "reads": self.reads, "timing": timing})
        journal.finish()
        return RerankedRun(hits, key, path, False, timing)

    @staticmethod
    def _path(source: CachedRun, key: str) -> Path:
        return source.path.with_name(f"{source.path.stem}.rerank-{key}.jsonl")

    def _cached(self, source: CachedRun, key: str, turns: Sequence[Any],
                strict: bool) -> RerankedRun | None:
        """The cached reranked run under `key` when it holds every turn; None when there is
        none, or (not `strict`) when it lacks some; DataError when it lacks some and
        `strict`."""
        path = self._path(source, key)
        meta = path.with_suffix(".json")
        if not (path.is_file() and meta.is_file()):
            return None
        hits = read_run(path).hits
        missing = [t.qid for t in turns if t.qid not in hits]
        if missing and strict:
            raise DataError(f"cached reranked run lacks query {missing[0]!r} (delete it to "
                            "rerun)", path)
        if missing:
            return None
        return RerankedRun(hits, key, path, True, load_json(meta).get("timing", {}))

    def _rerank_all(self, source: CachedRun, turns: Sequence[Any],
                    conversations: Mapping[str, Any], passages: str | Path, progress: bool,
                    label: str | None, journal: TurnJournal | None = None
                    ) -> tuple[dict[str, list[Hit]], dict[str, Any]]:
        import torch

        from convqa.precision import cpu_capability

        reranked, ms = rerank_turns(self.model, turns, conversations, source.hits, passages,
                                    self.top_n, progress, label, run_file=source.path,
                                    journal=journal)
        out = {turn.qid: reranked_order(reranked[turn.qid], source.hits.get(turn.qid, []))
               for turn in turns}
        device = getattr(getattr(self.model, "model", None), "device", None)
        return out, {"turns": len(ms), "ms_per_turn": percentiles(ms), "cpu": cpu_capability(),
                     "device": str(device) if device is not None else None,
                     "threads": torch.get_num_threads(),
                     "precision": getattr(self.model, "precision", None)}


def rerank_turns(model: Any, turns: Sequence[Any], conversations: Mapping[str, Any],
                 hits: Mapping[str, Sequence[Hit]], passages: str | Path, top_n: int,
                 progress: bool = True, label: str | None = None,
                 run_file: Path | None = None, journal: TurnJournal | None = None
                 ) -> tuple[dict[str, list[Hit]], list[float]]:
    """Each turn's first `top_n` hits rescored by `model.rerank_turn` on its conversation (the
    reranker's order, only those hits), and the milliseconds of each turn that had hits. With a
    `journal`, the turns an earlier, stopped run reranked are taken from it and each new one is
    added to it."""
    from tqdm.auto import tqdm

    from convqa.corpus import PassageStore

    out: dict[str, list[Hit]] = {}
    ms: list[float] = []
    journal = journal or TurnJournal.beside(None)
    done = journal.done()
    for turn in turns:
        if turn.qid in done:
            out[turn.qid] = [_hit_from_dict(h) for h in done[turn.qid]["hits"]]
            if done[turn.qid]["ms"] is not None:
                ms.append(done[turn.qid]["ms"])
    todo = [turn for turn in turns if turn.qid not in out]
    with journal, PassageStore.open(passages) as store:
        for turn in tqdm(todo, desc=f"rerank {label or ''}".strip(), unit=" q",
                         total=len(turns), initial=len(turns) - len(todo), disable=not progress):
            top = list(hits.get(turn.qid, []))[:top_n]
            texts = [_passage(store, hit.passage_id, run_file) for hit in top]
            history = conversations[turn.conversation_id].history(turn.turn)
            started = time.perf_counter()
            out[turn.qid] = model.rerank_turn(turn.question, history, top, texts) if top else []
            took = (time.perf_counter() - started) * 1000 if top else None
            if took is not None:
                ms.append(took)
            journal.add({"qid": turn.qid, "hits": [h.to_dict() for h in out[turn.qid]],
                         "ms": took})
    return {turn.qid: out[turn.qid] for turn in turns}, ms


def _hit_from_dict(data: dict[str, Any]) -> Hit:
    from convqa.types import RerankedHit

    return (RerankedHit if "retriever_score" in data else Hit).from_dict(data)


class CachedRerank(NamedTuple):
    """Turns' reranked hits, what reranking them cost, and whether a cache file gave them."""

    hits: dict[str, list[Hit]]
    facts: dict[str, Any]
    cached: bool


def cached_rerank_turns(model: Any, turns: Sequence[Any], conversations: Mapping[str, Any],
                        hits: Mapping[str, Sequence[Hit]], passages: str | Path, top_n: int,
                        cache_dir: str | Path | None = None, progress: bool = True
                        ) -> CachedRerank:
    """`rerank_turns`, kept in `cache_dir` (None: not kept) as rerank-KEY.json, for the jobs
    that choose settings on reranked training turns and rerun them (reranker fusion, reader
    decoding). KEY hashes the reranker's fingerprint and weight, `top_n`, the passage store and
    every turn's first `top_n` hits: another model, retriever or sample of turns never reads
    another's file; until it is written, a journal beside it keeps the turns done, so a stopped
    run resumes (convqa/turn_journal.py). Under it the stages' logits are kept by (query, passage)
    (logit_memo.py), so hits whose retriever scores moved in their last digits are reranked
    without scoring a pair again."""
    from convqa.types import RerankedHit

    key = json.dumps({"version": CACHE_VERSION, "reranker": model.fingerprint(),
                      "weight": getattr(model, "retriever_weight", None), "top_n": top_n,
                      "passages": str(Path(passages).resolve()),
                      "hits": [[t.qid, [[h.passage_id, h.score] for h in
                                        list(hits.get(t.qid, []))[:top_n]]] for t in turns]},
                     sort_keys=True, default=str)
    cache = Path(cache_dir) / f"rerank-{hashlib.sha256(key.encode()).hexdigest()[:24]}.json" \
        if cache_dir else None
    if cache is not None and cache.is_file():
        stored = load_json(cache)
        return CachedRerank({q: [RerankedHit.from_dict(h) for h in hs]
                             for q, hs in stored["hits"].items()}, stored["facts"], True)
    memo = LogitMemo.open(cache_dir, model)
    journal = TurnJournal.beside(cache)
    with memo.serving(model):
        out, ms = rerank_turns(model, turns, conversations, hits, passages, top_n, progress,
                               journal=journal)
    memo.save()
    facts = {"turns": len(turns), "top_n": top_n,
             # a turn whose pairs the memo knew costs no model time: no timing then
             "rerank_ms_per_turn_p50": percentiles(ms)["p50"] if ms and not memo.served else None}
    if memo.served:
        facts["memo_pairs"] = memo.served
    if cache is not None:
        write_json(cache, {"facts": facts,
                           "hits": {q: [h.to_dict() for h in hs] for q, hs in out.items()}})
        journal.finish()
    return CachedRerank(out, facts, False)


def open_reranker(reranker: Any, retriever: Any = None) -> Reranking:
    """A reranker spec (checked as the pipeline's `reranker:` key, then built) or an already
    built reranker (with `rerank_turn` and `options.top_n`). A spec'd reranker follows the
    row's `retriever` spec as in a pipeline (its calibrated fusion weight)."""
    from convqa.registry import RERANKERS

    if isinstance(reranker, (str, Mapping, RerankerConfig)):
        config = RerankerConfig.from_spec(reranker, None)
        config.check()
        built = RERANKERS.build(config.to_spec())
        if retriever is not None and hasattr(built, "for_retriever"):
            built.for_retriever(retriever)
        return Reranking(config.to_spec(), built)
    return Reranking(None, reranker)


def reranked_order(reranked: Sequence[Hit], hits: Sequence[Hit]) -> list[Hit]:
    """The reranked hits (their scores), then the other `hits` in their order, scored 1, 2, ...
    below the last reranked one; ranks 1, 2, 3, ..."""
    out = [Hit(hit.passage_id, float(hit.score), rank) for rank, hit in enumerate(reranked, 1)]
    seen = {hit.passage_id for hit in out}
    floor, last = (out[-1].score, out[-1].rank) if out else (0.0, 0)
    rest = [hit for hit in hits if hit.passage_id not in seen]
    return out + [Hit(hit.passage_id, floor - offset, last + offset)
                  for offset, hit in enumerate(rest, 1)]


def read_depth(k: int, top_n: int | None) -> int:
    """Passages the reader reads at k after a reranker that returns `top_n` (None: none)."""
    return k if top_n is None else min(k, top_n)


def _passage(store: Any, pid: str, run_file: Path | None):
    try:
        return store.get(pid)
    except KeyError:
        raise DataError(f"passage {pid!r} of the run is not in the passage store "
                        f"{store.path} (a run of another corpus?)", run_file) from None
