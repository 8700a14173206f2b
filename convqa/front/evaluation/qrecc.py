"""QReCC evaluation: retrieval (MRR, Hits@k, trec Recall@k) and end-to-end QA (EM/F1).

Example (runs from the repository root on the official-format fixture; runs and the BM25 index
go to $CONVQA_CACHE, default ~/.cache/convqa):

    from convqa.front.evaluation.qrecc import (answers_markdown, evaluate_qrecc_answers,
                                         evaluate_qrecc_retrieval, load_qrecc_eval,
                                         retrieval_markdown)

    folder = "tests/fixtures/qrecc_eval/"
    data = load_qrecc_eval(folder + "qrecc_test.json", folder + "passages.jsonl",
                           folder + "qrecc_test_qrels_binary.json")
    results = [evaluate_qrecc_retrieval(data, "bm25", history, ks=(1, 5), relevance=relevance,
                                        no_gold="miss", progress=False)
               for history in ("question_only", "rewrite")
               for relevance in ("gold-ids", "span-f1")]
    print(retrieval_markdown(results))
    answers = evaluate_qrecc_answers(data, "bm25", {"name": "extractive",
                                                    "model": "convqa-reader"},
                                     "question_only", top_ks=(1, 5), progress=False)
    print(answers_markdown([answers]))

`load_scai_eval(folder, cast_topics)` gives the 95-turn SCAI-QReCC-21 subset with its 326
passages instead (tests/test_eval_qrecc_scai.py runs it on ../shared/data).

Signatures (the `convqa eval --dataset qrecc` command calls these):
- `evaluate_qrecc_retrieval(dataset, retriever_spec, history, ks=(1, 5, 10, 20, 100),
  relevance="gold-ids", no_gold="skip", cache_dir=None, progress=True, *, k=None,
  span_method="qrecc", threshold=0.8, batch_size=64, label=None, use_cache=True) -> dict`
- `evaluate_qrecc_answers(dataset, retriever_spec, reader_spec, history, top_ks=(1, 5, 20),
  cache_dir=None, progress=True, *, k=100, batch_size=64, label=None, use_cache=True) -> dict`

`retriever_spec`: a spec (`"bm25"`, `{name: dense, index: ...}`) or a built retriever. A BM25
spec without `index` is built over the dataset's collection under `cache_dir/indexes` (preset
"qrecc", k1=0.82 b=0.68, unless the spec says otherwise). `history`: any history strategy spec
(`question_only`, `full`, `questions_only`, ...) or `"rewrite"`: the turn's human rewrite.
Every retrieved passage must be in the dataset's collection (else a DataError: an index of
another collection).

Relevance (say which a number used; the result records it):
- "gold-ids": the qrels' gold passages. Gives Hits@k, trec Recall@k (share of a turn's gold
  passages in the top k; DPR-IHN's QReCC numbers) and MRR. A gold passage missing from the
  collection can never be retrieved; such turns still count (`num_gold_outside_collection`).
- "span-f1": a retrieved passage is relevant when it holds a span with token F1 >= `threshold`
  (0.8) to the gold answer (`convqa.metrics.relevance`, `span_method` "qrecc" = the official
  heuristic, or "exact"). Only the top k are judged, so there is no Recall@k, only Hits@k
  (which QReCC's script prints as "Recall@k") and MRR.
Turns without gold (no gold id; for span-f1 an empty gold answer): `no_gold="skip"` leaves them
out, `"miss"` counts them as 0 on every metric (QReCC's script does this for empty answers).
Both are computed every time: `levels[relevance]["groups"]` follows `no_gold`, and
`levels[relevance]["both"]` has the overall means under each, with their counts.

Result shape (as `evaluate_retrieval`'s): `levels[relevance]["groups"][group]` holds "count",
"hits@k" (and "recall@k" for gold ids) per k and "mrr", fractions 0-1; groups are "all",
"first" (turn 1), "follow-up" (later turns) and "source:trec/quac/nq" when the file names a
source. MRR counts the first relevant passage within the retrieved top k (0 if none).
Runs are cached like the TopiOCQA runs (`evaluation.retrieval`): keyed by the dataset's turns,
the collection, the retriever and its fingerprint, the history strategy and k.
"""
from __future__ import annotations

