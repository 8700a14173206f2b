#!/usr/bin/env python
"""EM/F1 of extractive readers on held-out reader examples, per source, gold passage alone;
with several readers, each after the first is compared with it question by question (mean F1
difference per source and over sources, paired bootstrap 95% interval, wins and losses).

    python -m convqa.front.tools.reader_heldout --examples runs/reader-v1/data/heldout.jsonl \\
        --per-source 150 convqa-reader runs/reader-v1/model --out heldout.json

SQuAD convention for SQuAD-format sources, TopiOCQA convention for the benchmark's turns.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from convqa.errors import ConvQAError, DataError, reports_errors


def read_models(names: list[str], examples_path: str, per_source: int | None,
                echo: bool = False) -> dict[str, dict[str, dict[str, Any]]]:
    """model -> source -> {count, em, f1, seconds, f1_by_id}: each model reads the same first
    `per_source` held-out questions of each source (all with None)."""
    from readers.extractive.data import load_examples, scoring_convention
    from readers.extractive.heldout import evaluate_reader, question_scores
    from readers.extractive.model import ExtractiveReader

    by_source: dict[str, list] = {}
    for example in load_examples(examples_path):
        by_source.setdefault(example.source or "examples", []).append(example)
    if not by_source:
        raise DataError("no held-out examples", examples_path)
    results: dict[str, dict[str, dict[str, Any]]] = {}
    for name in names:
        reader = ExtractiveReader.from_pretrained(name).eval()
        results[name] = {}
        for source, items in by_source.items():
            started = time.perf_counter()
            items = items[:per_source]
            convention = scoring_convention(source)
            scores = evaluate_reader(reader, items, convention=convention)
            f1_by_id = {e.id: 100.0 * q["f1"] for e, q in
                        zip(items, question_scores(items, scores["predictions"], convention))}
            row = {"count": scores["count"], "em": round(scores["em"], 2),
                   "f1": round(scores["f1"], 2),
                   "seconds": round(time.perf_counter() - started, 1), "f1_by_id": f1_by_id}
            results[name][source] = row
            if echo:
                print(f"| {name} | {source} | {row['count']} | {row['em']:.1f} | "
                      f"{row['f1']:.1f} | {row['seconds']:.0f} |", flush=True)
    return results


def compare_models(results: dict[str, dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Each model after the first against the first: per source and over sources (the
    unweighted mean of the sources, as the tables report it), F1 differences with intervals."""
    from convqa.metrics.paired import paired_bootstrap, stratified_paired_bootstrap

    names = list(results)
    base = results[names[0]]
    comparisons: dict[str, dict[str, Any]] = {}
    for name in names[1:]:
        pairs = {}
        for source, row in results[name].items():
            ids = list(row["f1_by_id"])
            pairs[source] = ([row["f1_by_id"][i] for i in ids],
                             [base[source]["f1_by_id"][i] for i in ids])
        comparisons[name] = {"against": names[0],
                             "sources": {s: paired_bootstrap(a, b) for s, (a, b) in pairs.items()},
                             "mean": stratified_paired_bootstrap(pairs)}
    return comparisons


def interval(d: dict[str, float]) -> str:
    return (f"{d['mean']:+.2f} [{d['low']:+.2f}, {d['high']:+.2f}] | "
            f"{d['wins']} / {d['losses']} / {d['ties']}")


@reports_errors("reader_heldout")
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", help="reader folders or aliases")
    parser.add_argument("--examples", required=True)
    parser.add_argument("--per-source", type=int, default=150)
    parser.add_argument("--out", help="also write every score (and each question's F1) here")
    args = parser.parse_args(argv)
    twice = sorted({name for name in args.models if args.models.count(name) > 1})
    if twice:
        raise ConvQAError(f"reader named twice: {', '.join(twice)} (each is read once)")
    print("| model | source | n | EM | F1 | seconds |\n|---|---|---:|---:|---:|---:|")
    results = read_models(args.models, args.examples, args.per_source, echo=True)
    for name, sources in results.items():
        mean = sum(row["f1"] for row in sources.values()) / len(sources)
        print(f"| {name} | mean of {len(sources)} sources | "
              f"{sum(r['count'] for r in sources.values())} | | {mean:.2f} | |")
    comparisons = compare_models(results)
    for name, comparison in comparisons.items():
        print(f"\n{name} - {comparison['against']}, F1 (95% interval) | wins / losses / ties")
        for source, d in comparison["sources"].items():
            print(f"| {source} | {interval(d)} |")
        print(f"| mean of sources | {interval(comparison['mean'])} |")
    if args.out:
        from convqa.io import atomic_write

        with atomic_write(Path(args.out)) as handle:
            json.dump({"examples": args.examples, "per_source": args.per_source,
                       "models": results, "comparisons": comparisons}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
