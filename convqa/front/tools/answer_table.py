#!/usr/bin/env python
"""The end-to-end table: retriever x reader x top-k on the TopiOCQA x Wikipedia benchmark.

    python -m convqa.front.tools.answer_table --corpus vital=/tmp/bench/vital --corpus full=/tmp/bench/full \\
        --systems benchmarks/answer_systems.yaml [--out docs/results/answers.md] [--no-plots]

A thin wrapper of `convqa eval answers --benchmark NAME=DIR ...` (convqa/front/cli/eval.py; the
systems file format, with `top_ks` and a `reader` per system, is in
convqa/front/evaluation/systems.py). Writes OUT (Markdown, the block between
`<!-- answer-table:start -->` and `<!-- answer-table:end -->` is replaced), OUT with .json (every
number) and the PNG plots. Retrieval runs and predictions are cached, so adding a row costs only
that row.
"""
from __future__ import annotations

import argparse
import shlex
import sys

from convqa.errors import ConfigError, reports_errors


@reports_errors("answer_table")
def main(argv: list[str] | None = None) -> int:
    from convqa.front.cli.eval import make_table
    from convqa.front.evaluation.targets import benchmark_target

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", action="append", required=True, metavar="NAME=DIR")
    parser.add_argument("--systems", required=True, metavar="YAML")
    parser.add_argument("--split", default="dev", choices=("train", "dev", "all"))
    parser.add_argument("--out", default="docs/results/answers.md", metavar="FILE")
    parser.add_argument("--cache-dir", metavar="DIR",
                        help="run cache (default ~/.cache/convqa/runs)")
    parser.add_argument("--only", action="append", default=[], metavar="LABEL",
                        help="run only systems whose label contains this (repeatable)")
    parser.add_argument("--no-cache", action="store_true", help="recompute, ignore the cache")
    parser.add_argument("--no-plots", action="store_true", help="no PNG files")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    command = "python -m convqa.front.tools.answer_table " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    for item in args.corpus:
        if "=" not in item:
            raise ConfigError(f"--corpus {item!r}: expected NAME=DIR")
    targets = [benchmark_target(item) for item in args.corpus]
    written = make_table("answers", targets, args.systems, args.out, command=command,
                         split=args.split, only=args.only, cache_dir=args.cache_dir,
                         use_cache=not args.no_cache, progress=not args.quiet,
                         plots=not args.no_plots)
    print("wrote " + ", ".join(str(p) for p in written), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
