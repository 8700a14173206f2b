#!/usr/bin/env python
"""Write FiD examples (readers/fid/data.py format) from a benchmark and a retrieval run.

    python -m convqa.front.tools.fid_examples --benchmark /tmp/bench/full --run RUN.jsonl --split train \\
        --n 20 --out fid-train.jsonl
    convqa train fid --examples fid-train.jsonl --model google/flan-t5-base --out runs/fid ...

Runs come from `convqa retrieve ... --out RUN.jsonl` or the evaluation cache
(~/.cache/convqa/runs); they must cover the split's turns.
"""
from __future__ import annotations

import argparse
import sys

from convqa.errors import reports_errors
from readers.fid.data import write_examples
from readers.fid.from_run import examples_from_run


@reports_errors("fid_examples")
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--benchmark", required=True)
    parser.add_argument("--run", required=True)
    parser.add_argument("--split", default="train", choices=("train", "dev", "all"))
    parser.add_argument("--n", type=int, default=20, help="passages per example (default 20)")
    parser.add_argument("--answerable-only", action="store_true",
                        help="only turns whose answer occurs in a passage")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    count = write_examples(args.out, list(examples_from_run(
        args.benchmark, args.run, args.n, args.split, args.answerable_only)))
    print(f"{count} examples written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
