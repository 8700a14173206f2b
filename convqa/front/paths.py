"""Answering paths: one typed config and one builder, for `convqa answer`, the demo, serve and
the phrase rows of the evaluation tables.

A path is a retriever (+ a reranker) + a reader (`RetrieverReaderPath`), or
a phrase index that answers alone (`PhraseIndexPath`). `build(path)` opens it as an `Answerer`
(convqa/pipeline.py): callers ask its `kind` instead of probing its attributes.

One naming scheme everywhere (the API's pipeline names, the demo's choices):
- `<retriever>` for a retriever answering with passages only, `<retriever>+<reader>` with a
  reader (`dense`, `dense+extractive`); the embedded retrievers are RETRIEVER_CHOICES, a
  configured pipeline's retriever is named after its file (`films.yaml` -> `films`);
- `phrase:<folder name>` for a phrase index.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, ClassVar, Mapping, Sequence, Union

from convqa.config import apply_overrides, load_yaml
from convqa.errors import ConfigError
from convqa.pipeline import PHRASE_INDEX, PIPELINE_KEYS, RETRIEVER_READER, Answerer, Pipeline

from .embedded import DEFAULT_RETRIEVER, RETRIEVER_CHOICES, default_config, ensure_embedded

__all__ = ["PHRASE_INDEX", "RETRIEVER_CHOICES", "RETRIEVER_READER", "PathConfig",
           "PhraseIndexPath", "RerankerConfig", "RetrieverReaderPath", "build",
           "configured_path", "default_pipeline", "embedded_path", "phrase_spec", "spec_name",
           "without_reader"]

PHRASE_PREFIX = "phrase:"


def spec_name(spec: Any) -> str:
    """"bm25" of `"bm25"` or `{name: bm25, ...}`; "configured" when it names nothing."""
    name = spec.get("name") if isinstance(spec, Mapping) else spec
    return name if isinstance(name, str) else "configured"


def path_name(retriever: str, reader: str | None) -> str:
    return retriever if reader is None else f"{retriever}+{reader}"


@dataclass(frozen=True)
class RerankerConfig:
    """A reranker between retrieval and reading (a RERANKERS component, retrievers/rerank/):
    it rescores the retriever's first `top_n` hits and the reader reads its best `top_k`."""

    name: str
    options: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_spec(cls, spec: Any, where: str | None = "pipeline config"
                  ) -> "RerankerConfig | None":
        """`{name: cross_encoder, model: DIR, top_n: 20}` (or a bare name); None for none.
        `where` heads the error (None: the caller's own error says where)."""
        if spec is None or isinstance(spec, RerankerConfig):
            return spec
        if isinstance(spec, str):
            return cls(spec)
        if not isinstance(spec, Mapping) or not isinstance(spec.get("name"), str):
            raise ConfigError(f"{where + ': ' if where else ''}'reranker' must name a "
                              f"reranker, got {spec!r}")
        return cls(spec["name"], {k: v for k, v in spec.items() if k != "name"})

    def to_spec(self) -> dict[str, Any]:
        return {"name": self.name, **self.options}

    def check(self) -> Any:
        """The component's typed options, checked without loading anything: an unknown
        reranker or option, a bad value or a missing model folder is a one-line ConfigError."""
        from convqa.registry import RERANKERS

        options = RERANKERS.make_config(self.name, dict(self.options))
        if getattr(options, "model", None) == "":
            raise ConfigError(f"reranker '{self.name}': option 'model' (a folder made by "
                              "`convqa train reranker`) is required")
        return options


@dataclass(frozen=True)
class EmbeddedIndexes:
    """The indexes of the embedded collection a path reads, built on first use."""

    retriever: str
    cache_dir: str | os.PathLike | None = None


