"""Answering paths for the demo: built on first use, cached per choice, shared by all sessions.

A pipeline is read-only once built, so one instance serves every browser session; building one
can take seconds (reader weights) to minutes (the first dense index), so it happens once per
(retriever, reader) choice, under a lock per choice: two sessions asking for the same new path
wait for one build, and a build never blocks answers on the other paths.

The choice lists are data, not code: a new answering path (e.g. a phrase index) is one more
name in `retrievers` and a `build` function that knows it.
"""
from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from convqa.errors import ConfigError

NO_READER = "none"
EMBEDDED_RETRIEVERS = ("dense", "bm25", "hybrid")
EMBEDDED_READERS = ("extractive", NO_READER)

BuildFn = Callable[[str, str], Any]  # (retriever choice, reader choice) -> Pipeline


class PipelineCache:
    """`get(retriever, reader)` returns the pipeline for that choice, building it once."""

    def __init__(self, build: BuildFn, retrievers: Sequence[str], readers: Sequence[str],
                 default: tuple[str, str] | None = None):
        if not retrievers or not readers:
            raise ConfigError("demo: at least one retriever and one reader choice are needed")
        self._build = build
        self.retrievers = tuple(retrievers)
        self.readers = tuple(readers)
        self.default = default or (self.retrievers[0], self.readers[0])
        self._check(*self.default)
        self._pipelines: dict[tuple[str, str], Any] = {}
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._guard = threading.Lock()

    def _check(self, retriever: str, reader: str) -> None:
        if retriever not in self.retrievers:
            raise ConfigError(f"demo: unknown retriever {retriever!r} "
                              f"(choices: {', '.join(self.retrievers)})")
        if reader not in self.readers:
            raise ConfigError(f"demo: unknown reader {reader!r} "
                              f"(choices: {', '.join(self.readers)})")

    def get(self, retriever: str, reader: str) -> Any:
        self._check(retriever, reader)
        key = (retriever, reader)
        with self._guard:
            if key in self._pipelines:
                return self._pipelines[key]
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            with self._guard:
                if key in self._pipelines:  # built by another session while this one waited
                    return self._pipelines[key]
            pipeline = self._build(retriever, reader)
            with self._guard:
                self._pipelines[key] = pipeline
            return pipeline

    def is_built(self, retriever: str, reader: str) -> bool:
        with self._guard:
            return (retriever, reader) in self._pipelines


def embedded_pipelines(cache_dir: str | os.PathLike | None = None, progress: bool = True,
                       retriever: str = "dense", reader: str = "extractive") -> PipelineCache:
    """The embedded vital-article corpus with the shipped models (`Pipeline.default`): every
    retriever of `convqa answer`, with the shipped extractive reader or none."""
    from convqa.pipeline import Pipeline

    def build(retriever: str, reader: str):
        return Pipeline.default(cache_dir=cache_dir, progress=progress, retriever=retriever,
                                reader=None if reader == NO_READER else "default")

    return PipelineCache(build, EMBEDDED_RETRIEVERS, EMBEDDED_READERS, (retriever, reader))


def config_pipelines(config: str | os.PathLike | dict, name: str | None = None,
                     reader: str | None = None) -> PipelineCache:
    """One configured pipeline (a YAML file or a dict, see `Pipeline.from_config`): its
    retriever is the only retriever choice (named `name`, default the file's name or
    "configured"); its reader, if it has one, can be switched off."""
    from convqa.config import load_yaml
    from convqa.pipeline import Pipeline

    if not isinstance(config, dict):
        name = name or Path(config).name
        config = load_yaml(config)
    name = name or "configured"
    has_reader = bool(config.get("reader"))
    reader_name = _reader_name(config.get("reader")) if has_reader else NO_READER
    readers = (reader_name, NO_READER) if has_reader else (NO_READER,)

    def build(_retriever: str, chosen: str):
        chosen_config = dict(config)
        if chosen == NO_READER:
            chosen_config.pop("reader", None)
        return Pipeline.from_config(chosen_config)

    return PipelineCache(build, (name,), readers, (name, reader or readers[0]))


def _reader_name(spec: Any) -> str:
    if isinstance(spec, str):
        return spec
    if isinstance(spec, dict) and isinstance(spec.get("name"), str):
        return spec["name"]
    return "configured"
