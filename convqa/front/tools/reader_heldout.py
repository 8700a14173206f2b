#!/usr/bin/env python
"""EM/F1 of extractive readers on held-out reader examples, per source, gold passage alone.

    python -m convqa.front.tools.reader_heldout --examples runs/reader-v1/data/heldout.jsonl \\
        --per-source 150 runs/reader-v1/model convqa-reader

SQuAD convention for SQuAD-format sources, TopiOCQA convention for the benchmark's turns.
"""
from __future__ import annotations

import argparse
import sys
import time

from convqa.errors import reports_errors


@reports_errors("reader_heldout")
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", help="reader folders or aliases")
    parser.add_argument("--examples", required=True)
    parser.add_argument("--per-source", type=int, default=150)
    args = parser.parse_args(argv)
    from readers.extractive.data import load_examples, scoring_convention
    from readers.extractive.model import ExtractiveReader
    from readers.extractive.heldout import evaluate_reader

    by_source: dict[str, list] = {}
    for example in load_examples(args.examples):
        by_source.setdefault(example.source or "examples", []).append(example)
    print("| model | source | n | EM | F1 | seconds |\n|---|---|---:|---:|---:|---:|")
    for name in args.models:
        reader = ExtractiveReader.from_pretrained(name).eval()
        for source, items in by_source.items():
            started = time.perf_counter()
            convention = scoring_convention(source)
            scores = evaluate_reader(reader, items[:args.per_source], convention=convention)
            print(f"| {name} | {source} | {scores['count']} | {scores['em']:.1f} | "
                  f"{scores['f1']:.1f} | {time.perf_counter() - started:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
