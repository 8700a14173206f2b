"""Phrase-model training data: questions with their gold phrase in one passage, batched so that
turns of one conversation sit together (L_turn), with the teacher reader's view aligned.

Sources (all through the extractive reader's builders, readers/extractive/data.py, so the
phrase model and its teacher see the same examples, spans and train/held-out splits):
- SQuAD-format files (`squad_phrase_examples`): one question, no history;
- the TopiOCQA x Wikipedia benchmark (`benchmark_phrase_examples`): its answer-evaluable turns
  with their history; `conversation` and `turn` come from the query id;
- a reader-examples JSONL (`load_phrase_examples`, e.g. what `convqa train reader` saved).
An example keeps its first positive passage and that passage's gold spans (every occurrence
of the answer); a batch trains on the first span that fits the passage window. With
`negatives` > 0 an example also keeps that many hard negative passages (the reader builders'
BM25 passages without the answer; for the benchmark, of other articles than the gold one):
`make_phrase_batch(..., negatives=n)` adds the first window of each to the batch as passages
that hold no gold phrase, for the batch-wide span loss to score against.

Batches (`conversation_batches`): the examples of a conversation, in turn order, are cut into
runs of at most `run_length` consecutive examples; runs are shuffled (seeded by seed and epoch)
and packed into batches, so a batch holds consecutive turns of a conversation. L_turn also
needs turn t-1, which need not be a training example itself: `make_phrase_batch` encodes the
previous turn's query of every example with t >= 2 next to the batch's own queries.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch import Tensor

from convqa.errors import ConvQAError, DataError
from convqa.types import Passage, QueryId, Turn
from readers.extractive.data import ReaderExample
from readers.extractive.inputs import ReaderFeatures, build_features, char_span_to_tokens

BENCHMARK_SOURCE = "topiocqa-wiki"


@dataclass
class PhraseExample:
    id: str
    question: str
    history: list[tuple[str, str | None]]     # earlier (question, answer) pairs, oldest first
    passage: Passage
    spans: list[tuple[int, int]]              # gold (start, end) character offsets, end exclusive
    answers: list[str] = field(default_factory=list)
    conversation: str = ""                    # the conversation key ("" -> its own)
    turn: int = 1
    split: str = "train"
    source: str = ""
    negatives: list[Passage] = field(default_factory=list)   # hard negatives (no answer)

    def history_turns(self) -> list[Turn]:
        return [Turn(q, a) for q, a in self.history]

    def previous(self) -> tuple[str, list[Turn]] | None:
        """(question, history) of turn t-1, None at turn 1."""
        if self.turn < 2 or not self.history:
            return None
        question, _ = self.history[-1]
        return question, [Turn(q, a) for q, a in self.history[:-1]]


def from_reader_example(example: ReaderExample) -> PhraseExample:
    """The example's first positive with its gold spans; benchmark ids give the conversation."""
    if not example.positives:
        raise DataError(f"example {example.id!r} has no positive passage", field="positives")
    positive = example.positives[0]
    spans = [(s.start, s.end) for s in positive.spans]
    conversation, turn = example.id, len(example.history) + 1
    if example.source.startswith(BENCHMARK_SOURCE):
        _, _, qid = example.id.rpartition("/")
        try:
            query = QueryId.parse(qid)
        except ValueError as exc:
            raise DataError(f"example {example.id!r}: {exc}", field="id") from None
        conversation = f"{example.source}/{query.conversation_id}"
        turn = query.turn
        if turn != len(example.history) + 1:
            raise DataError(f"example {example.id!r} is turn {turn} but has "
                            f"{len(example.history)} history turns", field="history")
    return PhraseExample(example.id, example.question, list(example.history), positive.passage,
                         spans, example.golds(), conversation, turn, example.split,
                         example.source, list(example.negatives))


def load_phrase_examples(path: str | os.PathLike) -> list[PhraseExample]:
    """A reader-examples JSONL (readers/extractive/data.py format)."""
    from readers.extractive.data import load_examples

    return [from_reader_example(e) for e in load_examples(path)]


def squad_phrase_examples(path: str | os.PathLike, heldout_fraction: float = 0.1, seed: int = 0,
                          max_examples: int | None = None, negatives: int = 0,
                          **kwargs: Any) -> list[PhraseExample]:
    """Train and held-out examples of a SQuAD-format file (the reader's split by article),
    each with `negatives` BM25 passages of the file that lack its answer."""
    from readers.extractive.build_examples import squad_examples

    return [from_reader_example(e) for e in squad_examples(
        path, heldout_fraction, seed, negatives=negatives, max_examples=max_examples, **kwargs)]