import hashlib
import json
import os
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Any, Mapping, Sequence

from convqa.corpus import PassageStore
from convqa.errors import ConfigError, DataError
from convqa.history import build_history_strategy, clean_text
from convqa.io import iter_jsonl, load_json, write_json, write_jsonl
from convqa.metrics import group_means
from convqa.metrics.answer import answer_tokens, normalize_answer, score_answer
from convqa.metrics.relevance import METHODS, QRECC_THRESHOLD, span_relevance
from convqa.metrics.retrieval import hits_at_k, ranked_ids, recall_at_k, reciprocal_rank
from convqa.registry import READERS, build_dataclass
from convqa.runs import read_run, retrieve_all, write_run
from convqa.specs import build_retriever, retriever_fingerprint
from convqa.types import Conversation, Hit

from .qrecc_data import QReccEvalData, default_cache_dir, load_qrecc_eval, load_scai_eval
from .qrecc_tables import answers_markdown, retrieval_markdown
from .run_cache import run_key

__all__ = ["KS", "NO_GOLD", "RELEVANCE", "QReccEvalData", "RewriteQuery", "answers_markdown",
           "evaluate_qrecc_answers", "evaluate_qrecc_retrieval", "load_qrecc_eval",
           "load_scai_eval", "retrieval_markdown"]

KS = (1, 5, 10, 20, 100)
TOP_KS = (1, 5, 20)
RELEVANCE = ("gold-ids", "span-f1")
NO_GOLD = ("skip", "miss")
CONVENTION = "squad"
CACHE_VERSION = 1


class RewriteQuery:
    """`history="rewrite"`: the turn's human rewrite, whitespace-cleaned, as the query."""

    registered_name = "rewrite"

    def format_turn(self, conversation: Conversation, turn_number: int) -> str:
        text = clean_text(conversation.turn(turn_number).rewrite or "")
        if not text:
            raise DataError(f"conversation {conversation.id} turn {turn_number} has no rewrite "
                            "(history 'rewrite' needs one for every turn)", field="Rewrite")
        return text

    def to_dict(self) -> dict[str, Any]:
        return {"name": "rewrite"}


def query_strategy(history: Any):
    """A history strategy, or `RewriteQuery` for "rewrite" / {name: rewrite}."""
    if isinstance(history, RewriteQuery):
        return history
    name = history.get("name") if isinstance(history, dict) else history
    if name == "rewrite":
        if isinstance(history, dict) and len(history) > 1:
            raise ConfigError("history 'rewrite' takes no options")
        return RewriteQuery()
    return build_history_strategy(history)


def _check_ks(ks: Sequence[int], name: str) -> list[int]:
    values = list(ks)
    if not values or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in values):
        raise ConfigError(f"{name} must be positive integers, got {values}")
    return sorted(set(values))


def _cache_dirs(cache_dir: str | os.PathLike | None) -> tuple[Path, Path]:
    """(runs folder, BM25 index folder)."""
    if cache_dir is not None:
        return Path(cache_dir), Path(cache_dir) / "indexes"
    from .retrieval import default_cache_dir as runs_dir

    return runs_dir(), default_cache_dir() / "indexes"


def _with_bm25_index(spec: Any, store: PassageStore, index_root: Path,
                     progress: bool) -> Any:
    """A BM25 spec without `index` gets one built over `store` (once, then reused)."""
    if spec == "bm25":
        spec = {"name": "bm25"}
    if not isinstance(spec, dict) or spec.get("name") != "bm25" or spec.get("index"):
        return spec
    from retrievers.bm25 import BM25Config, BM25Retriever

    options = {k: v for k, v in spec.items() if k in ("preset", "k1", "b", "stopwords")}
    if "preset" not in options and "k1" not in options and "b" not in options:
        options["preset"] = "qrecc"
    config = build_dataclass(BM25Config, options, where="retriever 'bm25'")
    k1, b = config.params()
    name = f"bm25-{store.checksum.split(':')[-1][:16]}-k1={k1}-b={b}-{config.stopwords or 'none'}"
    folder = index_root / name
    if not folder.is_dir():
        BM25Retriever.build_from_store(store, config, show_progress=progress).save(folder)
    return dict(spec, **options, index=str(folder))


