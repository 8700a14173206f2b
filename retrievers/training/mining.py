"""Hard-negative mining: the current model's top-k passages for each training query, minus
its positives, written as JSONL with provenance.

    OUT/negatives.jsonl       {"qid", "negatives": [ids, best first], "scores": [...],
                               "positive_ranks": [1-based ranks of positives in the top-k]}
    OUT/negatives.meta.json   model fingerprint and path, corpus path/checksum/size, k, filter,
                              history strategy, positives mode, date, counts, Hits@k of the
                              training queries (how often the model already finds a positive)
    OUT/index/                the mining corpus encoded by the model (vectors/ shards + FAISS)

Resumable: the corpus encoding (the expensive part) resumes shard by shard
(retrievers/dense/encode.py); query encoding and search take seconds and are redone; the
negatives file is written atomically and its meta last, so a finished mining pass with the same
provenance is reused as is.

Filtering (`exclude_gold_article`, on by default): besides the example's positives, every
passage of its gold article is dropped, because the benchmark's article-level qrels count them
as relevant and training them away as negatives would fight the evaluation.
`keep_positives_in_negatives` turns all filtering off (an ablation).

The mining corpus can be smaller than the benchmark's (CPU budget): `build_mining_store` makes a
sub-store of the train turns' gold articles plus a random sample of the other passages.
"""
from __future__ import annotations

import datetime as _dt
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np
import torch

from convqa.benchmark.labelled_turns import article_id_of
from convqa.errors import ConfigError, DataError
from convqa.io import iter_jsonl, load_json, require, write_json, write_jsonl

from .data import ExampleSet

NEGATIVES_FILE = "negatives.jsonl"
NEGATIVES_META = "negatives.meta.json"
INDEX_DIR = "index"
FORMAT = "convqa-hard-negatives"
VERSION = 1


@dataclass
class MiningConfig:
    top_k: int = 100
    keep_positives_in_negatives: bool = False
    exclude_gold_article: bool = True
    factory: str = "Flat"
    batch_size: int = 64         # passages and queries per encoding batch
    fast: bool = True            # measured-fastest agreeing precision (convqa/precision.py)
    progress: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 1:
            raise ConfigError(f"mining top_k must be an integer >= 1, got {self.top_k!r}")
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) \
                or self.batch_size < 1:
            raise ConfigError(f"batch_size must be an integer >= 1, got {self.batch_size!r}")

    def filter_name(self) -> str:
        if self.keep_positives_in_negatives:
            return "none"
        return "gold-article" if self.exclude_gold_article else "positives"


def excluded_ids(positive_ids: Iterable[str], gold_article_id: str | None,
                 config: MiningConfig) -> tuple[set[str], str | None]:
    """(ids never used as negatives, article whose passages are never used) for one example."""
    if config.keep_positives_in_negatives:
        return set(), None
    return set(positive_ids), gold_article_id if config.exclude_gold_article else None


def filter_negatives(ranked_ids: list[str], positive_ids: Iterable[str],
                     gold_article_id: str | None, config: MiningConfig) -> list[int]:
    """Positions in `ranked_ids` that stay as negatives."""
    ids, article = excluded_ids(positive_ids, gold_article_id, config)
    return [i for i, pid in enumerate(ranked_ids)
            if pid not in ids and (article is None or article_id_of(pid) != article)]


def encode_queries(model, queries: list[str], batch_size: int = 64, precision: str = "fp32",
                   progress: bool = False) -> np.ndarray:
    """float32 `[n, dim]` query vectors (no gradients), batches sorted by length, in a fixed
    `precision` (convqa/precision.py)."""
    from convqa.precision import autocast, prepare

    out = np.empty((len(queries), model.dim), dtype=np.float32)
    order = sorted(range(len(queries)), key=lambda i: -len(queries[i]))
    from tqdm.auto import tqdm

    was_training = model.training
    model.eval()
    try:
        runner = prepare(model, precision)
        with torch.inference_mode(), autocast(precision, model.device), \
                tqdm(total=len(queries), desc="encoding queries", unit=" q",
                     disable=not progress) as bar:
            for start in range(0, len(order), batch_size):
                rows = order[start:start + batch_size]
                vectors = runner.encode_query(model.tokenize_queries([queries[i] for i in rows]))
                out[rows] = vectors.float().cpu().numpy()
                bar.update(len(rows))
    finally:
        model.train(was_training)
    return out


