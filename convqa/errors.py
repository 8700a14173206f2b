"""Errors that the CLI reports as one clear line instead of a traceback.

Every problem caused by the user's input (a file, a config, a flag) raises a subclass of
`ConvQAError`; bugs stay ordinary exceptions so they keep their traceback.
"""
from __future__ import annotations

import functools
import os
import sys
from typing import Callable


class ConvQAError(Exception):
    """Base class: the message alone must tell the user what to fix."""


class DataError(ConvQAError):
    """Bad input data. Names the file and, where known, the line and the field."""

    def __init__(self, message: str, path: str | os.PathLike | None = None,
                 line: int | None = None, field: str | None = None):
        self.message = message
        self.path = None if path is None else str(path)
        self.line = line
        self.field = field
        super().__init__(str(self))

    def __str__(self) -> str:
        where = self.path or "<input>"
        if self.line is not None:
            where += f":{self.line}"
        if self.field is not None:
            where += f": field '{self.field}'"
        return f"{where}: {self.message}"


class ConfigError(ConvQAError):
    """Bad configuration: an unknown component, an unknown or mistyped option."""


def reports_errors(prog: str) -> Callable[[Callable[..., int]], Callable[..., int]]:
    """Decorate a tool's `main(argv=None) -> int`: a `ConvQAError` it raises becomes one line on
    stderr, `PROG: error: MESSAGE`, and exit code 2 instead of a traceback, the convention of
    `convqa` itself (`convqa CMD: error: ...`). Other exceptions are bugs and propagate."""
    def decorate(main: Callable[..., int]) -> Callable[..., int]:
        @functools.wraps(main)
        def wrapper(*args, **kwargs) -> int:
            try:
                return main(*args, **kwargs)
            except ConvQAError as exc:
                print(f"{prog}: error: {exc}", file=sys.stderr)
                return 2
        return wrapper
    return decorate