def _run(dataset: QReccEvalData, retriever_spec: Any, history: Any, k: int,
         cache_dir: str | os.PathLike | None, progress: bool, batch_size: int,
         label: str | None, use_cache: bool) -> dict[str, Any]:
    """Retrieve the top k for every evaluated turn (or read the cached run); checks that every
    hit is in the collection. Returns {"run", "config", "key", "run_file", "cached", "timing"}."""
    strategy = query_strategy(history)
    runs, indexes = _cache_dirs(cache_dir)
    with PassageStore.open(dataset.store) as store:
        spec = retriever_spec if isinstance(retriever_spec, (str, dict)) else None
        if spec is not None:
            spec = _with_bm25_index(spec, store, indexes, progress)
        model = build_retriever(spec) if spec is not None else retriever_spec
        check_store = getattr(model, "check_store", None)
        if callable(check_store):
            check_store(store)
        cacheable = use_cache and (spec is not None or callable(getattr(model, "fingerprint",
                                                                        None)))
        config = {"version": CACHE_VERSION, "dataset": dataset.digest(),
                  "collection": store.checksum, "k": k,
                  "retriever": spec if spec is not None else type(model).__name__,
                  "retriever_fingerprint": retriever_fingerprint(model, spec) if cacheable
                  else None, "history": strategy.to_dict()}
        key = run_key(config)
        run_path, meta_path = runs / f"qrecc-{key}.jsonl", runs / f"qrecc-{key}.json"
        cached = cacheable and run_path.is_file() and meta_path.is_file()
        if cached:
            run = read_run(run_path).hits
            timing = load_json(meta_path).get("timing", {})
            missing = [qid for qid in dataset.queries if qid not in run]
            if missing:
                raise DataError(f"cached run lacks turn {missing[0]!r} (delete it to rerun)",
                                run_path)
        else:
            started = time.perf_counter()
            queries = {}
            for qid in dataset.queries:
                conversation, number = dataset.turn_of(qid)
                queries[qid] = strategy.format_turn(conversation, number)
            formatted = time.perf_counter()
            run = retrieve_all(model, queries, k, batch_size, progress,
                               desc=f"retrieve {label or config['retriever']}")
            done = time.perf_counter()
            timing = {"queries": len(queries),
                      "history_seconds": round(formatted - started, 3),
                      "retrieval_seconds": round(done - formatted, 3),
                      "queries_per_second": round(len(queries) / max(done - formatted, 1e-9), 2)}
        _check_in_collection(run, dataset.queries, store, run_path if cached else None)
        if cacheable and not cached:
            write_run(run_path, run, queries)
            write_json(meta_path, {"config": config, "timing": timing})
    return {"run": run, "config": config, "key": key if cacheable else None,
            "run_file": str(run_path) if cacheable else None, "cached": cached,
            "timing": timing}


def _check_in_collection(run: Mapping[str, Sequence[Hit]], queries: Sequence[str],
                         store: PassageStore, path: Path | None) -> None:
    seen: set[str] = set()
    for qid in queries:
        for hit in run[qid]:
            if hit.passage_id not in seen:
                if hit.passage_id not in store:
                    raise DataError(f"turn {qid}: retrieved passage {hit.passage_id!r} is not in "
                                    f"the collection {store.path} (an index of another "
                                    "collection?)", path if path is not None else "run")
                seen.add(hit.passage_id)


