"""The answering paths a server offers, by API name, and how to build one copy of them all.

Names: `<retriever>+<reader>` for a retriever with a reader ("dense+extractive"),
`<retriever>` for the same retriever answering with passages only ("dense"), and
`phrase:<folder name>` for a phrase index. A path without a reader shares the retriever,
history strategy and passage store of its path with a reader: nothing is loaded twice.

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


def built(pipelines: Mapping[str, Any]) -> PipelineSource:
    """Pipelines already in memory (tests, Python callers): one copy, served as they are."""
    paths = [PathInfo(name, _retriever_name(p), _reader_name(p)) for name, p in pipelines.items()]
    return PipelineSource(paths, lambda: dict(pipelines), copies=1)


WARM_UP_QUESTION = "Who wrote the first encyclopedia?"


def warmed(pipeline: Any) -> Any:
    """`pipeline`, after answering one question (which it is not asked again)."""
    pipeline.answer(WARM_UP_QUESTION)
    return pipeline


def without_reader(pipeline: Any) -> Any:
    """The same retriever, history and passages answering with passages only."""
    from convqa.pipeline import Pipeline

    return Pipeline(pipeline.retriever, pipeline.history, pipeline.passages, None,
                    pipeline.top_k, {**pipeline.config, "reader": None})


def _with_and_without_reader(name: str, reader: str | None,
                             build_one: Callable[[], Any]) -> PipelineSource:
    if reader is None:
        return PipelineSource([PathInfo(name, name, None)], lambda: {name: build_one()})

    def build() -> dict[str, Any]:
        pipeline = build_one()
        return {f"{name}+{reader}": pipeline, name: without_reader(pipeline)}

    return PipelineSource([PathInfo(f"{name}+{reader}", name, reader),
                           PathInfo(name, name, None)], build)


def embedded_source(retriever: str, with_reader: bool = True,
                    cache_dir: str | os.PathLike | None = None) -> PipelineSource:
    """A retriever of the embedded collection (dense, bm25, hybrid), with the shipped extractive
    reader and without; its indexes are built on first use (`convqa answer --prepare`)."""
    from convqa.front.embedded import RETRIEVER_CHOICES

    if retriever not in RETRIEVER_CHOICES:
        raise ConfigError(f"serve: unknown retriever {retriever!r} "
                          f"(choices: {', '.join(RETRIEVER_CHOICES)})")

    def build_one():
        from convqa.front.embedded import default_pipeline

        return warmed(default_pipeline(cache_dir=cache_dir, progress=False,
                                       retriever=retriever,
                                       reader="default" if with_reader else None))

    return _with_and_without_reader(retriever, "extractive" if with_reader else None, build_one)


def config_source(config: str | os.PathLike, overrides: Sequence[str] = ()) -> PipelineSource:
    """The pipeline of a YAML file (`Pipeline.from_config`), named after the file."""
    from convqa.config import apply_overrides, load_yaml

    values = apply_overrides(load_yaml(config), list(overrides))
    reader = values.get("reader")

    def build_one():
        from convqa.pipeline import Pipeline

        return warmed(Pipeline.from_config(values))

    return _with_and_without_reader(Path(config).stem, _spec_name(reader) if reader else None,
                                    build_one)


def phrase_source(folder: str | os.PathLike) -> PipelineSource:
    """A phrase index folder (`convqa index --phrase`): answers without a reader."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DataError("no such phrase index folder", folder)
    name = f"phrase:{folder.resolve().name}"

    def build_one():
        from phrase_index.answerer import PhrasePipeline

        return warmed(PhrasePipeline.from_folder(folder))

    return PipelineSource([PathInfo(name, "phrase index", None)], lambda: {name: build_one()})


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


def describe(name: str, pipeline: Any, info: PathInfo, ready: bool) -> dict[str, Any]:
    """What GET /v1/pipelines says of a path."""
    history = getattr(pipeline, "history", None)
    if history is None:  # a phrase index formats the conversation with its model's strategy
        history = getattr(getattr(pipeline, "model", None), "history_strategy", None)
    to_dict = getattr(history, "to_dict", None)
    return {"name": name, "retriever": info.retriever, "reader": info.reader,
            "history": to_dict() if callable(to_dict) else None,
            "top_k": getattr(pipeline, "top_k", None), "ready": ready}


def _retriever_name(pipeline: Any) -> str:
    config = getattr(pipeline, "config", None)
    if isinstance(config, dict) and config.get("retriever"):
        return _spec_name(config["retriever"])
    return "phrase index" if hasattr(pipeline, "searcher") else type(pipeline).__name__


def _reader_name(pipeline: Any) -> str | None:
    reader = getattr(pipeline, "reader", None)
    if reader is None:
        return None
    config = getattr(pipeline, "config", None)
    if isinstance(config, dict) and config.get("reader"):
        return _spec_name(config["reader"])
    return getattr(reader, "registered_name", None) or type(reader).__name__


def _spec_name(spec: Any) -> str:
    """"bm25" of `"bm25"` or `{name: bm25, ...}`."""
    name = spec.get("name") if isinstance(spec, dict) else spec
    return name if isinstance(name, str) else "configured"
