#!/usr/bin/env python
"""Latency of `convqa answer` per turn with warm models: p50 / p90 per stage over real turns.

    python -m convqa.front.tools.bench_answer --turns 100                    # embedded default pipeline
    python -m convqa.front.tools.bench_answer --retriever bm25 --turns 100
    python -m convqa.front.tools.bench_answer --config pipeline.yaml --benchmark /tmp/bench/vital [--split train]
    python -m convqa.front.tools.bench_answer --model-family large --benchmark /tmp/bench/vital
    python -m convqa.front.tools.bench_answer --set reader.stop_when_sure=false   # one option off

Questions and their conversations are the turns of one split (dev unless --split says otherwise)
of a TopiOCQA x Wikipedia benchmark (--benchmark), or else the first turns of the shared TopiOCQA
file. Each turn is answered once after 5 warm-up turns, in one process; the stages are the
pipeline's own timings (history, retrieve, fetch, rerank, rerank_second where a cascade has a
second stage, read; the report says on how many turns that stage ran). `--model-family` swaps
in a family's models as `convqa answer --model-family` does. A split without enough turns is a
one-line error naming the file and the splits it holds.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections import Counter
from pathlib import Path

from convqa.errors import ConvQAError, reports_errors

WARMUP_TURNS = 5

def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def summary(values: list[float]) -> dict[str, float]:
    """p50, p90 and mean (ms): a stage whose cost varies by turn (a read that may stop after its
    first passage) shows its gain in the mean before the median."""
    return {"p50": round(percentile(values, 0.5), 1), "p90": round(percentile(values, 0.9), 1),
            "mean": round(sum(values) / len(values), 1)}


def benchmark_turns(benchmark: str, split: str, count: int):
    """(question, history) pairs: the first `count` turns of `split` ("all": every split) of a
    benchmark folder, in file order; a split with too few is a one-line error."""
    from convqa.benchmark import load_labelled_turns
    from convqa.benchmark.labelled_turns import TURNS_FILE

    data = load_labelled_turns(benchmark)
    turns = [t for t in data.turns if split == "all" or t.split == split]
    if len(turns) <= WARMUP_TURNS:
        path = Path(benchmark)
        path = path / TURNS_FILE if path.is_dir() else path
        held = Counter(t.split for t in data.turns)
        splits = ", ".join(f"{name} {n}" for name, n in sorted(held.items())) or "none"
        raise ConvQAError(f"{path}: {len(turns)} turns in split '{split}', the benchmark needs "
                          f"more than {WARMUP_TURNS} ({WARMUP_TURNS} warm up the pipeline); "
                          f"turns per split: {splits} (choose one with --split)")
    return [(t.question, data.conversations[t.conversation_id].history(t.turn))
            for t in turns[:count]]


def topiocqa_turns(data_dir: str, count: int):
    """(question, history) pairs: the first `count` turns of the shared TopiOCQA file."""
    from convqa.loaders.topiocqa import load_topiocqa

    pairs = []
    for conversation in load_topiocqa(Path(data_dir) / "topiocqa" / "topiocqa_train.json.gz"):
        for number in range(1, len(conversation.turns) + 1):
            pairs.append((conversation.turn(number).question, conversation.history(number)))
            if len(pairs) >= count:
                return pairs
    return pairs


@reports_errors("bench_answer")
def main(argv: list[str] | None = None) -> int:
    from convqa.front.embedded import DEFAULT_RETRIEVER, RETRIEVER_CHOICES
    from convqa.front.families import add_family_argument

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", help="pipeline YAML (default: the embedded default)")
    parser.add_argument("--retriever", default=DEFAULT_RETRIEVER, choices=RETRIEVER_CHOICES)
    parser.add_argument("--no-reader", action="store_true", help="embedded default without reader")
    parser.add_argument("--benchmark", help="benchmark folder whose turns to ask")
    parser.add_argument("--split", default="dev", choices=("dev", "train", "all"),
                        help="with --benchmark: the split whose turns to ask (default: dev)")
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--precision", default="auto", choices=("auto", "fp32", "bf16", "int8"),
                        help="embedded default: the query encoder's and the reader's precision "
                             "(default auto: measured here)")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE",
                        help="override a pipeline value as `convqa answer --set` does, e.g. "
                             "--set reader.stop_when_sure=false")
    add_family_argument(parser)
    parser.add_argument("--json", help="also write the numbers here")
    args = parser.parse_args(argv)
    return run(args)


def pipeline_config(args: argparse.Namespace) -> dict:
    """The config to time: --config's, or the embedded default's with --precision on its query
    encoder and reader (its indexes built when missing); either with --model-family's models
    and --set's values."""
    from convqa.front.families import family_named, with_family
    from convqa.front.paths import configured_path, embedded_path

    family = family_named(args.model_family)
    overrides = getattr(args, "overrides", [])
    if args.config:
        return with_family(configured_path(args.config, overrides), family).pipeline_config()
    from convqa.front.embedded import ensure_embedded

    ensure_embedded(progress=True, retriever=args.retriever)
    path = embedded_path(args.retriever, None if args.no_reader else "default")
    config = with_family(path, family).pipeline_config()
    for part in (config["retriever"], config.get("reader")):
        if part and part.get("name") in ("dense", "extractive"):
            part["precision"] = args.precision
    if overrides:
        config = configured_path(config, overrides).pipeline_config()
    return config


