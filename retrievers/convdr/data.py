"""ConvDR training examples: one conversational turn with its rewrite and/or positives.

Sources (`build_examples([(source, path), ...])`):
- `canard`: CANARD JSON (`canard/dev.json`: 3,430 rewrites); history = the earlier questions
  AND answers of the QuAC dialog (a questions-only history strategy ignores the answers);
- `orquac`: an OR-QuAC folder, train split (`orquac_train.{question,rewrite}.tsv`: 31,526
  turns); history = the earlier questions of the dialog, no answers, as ConvDR used OR-QuAC;
- `orquac-dev`: the same folder's dev split (with answers; the same turns as CANARD dev);
- `cast`: a CAsT 2019 folder (evaluation topics + manually resolved rewrites, and the qrels'
  passage ids with relevance >= `cast_min_relevance` as positives when the qrels file is there);
- `benchmark`: a TopiOCQA x Wikipedia benchmark folder (`convqa data topiocqa-wiki`): its
  *train* turns that have answer passages, those passages as positives (ids of the benchmark's
  store), history with answers, no rewrite. Rank-trained on them with the teacher's index of
  the same store, a student learns to tell the answer passage from the other passages of its
  article, which the teacher's top-k is full of (dev turns are never read). With a
  weak-positive rule (`--weak-positives`, convqa/benchmark/weak_positives.py) also the train
  turns whose free-form answer occurs in no passage word for word: the passage the rule names is
  their positive, the siblings that may hold the answer too are their `not_negatives`;
- `jsonl`: this module's JSONL format (below), for any other data.

An example's id is `"{conversation_id}_{turn}"` (`str(QueryId)`), so the same turn read from two
sources (CANARD dev and OR-QuAC dev are the same 3,430 turns) is kept once (the first source
given wins; `duplicates` counts the others).

Rewrites and positives. KD needs the rewrite; Rank needs a positive. An example may have either
or both. Training (`run.py`) keeps, per mode: `kd` the examples with a rewrite; `rank` those with
a positive (given, or the teacher's pseudo-positive on the rewrite when `pseudo_positives` is
on); `multitask` those with either, each loss term masked for the examples that lack its input:
an example with a rewrite but no positive trains KD only, one with a positive but no rewrite
trains Rank only (its negatives are mined by the teacher on the conversation text instead of
the rewrite), one with both trains both.

Held-out split (`split_heldout`): by conversation, never by turn, so no dialog is on both sides;
conversation ids are ordered by sha256("{seed}:{conversation id}") and the first
round(n * fraction) are held out, a function of the ids, fraction and seed only. Conversations
named in `heldout_conversations` (e.g. every dialog of a retrieval benchmark built from OR-QuAC
train turns) are always held out.

JSONL format, one example per line:
    {"id": "C_x_3", "conversation_id": "C_x", "turn": 3, "question": "what did he do?",
     "history": [{"question": "...", "answer": "..." | null}, ...],
     "rewrite": "what did X do?" | null,
     "positives": [{"id": "passage id" | null, "text": "..." | null, "title": ""}],
     "source": "jsonl", "query": "formatted student input (optional, written by run.py)",
     "not_negatives": ["passage id", ...]}    (optional: never mined as negatives)
`id`, `conversation_id`, `turn` (>= 1), `question`, `history` are required; a positive needs an
`id` or a `text`. Any problem is a DataError naming the file, line and field.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from convqa.errors import ConfigError, DataError
from convqa.io import iter_jsonl, require, write_jsonl
from convqa.types import Conversation, Turn

SOURCES = ("canard", "orquac", "orquac-dev", "cast", "benchmark", "jsonl")
CAST_TOPICS = "2019_data_evaluation_evaluation_topics_v1.0.json"
CAST_REWRITES = "2019_data_evaluation_evaluation_topics_annotated_resolved_v1.0.tsv"
CAST_QRELS = "2019_data_2019qrels.txt"


@dataclass(frozen=True)
class PassageRef:
    """A positive passage: by id (a row of the teacher's passage store), by text, or both."""

    id: str | None = None
    text: str | None = None
    title: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "text": self.text, "title": self.title}