def benchmark_phrase_examples(folder: str | os.PathLike, max_examples: int | None = None,
                              seed: int = 0, negatives: int = 0,
                              **kwargs: Any) -> list[PhraseExample]:
    """The benchmark's answer-evaluable turns (train split -> "train", dev -> "heldout"), each
    with `negatives` BM25 passages of the benchmark's corpus from other articles."""
    from readers.extractive.build_examples import benchmark_examples

    return [from_reader_example(e) for e in benchmark_examples(
        folder, negatives=negatives, max_examples=max_examples, seed=seed, **kwargs)]


# ---------------------------------------------------------------------------------------------
# Batches


def conversation_batches(examples: Sequence[PhraseExample], batch_size: int, seed: int,
                         epoch: int, run_length: int = 4) -> list[list[int]]:
    """The epoch's batches of example numbers (see the module doc); the ragged tail is dropped
    so every batch is full."""
    if batch_size < 1 or run_length < 1:
        raise ConvQAError("batch_size and run_length must be >= 1")
    by_conversation: dict[str, list[int]] = {}
    for index, example in enumerate(examples):
        by_conversation.setdefault(example.conversation or example.id, []).append(index)
    runs: list[list[int]] = []
    for members in by_conversation.values():
        members.sort(key=lambda i: (examples[i].turn, i))
        runs.extend(members[i:i + run_length] for i in range(0, len(members), run_length))
    order = np.random.default_rng([seed, epoch, 7]).permutation(len(runs))
    flat = [index for r in order for index in runs[int(r)]]
    full = len(flat) // batch_size
    return [flat[i * batch_size:(i + 1) * batch_size] for i in range(full)]


@dataclass
class TeacherInputs:
    """The teacher reader's windows (one per example) and, for each of our tokens, the position
    of the same text token in the teacher's window (-1: the teacher did not see it)."""

    features: ReaderFeatures
    alignment: Tensor        # [B, L] long


@dataclass
class PhraseBatch:
    passages: dict[str, Tensor]    # input_ids, attention_mask [B, L]
    mask: Tensor                   # [B, L] bool: passage-text tokens
    offsets: Tensor                # [B, L, 2] character offsets into each passage text
    start_positions: Tensor        # [B]
    end_positions: Tensor          # [B]
    groups: Tensor                 # [B]: equal for examples with the same gold phrase
    queries: dict[str, Tensor]     # input_ids, attention_mask [U, Lq] (unique queries)
    current: Tensor                # [B]: the row in `queries` of each example's own query
    previous: Tensor               # [B]: the row of its turn t-1 query, -1 if none
    teacher: TeacherInputs | None = None
    indices: list[int] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)   # ids left out (skip_unfit)
    passage_groups: Tensor | None = None  # [B]: equal for examples of the same passage
    negatives: dict[str, Tensor] | None = None  # input_ids, attention_mask [N, L]: no gold
    negative_mask: Tensor | None = None         # [N, L] bool: their passage-text tokens

    def __len__(self) -> int:
        return int(self.start_positions.shape[0])

    def turn_exclude(self) -> Tensor:
        """[B, U]: for each example, its own query row (never a negative of itself)."""
        exclude = torch.zeros(len(self), self.queries["input_ids"].shape[0], dtype=torch.bool)
        exclude[torch.arange(len(self)), self.current] = True
        return exclude


def _features(encoding: Any) -> ReaderFeatures:
    """Our passage encoding seen as reader features, to reuse the reader's span helpers."""
    mapping = encoding.get("overflow_to_sample_mapping")
    rows = encoding["input_ids"].shape[0]
    return ReaderFeatures({"input_ids": encoding["input_ids"],
                           "attention_mask": encoding["attention_mask"]},
                          mapping.long() if mapping is not None else torch.arange(rows),
                          encoding["phrase_mask"], encoding["offset_mapping"].clamp(min=0))


def _first_fitting(features: ReaderFeatures, passage: int,
                   spans: Sequence[tuple[int, int]]) -> tuple[int, int, int] | None:
    """(window, first token, last token) of the first gold span wholly inside a window."""
    for start, end in spans:
        for window in features.windows_of(passage):
            tokens = char_span_to_tokens(features, window, start, end)
            if tokens is not None:
                return window, tokens[0], tokens[1]
    return None


