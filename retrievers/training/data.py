"""Training examples for the dual encoder, and the batches the trainer feeds it.

An example is one labelled turn of the benchmark's train split: its query text (a history
strategy's formatting of the conversation up to the turn) and its positive passages, either the
turn's answer passages (`positives="answer"`, the default: the passages that contain the answer)
or every passage of its gold article (`positives="article"`). Turns without positives under the
chosen rule, and turns whose query is empty (turn 1 under `history_only`), are skipped and counted.

Batches are deterministic functions of (seed, epoch, step): the epoch's order is a seeded
permutation, and each example draws its positive and its hard negatives from a generator seeded
by (seed, epoch, example number). So a resumed run sees exactly the batches an uninterrupted one
would, whatever the number of processes.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from convqa.errors import ConfigError, DataError
from convqa.io import iter_jsonl, load_json, require, write_json, write_jsonl
from convqa.training.schedule import example_rng
from convqa.types import Passage

POSITIVE_MODES = ("answer", "article")
POSITIVE_CHOICES = ("random", "first")
EXAMPLES_FILE = "examples.jsonl"
EXAMPLES_META = "examples.meta.json"


@dataclass
class TrainingExample:
    qid: str
    query: str
    positive_ids: list[str]
    gold_article_id: str | None = None
    question_type: str = ""


@dataclass
class ExampleSet:
    """The examples, and how they were made (recorded next to every model trained on them)."""

    examples: list[TrainingExample]
    positives: str
    history: dict[str, Any]
    split: str = "train"
    counts: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.examples)

    def meta(self) -> dict[str, Any]:
        return {"positives": self.positives, "history": self.history, "split": self.split,
                "counts": dict(self.counts)}


def build_examples(benchmark: str | os.PathLike | Any, history: Any = "oldest_first",
                   positives: str = "answer", split: str = "train",
                   progress: bool = False) -> ExampleSet:
    """Examples from a benchmark folder (or an already loaded `LabelledTurns`).

    `history` is a history-strategy spec (name, dict or strategy)."""
    from convqa.benchmark import load_labelled_turns
    from convqa.history import build_history_strategy

    if positives not in POSITIVE_MODES:
        raise ConfigError(f"positives must be one of {', '.join(POSITIVE_MODES)}, "
                          f"got {positives!r}")
    loaded = benchmark if hasattr(benchmark, "turns") else load_labelled_turns(benchmark)
    strategy = build_history_strategy(history)
    turns = [t for t in loaded.turns if t.split == split]
    counts = {"turns": len(turns), "examples": 0, "skipped_no_positive": 0,
              "skipped_empty_query": 0}
    examples: list[TrainingExample] = []
    if progress:
        from tqdm.auto import tqdm

        turns_iter: Iterable[Any] = tqdm(turns, desc=f"examples ({split})", unit=" turns")
    else:
        turns_iter = turns
    for turn in turns_iter:
        ids = turn.answer_passage_ids if positives == "answer" else turn.gold_passage_ids()
        if not ids:
            counts["skipped_no_positive"] += 1
            continue
        query = strategy.format_turn(loaded.conversations[turn.conversation_id], turn.turn)
        if not query.strip():
            counts["skipped_empty_query"] += 1
            continue
        examples.append(TrainingExample(turn.qid, query, list(ids), turn.gold_article_id,
                                        turn.question_type))
    counts["examples"] = len(examples)
    return ExampleSet(examples, positives, strategy.to_dict(), split, counts)


def save_examples(folder: str | os.PathLike, example_set: ExampleSet) -> None:
    folder = Path(folder)
    write_jsonl(folder / EXAMPLES_FILE, (asdict(e) for e in example_set.examples))
    write_json(folder / EXAMPLES_META, example_set.meta())


def load_examples(folder: str | os.PathLike) -> ExampleSet:
    """Inverse of `save_examples`; a malformed line is a DataError naming it."""
    folder = Path(folder)
    meta = load_json(folder / EXAMPLES_META)
    if not isinstance(meta, dict):
        raise DataError("expected a JSON object", folder / EXAMPLES_META)
    path = folder / EXAMPLES_FILE
    examples = []
    for line, data in iter_jsonl(path):
        ids = require(data, "positive_ids", path, line, list)
        if not ids or not all(isinstance(i, str) for i in ids):
            raise DataError("expected a non-empty list of passage ids", path, line,
                            "positive_ids")
        examples.append(TrainingExample(
            require(data, "qid", path, line, str), require(data, "query", path, line, str), ids,
            require(data, "gold_article_id", path, line, (str, type(None))),
            require(data, "question_type", path, line, str)))
    return ExampleSet(examples, meta.get("positives", "answer"), meta.get("history", {}),
                      meta.get("split", "train"), meta.get("counts", {}))


# ---------------------------------------------------------------------------------------------
# Passages by id


class PassageLookup:
    """Passages by id from one or more stores (the benchmark's, then e.g. a mining corpus)."""

    def __init__(self, stores: Sequence[Any]):
        if not stores:
            raise ValueError("PassageLookup needs at least one store")
        self.stores = list(stores)

    def __getitem__(self, pid: str) -> Passage:
        for store in self.stores:
            if pid in store:
                return store.get(pid)
        raise DataError(f"passage {pid!r} is in none of the passage stores "
                        f"({', '.join(str(getattr(s, 'path', s)) for s in self.stores)})")

    def random_ids(self, rng: np.random.Generator, count: int,
                   exclude: set[str] = frozenset()) -> list[str]:
        """`count` random ids of the first store, none in `exclude` (random negatives)."""
        store = self.stores[0]
        if len(store) <= len(exclude):
            raise DataError("the passage store has no passage outside the positives",
                            getattr(store, "path", None))
        ids: list[str] = []
        while len(ids) < count:
            pid = store.id_at(int(rng.integers(len(store))))
            if pid not in exclude:
                ids.append(pid)
        return ids


# ---------------------------------------------------------------------------------------------
# Batches (the seeded epoch order, global_batches and example_rng, are
# convqa/training/schedule.py's, shared by every trainer)


def sample_group(example: TrainingExample, negatives: Sequence[str], count: int,
                 rng: np.random.Generator, positive_choice: str = "random",
                 fallback: PassageLookup | None = None) -> tuple[str, list[str], int]:
    """(positive id, `count` hard-negative ids, how many were filled in) for one example.

    Negatives are drawn without replacement from the mined list; when it is shorter than
    `count` the rest are drawn again from it (with replacement), and when it is empty they are
    random passages of `fallback` (not positives)."""
    if positive_choice == "first":
        positive = example.positive_ids[0]
    elif positive_choice == "random":
        positive = example.positive_ids[int(rng.integers(len(example.positive_ids)))]
    else:
        raise ConfigError(f"positive_choice must be one of {', '.join(POSITIVE_CHOICES)}, "
                          f"got {positive_choice!r}")
    if count == 0:
        return positive, [], 0
    pool = list(negatives)
    if len(pool) >= count:
        chosen = [pool[i] for i in rng.choice(len(pool), size=count, replace=False)]
        return positive, chosen, 0
    if pool:
        extra = [pool[i] for i in rng.integers(len(pool), size=count - len(pool))]
        return positive, pool + extra, count - len(pool)
    if fallback is None:
        raise DataError(f"query {example.qid}: no hard negatives and no passage store to draw "
                        "random ones from")
    return positive, fallback.random_ids(rng, count, set(example.positive_ids)), count


@dataclass
class TrainingBatch:
    """One process's share of a global batch, in the loss's layout (see loss.py)."""

    queries: list[str]
    passages: list[Passage]
    passage_ids: list[str]
    positive_ids: list[set[str]]
    group_size: int
    filled: int = 0  # hard negatives that had to be repeated or drawn at random


def make_batch(example_set: ExampleSet | Sequence[TrainingExample], indices: Sequence[int],
               lookup: PassageLookup, seed: int, epoch: int, hard_negatives: int = 0,
               negatives: Mapping[str, Sequence[str]] | None = None,
               positive_choice: str = "random") -> TrainingBatch:
    examples = example_set.examples if isinstance(example_set, ExampleSet) else example_set
    queries, ids, positives = [], [], []
    filled = 0
    for index in indices:
        example = examples[int(index)]
        rng = example_rng(seed, epoch, int(index))
        mined = (negatives or {}).get(example.qid, ()) if hard_negatives else ()
        positive, chosen, extra = sample_group(example, mined, hard_negatives, rng,
                                               positive_choice, lookup)
        queries.append(example.query)
        ids.extend([positive, *chosen])
        positives.append(set(example.positive_ids))
        filled += extra
    return TrainingBatch(queries, [lookup[pid] for pid in ids], ids, positives,
                         1 + hard_negatives, filled)
