"""Hard negatives for the reader's selection head from a dense retriever (DPR's reader recipe):
the top-k passages that the retriever returns for a question's conversation, minus those of its
gold article, minus any that contains a gold answer. Easy BM25 paragraphs of other articles
teach the head little about the candidates it must rank at test time, the retriever's own.

    mined = mine_dense_negatives(examples, "/tmp/work/dense-fp32", "OUT/data/dense-negatives.jsonl")
    add_dense_negatives(examples, mined, count=7)

- Any dense index folder (`convqa index --dense`, `build_dense_index`) works: the retriever is
  the encoder it records (e.g. convqa-dpr-ihn) over the passage store it records. The index may
  be of another corpus than the examples' passages (the vital corpus for the full benchmark's
  turns): the gold article is then recognised by its title (case-insensitive), which is the
  same article in both; with the examples' own corpus, passages of the gold article id are
  dropped as well. Meant for the benchmark's turns; SQuAD-format examples would need an index
  of their paragraphs, and a file with a single title for everything (SQuADShifts reddit,
  COVID-QA) would lose every paragraph to the title rule.
- Queries are formatted by the retriever's history strategy (DPR-IHN: oldest-first), fp32.
- Cache: a JSONL file, first line the provenance (index fingerprint, corpus checksum, k,
  history), then one line per example `{"id", "negatives": [{"id", "title", "text", "score"}]}`,
  appended in chunks and flushed: a killed mining resumes after the last whole line; a cache
  of another index or settings is refused, never mixed.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from convqa.benchmark.labelled_turns import article_id_of
from convqa.errors import ConfigError, DataError
from convqa.types import Passage

from .data import ReaderExample, find_answer_spans

FORMAT = "convqa-reader-dense-negatives"
VERSION = 1
BENCHMARK_SOURCE = "topiocqa-wiki:"  # build_examples.benchmark_examples


@dataclass
class DenseNegativesConfig:
    index: str                                # dense index folder
    top_k: int = 50                           # retrieved per question, before filtering
    keep: int = 20                            # negatives kept per question in the cache
    history: str | dict = "oldest_first"      # the retriever's query formatting
    batch_size: int = 256                     # questions per search chunk (and cache flush)
    progress: bool = True

    def __post_init__(self) -> None:
        for name in ("top_k", "keep", "batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"dense negatives: {name} must be an integer >= 1, "
                                  f"got {value!r}")

    def identity(self) -> dict[str, Any]:
        """What the mined negatives depend on: the index (encoder fingerprint, corpus) and
        the settings (recorded in the run's data parameters and the cache's first line)."""
        from retrievers.dense.index import DenseIndex

        folder = Path(self.index)
        if not folder.is_dir():
            raise DataError("dense index folder not found", folder)
        meta = DenseIndex.read_meta(folder)
        return {"format": FORMAT, "version": VERSION, "encoder": meta.get("encoder"),
                "fingerprint": meta.get("fingerprint"),
                "corpus_checksum": meta.get("corpus_checksum"), "count": meta.get("count"),
                "top_k": self.top_k, "keep": self.keep, "history": self.history}


def is_gold(passage: Passage, titles: set[str], articles: set[str]) -> bool:
    """A passage of the gold article: same title (any corpus) or same article id."""
    return passage.title.casefold() in titles or article_id_of(passage.id) in articles


def gold_article_ids(example: ReaderExample) -> set[str]:
    """The gold article ids of a benchmark turn (passage ids "{article}#{n}"); none for other
    sources, whose passage ids do not name an article (SQuAD: "{file}#{n}")."""
    if not example.source.startswith(BENCHMARK_SOURCE):
        return set()
    return {article_id_of(p.passage.id) for p in example.positives}


def not_negative(example: ReaderExample) -> Callable[[Passage], str | None]:
    """Why a passage cannot be a negative of `example`: "gold_article" (of its gold article,
    by title or id), "holds_answer" (contains a gold answer), or None (it can)."""
    titles = {p.passage.title.casefold() for p in example.positives if p.passage.title}
    articles = gold_article_ids(example)
    golds = example.golds()

    def reason(passage: Passage) -> str | None:
        if is_gold(passage, titles, articles):
            return "gold_article"
        if find_answer_spans(passage.text, golds):
            return "holds_answer"
        return None

    return reason


def filter_hits(example: ReaderExample, hits: Sequence[Any], store: Any,
                keep: int) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The first `keep` retrieved passages that are not of the gold article and contain no
    gold answer, with their scores; and how many of each kind were dropped."""
    excluded = not_negative(example)
    kept: list[dict[str, Any]] = []
    dropped = {"gold_article": 0, "holds_answer": 0}
    for hit in hits:
        passage = store.get(hit.passage_id)
        reason = excluded(passage)
        if reason is not None:
            dropped[reason] += 1
        else:
            kept.append({**passage.to_dict(), "score": round(float(hit.score), 4)})
            if len(kept) == keep:
                break
    return kept, dropped


