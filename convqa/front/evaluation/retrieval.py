"""Retrieval evaluation on the TopiOCQA x Wikipedia benchmark: retrieve, cache, score, report.

    result = evaluate_retrieval("/tmp/bench/vital", {"name": "bm25", "index": "idx"},
                                history="question_only", split="dev")
    print(markdown_table(result))

What is measured (DPR-IHN's Tables 2 and 4 on our data):
- every retrieval-evaluable turn of the split is a query; its text is the history strategy's
  rendering of the conversation up to that turn; the top `k` (100) passages are retrieved;
- article level (`qrels(level="article")`): a hit is any passage of the turn's topic article;
  answer level (`qrels(level="answer")`, the answer-evaluable turns only): a hit is a passage
  that contains the answer;
- Hits@1/5/20/100 (any relevant passage in the top k; DPR's "top-k accuracy") and MRR (1/rank of
  the first relevant passage within the retrieved top `k`, 0 if none), averaged over the
  turns, for all turns and per question type (first / no-switch / switch).
A turn whose query is empty (a_{t-1} at turn 1, X_t without q_t at turn 1) gets no hits and
counts as a miss, as in the paper's shortcut analysis.
With a `reranker` the row is scored on the reranked run (convqa/front/evaluation/rerank.py:
each turn's first `top_n` hits rescored, the rest after them), retrieved `max(k, top_n)` deep.

Runs are cached under `cache_dir` (default `$CONVQA_CACHE/runs`, i.e. ~/.cache/convqa/runs)
keyed by a hash of everything they depend on: the benchmark files, the split, the retriever
(its index fingerprint), the history strategy with all its options, and k. A rerun with the
same configuration reads the run file instead of retrieving again.
"""
from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from convqa.benchmark import LabelledTurn, LabelledTurns, load_labelled_turns, qrels
from convqa.errors import ConfigError, DataError
from convqa.history import build_history_strategy
from convqa.io import load_json, write_json
from convqa.metrics import evaluate_run, group_means
from convqa.runs import read_run, retrieve_all, write_run
from convqa.specs import build_retriever, retriever_fingerprint
from convqa.turn_journal import TurnJournal
from convqa.types import Hit

from .run_cache import CachedRun, run_key


KS = (1, 5, 20, 100)
LEVELS = ("article", "answer")
GROUPS = ("all", "first", "no-switch", "switch")
SPLITS = ("train", "dev", "all")
CACHE_VERSION = 1


def default_cache_dir() -> Path:
    from convqa.cache import cache_dir

    return cache_dir() / "runs"


def select_turns(turns: Iterable[LabelledTurn], split: str) -> list[LabelledTurn]:
    """The retrieval-evaluable turns of `split` ("train", "dev" or "all"), in file order."""
    if split not in SPLITS:
        raise ConfigError(f"unknown split {split!r} (expected {', '.join(SPLITS)})")
    return [t for t in turns if t.retrieval_evaluable and (split == "all" or t.split == split)]


def query_texts(turns: Sequence[LabelledTurn], conversations, history) -> dict[str, str]:
    """{qid: query text}: the history strategy applied to each turn's conversation so far."""
    out = {}
    for turn in turns:
        out[turn.qid] = history.format_turn(conversations[turn.conversation_id], turn.turn)
    return out


def score_levels(run: dict[str, Sequence[Hit]], relevance: Mapping[str, Mapping[str, Any]],
                 types: Mapping[str, str], ks: Sequence[int] = KS) -> dict[str, Any]:
    """Hits@k and MRR for each level's qrels `{level: {qid: {passage_id: 1}}}`, per question
    type (`types`: {qid: "first" | "no-switch" | "switch"}): {level: {"num_queries",
    "num_missing", "groups"}}. Any relevance (a benchmark's or an official file's) scores here."""
    wanted = [f"hits@{k}" for k in ks] + ["mrr"]
    out: dict[str, Any] = {}
    for level, qrel_map in relevance.items():
        report = evaluate_run(run, qrel_map, ks=ks, ndcg_ks=(), queries=list(qrel_map))
        per_query = {qid: {name: values[name] for name in wanted}
                     for qid, values in report.per_query.items()}
        groups = group_means(per_query, types) if per_query else {"all": {"count": 0}}
        ordered = {g: groups[g] for g in GROUPS if g in groups}
        out[level] = {"num_queries": report.num_queries, "num_missing": report.num_missing,
                      "groups": ordered}
    return out


