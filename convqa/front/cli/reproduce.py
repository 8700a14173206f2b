"""`convqa reproduce`: run one named run of the reproduction matrix and compare with our numbers.

    convqa reproduce --list
    convqa reproduce bm25-xt-vital --bench /tmp/bench [--out DIR] [--dry-run]

The matrix (default benchmarks/reproduce.yaml; format in convqa/front/evaluation/reproduce.py) lists
each run's command, what it needs (e.g. the benchmark built by `convqa data topiocqa-wiki --out
BENCH`), and the scores we measured (docs/results/*.json) with a tolerance. Prints a table with
pass / FAIL per metric; exit status 0 when every metric matches, 1 on a mismatch or a failed
command, 2 when an input is missing.
"""
from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
from pathlib import Path

from convqa.errors import ConfigError, DataError

DEFAULT_MATRIX = Path("benchmarks") / "reproduce.yaml"


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "reproduce", help="rerun a named run of the reproduction matrix and compare its scores",
        description="Run one named run of the reproduction matrix (benchmarks/reproduce.yaml) "
                    "and compare its scores with the ones we measured.")
    p.add_argument("name", nargs="?", metavar="NAME", help="the run (see --list)")
    p.add_argument("--list", action="store_true", help="list the runs and exit")
    p.add_argument("--dry-run", action="store_true",
                   help="show the command and check its inputs, run nothing")
    p.add_argument("--matrix", metavar="YAML",
                   help="matrix file (default: benchmarks/reproduce.yaml of this checkout)")
    p.add_argument("--bench", default="data_out/topiocqa-wiki", metavar="DIR",
                   help="benchmark root of `convqa data topiocqa-wiki --out DIR` "
                        "(default: data_out/topiocqa-wiki)")
    p.add_argument("--out", metavar="DIR", help="folder for the run's outputs (default: a new "
                                                "temporary folder, kept)")
    p.add_argument("--quiet", action="store_true", help="hide the command's own output")
    p.set_defaults(func=run)


def matrix_path(given: str | None) -> Path:
    """--matrix, else benchmarks/reproduce.yaml here, else the one next to the package."""
    if given:
        return Path(given)
    if DEFAULT_MATRIX.is_file():
        return DEFAULT_MATRIX
    beside = Path(__file__).resolve().parents[3] / DEFAULT_MATRIX
    if beside.is_file():
        return beside
    raise ConfigError(f"no matrix file: {DEFAULT_MATRIX} not found (give --matrix FILE)")


def run(args: argparse.Namespace) -> int:
    from convqa.front.evaluation.reproduce import (argv, comparison_table, execute, load_matrix,
                                                   missing_needs)

    matrix = load_matrix(matrix_path(args.matrix))
    if args.list:
        width = max(len(name) for name in matrix.runs)
        for name, spec in matrix.runs.items():
            print(f"{name:{width}s}  {spec.description}")
        return 0
    if not args.name:
        raise ConfigError("name a run (convqa reproduce --list shows them)")
    if args.out:
        out = Path(args.out)
    elif args.dry_run:  # nothing is written: do not create a folder
        out = Path(tempfile.gettempdir()) / f"convqa-{args.name}-XXXXXX"
    else:
        out = Path(tempfile.mkdtemp(prefix=f"convqa-{args.name}-"))
    placeholders = {"bench": args.bench, "out": str(out), "here": str(matrix.path.parent),
                    "python": sys.executable}
    spec = matrix.get(args.name).resolved(placeholders)
    missing = missing_needs(spec)
    print(f"run {spec.name}: {spec.description}")
    print("command: " + " ".join(shlex.quote(a) for a in spec.command))
    if args.dry_run:
        for need in spec.needs:
            state = "missing" if need in missing else "ok"
            print(f"needs {need.path}: {state}" + (f" (make it: {need.how})"
                                                  if state == "missing" and need.how else ""))
        print(f"would compare {len(spec.expect)} metrics of {spec.output} with "
              f"{spec.source or 'the matrix'}")
        return 0
    if missing:
        need = missing[0]
        raise DataError(f"run '{spec.name}' needs this; make it with: {need.how}" if need.how
                        else f"run '{spec.name}' needs this", need.path)
    print(f"executing: {' '.join(shlex.quote(a) for a in argv(spec))}", flush=True)
    outcome = execute(spec, stream=not args.quiet)
    if outcome.returncode != 0:
        tail = f": {outcome.stderr_tail.splitlines()[-1]}" if outcome.stderr_tail else ""
        print(f"FAILED: the command exited with status {outcome.returncode} after "
              f"{outcome.seconds:.0f} s{tail}", file=sys.stderr)
        return 1
    print(f"\n{spec.name}: {outcome.seconds:.1f} s; outputs in {out}\n")
    print(comparison_table(outcome))
    failed = sum(1 for c in outcome.checks if not c.passed)
    print(f"\n{len(outcome.checks) - failed} of {len(outcome.checks)} metrics match" +
          ("" if not failed else f"; {failed} do NOT (expected values: {spec.source})"))
    return 0 if outcome.passed else 1
