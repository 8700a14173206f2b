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
# Planned subcommands: listed in --help, and they say plainly that they do not exist yet.
PLANNED: dict[str, tuple[str, str]] = {}


def _not_built(name: str, where: str):
    def run(args: argparse.Namespace) -> int:
        raise ConvQAError(f"`convqa {name}` is not built yet (planned in {where})")

    return run


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="convqa", description="Open-domain conversational question answering.")
    parser.add_argument("--version", action="version", version=f"convqa {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        if name not in PLANNED:
            importlib.import_module(f"convqa.front.cli.{name}").add_parser(subparsers)
        else:
            summary, where = PLANNED[name]
            sub = subparsers.add_parser(name, help=f"{summary} [not built yet]",
                                        description=f"{summary}. Not built yet: planned in {where}.")
            sub.set_defaults(func=_not_built(name, where))
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown and args.command not in PLANNED:  # planned commands accept anything, then say so
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
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
