"""Answering paths for the demo: built on first use, cached per choice, shared by all sessions.

A pipeline is read-only once built, so one instance serves every browser session; building one
can take seconds (reader weights) to minutes (the first dense index), so it happens once per
(retriever, reader) choice, under a lock per choice: two sessions asking for the same new path
wait for one build, and a build never blocks answers on the other paths.

The choice lists are data, not code: a new answering path is one more name in `retrievers` and
a `build` function that knows it; the paths themselves are built by convqa/front/paths.py, and
named as there (a phrase index is `phrase:<folder name>`). A path may allow only some readers:
a phrase index answers without one, so its only reader choice is "none"
(`with_phrase_indexes`).
"""
from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from convqa.errors import ConfigError, DataError
from convqa.front.embedded import DEFAULT_READER, DEFAULT_RETRIEVER, RETRIEVER_CHOICES
from convqa.front.families import ModelFamily, with_family
from convqa.front.paths import (PhraseIndexPath, build as build_path, configured_path,
                                embedded_path, spec_name)

NO_READER = "none"
EXTRACTIVE = spec_name(DEFAULT_READER)
EMBEDDED_READERS = (EXTRACTIVE, NO_READER)

BuildFn = Callable[[str, str], Any]  # (retriever choice, reader choice) -> Pipeline


class PipelineCache:
    """`get(retriever, reader)` returns the pipeline for that choice, building it once.

    `readers` is either the reader choices of every retriever, or {retriever: its readers}
    when they differ (a phrase index takes no reader: {"phrase:v1": ("none",)})."""

    def __init__(self, build: BuildFn, retrievers: Sequence[str],
                 readers: Sequence[str] | Mapping[str, Sequence[str]],
                 default: tuple[str, str] | None = None):
        if not isinstance(readers, Mapping):
            readers = {name: readers for name in retrievers}
        if not retrievers or any(not readers.get(name) for name in retrievers):
            raise ConfigError("demo: at least one retriever and one reader choice are needed")
        self._build = build
        self.retrievers = tuple(retrievers)
        self._readers = {name: tuple(readers[name]) for name in self.retrievers}
        # every reader choice, in order of first appearance
        self.readers = tuple(dict.fromkeys(r for name in self.retrievers
                                           for r in self._readers[name]))
        self.default = default or (self.retrievers[0], self._readers[self.retrievers[0]][0])
        self._check(*self.default)
        self._pipelines: dict[tuple[str, str], Any] = {}
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._guard = threading.Lock()

    def _check(self, retriever: str, reader: str) -> None:
        allowed = self.readers_for(retriever)
        if reader not in self.readers:
            raise ConfigError(f"demo: unknown reader {reader!r} "
                              f"(choices: {', '.join(self.readers)})")
        if reader not in allowed:
            raise ConfigError(f"demo: {retriever!r} takes no reader {reader!r} "
                              f"(choices: {', '.join(allowed)})")

    def readers_for(self, retriever: str) -> tuple[str, ...]:
        """The reader choices of `retriever`."""
        if retriever not in self._readers:
            raise ConfigError(f"demo: unknown retriever {retriever!r} "
                              f"(choices: {', '.join(self.retrievers)})")
        return self._readers[retriever]

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
                       retriever: str = DEFAULT_RETRIEVER,
                       reader: str = EXTRACTIVE, family: ModelFamily | None = None
                       ) -> PipelineCache:
    """The embedded vital-article corpus with the shipped models (`embedded_path`): every
    retriever of `convqa answer`, with the shipped extractive reader (of `family`, default the
    fast one) or none."""
    def build(retriever: str, reader: str):
        path = embedded_path(retriever, None if reader == NO_READER else "default", cache_dir)
        if family is not None and reader != NO_READER:
            path = with_family(path, family)
        return build_path(path, progress)

    return PipelineCache(build, RETRIEVER_CHOICES, EMBEDDED_READERS, (retriever, reader))


def config_pipelines(config: str | os.PathLike | dict, name: str | None = None,
                     reader: str | None = None, family: ModelFamily | None = None
                     ) -> PipelineCache:
    """One configured pipeline (a YAML file or a dict, see `Pipeline.from_config`), reading
    with `family`'s models when given: its retriever is the only retriever choice (named
    `name`, default after the file, or "configured"); its reader, if it has one, can be
    switched off."""
    path = configured_path(config, name=name)
    if family is not None:
        path = with_family(path, family)
    readers = (path.reader_name, NO_READER) if path.reader_name else (NO_READER,)

    def build(_retriever: str, chosen: str):
        return build_path(path.without_reader() if chosen == NO_READER else path)

    return PipelineCache(build, (path.retriever_name,), readers,
                         (path.retriever_name, reader or readers[0]))


def phrase_index_paths(folders: Sequence[str | os.PathLike]) -> dict[str, PhraseIndexPath]:
    """{choice name: path}: the paths' own names, `phrase:<folder name>` (a name given twice
    is an error)."""
    paths: dict[str, PhraseIndexPath] = {}
    for folder in folders:
        path = PhraseIndexPath(folder)
        if path.name in paths:
            raise ConfigError(f"demo: two phrase indexes are named {Path(folder).name!r}")
        paths[path.name] = path
    return paths


def with_phrase_indexes(cache: PipelineCache | None,
                        folders: Sequence[str | os.PathLike]) -> PipelineCache:
    """`cache`'s paths (None: none) plus one per phrase index folder (`convqa index
    --phrase`), each answering without a reader (its only reader choice is "none"); the
    first phrase index is selected at start."""
    indexes = phrase_index_paths(folders)
    if not indexes:
        raise ConfigError("demo: no phrase index given")
    for path in indexes.values():
        if not Path(path.index).is_dir():
            raise DataError("no such phrase index folder", Path(path.index))
    readers = {name: cache.readers_for(name) for name in cache.retrievers} if cache else {}
    clash = sorted(set(readers) & set(indexes))
    if clash:
        raise ConfigError(f"demo: a retriever is already named {clash[0]!r}")
    readers.update({name: (NO_READER,) for name in indexes})

    def build(retriever: str, reader: str):
        if retriever in indexes:
            return build_path(indexes[retriever])
        return cache._build(retriever, reader)

    return PipelineCache(build, list(readers), readers, (next(iter(indexes)), NO_READER))
