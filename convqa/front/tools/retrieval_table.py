#!/usr/bin/env python
"""The retrieval table: every system on every corpus of the TopiOCQA x Wikipedia benchmark.

    python -m convqa.front.tools.retrieval_table --corpus vital=/tmp/bench/vital \\
        --corpus full=/tmp/bench/full [--systems systems.yaml] [--split dev] \\
        [--out docs/results/retrieval.md] [--no-cache] [--no-plots]

A thin wrapper of `convqa eval retrieval --benchmark NAME=DIR ...` (convqa/front/cli/eval.py; the
tables, systems file format and outputs are documented in convqa/front/evaluation/tables.py and
systems.py). Writes OUT (Markdown; the block between `<!-- retrieval-table:start -->` and
`<!-- retrieval-table:end -->` is replaced when present), OUT with .json and the PNG plots.
Without --systems the rows are BM25 with each shortcut input of DPR-IHN's analysis.
"""
from __future__ import annotations

import argparse
import shlex
import sys

from convqa.errors import ConfigError, reports_errors


@reports_errors("retrieval_table")
def main(argv: list[str] | None = None) -> int:
    from convqa.front.cli.eval import make_table
    from convqa.front.evaluation.targets import benchmark_target

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", action="append", required=True, metavar="NAME=DIR",
                        help="a benchmark folder, e.g. vital=/tmp/bench/vital (repeatable)")
    parser.add_argument("--systems", metavar="YAML", help="systems file (default: BM25 shortcuts)")
    parser.add_argument("--split", default="dev", choices=("train", "dev", "all"))
    parser.add_argument("--out", default="docs/results/retrieval.md", metavar="FILE")
    parser.add_argument("--cache-dir", metavar="DIR",
                        help="run cache (default ~/.cache/convqa/runs)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--only", action="append", default=[], metavar="LABEL",
                        help="run only systems whose label contains this (repeatable)")
    parser.add_argument("--no-cache", action="store_true", help="retrieve again, ignore the cache")
    parser.add_argument("--no-plots", action="store_true", help="no PNG files")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    command = "python -m convqa.front.tools.retrieval_table " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    for item in args.corpus:
        if "=" not in item:
            raise ConfigError(f"--corpus {item!r}: expected NAME=DIR")
    targets = [benchmark_target(item) for item in args.corpus]
    written = make_table("retrieval", targets, args.systems, args.out, command=command,
                         split=args.split, only=args.only, cache_dir=args.cache_dir,
                         batch_size=args.batch_size, use_cache=not args.no_cache,
                         progress=not args.quiet, plots=not args.no_plots)
    print("wrote " + ", ".join(str(p) for p in written), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