def run(args: argparse.Namespace) -> int:
    import torch

    from convqa.pipeline import SECOND_RERANK_STAGE, Pipeline

    if args.turns < 1:
        raise ConvQAError("--turns must be at least 1")
    count = args.turns + WARMUP_TURNS
    turns = (benchmark_turns(args.benchmark, args.split, count) if args.benchmark
             else topiocqa_turns(args.data_dir, count))  # read first: a bad file fails fast
    if args.threads:
        torch.set_num_threads(args.threads)
    started = time.perf_counter()
    pipeline = Pipeline.from_config(pipeline_config(args))
    load_s = time.perf_counter() - started
    for question, history in turns[:WARMUP_TURNS]:
        pipeline.answer(question, history)
    stages: dict[str, list[float]] = {}
    totals = []
    for question, history in turns[WARMUP_TURNS:]:
        begin = time.perf_counter()
        result = pipeline.answer(question, history)
        totals.append((time.perf_counter() - begin) * 1000)
        for stage, ms in result.timings_ms.items():
            stages.setdefault(stage, []).append(ms)
    from convqa.precision import cpu_capability, cpu_name

    choices = {name: getattr(part, "precision_choice", None) or getattr(part, "precision", None)
               for name, part in (("retriever", pipeline.retriever),
                                  ("reranker", pipeline.reranker), ("reader", pipeline.reader))}
    report = {
        "turns": len(totals), "threads": torch.get_num_threads(), "load_seconds": round(load_s, 1),
        "cpu_capability": cpu_capability(), "cpu": cpu_name(),
        "precision": {name: (c.to_dict() if hasattr(c, "to_dict") else c)
                      for name, c in choices.items()},
        "load_average": os.getloadavg()[0], "machine": platform.machine(),
        "pipeline": pipeline.config,
        "total_ms": summary(totals),
        "stages_ms": {stage: summary(v) for stage, v in stages.items()},
    }
    if SECOND_RERANK_STAGE in stages:  # a cascade: on how many turns its second stage ran
        report["second_stage_turns"] = sum(ms > 0 for ms in stages[SECOND_RERANK_STAGE])
    print(f"{len(totals)} turns, {report['threads']} threads, {report['cpu_capability']} "
          f"({report['cpu']}), load "
          f"average {report['load_average']:.2f}, pipeline loaded in {load_s:.1f} s")
    for name, choice in report["precision"].items():
        if choice:
            print(f"{name} precision: "
                  f"{choice['precision'] if isinstance(choice, dict) else choice}")
    print("| stage | p50 ms | p90 ms | mean ms |\n|---|---:|---:|---:|")
    for stage, value in report["stages_ms"].items():
        print(f"| {stage} | {value['p50']} | {value['p90']} | {value['mean']} |")
    total = report["total_ms"]
    print(f"| **total** | {total['p50']} | {total['p90']} | {total['mean']} |")
    if "second_stage_turns" in report:
        print(f"the second reranking stage ran on {report['second_stage_turns']} of "
              f"{len(totals)} turns (the others skipped it: the first stage was sure)")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1, default=str), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
