#!/usr/bin/env python
"""What a phrase index's dense side (phrase_index/dense_prior.py) costs per turn: the median
milliseconds of its query encoding and of its FAISS search, one turn at a time, on a
benchmark's dev turns. Compare dense indexes (SQ8 against IVF1024,SQ8, say) on one machine.

    OMP_NUM_THREADS=1 python -m convqa.front.tools.bench_dense_side --benchmark BENCH/full \\
        --dense FULL_PHRASE_INDEX/dense --dense OTHER_DENSE_INDEX --turns 80
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time


def stage_ms(prior, texts: list[str]) -> dict[str, float]:
    """Median ms of encoding and searching each text alone (after one warm-up turn)."""
    prior.priors(texts[:1])
    encode, search = [], []
    for text in texts:
        began = time.perf_counter()
        vectors = prior.retriever.encode_queries([text])
        encoded = time.perf_counter()
        prior.retriever.index.search(vectors, prior.passages)
        encode.append((encoded - began) * 1000)
        search.append((time.perf_counter() - encoded) * 1000)
    return {"encode_ms": round(statistics.median(encode), 2),
            "search_ms": round(statistics.median(search), 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--benchmark", required=True, help="TopiOCQA x Wikipedia corpus folder")
    parser.add_argument("--dense", action="append", required=True,
                        help="a dense index of the benchmark's passages; repeatable")
    parser.add_argument("--turns", type=int, default=80)
    parser.add_argument("--precision", default="auto")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)

    import torch

    from convqa.benchmark import load_labelled_turns
    from convqa.corpus import PassageStore
    from phrase_index.dense_prior import DensePrior

    data = load_labelled_turns(args.benchmark)
    turns = [t for t in data.turns if t.split == "dev" and t.answer_evaluable][:args.turns]
    store = PassageStore.open(f"{args.benchmark}/passages")
    report = {"cpu": torch.backends.cpu.get_cpu_capability(), "threads": torch.get_num_threads(),
              "turns": len(turns), "indexes": {}}
    for folder in args.dense:
        prior = DensePrior.load(folder, store, precision=args.precision)
        texts = [prior.query_text(t.question, data.conversations[t.conversation_id]
                                  .history(t.turn)) for t in turns]
        row = {"factory": prior.retriever.index.meta.get("factory"), **stage_ms(prior, texts),
               "precision": prior.retriever.precision}
        report["indexes"][folder] = row
        print(f"{folder}: {row}", flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(report, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