class SpanJudge:
    """Span-F1 relevance of stored passages, the same verdicts as `span_relevance`, faster.

    Each passage is normalized once. A passage whose normalized text holds the normalized answer
    is relevant (the official rule 1). Otherwise any span shares at most c tokens with the
    n-token answer, c = the overlap of the passage's and the answer's token multisets, and its
    width is at least c, so F1 = 2c/(w + n) <= 2c/(c + n): below `threshold` the passage is not
    relevant; only the rest is handed to `span_relevance`. (Judging the 9.5k top-100 passages of
    the SCAI subset took 25-55 s with `span_relevance` alone.)
    """

    def __init__(self, store: PassageStore, threshold: float = QRECC_THRESHOLD,
                 method: str = "qrecc"):
        self.store, self.threshold, self.method = store, threshold, method
        self._passages: dict[str, tuple[str, str, Counter[str]]] = {}
        self._answers: dict[str, tuple[str, Counter[str], int]] = {}

    def _passage(self, pid: str) -> tuple[str, str, Counter[str]]:
        if pid not in self._passages:
            text = self.store.get(pid).text
            normalized = normalize_answer(text)
            self._passages[pid] = (text, normalized, Counter(normalized.split()))
        return self._passages[pid]

    def relevant(self, pid: str, answer: str) -> bool:
        if not answer:
            return False  # the official rule: an empty answer makes nothing relevant
        text, normalized, counts = self._passage(pid)
        if answer not in self._answers:
            tokens = answer_tokens(answer)
            self._answers[answer] = (" ".join(tokens), Counter(tokens), len(tokens))
        target, gold, n = self._answers[answer]
        if self.method == "qrecc" and target in normalized:
            return True
        common = sum(min(count, counts[tok]) for tok, count in gold.items())
        if n and 2 * common / (common + n) < self.threshold - 1e-9:
            return False
        return span_relevance(text, answer, self.threshold, self.method)


def _span_qrels(dataset: QReccEvalData, run: Mapping[str, Sequence[Hit]], k: int, method: str,
                threshold: float) -> dict[str, dict[str, int]]:
    """{qid: {pid: 0/1}} judging the top k of each turn with a gold answer by span F1."""
    judged: dict[str, dict[str, int]] = {}
    with PassageStore.open(dataset.store) as store:
        judge = SpanJudge(store, threshold, method)
        for qid in dataset.queries:
            answer = dataset.answers.get(qid, "")
            if answer:
                judged[qid] = {pid: int(judge.relevant(pid, answer))
                               for pid in ranked_ids(run[qid], qid)[:k]}
    return judged


def _types(dataset: QReccEvalData, qids: Sequence[str]) -> tuple[dict[str, str], dict[str, str]]:
    """({qid: "first"|"follow-up"}, {qid: "source:<source>"} for turns that name a source)."""
    position, source = {}, {}
    for qid in qids:
        conversation, number = dataset.turn_of(qid)
        position[qid] = "first" if number == 1 else "follow-up"
        name = conversation.turn(number).meta.get("source")
        if name:
            source[qid] = f"source:{name}"
    return position, source


def _groups(per_query: dict[str, dict[str, float]], dataset: QReccEvalData) -> dict[str, Any]:
    if not per_query:
        return {"all": {"count": 0}}
    position, source = _types(dataset, list(per_query))
    groups = group_means(per_query, position)
    ordered = {"all": groups["all"]}
    ordered.update({g: groups[g] for g in ("first", "follow-up") if g in groups})
    if source:
        by_source = group_means({q: m for q, m in per_query.items() if q in source}, source)
        ordered.update({g: v for g, v in by_source.items() if g.startswith("source:")})
    return ordered


def evaluate_qrecc_retrieval(dataset: QReccEvalData, retriever_spec: Any, history: Any,
                             ks: Sequence[int] = KS, relevance: str = "gold-ids",
                             no_gold: str = "skip", cache_dir: str | os.PathLike | None = None,
                             progress: bool = True, *, k: int | None = None,
                             span_method: str = "qrecc", threshold: float = QRECC_THRESHOLD,
                             batch_size: int = 64, label: str | None = None,
                             use_cache: bool = True) -> dict[str, Any]:
    """Retrieve for every turn of `dataset` and score (see the module doc). JSON-ready dict."""
    ks, k = _check_retrieval_options(dataset, ks, k, relevance, no_gold, span_method, threshold)
    done = _run(dataset, retriever_spec, history, k, cache_dir, progress, batch_size, label,
                use_cache)
    run = done["run"]
    judged, outside = _judgments(dataset, run, k, relevance, span_method, threshold)
    per_query = {qid: _turn_metrics(ranked_ids(run[qid], qid)[:k],
                                    {pid for pid, grade in judged.get(qid, {}).items()
                                     if grade > 0}, ks, relevance)
                 for qid in dataset.queries}
    no_gold_turns = [qid for qid in dataset.queries
                     if not (dataset.has_gold(qid) if relevance == "gold-ids"
                             else bool(dataset.answers.get(qid)))]
    skipped = set(no_gold_turns)
    modes = {"skip": {q: m for q, m in per_query.items() if q not in skipped},
             "miss": per_query}
    both = {mode: {"num_queries": len(rows), "all": _groups(rows, dataset)["all"]}
            for mode, rows in modes.items()}
    level = {"no_gold": no_gold, "num_queries": len(modes[no_gold]),
             "num_no_gold": len(no_gold_turns),
             "num_no_hits": sum(1 for q in dataset.queries if not run[q]),
             "groups": _groups(modes[no_gold], dataset), "both": both}
    if relevance == "gold-ids":
        level["num_gold_outside_collection"] = outside
    return {
        "dataset": "qrecc", "data": dataset.name, "sources": dataset.sources, "label": label,
        "retriever": done["config"]["retriever"], "history": done["config"]["history"],
        "k": k, "ks": ks, "relevance": relevance,
        "span": {"method": span_method, "threshold": threshold} if relevance == "span-f1"
        else None,
        "no_gold": no_gold, "turns": len(dataset.queries), "run_key": done["key"],
        "run_file": done["run_file"], "cached": done["cached"], "timing": done["timing"],
        "levels": {relevance: level},
    }