@dataclass
class ConvDRExample:
    id: str
    source: str
    conversation_id: str
    turn: int
    question: str
    history: list[Turn]
    rewrite: str | None = None
    positives: list[PassageRef] = field(default_factory=list)
    query: str | None = None  # the student's input text, once formatted (run.py)
    not_negatives: list[str] = field(default_factory=list)  # passage ids never mined as negatives

    @property
    def has_rewrite(self) -> bool:
        return bool(self.rewrite and self.rewrite.strip())

    def to_dict(self) -> dict[str, Any]:
        data = {"id": self.id, "source": self.source, "conversation_id": self.conversation_id,
                "turn": self.turn, "question": self.question,
                "history": [{"question": t.question, "answer": t.answer} for t in self.history],
                "rewrite": self.rewrite, "positives": [p.to_dict() for p in self.positives]}
        if self.query is not None:
            data["query"] = self.query
        if self.not_negatives:
            data["not_negatives"] = list(self.not_negatives)
        return data


def _turn_examples(conversations: Iterable[Conversation], source: str,
                   answers: bool = True) -> list[ConvDRExample]:
    examples = []
    for conversation in conversations:
        for qid in conversation.query_ids():
            turn = conversation.turn(qid.turn)
            history = [Turn(t.question, t.answer if answers else None)
                       for t in conversation.history(qid.turn)]
            rewrite = turn.rewrite.strip() if turn.rewrite and turn.rewrite.strip() else None
            examples.append(ConvDRExample(str(qid), source, conversation.id, qid.turn,
                                          turn.question, history, rewrite))
    return examples


def canard_examples(path: str | os.PathLike) -> list[ConvDRExample]:
    """Every CANARD question with its rewrite; history with answers."""
    from convqa.loaders import load_canard

    return _turn_examples(load_canard(path), "canard")


def orquac_examples(directory: str | os.PathLike, split: str = "train") -> list[ConvDRExample]:
    """Every OR-QuAC question of `split` with its rewrite (train: questions-only history)."""
    from convqa.loaders import load_orquac

    conversations = load_orquac(directory, split)
    return _turn_examples(conversations, "orquac" if split == "train" else f"orquac-{split}")


def cast_examples(directory: str | os.PathLike, min_relevance: int = 1) -> list[ConvDRExample]:
    """CAsT 2019 evaluation topics with their manual rewrites; positives from the qrels (ids
    only: CAsT passage texts are not available, so they count only for an index holding them)."""
    from convqa.loaders import load_cast_topics, load_trec_qrels

    directory = Path(directory)
    for name in (CAST_TOPICS, CAST_REWRITES):
        if not (directory / name).exists():
            raise DataError(f"CAsT folder lacks {name}", directory)
    examples = _turn_examples(load_cast_topics(directory / CAST_TOPICS,
                                               directory / CAST_REWRITES), "cast")
    if (directory / CAST_QRELS).exists():
        qrels = load_trec_qrels(directory / CAST_QRELS)
        for example in examples:
            judged = qrels.get(example.id, {})
            example.positives = [PassageRef(pid) for pid, rel in sorted(judged.items())
                                 if rel >= min_relevance]
    return examples


def benchmark_examples(folder: str | os.PathLike, weak: Any = None) -> list[ConvDRExample]:
    """The train turns of a benchmark folder with answer passages, those as positives; with a
    `weak` rule (convqa.benchmark.weak_positives.WeakPositiveRule) also the train turns whose
    answer occurs in no passage word for word, where the rule names their passage (source
    "benchmark:weak"; the siblings that may hold the answer too are never negatives)."""
    from convqa.benchmark.labelled_turns import load_labelled_turns

    labelled = load_labelled_turns(folder)
    labels = {}
    if weak is not None:
        from convqa.benchmark.weak_positives import weak_labels
        from convqa.corpus import PassageStore

        with PassageStore.open(Path(folder) / "passages") as store:
            labels = weak_labels(labelled, store, weak)
    examples = []
    for record in labelled.turns:
        label = labels.get(record.qid)
        if record.split != "train" or not (record.answer_passage_ids or label):
            continue
        conversation = labelled.conversations[record.conversation_id]
        example = ConvDRExample(record.qid, "benchmark", record.conversation_id, record.turn,
                                record.question, list(conversation.history(record.turn)))
        if record.answer_passage_ids:
            example.positives = [PassageRef(pid) for pid in record.answer_passage_ids]
        else:
            example.source, example.positives = "benchmark:weak", [PassageRef(label.passage)]
            example.not_negatives = list(label.second_sources)
        examples.append(example)
    return examples