def provenance(model, store, example_set: ExampleSet, config: MiningConfig,
               model_path: str | None) -> dict[str, Any]:
    """What a set of negatives depends on (compared on resume) plus where it came from."""
    return {"format": FORMAT, "version": VERSION, "model_fingerprint": model.fingerprint(),
            "model": model_path, "corpus": str(Path(store.path).resolve()),
            "corpus_checksum": store.checksum, "corpus_size": len(store), "k": config.top_k,
            "filter": config.filter_name(), "history": example_set.history,
            "positives": example_set.positives, "queries": len(example_set)}


_SAME = ("format", "version", "model_fingerprint", "corpus_checksum", "k", "filter",
         "history", "positives", "queries")


def mine_hard_negatives(model, example_set: ExampleSet, store, out_dir: str | os.PathLike,
                        config: MiningConfig | None = None, accelerator: Any = None,
                        model_path: str | None = None) -> dict[str, Any]:
    """Encode `store` with `model`, retrieve the top-k for every example's query, drop
    positives, write OUT/negatives.jsonl (main process) and return its meta. Every process of
    an `accelerate launch` must call this (the corpus encoding is shared out); only the main
    process searches and writes."""
    from retrievers.dense.build import build_dense_index

    config = config or MiningConfig()
    out = Path(out_dir)
    record = provenance(model, store, example_set, config, model_path)
    meta_path = out / NEGATIVES_META
    if meta_path.exists() and (out / NEGATIVES_FILE).exists():
        old = load_json(meta_path)
        if all(old.get(key) == record[key] for key in _SAME):
            return old
    main = accelerator is None or accelerator.is_main_process
    start = _dt.datetime.now(_dt.timezone.utc)
    index = build_dense_index(model, store, out / INDEX_DIR, config.factory, config.batch_size,
                              "auto" if config.fast else "fp32", accelerator,
                              progress=config.progress)
    index.check(fingerprint=record["model_fingerprint"], corpus_checksum=store.checksum)
    if main:
        queries = [e.query for e in example_set.examples]
        vectors = encode_queries(model, queries, config.batch_size,
                                 index.meta.get("precision") or "fp32", config.progress)
        scores, rows = index.search(vectors, config.top_k)
        counts = _write_negatives(out / NEGATIVES_FILE, example_set, store, scores, rows, config)
        record.update(counts)
        record["date"] = start.isoformat(timespec="seconds")
        record["seconds"] = round((_dt.datetime.now(_dt.timezone.utc) - start).total_seconds(), 1)
        record["index_precision"] = index.meta.get("precision")
        write_json(meta_path, record)
    if accelerator is not None:
        accelerator.wait_for_everyone()
    return load_json(meta_path)


def _write_negatives(path: Path, example_set: ExampleSet, store, scores: np.ndarray,
                     rows: np.ndarray, config: MiningConfig) -> dict[str, Any]:
    hits = 0
    lengths = []
    records = []
    for example, row_scores, row_ids in zip(example_set.examples, scores, rows):
        ranked = [store.id_at(int(r)) for r in row_ids if r >= 0]
        positives = set(example.positive_ids)
        positive_ranks = [rank for rank, pid in enumerate(ranked, 1) if pid in positives]
        hits += bool(positive_ranks)
        keep = filter_negatives(ranked, example.positive_ids, example.gold_article_id, config)
        lengths.append(len(keep))
        records.append({"qid": example.qid, "negatives": [ranked[i] for i in keep],
                        "scores": [round(float(row_scores[i]), 5) for i in keep],
                        "positive_ranks": positive_ranks})
    write_jsonl(path, records)
    return {"hits_at_k": round(hits / max(1, len(records)), 4),
            "negatives_per_query": {"min": int(min(lengths, default=0)),
                                    "mean": round(float(np.mean(lengths)) if lengths else 0.0, 2),
                                    "max": int(max(lengths, default=0))},
            "queries_without_negatives": sum(1 for n in lengths if n == 0)}


