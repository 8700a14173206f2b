"""The answering paths a server offers, by API name, and how to build one copy of them all.

Names are the answering paths' (convqa/front/paths.py): `<retriever>+<reader>` for a retriever
with a reader ("dense+extractive"), `<retriever>` for the same retriever answering with passages
only ("dense"), and `phrase:<folder name>` for a phrase index. A path without a reader shares
the retriever, history strategy and passage store of its path with a reader: nothing is loaded
twice.

A `PipelineSource` lists the paths before anything is loaded (GET /v1/pipelines can say what
is coming while the server loads) and builds one copy ("replica") of them when asked; the
server builds as many copies as its settings say, in the background. The sources of the
command line answer one question with each copy they build (`warmed`): lazy work (tokenizers,
the precision probe of `precision: auto`) is done before /health says ready, not in the first
client's request.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from convqa.errors import ConfigError, DataError
from convqa.front.families import ModelFamily, with_family
from convqa.front.paths import (PHRASE_INDEX, RETRIEVER_CHOICES, PathConfig, PhraseIndexPath,
                                build, configured_path, embedded_path, spec_name, without_reader)
from convqa.pipeline import Answerer


@dataclass(frozen=True)
class PathInfo:
    name: str
    retriever: str
    reader: str | None  # None: passages only, or a phrase index


@dataclass
class PipelineSource:
    paths: list[PathInfo]
    build: Callable[[], dict[str, Any]]  # one copy of every path: {name: pipeline}
    copies: int | None = None            # how many copies `build` can make (None: any)

    def __post_init__(self) -> None:
        if not self.paths:
            raise ConfigError("serve: no answering path to offer")
        names = [path.name for path in self.paths]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ConfigError(f"serve: two answering paths are named {twice[0]!r}")

    @property
    def names(self) -> list[str]:
        return [path.name for path in self.paths]


def built(pipelines: Mapping[str, Answerer]) -> PipelineSource:
    """Pipelines already in memory (tests, Python callers): one copy, served as they are."""
    paths = [PathInfo(name, _retriever_name(p), _reader_name(p)) for name, p in pipelines.items()]
    return PipelineSource(paths, lambda: dict(pipelines), copies=1)


WARM_UP_QUESTION = "Who wrote the first encyclopedia?"


def warmed(pipeline: Answerer) -> Answerer:
    """`pipeline`, after answering one question (which it is not asked again)."""
    pipeline.answer(WARM_UP_QUESTION)
    return pipeline


def path_source(path: PathConfig) -> PipelineSource:
    """`path`, and for a retriever with a reader the same retriever answering with passages
    only (sharing what is loaded, `without_reader`), built and warmed when asked."""
    def build_one() -> Answerer:
        return warmed(build(path, progress=False))

    if path.reader_name is None:
        return PipelineSource([PathInfo(path.name, path.retriever_name, None)],
                              lambda: {path.name: build_one()})
    bare = path.without_reader()

    def build_both() -> dict[str, Any]:
        pipeline = build_one()
        return {path.name: pipeline, bare.name: without_reader(pipeline)}

    return PipelineSource([PathInfo(path.name, path.retriever_name, path.reader_name),
                           PathInfo(bare.name, bare.retriever_name, None)], build_both)


def embedded_source(retriever: str, with_reader: bool = True,
                    cache_dir: str | os.PathLike | None = None,
                    family: ModelFamily | None = None) -> PipelineSource:
    """A retriever of the embedded collection (RETRIEVER_CHOICES), with the shipped extractive
    reader (of `family`, default the fast one) and without; its indexes are built on first use
    (`convqa answer --prepare`)."""
    if retriever not in RETRIEVER_CHOICES:
        raise ConfigError(f"serve: unknown retriever {retriever!r} "
                          f"(choices: {', '.join(RETRIEVER_CHOICES)})")
    path = embedded_path(retriever, "default" if with_reader else None, cache_dir)
    return path_source(with_family(path, family) if family else path)


def config_source(config: str | os.PathLike, overrides: Sequence[str] = (),
                  family: ModelFamily | None = None) -> PipelineSource:
    """The pipeline of a YAML file (`Pipeline.from_config`), named after the file, reading
    with `family`'s models when given (`--set` overrides still win)."""
    path = configured_path(config)
    if family:
        path = with_family(path, family)
    return path_source(path.with_overrides(overrides))


def phrase_source(folder: str | os.PathLike) -> PipelineSource:
    """A phrase index folder (`convqa index --phrase`): answers without a reader."""
    if not Path(folder).is_dir():
        raise DataError("no such phrase index folder", Path(folder))
    return path_source(PhraseIndexPath(folder))


def combine(sources: Sequence[PipelineSource]) -> PipelineSource:
    """Every path of `sources`, the first source's first path being the default."""
    if len(sources) == 1:
        return sources[0]
    copies = [s.copies for s in sources if s.copies is not None]

    def build() -> dict[str, Any]:
        out: dict[str, Any] = {}
        for source in sources:
            out.update(source.build())
        return out

    return PipelineSource([p for s in sources for p in s.paths], build,
                          min(copies) if copies else None)


def describe(name: str, pipeline: Answerer | None, info: PathInfo, ready: bool
             ) -> dict[str, Any]:
    """What GET /v1/pipelines says of a path (`pipeline` None: not loaded yet)."""
    history = pipeline.history_strategy if pipeline is not None else None
    return {"name": name, "retriever": info.retriever, "reader": info.reader,
            "history": history.to_dict() if history is not None else None,
            "top_k": pipeline.top_k if pipeline is not None else None, "ready": ready}


def _retriever_name(pipeline: Answerer) -> str:
    if pipeline.kind == PHRASE_INDEX:
        return PHRASE_INDEX
    retriever = pipeline.config.get("retriever")
    return spec_name(retriever) if retriever else type(pipeline).__name__


def _reader_name(pipeline: Answerer) -> str | None:
    if pipeline.kind == PHRASE_INDEX or pipeline.reader is None:
        return None
    if pipeline.config.get("reader"):
        return spec_name(pipeline.config["reader"])
    return getattr(pipeline.reader, "registered_name", None) or type(pipeline.reader).__name__