@dataclass(frozen=True)
class RetrieverReaderPath:
    """A retriever (registry spec) with its history strategy, and a reader (None: passages
    only), over a passage store: a pipeline config (`Pipeline.from_config`) with a name."""

    kind: ClassVar[str] = RETRIEVER_READER

    retriever_name: str
    retriever: Any
    passages: Any = None
    history: Any = None
    reader: Any = None
    reranker: RerankerConfig | None = None
    top_k: Any = None
    extra: Mapping[str, Any] = field(default_factory=dict)  # refused by Pipeline.from_config
    embedded: EmbeddedIndexes | None = None

    @classmethod
    def from_config(cls, config: Mapping[str, Any], retriever_name: str,
                    embedded: EmbeddedIndexes | None = None) -> "RetrieverReaderPath":
        """The path of a pipeline config as read (it is checked when the path is built)."""
        return cls(retriever_name, config.get("retriever"), config.get("passages"),
                   config.get("history"), config.get("reader"),
                   RerankerConfig.from_spec(config.get("reranker")), config.get("top_k"),
                   {k: v for k, v in config.items() if k not in PIPELINE_KEYS}, embedded)

    @property
    def reader_name(self) -> str | None:
        return spec_name(self.reader) if self.reader else None

    @property
    def name(self) -> str:
        return path_name(self.retriever_name, self.reader_name)

    def without_reader(self) -> "RetrieverReaderPath":
        return replace(self, reader=None)

    def with_overrides(self, overrides: Sequence[str]) -> "RetrieverReaderPath":
        """`--set key.sub=value` applied to the pipeline config."""
        if not overrides:
            return self
        changed = apply_overrides(self.pipeline_config(), list(overrides))
        return RetrieverReaderPath.from_config(changed, self.retriever_name, self.embedded)

    def pipeline_config(self) -> dict[str, Any]:
        """The config `Pipeline.from_config` reads (keys left unset are left out)."""
        values = {"passages": self.passages, "retriever": self.retriever,
                  "history": self.history, "reader": self.reader, "top_k": self.top_k,
                  "reranker": self.reranker.to_spec() if self.reranker else None}
        return {**{k: v for k, v in values.items() if v is not None}, **self.extra}


PHRASE_OPTIONS = ("index", "model", "passages", "nprobe", "candidates", "sparse_weight",
                  "sparse_passages", "sparse_history", "precision", "overlap_weight",
                  "dense_index", "dense_weight", "dense_passages", "dense_history")


@dataclass(frozen=True)
class PhraseIndexPath:
    """A folder of `convqa index --phrase` and how to search it (phrase_index/answerer.py,
    `PhrasePipeline.from_folder`): None leaves an option at the index's or the model's
    default."""

    kind: ClassVar[str] = PHRASE_INDEX

    index: str | os.PathLike
    model: str | os.PathLike | None = None
    passages: str | os.PathLike | None = None
    nprobe: int | None = None
    candidates: int | None = None
    sparse_weight: float | None = None
    sparse_passages: int | None = None
    sparse_history: Any = None
    precision: str | None = None
    overlap_weight: float | None = None
    dense_index: str | os.PathLike | None = None
    dense_weight: float | None = None
    dense_passages: int | None = None
    dense_history: Any = None

    @classmethod
    def from_spec(cls, spec: Any, passages: str | os.PathLike | None = None
                  ) -> "PhraseIndexPath":
        """From a systems-file `phrase_index` entry, checked (`phrase_spec`); `passages` is the
        store used when the entry names none."""
        return cls.from_options(phrase_spec(spec), passages)

    @classmethod
    def from_options(cls, options: Mapping[str, Any], passages: str | os.PathLike | None = None
                     ) -> "PhraseIndexPath":
        """From options `phrase_spec` already checked."""
        values = {k: v for k, v in options.items() if v is not None}
        if not values.get("passages") and passages is not None:
            values["passages"] = str(passages)
        return cls(**values)

    @property
    def retriever_name(self) -> str:
        return PHRASE_INDEX

    @property
    def reader_name(self) -> None:
        return None

    @property
    def name(self) -> str:
        return PHRASE_PREFIX + Path(self.index).resolve().name


PathConfig = Union[RetrieverReaderPath, PhraseIndexPath]


def embedded_path(retriever: str = DEFAULT_RETRIEVER, reader: Any = "default",
                  cache_dir: str | os.PathLike | None = None) -> RetrieverReaderPath:
    """A retriever of the embedded collection (RETRIEVER_CHOICES) with `reader`: "default" (the
    shipped extractive reader), None (passages only) or a reader spec; its indexes are built
    when the path is (`convqa answer --prepare` builds them ahead)."""
    config = default_config(cache_dir, retriever, reader)
    return RetrieverReaderPath.from_config(config, retriever,
                                           EmbeddedIndexes(retriever, cache_dir))


def default_pipeline(cache_dir: str | os.PathLike | None = None, progress: bool = True,
                     retriever: str = DEFAULT_RETRIEVER, reader: Any = "default") -> Answerer:
    """The embedded vital-article corpus with the shipped models; `retriever` is dense
    (DPR-IHN adapter), bm25 or hybrid (RRF of both); `reader` "default" (the shipped
    extractive reader), None (retrieval only) or a reader spec. Indexes are built on
    first use (under `cache_dir`, default ~/.cache/convqa).

    >>> import tempfile
    >>> from convqa.types import Turn
    >>> with tempfile.TemporaryDirectory() as cache:
    ...     pipeline = default_pipeline(cache, progress=False)
    ...     first = pipeline.answer("Who directed 2001: A Space Odyssey?", [])
    ...     history = [Turn(first.question, first.answer.text)]
    ...     then = pipeline.answer("When was it released?", history)
    >>> first.answer.text, then.answer.text, then.answer.passage_id
    ('Stanley Kubrick', '1968', '2001:_A_Space_Odyssey#0')
    """
    return build(embedded_path(retriever, reader, cache_dir), progress)


