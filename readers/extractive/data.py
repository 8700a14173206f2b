"""Reader training examples: a question with its history, positive passages carrying every
occurrence of the answer as a gold span, and negative passages.

JSONL format (`save_examples` / `load_examples`), one example per line:

    {"id": "dev-v2.0/56be4db0acb8001400a502ec",
     "question": "Which NFL team represented the AFC at Super Bowl 50?",
     "history": [["earlier question", "its answer"], ...],      # oldest first; [] if none;
                                                                 # an answer may be null
     "answers": ["Denver Broncos"],                             # optional: golds for EM/F1
                                                                 # (default: the span texts)
     "positives": [{"id": "dev-v2.0#0", "title": "Super Bowl 50", "text": "...",
                    "answers": [{"text": "Denver Broncos", "start": 177}, ...]}],
     "negatives": [{"id": "...", "title": "...", "text": "..."}, ...],   # may be []
     "split": "train",                                          # optional: train | heldout
     "source": "squad:dev-v2.0"}                                # optional

An unanswerable example (no passage read with it answers the question) says
`"unanswerable": true`, has `"positives": []` and at least one negative; its first negative is
the one that looks most like an answer (its own SQuAD paragraph, the retriever's best passage)
and is read every time it is trained on (train.py). Readers trained with such examples get the
"no passage answers" option in their selection softmax (loss.py).

Each positive needs at least one answer, and `text[start:start + len(answer)]` must equal the
answer's text: the loader checks it, and any problem is a DataError naming file, line and field
(e.g. `positives[0].answers[1].start`).

The builders from SQuAD-format files and the benchmark: build_examples.py.
"""
from __future__ import annotations

import os
import re
import string
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from convqa.errors import ConfigError
from convqa.example_records import RecordReader, load_records
from convqa.io import write_jsonl
from convqa.types import Passage, Turn

SPLITS = ("train", "heldout")


@dataclass(frozen=True)
class GoldSpan:
    text: str
    start: int  # character offset into the passage text

    @property
    def end(self) -> int:
        return self.start + len(self.text)


@dataclass
class ReaderPassage:
    """A positive passage with its gold spans."""

    passage: Passage
    spans: list[GoldSpan]


@dataclass
class ReaderExample:
    id: str
    question: str
    history: list[tuple[str, str | None]]
    positives: list[ReaderPassage]
    negatives: list[Passage] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)
    split: str = "train"
    source: str = ""
    unanswerable: bool = False  # no passage answers it: no positives, target "none answers"

    def history_turns(self) -> list[Turn]:
        return [Turn(question, answer) for question, answer in self.history]

    def golds(self) -> list[str]:
        """The gold answers to score against: `answers`, else the distinct span texts."""
        if self.answers:
            return list(self.answers)
        return list(dict.fromkeys(s.text for p in self.positives for s in p.spans))

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": self.id, "question": self.question,
            "history": [[q, a] for q, a in self.history],
            "answers": list(self.answers),
            "positives": [{**p.passage.to_dict(),
                           "answers": [{"text": s.text, "start": s.start} for s in p.spans]}
                          for p in self.positives],
            "negatives": [p.to_dict() for p in self.negatives],
            "split": self.split}
        if self.source:
            data["source"] = self.source
        if self.unanswerable:
            data["unanswerable"] = True
        return data

    @classmethod
    def from_dict(cls, data: Any, path: str | os.PathLike | None = None,
                  line: int | None = None) -> "ReaderExample":
        """Parse and check one record; problems are DataErrors naming line and field."""
        record = RecordReader(path, line)
        fail, get = record.fail, record.get
        question = record.question(data)
        history = record.history(data, required=True)
        answers = get(data, "answers", list, required=False, default=[])
        if not all(isinstance(a, str) for a in answers):
            raise fail("answers", "expected a list of strings")
        unanswerable = get(data, "unanswerable", bool, required=False, default=False)
        positives = get(data, "positives", list)
        if unanswerable and positives:
            raise fail("positives", "an unanswerable example has no positive passages")
        if not positives and not unanswerable:
            raise fail("positives", "needs at least one positive passage")
        parsed_positives = []
        for i, item in enumerate(positives):
            where = f"positives[{i}]."
            passage = record.passage(item, where)
            spans = get(item, "answers", list, where)
            if not spans:
                raise fail(f"{where}answers", "a positive needs at least one answer span")
            parsed = []
            for j, span in enumerate(spans):
                at = f"{where}answers[{j}]."
                text = get(span, "text", str, at)
                start = get(span, "start", int, at)
                if not text or start < 0 or passage.text[start:start + len(text)] != text:
                    raise fail(f"{at}start", f"answer {text!r} is not at offset {start} of the "
                               f"passage text ({passage.text[start:start + len(text)]!r})")
                parsed.append(GoldSpan(text, start))
            parsed_positives.append(ReaderPassage(passage, parsed))
        negatives = [record.passage(item, f"negatives[{i}].")
                     for i, item in enumerate(get(data, "negatives", list))]
        if unanswerable and not negatives:
            raise fail("negatives", "an unanswerable example needs at least one negative "
                       "passage")
        split = get(data, "split", str, required=False, default="train")
        if split not in SPLITS:
            raise fail("split", f"expected one of {', '.join(SPLITS)}, got {split!r}")
        return cls(id=str(get(data, "id", (str, int))), question=question, history=history,
                   positives=parsed_positives, negatives=negatives, answers=answers,
                   split=split, source=get(data, "source", str, required=False, default=""),
                   unanswerable=unanswerable)