def _check_retrieval_options(dataset: QReccEvalData, ks: Sequence[int], k: int | None,
                             relevance: str, no_gold: str, span_method: str,
                             threshold: Any) -> tuple[list[int], int]:
    """The cutoffs and the run depth, once every option is known to be usable."""
    if relevance not in RELEVANCE:
        raise ConfigError(f"unknown relevance {relevance!r} (expected {', '.join(RELEVANCE)})")
    if no_gold not in NO_GOLD:
        raise ConfigError(f"unknown no_gold {no_gold!r} (expected {', '.join(NO_GOLD)})")
    if span_method not in METHODS:
        raise ConfigError(f"unknown span method {span_method!r} (expected {', '.join(METHODS)})")
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or \
            not 0.0 < threshold <= 1.0:
        raise ConfigError(f"span F1 threshold must be in (0, 1], got {threshold!r}")
    ks = _check_ks(ks, "ks")
    k = max(ks) if k is None else k
    if k < max(ks):
        raise ConfigError(f"k={k} is smaller than the largest cutoff {max(ks)}")
    if relevance == "gold-ids" and dataset.gold is None:
        raise ConfigError(f"{dataset.name}: no gold passage ids (give the qrels file), or use "
                          "relevance 'span-f1'")
    if not dataset.queries:
        raise DataError("no turns to evaluate", dataset.sources.get("qrecc_json"))
    return ks, k


def _judgments(dataset: QReccEvalData, run: dict, k: int, relevance: str, span_method: str,
               threshold: float) -> tuple[dict[str, dict[str, int]], int]:
    """Each turn's relevant passages (the gold ids, or the hits whose span F1 with the answer
    passes `threshold`) and, for gold ids, how many turns have none in the collection."""
    if relevance != "gold-ids":
        return _span_qrels(dataset, run, k, span_method, threshold), 0
    gold = dataset.gold or {}
    judged = {qid: {pid: 1 for pid in gold.get(qid, [])} for qid in dataset.queries}
    with PassageStore.open(dataset.store) as store:
        outside = sum(1 for pids in judged.values()
                      if pids and not any(pid in store for pid in pids))
    return judged, outside


def _turn_metrics(ranked: list[str], relevant: set[str], ks: Sequence[int],
                  relevance: str) -> dict[str, float]:
    metrics = {f"hits@{c}": hits_at_k(ranked, relevant, c) for c in ks}
    if relevance == "gold-ids":
        metrics.update({f"recall@{c}": recall_at_k(ranked, relevant, c) for c in ks})
    metrics["mrr"] = reciprocal_rank(ranked, relevant)
    return metrics


