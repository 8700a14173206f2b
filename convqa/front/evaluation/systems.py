"""Systems files: the rows of the evaluation tables, read from YAML and checked before any run.

    systems:
      - label: "BM25, X_t"
        retriever: {name: bm25, index: "{corpus}/indexes/bm25"}
        history: full                      # the retriever's query (default oldest_first)
        reader: {name: extractive, model: convqa-reader}   # end-to-end tables only
        corpora: [vital]                   # only on these corpora (default: all)
      - label: "BM25, X_t + reranker top 50"
        retriever: {name: bm25, index: "{corpus}/indexes/bm25"}
        history: full
        reranker: {name: cross_encoder, model: runs/reranker/model, top_n: 50}
        reader: {name: extractive, model: convqa-reader}
      - label: "PRO-ConvQA phrase index"   # answers without retriever and reader
        phrase_index: {index: "{corpus}/indexes/phrase-v2", nprobe: 64}
    top_ks: [1, 5, 20]                     # end-to-end tables: passages given to the reader

A `reranker` (the pipeline's `reranker:` key, convqa/front/paths.py `RerankerConfig`; options in
retrievers/rerank/reranker.py) rescores each turn's first `top_n` hits of the retriever's run
(convqa/front/evaluation/rerank.py): the row's retrieval metrics are those of the reranked run,
and its reader reads the reranker's best k, as `convqa answer --rerank` does.

A `phrase_index` row (options in convqa/front/evaluation/phrase.py) has no retriever, reader or
history: the phrase model formats the conversation itself, the passages of its best phrases are
the ranking and its best phrase is the answer, scored once (@1) in end-to-end tables.

Placeholders in any string: `{corpus}` (the corpus's folder: a benchmark folder, or the folder
that holds the passage store of an official file) and `{passages}` (the passage store).

Every component a file names is looked up before anything runs, so a typo in the last row fails
in a second, not after an hour of retrieval: the error names the file and the system, e.g.
"systems.yaml: system 'foo': unknown retriever 'bm26' (known: bm25, dense, ...)".
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

from convqa.config import load_yaml
from convqa.errors import ConfigError
from convqa.specs import load_retriever_modules, spec_names

from ..paths import RerankerConfig, phrase_spec

TOP_KS = [1, 5, 20]
_BM25 = {"name": "bm25", "index": "{corpus}/indexes/bm25"}
KINDS = ("retrieval", "answers")


@dataclass(frozen=True)
class System:
    """One row: a retriever with its history strategy (and a reranker after it), and a reader
    for end-to-end rows; or a phrase index (`phrase_index`, then `retriever` is None), which
    does both."""

    label: str
    retriever: Any
    history: Any = "oldest_first"
    reader: Any = None
    corpora: tuple[str, ...] | None = None
    phrase_index: Any = None
    reranker: Any = None

    def runs_on(self, corpus: str) -> bool:
        return self.corpora is None or corpus in self.corpora

    def resolved(self, placeholders: Mapping[str, str]) -> "System":
        """This system with `{corpus}` / `{passages}` replaced in every string."""
        return replace(self, retriever=substitute(self.retriever, placeholders),
                       history=substitute(self.history, placeholders),
                       reader=substitute(self.reader, placeholders),
                       phrase_index=substitute(self.phrase_index, placeholders),
                       reranker=substitute(self.reranker, placeholders))


@dataclass(frozen=True)
class Systems:
    """A systems file: where it came from (for error messages), its rows and reader cut-offs."""

    path: str
    systems: tuple[System, ...]
    top_ks: tuple[int, ...] = tuple(TOP_KS)

    def select(self, only: list[str] | None) -> "Systems":
        """The systems named by `only` (all when it is empty): for each entry, the system whose
        label equals it, else every system whose label contains it."""
        if not only:
            return self
        wanted: set[str] = set()
        for entry in only:
            exact = [s.label for s in self.systems if s.label == entry]
            wanted.update(exact or [s.label for s in self.systems if entry in s.label])
        chosen = tuple(s for s in self.systems if s.label in wanted)
        if not chosen:
            raise ConfigError(f"{self.path}: no system label contains "
                              f"{' or '.join(repr(o) for o in only)}")
        return replace(self, systems=chosen)


# The shortcut rows of DPR-IHN's analysis with BM25: the retrieval table without a systems file.
DEFAULT_RETRIEVAL_SYSTEMS = Systems("<default BM25 shortcut rows>", (
    System("BM25, q_t (question_only)", _BM25, "question_only"),
    System("BM25, a_{t-1} (last_answer)", _BM25, "last_answer"),
    System("BM25, X_t without q_t (history_only)", _BM25, "history_only"),
    System("BM25, X_t (full = oldest_first)", _BM25, "full"),
    System("BM25, current_first", _BM25, "current_first"),
))


def substitute(value: Any, placeholders: Mapping[str, str]) -> Any:
    """`value` with every `{name}` of `placeholders` replaced in its strings, recursively."""
    if isinstance(value, str):
        for name, replacement in placeholders.items():
            value = value.replace("{" + name + "}", str(replacement))
        return value
    if isinstance(value, dict):
        return {k: substitute(v, placeholders) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [substitute(v, placeholders) for v in value]
    return value


def load_systems(path: str | os.PathLike, kind: str = "retrieval") -> Systems:
    """Read and check a systems file (`kind` "answers" requires a reader per system)."""
    if kind not in KINDS:
        raise ConfigError(f"unknown systems kind {kind!r} (expected {', '.join(KINDS)})")
    where = str(path)
    data = load_yaml(path)
    rows = data.get("systems")
    if not isinstance(rows, list) or not rows:
        raise ConfigError(f"{where}: expected a non-empty list under 'systems'")
    keys = ("label", "retriever", "history", "reranker", "reader", "corpora", "phrase_index")
    systems = []
    labels: set[str] = set()
    for index, row in enumerate(rows):
        if not isinstance(row, dict) or not row.get("label"):
            raise ConfigError(f"{where}: systems[{index}] needs 'label'")
        label = str(row["label"])
        unknown = sorted(set(row) - set(keys))
        if unknown:
            raise ConfigError(f"{where}: system '{label}': unknown key '{unknown[0]}' (keys: "
                              f"{', '.join(keys)})")
        _check_parts(row, kind, where, index, label)
        if label in labels:
            raise ConfigError(f"{where}: system '{label}' appears twice")
        labels.add(label)
        corpora = row.get("corpora")
        if corpora is not None and (not isinstance(corpora, list)
                                    or not all(isinstance(c, str) for c in corpora)):
            raise ConfigError(f"{where}: system '{label}': corpora must be a list of names")
        systems.append(System(label, row.get("retriever"), row.get("history") or "oldest_first",
                              row.get("reader"), tuple(corpora) if corpora else None,
                              row.get("phrase_index"), row.get("reranker")))
    top_ks = data.get("top_ks", TOP_KS)
    if (not isinstance(top_ks, list) or not top_ks
            or not all(isinstance(k, int) and not isinstance(k, bool) and k > 0 for k in top_ks)):
        raise ConfigError(f"{where}: top_ks must be a list of positive integers")
    return Systems(where, tuple(systems), tuple(top_ks))


def _check_parts(row: dict[str, Any], kind: str, where: str, index: int, label: str) -> None:
    """A row is a retriever (+ reader for end-to-end tables) or a phrase index, not both."""
    if "phrase_index" in row:
        others = [key for key in ("retriever", "reranker", "reader", "history") if key in row]
        if others:
            raise ConfigError(f"{where}: system '{label}': 'phrase_index' does not go with "
                              f"'{others[0]}' (a phrase index answers without retriever and "
                              "reader, and its model formats the conversation)")
        if not row["phrase_index"]:
            raise ConfigError(f"{where}: system '{label}': 'phrase_index' is empty")
        return
    needed = ("retriever", "reader") if kind == "answers" else ("retriever",)
    missing = [key for key in needed if not row.get(key)]
    if missing:
        raise ConfigError(f"{where}: systems[{index}] needs '{missing[0]}'"
                          + (" or a 'phrase_index'" if missing[0] == "retriever" else "")
                          + f" (system '{label}')")


def check_components(systems: Systems, extra_histories: Sequence[str] = ()) -> None:
    """Every retriever, history strategy, reranker and reader named exists and takes the
    options given; otherwise a one-line ConfigError naming the file and the system. Builds
    nothing.
    `extra_histories`: query names a dataset adds (QReCC's "rewrite")."""
    from convqa.registry import HISTORY_STRATEGIES, READERS, RETRIEVERS

    for system in systems.systems:
        where = f"{systems.path}: system '{system.label}'"
        try:
            if system.phrase_index is not None:
                phrase_spec(system.phrase_index)
                continue
            if any(name not in RETRIEVERS.names() for name in spec_names(system.retriever)):
                load_retriever_modules()
            _check(RETRIEVERS, system.retriever, "retriever")
            if not (isinstance(system.history, str) and system.history in extra_histories):
                _check(HISTORY_STRATEGIES, system.history, "history")
            if system.reranker is not None:
                RerankerConfig.from_spec(system.reranker, None).check()
            if system.reader is not None:
                _check(READERS, system.reader, "reader")
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None


def _check(registry: Any, spec: Any, what: str) -> None:
    if isinstance(spec, str):
        spec = {"name": spec}
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
        raise ConfigError(f"{what} needs a 'name', got {spec!r}")
    registry.make_config(spec["name"], {k: v for k, v in spec.items() if k != "name"})
    nested = spec.get("retrievers") if what == "retriever" else None  # fusion's sub-retrievers
    for item in nested if isinstance(nested, list) else []:
        _check(registry, item, what)
