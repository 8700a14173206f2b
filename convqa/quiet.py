"""Third-party chatter off for the commands a user reads (`convqa answer`, `serve`, `demo`,
`retrieve`, `index`, `eval`, `train`).

Loading a model makes transformers draw "Loading weights" bars, and the libraries warn about
their own deprecations (a FutureWarning about `is_gradient_checkpointing` from peft's use of
transformers): noise before the answer that the user can do nothing about. Inside
`quiet_third_party()` those stay silent; convqa's own output (its progress bars on long work,
its warnings and log messages) and every library's errors still show. `--verbose` (see
`add_verbose_argument`) keeps everything, for bug reports.
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import warnings
from typing import Iterator

# Top-level packages of this distribution: their warnings and log records are ours.
OUR_PACKAGES = ("convqa", "retrievers", "readers", "phrase_index", "apps")
_OURS = rf"({'|'.join(OUR_PACKAGES)})(\.|$)"
# Deprecation notices are for developers, even when a library attributes them to our call site.
DEVELOPER_WARNINGS = (DeprecationWarning, PendingDeprecationWarning, FutureWarning)


def add_verbose_argument(parser: argparse.ArgumentParser) -> None:
    """The `--verbose` flag: `convqa.front.cli.main` runs a command that has it inside
    `quiet_third_party()` unless it is given."""
    parser.add_argument("--verbose", action="store_true",
                        help="also show third-party progress bars, warnings and log messages "
                             "(model loading, deprecations); for bug reports")


def is_ours(logger_name: str) -> bool:
    return logger_name.split(".")[0] in OUR_PACKAGES


class _OursOrErrors(logging.Filter):
    """Passes our log records, and other libraries' records from ERROR up."""

    def filter(self, record: logging.LogRecord) -> bool:
        return is_ours(record.name) or record.levelno >= logging.ERROR


@contextlib.contextmanager
def quiet_third_party(enabled: bool = True) -> Iterator[None]:
    """Silence other libraries' progress bars, warnings and log records below ERROR for the
    block (everything is restored after). `enabled=False`: a no-op, for `--verbose`."""
    if not enabled:
        yield
        return
    with warnings.catch_warnings(), _transformers_quiet(), _log_handlers_filtered():
        warnings.simplefilter("ignore")
        warnings.filterwarnings("default", module=_OURS)
        for category in DEVELOPER_WARNINGS:
            warnings.filterwarnings("ignore", category=category)
        yield


@contextlib.contextmanager
def _transformers_quiet() -> Iterator[None]:
    """transformers (and through it huggingface_hub) without progress bars, logging errors
    only. Every command that loads a model imports transformers anyway."""
    from transformers.utils import logging as hf_logging

    bars, level = hf_logging.is_progress_bar_enabled(), hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


@contextlib.contextmanager
def _log_handlers_filtered() -> Iterator[None]:
    """Libraries that log through the standard `logging` module without a handler of their own
    (huggingface_hub, accelerate, peft, ...) reach stderr through `logging.lastResort` or the
    root logger's handlers: filter those."""
    handlers = [h for h in (logging.lastResort, *logging.getLogger().handlers) if h is not None]
    only_ours = _OursOrErrors()
    for handler in handlers:
        handler.addFilter(only_ours)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(only_ours)
