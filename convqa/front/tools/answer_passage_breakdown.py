#!/usr/bin/env python
"""End-to-end F1 split by whether the answer passage was among the passages read, from the
cached run of `convqa eval answers --cache-dir DIR` (retrieval run + answers at each k): what
limits a corpus, recall or the choice of passage.

    python -m convqa.front.tools.answer_passage_breakdown --benchmark /tmp/work/bench/full \\
        --cache-dir /tmp/work/cache-full

Each cached retrieval run (DIR/RUN.jsonl; a reranked one, DIR/RUN.rerank-KEY.jsonl, too) and its
answer files (DIR/RUN.jsonl.answers-*-kK.jsonl) are read; `--run FILE` (repeatable) takes those
runs only. Per k: turns whose answer passage was read, their F1, how often the answer came from
an answer passage, and the F1 of the other turns (TopiOCQA scoring). After a reranker of
`top_n` (its RUN.rerank-KEY.json says; after a second stage, that stage's top_n) the reader
read the first min(k, top_n) passages, so those are what "read" counts.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from convqa.errors import ConvQAError, DataError


def read_jsonl(path: Path) -> list[dict]:
    from convqa.io import iter_jsonl

    return [row for _, row in iter_jsonl(path)]


def breakdown(turns: dict[str, dict], hits: dict[str, list[str]], answers: list[dict],
              k: int) -> dict[str, float]:
    from convqa.metrics.answer import score_answer

    read, other = [], []
    for row in answers:
        turn = turns.get(row["qid"])
        if turn is None:
            continue
        gold = set(turn["answer_passage_ids"])
        f1 = score_answer(row.get("prediction") or "", turn["answers"], "topiocqa")["f1"]
        if gold & set(hits.get(row["qid"], [])[:k]):
            read.append((f1, row.get("passage_id") in gold))
        else:
            other.append(f1)
    count = len(read) + len(other)
    mean = lambda values: round(100 * sum(values) / len(values), 1) if values else None  # noqa: E731
    return {"k": k, "turns": count, "read": len(read),
            "read_percent": round(100 * len(read) / count, 1) if count else None,
            "f1_read": mean([f for f, _ in read]),
            "from_answer_passage_percent": mean([float(g) for _, g in read]),
            "f1_other": mean(other)}


def reranked_top_n(run: Path) -> int | None:
    """How many passages a reranked run's reranker returned per turn (its `reads`, else its
    `top_n`, from the RUN.json beside it), None for a retriever's run."""
    meta = run.with_suffix(".json")
    if not meta.is_file():
        return None
    from convqa.io import load_json

    facts = load_json(meta)
    if facts.get("reads") is not None:
        return int(facts["reads"])
    config = facts.get("config", {})
    return config.get("top_n") if isinstance(config, dict) else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--benchmark", required=True, help="`convqa data topiocqa-wiki` corpus folder")
    parser.add_argument("--cache-dir", help="`convqa eval answers --cache-dir`: every run in it")
    parser.add_argument("--run", action="append", default=[],
                        help="a run file of that folder (retriever's or reranked); repeatable")
    args = parser.parse_args(argv)
    if not args.cache_dir and not args.run:
        parser.error("give --cache-dir DIR or --run FILE")
    try:
        turns = {t["qid"]: t for t in read_jsonl(Path(args.benchmark) / "turns.jsonl")
                 if t.get("split") == "dev" and t.get("answer_evaluable")}
        runs = [Path(p) for p in args.run] or [
            p for p in sorted(Path(args.cache_dir).glob("*.jsonl")) if ".answers-" not in p.name]
        if not runs:
            raise DataError("no cached retrieval run (*.jsonl)", args.cache_dir)
        for run in runs:
            if not run.is_file():
                raise DataError("run file not found", run)
            hits = {r["qid"]: [h["passage_id"] for h in r["hits"]] for r in read_jsonl(run)}
            top_n = reranked_top_n(run)
            for path in sorted(run.parent.glob(run.name + ".answers-*-k*.jsonl")):
                k = int(re.search(r"-k(\d+)\.jsonl$", path.name).group(1))
                depth = k if top_n is None else min(k, top_n)
                print(json.dumps({"run": run.name, "answers": path.name,
                                  **breakdown(turns, hits, read_jsonl(path), depth), "k": k,
                                  "passages_read": depth}))
    except (ConvQAError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
