"""What an evaluation table runs on, and running one system on it.

A target is a named column of the tables: a TopiOCQA x Wikipedia benchmark folder
(`convqa data topiocqa-wiki`; dataset "topiocqa-wiki") or an official TopiOCQA file with a
passage store (dataset "topiocqa"). Each gives the placeholders of the systems file:
`{corpus}` (the benchmark folder, or the folder that holds the store) and `{passages}`.
A BM25 index a system names that does not exist yet is built from the target's store first.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from convqa.errors import ConfigError, DataError

from .phrase import TOP_KS as PHRASE_TOP_KS
from .systems import System

DATASETS = ("topiocqa-wiki", "topiocqa")


@dataclass(frozen=True)
class Target:
    name: str
    dataset: str   # one of DATASETS
    path: Path     # the benchmark folder, or the official file
    passages: Path  # the passage store

    @property
    def corpus(self) -> Path:
        return self.path if self.dataset == "topiocqa-wiki" else self.passages.parent

    def placeholders(self) -> dict[str, str]:
        return {"corpus": str(self.corpus), "passages": str(self.passages)}

    def load(self) -> Any:
        """The turns (checked) and a look at the store: a table reads them once, before any
        system runs, so a malformed file fails first and is not parsed again for every row."""
        from convqa.benchmark import load_labelled_turns
        from convqa.corpus import PassageStore

        from .topiocqa import load_official_turns

        data = (load_labelled_turns(self.path) if self.dataset == "topiocqa-wiki"
                else load_official_turns(self.path))
        PassageStore.open(self.passages).close()
        return data


def named_path(text: str, flag: str) -> tuple[str | None, Path]:
    """("NAME", path) from "NAME=PATH", or (None, path) from "PATH"."""
    name, sep, rest = text.partition("=")
    if sep and name and rest and "/" not in name:
        return name, Path(rest)
    if not text or text.endswith("="):
        raise ConfigError(f"{flag} {text!r}: expected [NAME=]PATH")
    return None, Path(text)


def benchmark_target(text: str) -> Target:
    """A benchmark folder from "[NAME=]DIR"; the name defaults to the folder's name."""
    name, folder = named_path(text, "--benchmark")
    if not (folder / "turns.jsonl").is_file():
        raise DataError("not a benchmark folder (no turns.jsonl; build one with `convqa data "
                        "topiocqa-wiki --out DIR`)", folder)
    return Target(name or folder.name, "topiocqa-wiki", folder, folder / "passages")


def official_target(text: str, passages: str | None) -> Target:
    """An official TopiOCQA file from "[NAME=]FILE" with its passage store."""
    name, path = named_path(text, "--data")
    if not passages:
        raise ConfigError("--dataset topiocqa needs --passages STORE (the passage collection as "
                          "a store: `convqa index` / convqa.corpus.PassageStore)")
    if not path.is_file():
        raise DataError("file not found", path)
    stem = path.name.split(".")[0]
    return Target(name or stem, "topiocqa", path, Path(passages))


def ensure_bm25_indexes(spec: Any, passages: Path, progress: bool) -> None:
    """Build any BM25 index `spec` names that does not exist yet, from the store `passages`."""
    if isinstance(spec, list):
        for item in spec:
            ensure_bm25_indexes(item, passages, progress)
        return
    if not isinstance(spec, dict):
        return
    if spec.get("name") == "bm25" and spec.get("index") and not Path(spec["index"]).exists():
        from convqa.corpus import PassageStore
        from retrievers.bm25 import BM25Config, BM25Retriever

        config = BM25Config(preset=spec.get("preset", "default"), k1=spec.get("k1"),
                            b=spec.get("b"))
        started = time.perf_counter()
        with PassageStore.open(passages) as store:
            BM25Retriever.build_from_store(store, config, show_progress=progress).save(
                spec["index"])
            count = len(store)
        print(f"built BM25 index {spec['index']} ({count} passages) in "
              f"{time.perf_counter() - started:.1f} s", file=sys.stderr)
    for value in spec.values():
        if isinstance(value, (dict, list)):
            ensure_bm25_indexes(value, passages, progress)


def _components(target: Target, system: System, progress: bool) -> tuple[Any, Any, Any, Any]:
    """(retriever, history, reader, phrase system or None) of `system` (placeholders resolved):
    a phrase index is all three (convqa.front.evaluation.phrase); BM25 indexes are built if
    missing."""
    if system.phrase_index is not None:
        from .phrase import PhraseSystem

        phrase = PhraseSystem.load(system.phrase_index, target.passages)
        return phrase, phrase.history, phrase, phrase
    ensure_bm25_indexes(system.retriever, target.passages, progress)
    return system.retriever, system.history, system.reader, None


def run_retrieval(target: Target, system: System, split: str = "dev",
                  cache_dir: str | None = None, batch_size: int = 64, progress: bool = True,
                  use_cache: bool = True, levels: Sequence[str] | None = None,
                  data: Any = None) -> dict[str, Any]:
    """One row of the retrieval table: `system` (placeholders not yet resolved) on `target`;
    `data` is `target.load()` when already read."""
    from .retrieval import evaluate_retrieval
    from .topiocqa import evaluate_topiocqa_retrieval

    system = system.resolved(target.placeholders())
    retriever, history, _, phrase = _components(target, system, progress)
    if target.dataset == "topiocqa-wiki":
        result = evaluate_retrieval(target.path, retriever, history, split=split,
                                    cache_dir=cache_dir, batch_size=batch_size,
                                    progress=progress, label=system.label, use_cache=use_cache,
                                    data=data, reranker=system.reranker)
    else:
        result = evaluate_topiocqa_retrieval(target.path, target.passages, retriever,
                                             history, levels=levels,
                                             cache_dir=cache_dir, batch_size=batch_size,
                                             progress=progress, label=system.label,
                                             use_cache=use_cache, data=data,
                                             reranker=system.reranker)
    if phrase is not None:
        result.update({k: v for k, v in phrase.describe().items() if k != "reader"})
    result["corpus_name"] = target.name
    return result


def run_answers(target: Target, system: System, top_ks: Sequence[int], split: str = "dev",
                cache_dir: str | None = None, progress: bool = True,
                use_cache: bool = True, data: Any = None) -> dict[str, Any]:
    """One row of the end-to-end table: `system` (with a reader, or a phrase index: then
    scored once, at k=1) on `target`; `data` is `target.load()` when already read."""
    from .answers import evaluate_answers
    from .topiocqa import evaluate_topiocqa_answers

    if system.reader is None and system.phrase_index is None:
        raise ConfigError(f"system '{system.label}' has no reader")
    system = system.resolved(target.placeholders())
    retriever, history, reader, phrase = _components(target, system, progress)
    if phrase is not None:
        top_ks = PHRASE_TOP_KS  # one answer per turn, whatever the readers' k
    if target.dataset == "topiocqa-wiki":
        result = evaluate_answers(target.path, retriever, reader, history, split=split,
                                  top_ks=top_ks, cache_dir=cache_dir, progress=progress,
                                  label=system.label, use_cache=use_cache, data=data,
                                  reranker=system.reranker)
    else:
        result = evaluate_topiocqa_answers(target.path, target.passages, retriever, reader,
                                           history, top_ks=top_ks, cache_dir=cache_dir,
                                           progress=progress, label=system.label,
                                           use_cache=use_cache, data=data,
                                           reranker=system.reranker)
    if phrase is not None:
        result.update(phrase.describe())
    return result