def load_negatives(folder_or_file: str | os.PathLike,
                   example_set: ExampleSet | None = None) -> dict[str, list[str]]:
    """{qid: negative ids, best first} from a mining output; with `example_set`, every example
    must have a line (negatives mined for other examples are a DataError)."""
    path = Path(folder_or_file)
    if path.is_dir():
        path = path / NEGATIVES_FILE
    negatives: dict[str, list[str]] = {}
    for line, data in iter_jsonl(path):
        qid = require(data, "qid", path, line, str)
        ids = require(data, "negatives", path, line, list)
        if not all(isinstance(i, str) for i in ids):
            raise DataError("expected a list of passage ids", path, line, "negatives")
        if qid in negatives:
            raise DataError(f"duplicate query {qid!r}", path, line, "qid")
        negatives[qid] = ids
    if example_set is not None:
        missing = [e.qid for e in example_set.examples if e.qid not in negatives]
        if missing:
            raise DataError(f"no negatives for {len(missing)} training queries (first: "
                            f"{missing[0]!r}); were they mined for other examples?", path)
    return negatives


def build_mining_store(benchmark: str | os.PathLike, out: str | os.PathLike,
                       sample: int = 0, seed: int = 0, per_article: int | None = None,
                       split: str = "train", progress: bool = True, overwrite: bool = False):
    """A sub-store of the benchmark's passages for cheaper mining: passages of the gold
    articles of `split`'s retrieval-evaluable turns (all of them, or with `per_article` the
    first `per_article` of each article plus every answer passage of those turns), plus `sample`
    random other passages (seeded), in the benchmark store's order with the same ids.
    Returns the opened store."""
    from convqa.benchmark import load_labelled_turns
    from convqa.corpus import PassageStore

    if isinstance(sample, bool) or not isinstance(sample, int) or sample < 0:
        raise ConfigError(f"sample must be an integer >= 0, got {sample!r}")
    if per_article is not None and (isinstance(per_article, bool)
                                    or not isinstance(per_article, int) or per_article < 1):
        raise ConfigError(f"per_article must be an integer >= 1, got {per_article!r}")
    benchmark = Path(benchmark)
    source = PassageStore.open(benchmark / "passages")
    gold: set[int] = set()
    for turn in load_labelled_turns(benchmark).turns:
        if turn.split != split or not turn.retrieval_evaluable:
            continue
        ids = turn.gold_passage_ids()
        if per_article is not None:
            ids = ids[:per_article] + turn.answer_passage_ids
        for pid in ids:
            try:
                gold.add(source.index(pid))
            except KeyError:
                raise DataError(f"gold passage {pid!r} of {turn.qid} is not in the store",
                                benchmark / "passages") from None
    others = np.setdiff1d(np.arange(len(source)), np.fromiter(gold, dtype=np.int64))
    chosen = np.random.default_rng(seed).choice(others, min(sample, len(others)),
                                                replace=False) if sample else np.array([], int)
    rows = sorted(gold | set(int(i) for i in chosen))
    which = "all" if per_article is None else f"the first {per_article} + answer passages"
    description = (f"mining subset of {benchmark}: {len(gold)} passages of the {split} gold "
                   f"articles ({which}) + {len(chosen)} random others (seed {seed})")
    return PassageStore.build((source.at(i) for i in rows), out, progress=progress,
                              source=description, overwrite=overwrite)


def mining_summary(meta: Mapping[str, Any]) -> str:
    """One line for logs: corpus size, k, filter, Hits@k of the training queries."""
    return (f"mined top-{meta.get('k')} over {meta.get('corpus_size')} passages "
            f"(filter {meta.get('filter')}): training Hits@{meta.get('k')} "
            f"{meta.get('hits_at_k')}, negatives/query {meta.get('negatives_per_query')}")


__all__ = ["MiningConfig", "build_mining_store", "encode_queries", "filter_negatives",
           "load_negatives", "mine_hard_negatives", "mining_summary", "provenance"]