def load_examples(path: str | os.PathLike) -> list[ReaderExample]:
    return load_records(path, ReaderExample.from_dict)


def save_examples(path: str | os.PathLike, examples: Iterable[ReaderExample]) -> int:
    return write_jsonl(path, (e.to_dict() for e in examples))


# ---------------------------------------------------------------------------------------------
# Gold spans


def find_spans(text: str, answer: str, ignore_case: bool = True) -> list[GoldSpan]:
    """Every whole-word occurrence of `answer` in `text` (an occurrence is not whole-word when
    a letter or digit continues a word across its edge: "art" in "start" does not count).
    Span texts are the passage's own characters, so `text[start:end] == span.text`."""
    answer = answer.strip()
    if not answer:
        return []
    spans = []
    flags = re.IGNORECASE if ignore_case else 0
    for match in re.finditer(re.escape(answer), text, flags):
        start, end = match.span()
        if answer[0].isalnum() and start > 0 and text[start - 1].isalnum():
            continue
        if answer[-1].isalnum() and end < len(text) and text[end].isalnum():
            continue
        spans.append(GoldSpan(text[start:end], start))
    return spans


_EDGE_PUNCTUATION = "".join(ch for ch in string.punctuation if ch not in "%$")
_ARTICLE = re.compile(r"^(?:a|an|the)\s+", re.IGNORECASE)


def answer_variants(answer: str) -> list[str]:
    """The answer, then forms that differ only in what SQuAD normalization ignores anyway:
    without surrounding punctuation ("Paris." -> "Paris") and without a leading article
    ("the Beatles" -> "Beatles"). Distinct, non-empty, in that order."""
    stripped = answer.strip().strip(_EDGE_PUNCTUATION + " ")
    forms = [answer.strip(), stripped, _ARTICLE.sub("", stripped)]
    return [form for form in dict.fromkeys(forms) if form]


def find_answer_spans(text: str, answers: Iterable[str]) -> list[GoldSpan]:
    """Spans of every answer in `text`: each answer's exact (case-insensitive, whole-word)
    occurrences, or, when it has none, those of its first variant that occurs."""
    spans: list[GoldSpan] = []
    for answer in dict.fromkeys(answers):
        for form in answer_variants(answer):
            found = find_spans(text, form)
            if found:
                spans.extend(found)
                break
    return merge_spans(spans)


def merge_spans(spans: Iterable[GoldSpan]) -> list[GoldSpan]:
    """Distinct spans by (start, end), in text order."""
    unique = {(s.start, s.end): s for s in spans}
    return [unique[key] for key in sorted(unique)]


# ---------------------------------------------------------------------------------------------
# Shared helpers of the builders


@dataclass
class BuildReport:
    """What a builder made and skipped, per source."""

    counts: dict[str, Counter] = field(default_factory=dict)

    def add(self, source: str, key: str, amount: int = 1) -> None:
        self.counts.setdefault(source, Counter())[key] += amount

    def to_dict(self) -> dict[str, dict[str, int]]:
        return {source: dict(sorted(c.items())) for source, c in self.counts.items()}


def is_unanswerable(answers: Sequence[str]) -> bool:
    """No gold answer (SQuAD v2.0), or only TopiOCQA's UNANSWERABLE."""
    from convqa.metrics.answer import normalize_answer

    return all(normalize_answer(a) == "unanswerable" for a in answers)


def heldout_keys(keys: Iterable[str], fraction: float, seed: int) -> frozenset[str]:
    """The held-out keys: sha256("{seed}:{key}") order, the first round(n * fraction)."""
    from convqa.benchmark.labelled_turns import dev_conversation_ids

    if not 0.0 <= fraction < 1.0:
        raise ConfigError(f"held-out fraction must be in [0, 1), got {fraction}")
    return dev_conversation_ids(keys, fraction, seed)


def scoring_convention(source: str) -> str:
    """How a source's answers are scored: TopiOCQA's convention for the benchmark's turns
    (`topiocqa-wiki:...`), SQuAD's for SQuAD-format files (`squad:...`) and anything else."""
    return "topiocqa" if source.startswith("topiocqa") else "squad"


def source_name(path: str | os.PathLike) -> str:
    name = Path(path).name
    for suffix in (".gz", ".jsonl", ".json"):
        name = name.removesuffix(suffix)
    return name


