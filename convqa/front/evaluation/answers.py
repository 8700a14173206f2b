"""End-to-end QA evaluation on the TopiOCQA x Wikipedia benchmark: retrieve, read, score.

    result = evaluate_answers("/tmp/bench/vital", {"name": "bm25", "index": "idx"},
                              {"name": "extractive", "model": "convqa-reader"},
                              history="oldest_first", top_ks=(1, 5, 20))

What is measured (the end-to-end rows of the TopiOCQA paper, on our data):
- the answer-evaluable turns of the split (a gold answer occurs in a passage of the topic
  article; docs/benchmark_format.md): the reader reads the top k passages of the retrieval run
  (`evaluate_retrieval`, cached, so the retriever runs once for every k and reader) and answers;
- EM / F1 under TopiOCQA's convention (`convqa.metrics.answer`, "topiocqa": leave-one-out over
  the gold answers; the first release has one gold per turn, scored directly), in percent,
  for all turns and per question type (first / no-switch / switch);
- the reader's time per question (mean and p50/p90, milliseconds).
With a `reranker` (convqa/front/evaluation/rerank.py) the reader reads the reranked run, at k
its first min(k, top_n) passages, as `convqa answer --rerank` does; the reranker's time per
turn is in `rerank`.
Predictions are written next to the run (`{run}.answers-{key}.jsonl`) so a rerun of the same
retriever, reader and k reads them instead of reading again; until then each turn's goes into
a journal beside it (`.part`, convqa/turn_journal.py), so a stopped run resumes where it stopped.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from convqa.benchmark import LabelledTurns, load_labelled_turns
from convqa.corpus import PassageStore
from convqa.errors import ConfigError, DataError
from convqa.io import iter_jsonl, write_jsonl
from convqa.metrics import group_means
from convqa.metrics.answer import score_answer
from convqa.pipeline import read_passages
from convqa.registry import READERS
from convqa.runs import read_run
from convqa.turn_journal import TurnJournal
from convqa.types import Hit

from .rerank import read_depth
from .retrieval import GROUPS, evaluate_retrieval
from .timing import percentiles

TOP_KS = (1, 5, 20)
CONVENTION = "topiocqa"


def _reader_key(reader_spec: Any, reader: Any) -> str | None:
    """What the predictions depend on, hashed; None (no caching) when we cannot tell. A built
    reader is cached when it says what it was built from (a `spec` attribute, e.g. the phrase
    rows' `convqa.front.evaluation.phrase.PhraseSystem`) and has a fingerprint."""
    fingerprint = getattr(reader, "fingerprint", None)
    if not isinstance(reader_spec, (str, dict)):
        reader_spec = getattr(reader, "spec", None)
    if not callable(fingerprint) or not isinstance(reader_spec, (str, dict)):
        return None
    # rows always answer: a reader's confidence does not change them
    text = json.dumps({"spec": reader_spec, "fingerprint": fingerprint(always_answer=True)
                       if getattr(reader, "abstains", False) else fingerprint()},
                      sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@contextlib.contextmanager
def run_cache(cache_dir: str | os.PathLike | None, use_cache: bool) -> Iterator[Any]:
    """The cache folder of an end-to-end evaluation: `cache_dir`, or with `use_cache` False a
    fresh temporary folder, so everything is recomputed while the reader still reads the
    retrieval run from its file (removed afterwards)."""
    if use_cache:
        yield cache_dir
        return
    with tempfile.TemporaryDirectory(prefix="convqa-eval-") as tmp:
        yield tmp


def evaluate_answers(benchmark: str | os.PathLike, retriever: Any, reader: Any,
                     history: Any = "oldest_first", split: str = "dev",
                     top_ks: Sequence[int] = TOP_KS, cache_dir: str | os.PathLike | None = None,
                     progress: bool = True, label: str | None = None,
                     use_cache: bool = True, data: LabelledTurns | None = None,
                     reranker: Any = None) -> dict[str, Any]:
    """Retrieve (history strategy `history`), rerank (`reranker`, None for none), read the top
    k for each k, score. The reader formats the conversation itself (its own history
    strategy). `data`: the benchmark's labelled turns when already loaded. Returns a
    JSON-ready dict."""
    if not top_ks or any(k < 1 for k in top_ks):
        raise ConfigError(f"top_ks must be positive, got {list(top_ks)}")
    folder = Path(benchmark)
    data = data if data is not None else load_labelled_turns(folder)
    turns = [t for t in data.turns
             if t.answer_evaluable and (split == "all" or t.split == split)]
    if not turns:
        raise DataError(f"no answer-evaluable turns in split {split!r}", folder / "turns.jsonl")
    with run_cache(cache_dir, use_cache) as cache:
        # a reranker rescores only the turns read here, not every retrieval-evaluable one
        retrieval = evaluate_retrieval(folder, retriever, history, split=split,
                                       k=max(100, max(top_ks)), cache_dir=cache,
                                       progress=progress, label=label, use_cache=True,
                                       data=data, reranker=reranker,
                                       rerank_only=[t.qid for t in turns])
        out = read_run_and_score(retrieval, turns, data.conversations, folder / "passages",
                                 reader, top_ks, progress, use_cache,
                                 {"label": label, "benchmark": str(folder), "split": split,
                                  "convention": CONVENTION})
    return out


def read_run_and_score(retrieval: Mapping[str, Any], turns: Sequence[Any],
                       conversations: Mapping[str, Any], passages: str | os.PathLike,
                       reader: Any, top_ks: Sequence[int], progress: bool, use_cache: bool,
                       fields: Mapping[str, Any]) -> dict[str, Any]:
    """The reader half of an end-to-end evaluation: read the top k passages of the cached
    retrieval run for every turn, for each k; `fields` head the result (label, benchmark,
    split, convention). With `use_cache` False the run file is temporary and not reported."""
    if retrieval["run_file"] is None:
        raise ConfigError("end-to-end evaluation needs a cacheable retriever (a spec)")
    run = read_run(retrieval["run_file"]).hits
    model = READERS.build(reader) if isinstance(reader, (str, dict)) else reader
    out: dict[str, Any] = {
        **fields, "retriever": retrieval["retriever"], "history": retrieval["history"],
        "reader": reader if isinstance(reader, (str, dict)) else type(model).__name__,
        "turns": len(turns), "retrieval_run": retrieval["run_file"] if use_cache else None}
    reads = retrieval.get("reads", retrieval.get("top_n"))  # what a reranker returns per turn
    if retrieval.get("top_n") is not None:  # a reranked row
        out.update({"reranker": retrieval.get("reranker"), "top_n": retrieval["top_n"],
                    "reads": reads, "rerank": retrieval["rerank"]})
    with PassageStore.open(passages) as store:
        out["by_k"] = read_and_score(turns, conversations, run, retrieval["run_file"], store,
                                     model, top_ks, _reader_key(reader, model), progress,
                                     fields.get("convention", CONVENTION), reads)
    return out


def read_and_score(turns: Sequence[Any], conversations: Mapping[str, Any],
                   run: Mapping[str, Sequence[Hit]], run_file: str, store: PassageStore,
                   model: Any, top_ks: Sequence[int], key: str | None = None,
                   progress: bool = True, convention: str = CONVENTION,
                   top_n: int | None = None) -> dict[str, Any]:
    """For each k: the reader reads the top k passages of `run` for every turn and is scored
    (the top min(k, top_n) of a run whose reranker returns `top_n` per turn).

    `turns` have `qid`, `conversation_id`, `turn`, `question`, `answers` and `question_type`
    (a benchmark's LabelledTurn or an official file's turn). With a `key` (what the predictions
    depend on) they are cached next to `run_file`. Returns {str(k): {"groups", "reader_ms",
    "cached", "predictions"}}."""
    from tqdm.auto import tqdm

    types = {t.qid: t.question_type for t in turns}
    by_k: dict[str, Any] = {}
    for k in top_ks:
        depth = read_depth(k, top_n)
        cache = Path(f"{run_file}.answers-{key}-k{k}.jsonl") if key is not None else None
        predictions = _cached_predictions(cache, turns) if cache is not None else None
        cached = predictions is not None
        if predictions is None:
            journal = TurnJournal.beside(cache)
            predictions = journal.done()
            todo = [turn for turn in turns if turn.qid not in predictions]
            with journal:
                for turn in tqdm(todo, desc=f"read top-{k}", unit=" q", total=len(turns),
                                 initial=len(turns) - len(todo), disable=not progress):
                    predictions[turn.qid] = _read_turn(model, turn, conversations, run, depth,
                                                       store, run_file, top_n)
                    journal.add(predictions[turn.qid])
            if cache is not None:
                write_jsonl(cache, [predictions[t.qid] for t in turns])
                journal.finish()
        per_query = {}
        for turn in turns:
            scores = score_answer(predictions[turn.qid]["prediction"], turn.answers, convention)
            per_query[turn.qid] = {"em": 100.0 * scores["em"], "f1": 100.0 * scores["f1"]}
        groups = group_means(per_query, types)
        by_k[str(k)] = {
            "groups": {g: groups[g] for g in GROUPS if g in groups},
            "reader_ms": percentiles([p["ms"] for p in predictions.values()]),
            "cached": cached, "predictions": str(cache) if cache else None}
    return by_k


def _read_turn(model: Any, turn: Any, conversations: Mapping[str, Any],
               run: Mapping[str, Sequence[Hit]], depth: int, store: PassageStore,
               run_file: str, top_n: int | None) -> dict[str, Any]:
    """The reader's prediction for one turn from its first `depth` passages, and its time."""
    conversation = conversations[turn.conversation_id]
    hits = run.get(turn.qid, [])[:depth]
    passages = [_passage(store, hit.passage_id, run_file) for hit in hits]
    started = time.perf_counter()
    answer = read_passages(model, turn.question, conversation.history(turn.turn), passages,
                           hits, always_answer=True, reranked=top_n is not None)
    ms = (time.perf_counter() - started) * 1000
    return {"qid": turn.qid, "prediction": answer.text if answer else "",
            "passage_id": answer.passage_id if answer else None, "ms": round(ms, 2)}


def _passage(store: PassageStore, pid: str, run_file: str):
    try:
        return store.get(pid)
    except KeyError:
        raise DataError(f"passage {pid!r} of the run is not in the benchmark's passage store "
                        "(a run of another corpus?)", run_file) from None


def _cached_predictions(path: Path, turns) -> dict[str, dict] | None:
    if not path.is_file():
        return None
    records = {record["qid"]: record for _, record in iter_jsonl(path)}
    if any(t.qid not in records for t in turns):
        return None
    return records