# ---------------------------------------------------------------------------------------------
# JSONL


def _optional_str(record: dict, name: str, path: Path, line: int) -> str | None:
    value = record.get(name)
    if value is not None and not isinstance(value, str):
        raise DataError(f"expected a string or null, got {type(value).__name__}", path, line,
                        name)
    return value


def _history(record: dict, path: Path, line: int) -> list[Turn]:
    items = require(record, "history", path, line, list)
    turns = []
    for i, item in enumerate(items):
        where = f"history[{i}]"
        if not isinstance(item, dict):
            raise DataError(f"expected an object with 'question' and 'answer', got "
                            f"{type(item).__name__}", path, line, where)
        question = item.get("question")
        if not isinstance(question, str):
            raise DataError("expected a string", path, line, f"{where}.question")
        answer = item.get("answer")
        if answer is not None and not isinstance(answer, str):
            raise DataError("expected a string or null", path, line, f"{where}.answer")
        turns.append(Turn(question, answer))
    return turns


def _positives(record: dict, path: Path, line: int) -> list[PassageRef]:
    items = record.get("positives")
    if items is None:
        return []
    if not isinstance(items, list):
        raise DataError(f"expected a list, got {type(items).__name__}", path, line, "positives")
    refs = []
    for i, item in enumerate(items):
        where = f"positives[{i}]"
        if not isinstance(item, dict):
            raise DataError(f"expected an object, got {type(item).__name__}", path, line, where)
        values = {}
        for name in ("id", "text", "title"):
            value = item.get(name)
            if value is not None and not isinstance(value, str):
                raise DataError("expected a string or null", path, line, f"{where}.{name}")
            values[name] = value
        if not (values["id"] or "").strip() and not (values["text"] or "").strip():
            raise DataError("a positive needs an 'id' or a 'text'", path, line, where)
        refs.append(PassageRef(values["id"] or None, values["text"] or None,
                               values["title"] or ""))
    return refs


def _not_negatives(record: dict, path: Path, line: int) -> list[str]:
    items = record.get("not_negatives")
    if items is None:
        return []
    if not isinstance(items, list) or not all(isinstance(i, str) and i for i in items):
        raise DataError("expected a list of passage ids", path, line, "not_negatives")
    return list(items)


def load_examples_jsonl(path: str | os.PathLike) -> list[ConvDRExample]:
    """Examples from the JSONL format of the module doc; ids must be unique."""
    path = Path(path)
    examples = []
    seen: dict[str, int] = {}
    for line, record in iter_jsonl(path):
        example_id = require(record, "id", path, line, str)
        if not example_id.strip():
            raise DataError("must not be empty", path, line, "id")
        if example_id in seen:
            raise DataError(f"id {example_id!r} appears twice (first on line "
                            f"{seen[example_id]})", path, line, "id")
        seen[example_id] = line
        conversation = require(record, "conversation_id", path, line, str)
        turn = require(record, "turn", path, line, int)
        if isinstance(turn, bool) or turn < 1:
            raise DataError(f"expected a turn number >= 1, got {turn!r}", path, line, "turn")
        question = require(record, "question", path, line, str)
        if not question.strip():
            raise DataError("the question is empty", path, line, "question")
        rewrite = _optional_str(record, "rewrite", path, line)
        source = _optional_str(record, "source", path, line) or "jsonl"
        query = _optional_str(record, "query", path, line)
        examples.append(ConvDRExample(
            example_id, source, conversation, turn, question, _history(record, path, line),
            rewrite.strip() if rewrite and rewrite.strip() else None,
            _positives(record, path, line), query, _not_negatives(record, path, line)))
    return examples


