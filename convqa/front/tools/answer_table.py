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
import sys

from convqa.errors import reports_errors
from convqa.front.tools.table_args import add_table_arguments, command_line, corpus_targets


@reports_errors("answer_table")
def main(argv: list[str] | None = None) -> int:
    from convqa.front.cli.eval import make_table

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_table_arguments(parser, "docs/results/answers.md")
    parser.add_argument("--systems", required=True, metavar="YAML")
    args = parser.parse_args(argv)
    written = make_table("answers", corpus_targets(args.corpus), args.systems, args.out,
                         command=command_line("answer_table", argv), split=args.split,
                         only=args.only, cache_dir=args.cache_dir, use_cache=not args.no_cache,
                         progress=not args.quiet, plots=not args.no_plots)
    print("wrote " + ", ".join(str(p) for p in written), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