def make_phrase_batch(examples: Sequence[PhraseExample], indices: Sequence[int], model: Any,
                      stride: int = 64, teacher: Any = None,
                      teacher_query: Callable[[PhraseExample], str] | None = None,
                      skip_unfit: bool = False, negatives: int = 0) -> PhraseBatch:
    """Tensors for the examples `indices`. `model` is a PhraseModel (tokenizer, formatting);
    `teacher` an ExtractiveReader and `teacher_query(example)` its query text, for
    distillation. An example none of whose spans fits a window (an answer longer than a
    window) is a DataError naming it; with `skip_unfit` it is left out of the batch instead
    (its id in `batch.skipped`), unless every example of the batch is. `negatives`: the first
    window of up to that many hard negatives of each example (`batch.negatives`), each
    passage once and none that is a gold passage of the batch."""
    chosen = [examples[int(i)] for i in indices]
    extra = _batch_negatives(chosen, negatives)
    everything = [e.passage for e in chosen] + extra
    encoding = model.tokenize_passages([p.title for p in everything],
                                       [p.text for p in everything], stride=stride)
    features = _features(encoding)
    first_windows = [features.windows_of(len(chosen) + n)[0] for n in range(len(extra))]
    fitting = [_first_fitting(features, number, example.spans)
               for number, example in enumerate(chosen)]
    unfit = [example.id for example, found in zip(chosen, fitting) if found is None]
    if unfit and (not skip_unfit or len(unfit) == len(chosen)):
        raise DataError(f"example {unfit[0]!r}: no gold span fits a passage window",
                        field="spans")
    if unfit:  # the windows of the encoding stay valid for the examples kept
        kept = [n for n, found in enumerate(fitting) if found is not None]
        chosen, fitting = [chosen[n] for n in kept], [fitting[n] for n in kept]
        indices = [indices[n] for n in kept]
    windows, starts, ends, groups, passage_groups = _gold_rows(chosen, fitting, features)
    selected = features.select(windows + first_windows)  # one padded length for both
    gold = len(windows)
    texts, current, previous = _query_rows(chosen, model)
    queries = model.tokenize_queries(texts)
    batch = PhraseBatch(
        passages={k: v[:gold] for k, v in selected.tensors.items()},
        mask=selected.context[:gold], offsets=selected.offsets[:gold],
        start_positions=torch.tensor(starts), end_positions=torch.tensor(ends),
        groups=torch.tensor(groups),
        queries={"input_ids": queries["input_ids"], "attention_mask": queries["attention_mask"]},
        current=torch.tensor(current), previous=torch.tensor(previous),
        indices=[int(i) for i in indices], skipped=unfit,
        passage_groups=torch.tensor(passage_groups))
    if extra:
        batch.negatives = {k: v[gold:] for k, v in selected.tensors.items()}
        batch.negative_mask = selected.context[gold:]
    if teacher is not None:
        if teacher_query is None:
            raise ConvQAError("distillation needs the teacher's query texts")
        batch.teacher = teacher_inputs(teacher, [teacher_query(e) for e in chosen], chosen,
                                       batch)
    return batch


def _gold_rows(chosen: Sequence[PhraseExample], fitting: list, features: Any
               ) -> tuple[list[int], list[int], list[int], list[int], list[int]]:
    """Per example: its window, the gold span's first and last token in it, the group of
    examples with the same gold phrase (passage and character span) and the group of
    examples reading the same passage."""
    windows, starts, ends, groups, passage_groups = [], [], [], [], []
    group_ids: dict[tuple[str, int, int], int] = {}
    passage_ids: dict[str, int] = {}
    for example, (window, first, last) in zip(chosen, fitting):
        windows.append(window)
        starts.append(first)
        ends.append(last)
        key = (example.passage.id, int(features.offsets[window, first, 0]),
               int(features.offsets[window, last, 1]))
        groups.append(group_ids.setdefault(key, len(group_ids)))
        passage_groups.append(passage_ids.setdefault(example.passage.id, len(passage_ids)))
    return windows, starts, ends, groups, passage_groups