def save_examples_jsonl(path: str | os.PathLike, examples: Iterable[ConvDRExample]) -> int:
    return write_jsonl(path, (e.to_dict() for e in examples))


# ---------------------------------------------------------------------------------------------
# Building and splitting


def parse_data_spec(text: str) -> tuple[str, str]:
    """`"canard=PATH"` -> ("canard", "PATH"); the source must be one of SOURCES."""
    source, sep, path = text.partition("=")
    source = source.strip()
    if not sep or not path.strip():
        raise ConfigError(f"--data expects SOURCE=PATH (sources: {', '.join(SOURCES)}), "
                          f"got {text!r}")
    if source not in SOURCES:
        raise ConfigError(f"unknown data source {source!r} (known: {', '.join(SOURCES)})")
    return source, path.strip()


def load_source(source: str, path: str | os.PathLike, cast_min_relevance: int = 1,
                weak: Any = None) -> list[ConvDRExample]:
    """The examples of one source; `weak` (a WeakPositiveRule) adds a benchmark's weakly
    labelled turns."""
    if not Path(path).exists():
        raise DataError("not found", path)
    if source == "canard":
        return canard_examples(path)
    if source == "orquac":
        return orquac_examples(path, "train")
    if source == "orquac-dev":
        return orquac_examples(path, "dev")
    if source == "cast":
        return cast_examples(path, cast_min_relevance)
    if source == "benchmark":
        return benchmark_examples(path, weak)
    if source == "jsonl":
        return load_examples_jsonl(path)
    raise ConfigError(f"unknown data source {source!r} (known: {', '.join(SOURCES)})")


@dataclass
class BuiltExamples:
    examples: list[ConvDRExample]
    counts: dict[str, dict[str, int]]  # per source: read, kept, duplicates


def build_examples(specs: Sequence[tuple[str, str]], cast_min_relevance: int = 1,
                   weak: Any = None) -> BuiltExamples:
    """Every example of every (source, path), the first of each id kept; `weak` as for
    `load_source` (counted as `weak` among the kept)."""
    examples: list[ConvDRExample] = []
    seen: set[str] = set()
    counts: dict[str, dict[str, int]] = {}
    for source, path in specs:
        loaded = load_source(source, path, cast_min_relevance, weak)
        count = counts.setdefault(source, {"read": 0, "kept": 0, "duplicates": 0})
        count["read"] += len(loaded)
        for example in loaded:
            if example.id in seen:
                count["duplicates"] += 1
                continue
            seen.add(example.id)
            examples.append(example)
            count["kept"] += 1
            if example.source.endswith(":weak"):
                count["weak"] = count.get("weak", 0) + 1
    return BuiltExamples(examples, counts)


def heldout_conversation_ids(conversation_ids: Iterable[str], fraction: float,
                             seed: int = 0) -> set[str]:
    """The conversations held out: the first round(n * fraction) by sha256("{seed}:{id}")
    (at least one when the fraction is positive and there are two or more)."""
    if not 0.0 <= fraction < 1.0:
        raise ConfigError(f"held-out fraction must be in [0, 1), got {fraction!r}")
    ids = sorted(set(conversation_ids),
                 key=lambda cid: hashlib.sha256(f"{seed}:{cid}".encode()).hexdigest())
    count = round(len(ids) * fraction)
    if fraction > 0 and len(ids) > 1:
        count = min(max(count, 1), len(ids) - 1)
    return set(ids[:count])


def split_heldout(examples: Sequence[ConvDRExample], fraction: float = 0.1, seed: int = 0,
                  heldout_conversations: Iterable[str] = ()
                  ) -> tuple[list[ConvDRExample], list[ConvDRExample]]:
    """(train, held-out), both in input order; see the module doc."""
    forced = set(heldout_conversations)
    free = [e.conversation_id for e in examples if e.conversation_id not in forced]
    heldout = heldout_conversation_ids(free, fraction, seed) | forced
    train = [e for e in examples if e.conversation_id not in heldout]
    held = [e for e in examples if e.conversation_id in heldout]
    return train, held