def _read_cache(path: Path, identity: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The negatives already mined into `path`, by example id (a line cut by a kill is
    dropped from the file); a cache with another provenance is an error."""
    if not path.exists():
        return {}
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    done: dict[str, list[dict[str, Any]]] = {}
    whole = 0
    for number, line in enumerate(lines, start=1):
        if not line.endswith("\n"):
            break
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            raise DataError("malformed line in the negatives cache (delete it to mine again)",
                            path, number) from None
        if number == 1:
            if record != json.loads(json.dumps(identity)):
                raise ConfigError(f"{path} holds negatives mined with another index or other "
                                  "settings; delete it or use another output folder")
        else:
            done[str(record["id"])] = record["negatives"]
        whole += len(line.encode("utf-8"))
    if whole != path.stat().st_size:
        with open(path, "r+b") as handle:
            handle.truncate(whole)
    return done


def mine_dense_negatives(examples: Sequence[ReaderExample], config: DenseNegativesConfig,
                         cache: str | os.PathLike) -> dict[str, list[dict[str, Any]]]:
    """Negatives of every example, by id: read from `cache`, the missing ones mined (and
    appended to it). Examples need their history, positives and answers."""
    from tqdm.auto import tqdm

    from convqa.history import build_history_strategy
    from convqa.registry import RETRIEVERS

    path = Path(cache)
    identity = config.identity()
    done = _read_cache(path, identity)
    todo = [e for e in examples if e.id not in done]
    if not todo:
        return done
    retriever = RETRIEVERS.build({"name": "dense", "index": str(config.index),
                                 "precision": "fp32"})
    strategy = build_history_strategy(config.history)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as handle, \
            tqdm(total=len(todo), desc="mining dense negatives", unit=" q",
                 disable=not config.progress) as bar:
        if not done and handle.tell() == 0:
            handle.write(json.dumps(identity) + "\n")
        for begin in range(0, len(todo), config.batch_size):
            chunk = todo[begin:begin + config.batch_size]
            queries = [strategy.format(e.question, e.history_turns()) for e in chunk]
            rows = retriever.retrieve_batch(queries, k=config.top_k)
            for example, hits in zip(chunk, rows):
                kept, _ = filter_hits(example, hits, retriever.store, config.keep)
                done[example.id] = kept
                handle.write(json.dumps({"id": example.id, "negatives": kept},
                                        ensure_ascii=False) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
            bar.update(len(chunk))
    return done


def add_dense_negatives(examples: Sequence[ReaderExample],
                        mined: dict[str, list[dict[str, Any]]], count: int) -> dict[str, int]:
    """Each example's negatives become its first `count` mined ones, filled up to `count` with
    its previous (BM25) negatives; returns counts for the data report."""
    report = {"examples": 0, "dense_negatives": 0, "filled_with_bm25": 0}
    for example in examples:
        if example.id not in mined:
            continue
        dense = [Passage.from_dict(item) for item in mined[example.id][:count]]
        ids = {p.id for p in dense}
        fill = [p for p in example.negatives if p.id not in ids][:count - len(dense)]
        example.negatives = dense + fill
        report["examples"] += 1
        report["dense_negatives"] += len(dense)
        report["filled_with_bm25"] += len(fill)
    return report