def configured_path(config: str | os.PathLike | Mapping[str, Any], overrides: Sequence[str] = (),
                    name: str | None = None) -> RetrieverReaderPath:
    """The pipeline of a YAML file (or a config dict), `--set` overrides applied; its retriever
    is named `name`, else after the file ("configured" for a dict)."""
    if isinstance(config, Mapping):
        values = dict(config)
        name = name or "configured"
    else:
        values = load_yaml(config)
        name = name or Path(config).stem
    return RetrieverReaderPath.from_config(values, name).with_overrides(overrides)


def build(path: PathConfig, progress: bool = True) -> Answerer:
    """Open `path`: the embedded indexes it reads are built first when missing (with a
    progress bar unless `progress` is False)."""
    if isinstance(path, PhraseIndexPath):
        return _build_phrase(path)
    if path.embedded is not None:
        ensure_embedded(path.embedded.cache_dir, progress=progress,
                        retriever=path.embedded.retriever)
    return Pipeline.from_config(path.pipeline_config())


def _build_phrase(path: PhraseIndexPath) -> Answerer:
    from phrase_index.answerer import PhrasePipeline

    options = {f.name: getattr(path, f.name) for f in fields(path)
               if f.name not in ("index", "model", "passages")}
    options["precision"] = options["precision"] or "auto"
    return PhrasePipeline.from_folder(path.index, path.model, path.passages, **options)


def without_reader(pipeline: Pipeline) -> Pipeline:
    """The same retriever, history and passages answering with passages only: a path without a
    reader next to its path with one loads nothing twice."""
    if pipeline.kind != RETRIEVER_READER:
        raise ConfigError(f"a {pipeline.kind} answers without a reader already")
    return Pipeline(pipeline.retriever, pipeline.history, pipeline.passages, None,
                    pipeline.top_k, {**pipeline.config, "reader": None}, pipeline.reranker)


def phrase_spec(spec: Any) -> dict[str, Any]:
    """`spec` (a folder, or a mapping of PHRASE_OPTIONS) as a checked dict; nothing is loaded;
    ConfigError otherwise."""
    if isinstance(spec, str):
        spec = {"index": spec}
    if not isinstance(spec, dict):
        raise ConfigError(f"phrase_index must be a folder or a mapping with 'index', got {spec!r}")
    unknown = sorted(set(spec) - set(PHRASE_OPTIONS))
    if unknown:
        raise ConfigError(f"phrase_index: unknown option '{unknown[0]}' (options: "
                          f"{', '.join(PHRASE_OPTIONS)})")
    if not isinstance(spec.get("index"), str) or not spec["index"].strip():
        raise ConfigError("phrase_index needs 'index': the folder of `convqa index --phrase`")
    for name in ("model", "passages", "dense_index"):
        if spec.get(name) is not None and (not isinstance(spec[name], str) or not spec[name]):
            raise ConfigError(f"phrase_index: {name} must be a path, got {spec[name]!r}")
    for name in ("nprobe", "candidates"):
        value = spec.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 1):
            raise ConfigError(f"phrase_index: {name} must be a positive integer, got {value!r}")
    if spec.get("sparse_weight") is not None or spec.get("sparse_passages") is not None:
        from phrase_index.sparse import check_settings

        try:
            check_settings(spec.get("sparse_weight"), spec.get("sparse_passages"))
        except ConfigError as exc:
            raise ConfigError(f"phrase_index: {exc}") from None
    if spec.get("dense_weight") is not None or spec.get("dense_passages") is not None:
        from phrase_index.dense_prior import check_dense_settings

        try:
            check_dense_settings(spec.get("dense_weight"), spec.get("dense_passages"))
        except ConfigError as exc:
            raise ConfigError(f"phrase_index: {exc}") from None
    if spec.get("overlap_weight") is not None:
        from phrase_index.overlap import check_weight

        try:
            check_weight(spec["overlap_weight"])
        except ConfigError as exc:
            raise ConfigError(f"phrase_index: {exc}") from None
    if spec.get("precision") is not None:
        from convqa.precision import normalize_precision

        normalize_precision(spec["precision"], "phrase_index: precision")
    for name, plain in (("sparse_history", (None, "phrase")), ("dense_history", (None,))):
        if spec.get(name) in plain:
            continue
        from convqa.history import build_history_strategy

        try:
            build_history_strategy(spec[name])
        except (ConfigError, ValueError, TypeError) as exc:
            raise ConfigError(f"phrase_index: {name}: {exc}") from None
    return dict(spec)