def _query_rows(chosen: Sequence[PhraseExample], model: Any
                ) -> tuple[list[str], list[int], list[int]]:
    """The distinct query texts of the batch (each turn's, and the turn before it), and per
    example the row of its own query and of the previous turn's (-1: a first turn)."""
    texts: list[str] = []
    rows: dict[tuple[str, int], int] = {}

    def row(key: tuple[str, int], text: Callable[[], str]) -> int:
        if key not in rows:
            rows[key] = len(texts)
            texts.append(text())
        return rows[key]

    current, previous = [], []
    for example in chosen:
        key = (example.conversation or example.id, example.turn)
        current.append(row(key, lambda e=example: model.format_query(e.question,
                                                                     e.history_turns())))
        before = example.previous()
        previous.append(-1 if before is None else row(
            (key[0], example.turn - 1), lambda b=before: model.format_query(*b)))
    return texts, current, previous


def _batch_negatives(chosen: Sequence[PhraseExample], per_example: int) -> list[Passage]:
    """Up to `per_example` hard negatives of each example, in order: each passage once, none
    that is the gold passage of an example of the batch or holds the gold answer text of any
    (a negative is mined against its own question only, and would be a false one for another
    question of the batch)."""
    if per_example < 0:
        raise ConvQAError(f"negatives must be >= 0, got {per_example}")
    seen = {e.passage.id for e in chosen}
    answers = {e.passage.text[start:end].lower() for e in chosen for start, end in e.spans}
    answers.discard("")
    result: list[Passage] = []
    for example in chosen:
        taken = 0
        for passage in example.negatives:
            if taken == per_example:
                break
            text = passage.text.lower()
            if passage.id not in seen and not any(answer in text for answer in answers):
                seen.add(passage.id)
                result.append(passage)
                taken += 1
    return result


def teacher_inputs(teacher: Any, queries: Sequence[str], chosen: Sequence[PhraseExample],
                   batch: PhraseBatch) -> TeacherInputs:
    """The teacher's window of each passage that holds our gold span, and the alignment of our
    text tokens to its tokens by character offsets (the same tokenizer cuts the same text the
    same way; a token the teacher's window lacks is -1)."""
    passages = [e.passage for e in chosen]
    features = build_features(teacher.tokenizer, list(queries), passages, teacher.config)
    windows = []
    for number in range(len(chosen)):
        first = int(batch.offsets[number, batch.start_positions[number], 0])
        last = int(batch.offsets[number, batch.end_positions[number], 1])
        options = features.windows_of(number)
        fitting = [w for w in options if char_span_to_tokens(features, w, first, last)]
        windows.append(fitting[0] if fitting else options[0])
    features = features.select(windows)
    alignment = torch.full(batch.mask.shape, -1, dtype=torch.long)
    for number in range(len(chosen)):
        where = {int(s): t for t, s in enumerate(features.offsets[number, :, 0].tolist())
                 if features.context[number, t]}
        ours = torch.nonzero(batch.mask[number]).flatten().tolist()
        for position in ours:
            alignment[number, position] = where.get(int(batch.offsets[number, position, 0]), -1)
    return TeacherInputs(features, alignment)


def align_teacher_logits(logits: Tensor, alignment: Tensor) -> tuple[Tensor, Tensor]:
    """Teacher logits [B, Lt] moved onto our tokens [B, L], and the mask of those it saw."""
    seen = alignment >= 0
    moved = logits.gather(1, alignment.clamp(min=0).to(logits.device))
    return moved.masked_fill(~seen.to(logits.device), 0.0), seen.to(logits.device)


def build_examples(squad: Sequence[str] = (), benchmarks: Sequence[str] = (),
                   examples: Sequence[str] = (), max_examples: int | None = None,
                   heldout_fraction: float = 0.1, seed: int = 0,
                   negatives: int = 0) -> list[PhraseExample]:
    """Train and held-out examples of every source (SQuAD-format files, benchmark folders,
    reader-example JSONL files); `max_examples` caps each source's training examples;
    `negatives` hard negatives are mined for each example of the first two kinds (a JSONL
    file's examples keep those it holds)."""
    result: list[PhraseExample] = []
    for path in squad:
        result += squad_phrase_examples(path, heldout_fraction, seed, max_examples, negatives)
    for folder in benchmarks:
        result += benchmark_phrase_examples(folder, max_examples, seed, negatives)
    for path in examples:
        result += load_phrase_examples(path)
    seen: set[str] = set()
    for example in result:
        if example.id in seen:
            raise DataError(f"example id {example.id!r} occurs in two inputs", field="id")
        seen.add(example.id)
    return result
