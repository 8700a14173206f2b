"""Reranker training examples: a question with its conversation, its positive passages, and two
kinds of negatives.

- article negatives: passages of the positive's own article that do not hold the answer. On a
  collection that splits an article into many passages these are the choice the reranker is
  for (the retriever finds the article; the passage inside it is what it misses);
- mined negatives: passages of other articles that a retriever ranks high for the question (a
  run file of that retriever, else BM25), minus any that holds an answer.

JSONL format (`save_examples` / `load_examples`; `.xz` and `.gz` names are compressed), one
example a line:

    {"id": "full/123_4", "question": "who directed it?",
     "history": [["earlier question", "its answer or null"], ...],        # oldest first
     "positives": [{"id": "A#3", "title": "...", "text": "..."}],
     "article_negatives": [{"id": "A#0", ...}, ...], "mined_negatives": [...],
     "split": "train",                                   # train | heldout
     "source": "topiocqa-wiki:full"}

`from_reader_examples` reads the extractive reader's examples (`load_examples` reads such a file
as it is), their negatives split into the two kinds by title.

The builders from the benchmark and SQuAD-format files: build_examples.py.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Iterable

from convqa.errors import DataError
from convqa.example_records import RecordReader, load_records
from convqa.io import iter_jsonl, write_jsonl
from convqa.types import Passage, Turn

SPLITS = ("train", "heldout")
NEGATIVE_KINDS = ("article_negatives", "mined_negatives")


@dataclass
class RerankExample:
    id: str
    question: str
    history: list[tuple[str, str | None]]
    positives: list[Passage]
    article_negatives: list[Passage] = field(default_factory=list)
    mined_negatives: list[Passage] = field(default_factory=list)
    split: str = "train"
    source: str = ""

    def history_turns(self) -> list[Turn]:
        return [Turn(question, answer) for question, answer in self.history]

    @property
    def negatives(self) -> list[Passage]:
        return self.article_negatives + self.mined_negatives

    def to_dict(self) -> dict[str, Any]:
        data = {"id": self.id, "question": self.question,
                "history": [[q, a] for q, a in self.history],
                "positives": [p.to_dict() for p in self.positives],
                "article_negatives": [p.to_dict() for p in self.article_negatives],
                "mined_negatives": [p.to_dict() for p in self.mined_negatives],
                "split": self.split}
        if self.source:
            data["source"] = self.source
        return data

    @classmethod
    def from_dict(cls, data: Any, path: str | os.PathLike | None = None,
                  line: int | None = None) -> "RerankExample":
        """Parse and check one record; a problem is a DataError naming the line and field."""
        record = RecordReader(path, line)
        fail, get = record.fail, record.get

        def passages(name: str, required: bool) -> list[Passage]:
            items = get(data, name, list, required=required, default=[])
            return [record.passage(item, f"{name}[{i}].") for i, item in enumerate(items)]

        question = record.question(data)
        history = record.history(data, required=False)
        positives = passages("positives", True)
        if not positives:
            raise fail("positives", "needs at least one positive passage")
        kept = {p.id for p in positives}
        negatives = {}
        for name in NEGATIVE_KINDS:
            negatives[name] = passages(name, False)
            for i, passage in enumerate(negatives[name]):
                if passage.id in kept:
                    raise fail(f"{name}[{i}].id", f"passage {passage.id!r} is also a positive")
        split = get(data, "split", str, required=False, default="train")
        if split not in SPLITS:
            raise fail("split", f"expected one of {', '.join(SPLITS)}, got {split!r}")
        return cls(str(get(data, "id", (str, int))), question, history, positives,
                   negatives["article_negatives"], negatives["mined_negatives"], split,
                   get(data, "source", str, required=False, default=""))


def load_examples(path: str | os.PathLike) -> list[RerankExample]:
    """The examples of a reranker example file, or of a reader example file (`convqa train
    reader`'s format, told by its first record: one "negatives" list), converted by
    `from_reader_examples`; either is checked line by line."""
    if _holds_reader_examples(path):
        from readers.extractive.data import load_examples as load_reader_examples

        examples = from_reader_examples(load_reader_examples(path))
    else:
        examples = load_records(path, RerankExample.from_dict)
    if not examples:
        raise DataError("no examples", path)
    return examples


def _holds_reader_examples(path: str | os.PathLike) -> bool:
    for _, record in iter_jsonl(path):
        return (isinstance(record, dict) and "negatives" in record
                and not any(kind in record for kind in NEGATIVE_KINDS))
    return False


def from_reader_examples(examples: Iterable[Any]) -> list[RerankExample]:
    """Reader examples (readers.extractive.data.ReaderExample: positives with answer spans, one
    list of negatives) as reranker examples. A negative titled like one of its positives is an
    article negative (a TopiOCQA article's passages share its title; a SQuAD article is a
    title); the others, and untitled ones (COVID-QA), are mined. A source whose passages all
    carry one title (SQuADShifts reddit) has no articles: all its negatives are mined, as
    `squad_examples` has it. Unanswerable reader examples (no positive) are left out."""
    examples = [e for e in examples if not getattr(e, "unanswerable", False)]
    titles: dict[str, set[str]] = {}
    for example in examples:
        titles.setdefault(example.source, set()).update(
            p.title for p in [r.passage for r in example.positives] + example.negatives)
    converted = []
    for example in examples:
        positives = [r.passage for r in example.positives]
        clash = {p.id for p in positives} & {p.id for p in example.negatives}
        if clash:
            raise DataError(f"example {example.id!r}: passage {sorted(clash)[0]!r} is both a "
                            "positive and a negative", field="negatives")
        by_title = len(titles[example.source]) > 1
        article = {p.title for p in positives if p.title} if by_title else set()
        converted.append(RerankExample(
            example.id, example.question, list(example.history), positives,
            [p for p in example.negatives if p.title in article],
            [p for p in example.negatives if p.title not in article],
            example.split, example.source))
    return converted


def save_examples(path: str | os.PathLike, examples: Iterable[RerankExample]) -> int:
    """Atomically; xz-compressed for a `.xz` name (a GPU machine then needs one small file)."""
    return write_jsonl(path, (e.to_dict() for e in examples))
