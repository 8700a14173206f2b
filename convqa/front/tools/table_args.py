"""What the two table tools (answer_table, retrieval_table) share: their common options, the
benchmark folders they read and the command line each table records so it can be remade."""
from __future__ import annotations

import argparse
import shlex
import sys

from convqa.errors import ConfigError


def add_table_arguments(parser: argparse.ArgumentParser, default_out: str) -> None:
    parser.add_argument("--corpus", action="append", required=True, metavar="NAME=DIR",
                        help="a benchmark folder, e.g. vital=/tmp/bench/vital (repeatable)")
    parser.add_argument("--split", default="dev", choices=("train", "dev", "all"))
    parser.add_argument("--out", default=default_out, metavar="FILE")
    parser.add_argument("--cache-dir", metavar="DIR",
                        help="run cache (default ~/.cache/convqa/runs)")
    parser.add_argument("--only", action="append", default=[], metavar="LABEL",
                        help="run only systems whose label contains this (repeatable)")
    parser.add_argument("--no-cache", action="store_true", help="recompute, ignore the cache")
    parser.add_argument("--no-plots", action="store_true", help="no PNG files")
    parser.add_argument("--quiet", action="store_true")


def corpus_targets(items: list[str]) -> list:
    """The benchmark targets of the --corpus NAME=DIR options."""
    from convqa.front.evaluation.targets import benchmark_target

    for item in items:
        if "=" not in item:
            raise ConfigError(f"--corpus {item!r}: expected NAME=DIR")
    return [benchmark_target(item) for item in items]


def command_line(tool: str, argv: list[str] | None) -> str:
    """The command that makes the table, as the table records it."""
    return f"python -m convqa.front.tools.{tool} " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
