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
import sys

from convqa.errors import reports_errors
from convqa.front.tools.table_args import add_table_arguments, command_line, corpus_targets


@reports_errors("retrieval_table")
def main(argv: list[str] | None = None) -> int:
    from convqa.front.cli.eval import make_table

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_table_arguments(parser, "docs/results/retrieval.md")
    parser.add_argument("--systems", metavar="YAML", help="systems file (default: BM25 shortcuts)")
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args(argv)
    written = make_table("retrieval", corpus_targets(args.corpus), args.systems, args.out,
                         command=command_line("retrieval_table", argv), split=args.split,
                         only=args.only, cache_dir=args.cache_dir, batch_size=args.batch_size,
                         use_cache=not args.no_cache, progress=not args.quiet,
                         plots=not args.no_plots)
    print("wrote " + ", ".join(str(p) for p in written), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
