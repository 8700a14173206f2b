"""The `convqa` command: one subcommand module per job, imported only when used.

Errors caused by the user's input (`ConvQAError`) print as one line on stderr, exit status 2.
A command with a `--verbose` flag (`convqa.quiet.add_verbose_argument`) runs without other
libraries' progress bars and warnings unless it is given.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from convqa import __version__
from convqa.errors import ConvQAError
from convqa.quiet import quiet_third_party

# in --help's order; each one's module convqa.front.cli.NAME adds it (with its one-line help)
COMMANDS = ("data", "index", "retrieve", "train", "answer", "eval", "reproduce", "demo", "serve",
            "models")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="convqa", description="Open-domain conversational question answering.")
    parser.add_argument("--version", action="version", version=f"convqa {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"convqa.front.cli.{name}").add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        with quiet_third_party(enabled=getattr(args, "verbose", True) is False):
            return int(args.func(args) or 0)
    except ConvQAError as exc:
        print(f"convqa {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"convqa {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