def _reader_key(reader_spec: Any, reader: Any) -> str | None:
    fingerprint = getattr(reader, "fingerprint", None)
    if not callable(fingerprint):
        return None
    text = json.dumps({"spec": reader_spec if isinstance(reader_spec, (str, dict)) else
                       type(reader).__name__, "fingerprint": fingerprint()}, sort_keys=True,
                      default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _milliseconds(values: Sequence[float]) -> dict[str, float]:
    ordered = sorted(values) or [0.0]
    return {"mean": round(statistics.fmean(ordered), 1),
            "p50": round(ordered[int(0.5 * (len(ordered) - 1))], 1),
            "p90": round(ordered[int(0.9 * (len(ordered) - 1))], 1)}


def evaluate_qrecc_answers(dataset: QReccEvalData, retriever_spec: Any, reader_spec: Any,
                           history: Any, top_ks: Sequence[int] = TOP_KS,
                           cache_dir: str | os.PathLike | None = None, progress: bool = True, *,
                           k: int = 100, batch_size: int = 64, label: str | None = None,
                           use_cache: bool = True) -> dict[str, Any]:
    """Retrieve (history `history`), let the reader read the top k for each k in `top_ks`, and
    score SQuAD-normalized EM/F1 (percent) against the gold answers of every turn. A turn with
    an empty gold answer scores 100 only for an empty prediction (SQuAD v2.0's no-answer);
    `num_no_answer` counts them. The reader gets the raw question and the conversation history
    and formats them itself. Predictions are cached next to the run."""
    from tqdm.auto import tqdm

    top_ks = _check_ks(top_ks, "top_ks")
    done = _run(dataset, retriever_spec, history, max(k, max(top_ks)), cache_dir, progress,
                batch_size, label, use_cache)
    run = done["run"]
    model = READERS.build(reader_spec) if isinstance(reader_spec, (str, dict)) else reader_spec
    key = _reader_key(reader_spec, model) if use_cache and done["run_file"] else None
    out: dict[str, Any] = {
        "dataset": "qrecc", "data": dataset.name, "label": label,
        "retriever": done["config"]["retriever"], "history": done["config"]["history"],
        "reader": reader_spec if isinstance(reader_spec, (str, dict)) else type(model).__name__,
        "convention": CONVENTION, "turns": len(dataset.queries),
        "num_no_answer": sum(1 for q in dataset.queries if not dataset.answers.get(q)),
        "retrieval_run": done["run_file"], "by_k": {}}
    # turns that all have an answer are read always answering (no-answer turns: as configured)
    always = {"always_answer": True} if getattr(model, "abstains", False) \
        and not out["num_no_answer"] else {}
    with PassageStore.open(dataset.store) as store:
        for top in top_ks:
            cache = (Path(f"{done['run_file']}.answers-{key}-k{top}.jsonl")
                     if key is not None else None)
            predictions = _cached_predictions(cache, dataset.queries)
            cached = predictions is not None
            if predictions is None:
                predictions = {}
                for qid in tqdm(dataset.queries, desc=f"read top-{top}", unit=" q",
                                disable=not progress):
                    conversation, number = dataset.turn_of(qid)
                    passages = [store.get(hit.passage_id) for hit in run[qid][:top]]
                    started = time.perf_counter()
                    answer = model.read(conversation.turn(number).question,
                                        conversation.history(number), passages, **always)
                    ms = (time.perf_counter() - started) * 1000
                    predictions[qid] = {"qid": qid, "prediction": answer.text if answer else "",
                                        "passage_id": answer.passage_id if answer else None,
                                        "ms": round(ms, 2)}
                if cache is not None:
                    write_jsonl(cache, [predictions[q] for q in dataset.queries])
            per_query = {}
            for qid in dataset.queries:
                scores = score_answer(predictions[qid]["prediction"],
                                      [dataset.answers.get(qid, "")], CONVENTION)
                per_query[qid] = {"em": 100.0 * scores["em"], "f1": 100.0 * scores["f1"]}
            out["by_k"][str(top)] = {
                "groups": _groups(per_query, dataset),
                "reader_ms": _milliseconds([p["ms"] for p in predictions.values()]),
                "cached": cached, "predictions": str(cache) if cache else None}
    return out


def _cached_predictions(path: Path | None, queries: Sequence[str]) -> dict[str, dict] | None:
    if path is None or not path.is_file():
        return None
    records = {}
    for line, record in iter_jsonl(path):
        if not isinstance(record, dict) or not isinstance(record.get("qid"), str) or \
                not isinstance(record.get("prediction"), str):
            raise DataError("expected {qid, prediction, ...} (delete the file to rerun)", path,
                            line)
        records[record["qid"]] = record
    if any(q not in records for q in queries):
        return None
    return records
