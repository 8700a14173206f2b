#!/usr/bin/env python
"""Choose the extractive reader's fusion weights (selection, span, retriever) on held-out
benchmark turns so that F1 at top-5 and top-20 is at least F1 at top-1, and report them on
other turns.

    OMP_NUM_THREADS=1 python -m convqa.front.tools.tune_reader_fusion --benchmark /tmp/work/bench/vital \\
        --index /tmp/work/dense-fp32 --reader convqa-reader --out fusion.json

Which turns: the answer-evaluable turns of the benchmark's dev split (its conversations are
never trained on), split by conversation (sha256 order, seeded): the first half chooses the
weights, the second half is reported on. The retriever is a dense index (--index, queried
oldest-first as DPR-IHN was trained) or any retriever spec (--retriever); its run is cached
(--cache). Prints the reader spec to use and a table; --out writes everything as JSON.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from convqa.errors import reports_errors


@reports_errors("tune_reader_fusion")
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--benchmark", required=True, help="`convqa data topiocqa-wiki` folder")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--index", help="dense index folder (its encoder and passages)")
    where.add_argument("--retriever", help="retriever spec as JSON, e.g. "
                                           "'{\"name\": \"bm25\", \"index\": \"DIR\"}'")
    parser.add_argument("--history", default="oldest_first",
                        help="the retriever's query formatting (default oldest_first)")
    parser.add_argument("--reader", default="convqa-reader", help="reader folder or alias")
    parser.add_argument("--split", default="dev")
    parser.add_argument("--ks", type=int, nargs="+", default=[1, 5, 20])
    parser.add_argument("--tune-fraction", type=float, default=0.5,
                        help="share of the split's conversations the weights are chosen on")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-turns", type=int, help="at most N turns per half (a smoke run)")
    parser.add_argument("--cache", default=None, help="retrieval cache folder")
    parser.add_argument("--out", help="write the choice and all scores as JSON")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    result = tune_on_benchmark(args)
    if args.out:
        from convqa.io import write_json

        write_json(args.out, result)
    print(json.dumps({"reader": result["reader_spec"]}))
    print(table(result))
    return 0


def tune_on_benchmark(args: argparse.Namespace) -> dict:
    import torch

    from convqa.benchmark import load_labelled_turns
    from convqa.corpus import PassageStore
    from convqa.errors import ConfigError
    from convqa.front.evaluation.retrieval import evaluate_retrieval
    from convqa.runs import read_run
    from convqa.registry import READERS
    from readers.extractive.decode import Fusion
    from readers.extractive.fusion_tuning import (read_turns, report, split_conversations,
                                                  tune)

    if min(args.ks) != 1 or len(args.ks) < 2:
        raise ConfigError("--ks needs 1 and at least one larger k")
    retriever = {"name": "dense", "index": args.index} if args.index \
        else json.loads(args.retriever)
    data = load_labelled_turns(args.benchmark)
    turns = [t for t in data.turns if t.answer_evaluable and t.split == args.split]
    if not turns:
        raise ConfigError(f"no answer-evaluable turns in split {args.split!r}")
    tuning, reporting = split_conversations(turns, args.tune_fraction, args.seed)
    if args.max_turns:
        tuning, reporting = tuning[:args.max_turns], reporting[:args.max_turns]
    k = max(args.ks)
    retrieval = evaluate_retrieval(args.benchmark, retriever, args.history, split=args.split,
                                   k=max(100, k), cache_dir=args.cache,
                                   progress=not args.quiet, data=data)
    run = read_run(retrieval["run_file"]).hits
    reader = READERS.build({"name": "extractive", "model": args.reader})
    started = time.perf_counter()
    with PassageStore.open(f"{args.benchmark}/passages") as store:
        tune_read = read_turns(reader, tuning, data.conversations, run, store, k,
                               not args.quiet)
        report_read = read_turns(reader, reporting, data.conversations, run, store, k,
                                 not args.quiet)
    seconds = time.perf_counter() - started
    chosen = tune(tune_read, args.ks)
    fusion = Fusion(**chosen["fusion"])
    return {
        "benchmark": args.benchmark, "split": args.split, "retriever": retrieval["retriever"],
        "history": retrieval["history"], "reader": args.reader, "ks": args.ks,
        "seed": args.seed, "tune_fraction": args.tune_fraction,
        "tuning_turns": len(tune_read), "reporting_turns": len(report_read),
        "tuning_conversations": len({t.conversation_id for t in tune_read}),
        "reporting_conversations": len({t.conversation_id for t in report_read}),
        "read_seconds": round(seconds, 1), "threads": torch.get_num_threads(),
        "cpu": torch.backends.cpu.get_cpu_capability(),
        "chosen": {k: v for k, v in chosen.items() if k != "candidates"},
        "candidates": chosen["candidates"],
        "reader_spec": {"name": "extractive", "model": args.reader,
                        "fusion": fusion.to_dict()},
        "tuning": report(tune_read, args.ks, fusion),
        "reporting": report(report_read, args.ks, fusion)}


def table(result: dict) -> str:
    ks = result["ks"]
    head = "| turns | decoding | " + " | ".join(f"EM@{k} / F1@{k}" for k in ks) + " |"
    lines = [head, "|---|---|" + "---:|" * len(ks)]
    for half in ("tuning", "reporting"):
        for name, by_k in result[half].items():
            cells = " | ".join(f"{by_k[str(k)]['em']:.1f} / {by_k[str(k)]['f1']:.1f}"
                               for k in ks)
            lines.append(f"| {half} ({result[f'{half}_turns']}) | {name} | {cells} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