def score_run(run: dict[str, Sequence[Hit]], turns: Sequence[LabelledTurn],
              ks: Sequence[int] = KS) -> dict[str, Any]:
    """Hits@k and MRR per level and question type: {level: {"num_queries", "groups"}}."""
    types = {t.qid: t.question_type for t in turns}
    return score_levels(run, {level: qrels(turns, level=level) for level in LEVELS}, types, ks)


def benchmark_digest(folder: Path) -> str:
    """sha256 of the benchmark's turns.jsonl and conversations.jsonl."""
    digest = hashlib.sha256()
    for name in ("turns.jsonl", "conversations.jsonl"):
        with open(folder / name, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def retrieve_cached(dataset_digest: str, split: str, qids: Sequence[str],
                    make_queries: Callable[[Any], dict[str, str]], retriever: Any,
                    history: Any, k: int, cache_dir: str | os.PathLike | None = None,
                    batch_size: int = 64, progress: bool = True, label: str | None = None,
                    use_cache: bool = True) -> CachedRun:
    """Retrieve the top `k` for the queries `qids`, or read the run from the cache.

    The cache key hashes `dataset_digest` (what the query texts come from), `split`, `k`, the
    retriever (spec and fingerprint) and the history strategy with all its options.
    `make_queries(strategy)` gives {qid: query text}; it is called only when retrieving."""
    strategy = build_history_strategy(history)
    spec = retriever if isinstance(retriever, (str, dict)) else None
    model = build_retriever(retriever) if spec is not None else retriever
    cacheable = use_cache and (spec is not None or callable(getattr(model, "fingerprint", None)))
    config = {
        "version": CACHE_VERSION, "benchmark": dataset_digest, "split": split, "k": k,
        "retriever": spec if spec is not None else type(model).__name__,
        "retriever_fingerprint": retriever_fingerprint(model, spec) if cacheable else None,
        "history": strategy.to_dict(),
    }
    key = run_key(config)
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    run_path, meta_path = cache / f"{key}.jsonl", cache / f"{key}.json"
    cached = cacheable and run_path.is_file() and meta_path.is_file()
    if cached:
        meta = load_json(meta_path)
        run = read_run(run_path).hits
        missing = [qid for qid in qids if qid not in run]
        if missing:
            raise DataError(f"cached run lacks query {missing[0]!r} (delete it to rerun)", run_path)
        timing = meta.get("timing", {}) if isinstance(meta, dict) else {}
    else:
        started = time.perf_counter()
        queries = make_queries(strategy)
        formatted = time.perf_counter()
        journal = TurnJournal.beside(run_path if cacheable else None)
        run = retrieve_all(model, queries, k, batch_size, progress,
                           desc=f"retrieve {label or config['retriever']}", journal=journal)
        done = time.perf_counter()
        timing = {"queries": len(queries), "history_seconds": round(formatted - started, 3),
                  "retrieval_seconds": round(done - formatted, 3),
                  "queries_per_second": round(len(queries) / max(done - formatted, 1e-9), 2)}
        if cacheable:
            write_run(run_path, run, queries)
            write_json(meta_path, {"config": config, "timing": timing})
            journal.finish()
    return CachedRun(run, config, key if cacheable else None,
                     run_path if cacheable else None, cached, timing)


def evaluate_retrieval(benchmark: str | os.PathLike, retriever: Any, history: Any = "oldest_first",
                       split: str = "dev", k: int = 100, ks: Sequence[int] = KS,
                       cache_dir: str | os.PathLike | None = None, batch_size: int = 64,
                       progress: bool = True, label: str | None = None,
                       use_cache: bool = True, data: LabelledTurns | None = None,
                       reranker: Any = None, rerank_only: Sequence[str] | None = None
                       ) -> dict[str, Any]:
    """Retrieve for the retrieval-evaluable turns of `split` (and rerank) and score (see module
    doc). `rerank_only`: the qids of the turns worth reranking (an answer table's
    answer-evaluable turns); the reranked run and the levels then hold these turns alone.

    `retriever` is a spec (name, dict) or an already built retriever (then cached by its
    `fingerprint()` if it has one, else not cached); `reranker` likewise (a spec as the
    pipeline's `reranker:` key), or None. `data`: the benchmark's labelled turns when already
    loaded (a table of many systems reads them once). Returns a JSON-ready dict."""
    folder = Path(benchmark)
    if not (folder / "turns.jsonl").is_file():
        raise DataError("not a benchmark folder (no turns.jsonl; build one with `convqa data "
                        "topiocqa-wiki`)", folder)
    if k < max(ks):
        raise ConfigError(f"k={k} is smaller than the largest cutoff {max(ks)}")
    data = data if data is not None else load_labelled_turns(folder)
    turns = select_turns(data.turns, split)
    if not turns:
        raise DataError(f"no retrieval-evaluable turns in split {split!r}", folder / "turns.jsonl")
    reranking = _open_reranker(reranker, retriever)
    depth = max(k, reranking.top_n) if reranking is not None else k
    result = retrieve_cached(
        benchmark_digest(folder), split, [t.qid for t in turns],
        lambda strategy: query_texts(turns, data.conversations, strategy), retriever, history,
        depth, cache_dir, batch_size, progress, label, use_cache)
    out = {
        "label": label, "benchmark": str(folder), "corpus": data.meta.get("corpus"),
        "split": split, "retriever": result.config["retriever"],
        "history": result.config["history"], "k": depth, "ks": list(ks), "run_key": result.key,
        "run_file": str(result.path) if result.path is not None else None,
        "cached": result.cached, "timing": result.timing,
    }
    hits = result.hits
    if reranking is not None:
        if rerank_only is not None:
            wanted = set(rerank_only)
            turns = [t for t in turns if t.qid in wanted]
        reranked = reranking.run(result, turns, data.conversations, folder / "passages",
                                 progress, label, part=rerank_only is not None)
        out.update(reranked.fields(reranking, result))
        hits = reranked.hits
    out["levels"] = score_run(hits, turns, ks)
    return out


def _open_reranker(reranker: Any, retriever: Any = None) -> Any:
    """`rerank.open_reranker(reranker, retriever)`, None for none (imported only for a reranked
    row)."""
    if reranker is None:
        return None
    from .rerank import open_reranker

    return open_reranker(reranker, retriever)


def format_row(groups: dict[str, Any], group: str, ks: Sequence[int] = KS) -> list[str]:
    """Hits@k as percentages with one decimal, MRR with three decimals, and the count."""
    values = groups.get(group, {})
    count = int(values.get("count", 0))
    if not count:
        return ["0"] + ["-"] * (len(ks) + 1)
    return ([str(count)] + [f"{100 * values[f'hits@{k}']:.1f}" for k in ks]
            + [f"{values['mrr']:.3f}"])


def markdown_table(result: dict[str, Any]) -> str:
    """One result as a Markdown table: rows level x question type."""
    ks = result.get("ks", KS)
    header = ["level", "turns", "n"] + [f"Hits@{k}" for k in ks] + ["MRR"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for level, scores in result["levels"].items():
        groups = scores["groups"]
        for group in GROUPS:
            if group in groups:
                lines.append("| " + " | ".join([level, group] + format_row(groups, group, ks))
                             + " |")
    return "\n".join(lines)
