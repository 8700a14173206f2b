"""Model families: which shipped reader (and reranker) a path reads with, by one name.

`default` is the fast MiniLM family the embedded collection ships with; `large` swaps in the
models trained from all-mpnet-base-v2 (`convqa models install all-mpnet-base-v2` first), which
read better and cost several times the milliseconds. The family changes models only: the
retriever, the collection and every option of a pipeline YAML stay as given, and a reranker
the path already names is kept.

>>> from convqa.front.families import family_named, with_family
>>> from convqa.front.paths import embedded_path
>>> path = with_family(embedded_path("dense"), family_named("large"))
>>> path.reader["model"], path.reranker.options["model"]
('convqa-reader-large', 'convqa-reranker')
>>> path.reranker.options["second_stage"]
{'model': 'convqa-reranker-large', 'top_n': 5}
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping

from convqa.errors import ConfigError

from .paths import PathConfig, RerankerConfig, RetrieverReaderPath


@dataclass(frozen=True)
class ModelFamily:
    """The models of a family: an extractive reader, and a reranker to put before it when
    the path has none (None: no reranker), with its second stage if any."""

    name: str
    reader: str
    reranker: str | None = None
    rerank_top_n: int | None = None
    # which of the top_n the first reranker rescores (`rescore_within`, `rescore_word_matches`)
    rerank_shortlist: Mapping[str, Any] | None = None
    # a slower reranker that reorders the first one's best few (the reranker's `second_stage`)
    rerank_second_stage: Mapping[str, Any] | None = None
    summary: str = ""


DEFAULT_FAMILY = "default"
FAMILIES: Mapping[str, ModelFamily] = {
    family.name: family for family in (
        ModelFamily(DEFAULT_FAMILY, reader="convqa-reader",
                    summary="MiniLM-L6 models: the fast default"),
        # the best measured full-collection row (and above one reranker on vital): the
        # reranker over the top 50, the large reranker reordering its best 5, the large reader
        # over those (docs/reranker.md, "Two stages"); the first reranker rescores the hits
        # within 4 standard deviations of the best and the 6 others whose words match best,
        # which keep every hit's Hits on both collections' train turns behind DPR-IHN
        # (docs/reranker.md, "Also the hits whose words match")
        ModelFamily("large", reader="convqa-reader-large", reranker="convqa-reranker",
                    rerank_top_n=50,
                    rerank_shortlist={"rescore_within": 4.0, "rescore_word_matches": 6},
                    rerank_second_stage={"model": "convqa-reranker-large", "top_n": 5},
                    summary="the all-mpnet-base-v2 reader behind the reranker and the large "
                            "reranker (needs `convqa models install all-mpnet-base-v2`)"),
    )}


def add_family_argument(parser) -> None:
    """`--model-family NAME`, the same on `convqa answer`, `convqa serve` and `convqa demo`."""
    parser.add_argument("--model-family", choices=tuple(FAMILIES), default=DEFAULT_FAMILY,
                        help="the models to read with: " + "; ".join(
                            f"{f.name}: {f.summary}" for f in FAMILIES.values()))


def family_named(name: str) -> ModelFamily:
    family = FAMILIES.get(name)
    if family is None:
        raise ConfigError(f"--model-family must be one of {', '.join(FAMILIES)}, got {name!r}")
    return family


def with_family(path: PathConfig, family: ModelFamily) -> PathConfig:
    """`path` reading with `family`'s models. The default family leaves a path as it is; a
    phrase index or a path without a reader has no reader to swap and is refused."""
    if family.name == DEFAULT_FAMILY:
        return path
    if not isinstance(path, RetrieverReaderPath) or not path.reader:
        raise ConfigError(f"--model-family {family.name} swaps the reader: it needs a path "
                          "with one (not --no-reader or --phrase-index)")
    reader = path.reader if isinstance(path.reader, Mapping) else {"name": path.reader}
    if reader.get("name", "extractive") != "extractive":
        raise ConfigError(f"--model-family {family.name} has an extractive reader; this "
                          f"pipeline's reader is {reader.get('name')!r}")
    changed = replace(path, reader={**reader, "model": family.reader})
    if family.reranker and changed.reranker is None:
        options: dict[str, Any] = {"model": family.reranker}
        if family.rerank_top_n is not None:
            options["top_n"] = family.rerank_top_n
        options.update(family.rerank_shortlist or {})
        if family.rerank_second_stage is not None:
            options["second_stage"] = dict(family.rerank_second_stage)
        changed = replace(changed, reranker=RerankerConfig("cross_encoder", options))
    return changed
