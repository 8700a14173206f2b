"""Labelled turns of the TopiOCQA x Wikipedia benchmark: labelling rules, file format, qrels, split.

Every later evaluation reads `turns.jsonl` + `conversations.jsonl` through `load_labelled_turns`,
so the rules that decide which turn counts for what live here, in one place
(docs/benchmark_format.md describes the files):

- retrieval-evaluable: the turn's `Topic`, compared case-insensitively (casefold), is the title
  of an article in the corpus; gold = every passage of that article (article-level Hits@k).
- answer-evaluable: retrieval-evaluable, and some gold answer that is not yes / no /
  unanswerable (after SQuAD normalization) occurs in a passage of that article. "Occurs" means
  the normalized answer is a run of whole tokens of the normalized passage text:
  `f" {answer} " in f" {passage} "`. Those passages are the turn's answer passages.
- question type: "first" for turn 1; otherwise "switch" when the turn's topic differs
  (case-insensitively) from the topic of the turn before it, else "no-switch". TopiOCQA leaves
  the topic of unanswerable turns empty; an empty topic means "unknown, same as before": a turn
  with an empty topic is "no-switch", and the turn after it is compared with the nearest earlier
  non-empty topic ("no-switch" when there is none, i.e. only unanswerable turns precede it).
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, NamedTuple, Sequence

from convqa.errors import ConfigError, DataError
from convqa.io import iter_jsonl, load_json, require
from convqa.types import Conversation, Passage, QueryId
from convqa.metrics.answer import normalize_answer
from convqa.metrics.breakdown import NO_SWITCH, topic_switch_types

QUESTION_TYPES = ("first", "no-switch", "switch")
SPLITS = ("train", "dev")
TURNS_FILE = "turns.jsonl"
CONVERSATIONS_FILE = "conversations.jsonl"
META_FILE = "meta.json"
# Normalized answers that never make a turn answer-evaluable: a span match would be meaningless.
EXCLUDED_ANSWERS = frozenset({"", "yes", "no", "unanswerable"})


def topic_key(topic: str) -> str:
    """The form in which topics and article titles are compared."""
    return topic.strip().casefold()


def passage_id(article_id: str, number: int) -> str:
    return f"{article_id}#{number}"


def article_id_of(pid: str) -> str:
    """The article a passage id `"{article id}#{n}"` belongs to (article ids may contain '#')."""
    article, sep, _ = pid.rpartition("#")
    return article if sep else pid


# ---------------------------------------------------------------------------------------------
# The labelling rules


def question_types(topics: Sequence[str]) -> list[str]:
    """Question type of each turn, given the `Topic` of turns 1..n of one conversation in order.

    The rule is `convqa.metrics.topic_switch_types`, with turns that have no comparable topic
    (an empty topic, or no non-empty topic before it) counted as no-switch."""
    types = topic_switch_types("c", topics, skip_empty=True, unknown=NO_SWITCH)
    return [types[f"c_{number}"] for number in range(1, len(topics) + 1)]


def evaluable_answers(answers: Iterable[str]) -> list[str]:
    """The normalized answers that can be matched in passages (yes/no/unanswerable dropped)."""
    result: list[str] = []
    for answer in answers:
        normalized = normalize_answer(answer)
        if normalized not in EXCLUDED_ANSWERS and normalized not in result:
            result.append(normalized)
    return result


def occurs(normalized_answer: str, normalized_passage: str) -> bool:
    """Whole-token containment of two SQuAD-normalized strings (single spaces between tokens)."""
    return bool(normalized_answer) and f" {normalized_answer} " in f" {normalized_passage} "


@dataclass
class TopicArticle:
    """One corpus article that is the topic of some turn: its passages, normalized once."""

    article_id: str
    title: str
    passage_ids: list[str]
    normalized_texts: list[str]

    @classmethod
    def from_passages(cls, article_id: str, title: str,
                      passages: Sequence[Passage]) -> "TopicArticle":
        return cls(article_id, title, [p.id for p in passages],
                   [normalize_answer(p.text) for p in passages])

    def answer_passages(self, normalized_answers: Sequence[str]) -> list[str]:
        return [pid for pid, text in zip(self.passage_ids, self.normalized_texts)
                if any(occurs(answer, text) for answer in normalized_answers)]


# ---------------------------------------------------------------------------------------------
# The record


@dataclass
class LabelledTurn:
    """One line of turns.jsonl. Gold passages at article level are not listed: they are
    `"{gold_article_id}#{n}"` for n in range(gold_passage_count) (see `gold_passage_ids`)."""

    conversation_id: str
    turn: int
    question: str
    answers: list[str]
    topic: str
    topic_section: str
    is_nq: bool
    question_type: str
    retrieval_evaluable: bool
    answer_evaluable: bool
    gold_article_id: str | None
    gold_passage_count: int
    answer_passage_ids: list[str] = field(default_factory=list)
    split: str = "train"

    @property
    def query_id(self) -> QueryId:
        return QueryId(self.conversation_id, self.turn)

    @property
    def qid(self) -> str:
        return str(self.query_id)

    def gold_passage_ids(self) -> list[str]:
        if self.gold_article_id is None:
            return []
        return [passage_id(self.gold_article_id, n) for n in range(self.gold_passage_count)]

    def to_dict(self) -> dict[str, Any]:
        return {"qid": self.qid, **asdict(self)}

    @classmethod
    def from_dict(cls, data: Any, path: str | os.PathLike | None = None,
                  line: int | None = None) -> "LabelledTurn":
        """Parse and check one record; any problem is a DataError naming the line and field."""
        def get(name: str, types: type | tuple[type, ...]) -> Any:
            return require(data, name, path, line, types)

        def fail(name: str, message: str) -> DataError:
            return DataError(message, path, line, name)

        turn = get("turn", int)
        if isinstance(turn, bool) or turn < 1:
            raise fail("turn", f"expected a turn number >= 1, got {turn!r}")
        answers = get("answers", list)
        if not all(isinstance(a, str) for a in answers):
            raise fail("answers", "expected a list of strings")
        pids = get("answer_passage_ids", list)
        if not all(isinstance(p, str) for p in pids):
            raise fail("answer_passage_ids", "expected a list of strings")
        record = cls(
            conversation_id=get("conversation_id", str), turn=turn,
            question=get("question", str), answers=answers,
            topic=get("topic", str), topic_section=get("topic_section", str),
            is_nq=get("is_nq", bool), question_type=get("question_type", str),
            retrieval_evaluable=get("retrieval_evaluable", bool),
            answer_evaluable=get("answer_evaluable", bool),
            gold_article_id=get("gold_article_id", (str, type(None))),
            gold_passage_count=get("gold_passage_count", int),
            answer_passage_ids=pids, split=get("split", str))
        if record.question_type not in QUESTION_TYPES:
            raise fail("question_type", f"expected one of {', '.join(QUESTION_TYPES)}, "
                                        f"got {record.question_type!r}")
        if record.split not in SPLITS:
            raise fail("split", f"expected one of {', '.join(SPLITS)}, got {record.split!r}")
        if "qid" in data and data["qid"] != record.qid:
            raise fail("qid", f"{data['qid']!r} does not match conversation_id and turn "
                              f"({record.qid!r})")
        if record.retrieval_evaluable != (record.gold_article_id is not None):
            raise fail("gold_article_id", "must be set exactly when retrieval_evaluable is true")
        if record.retrieval_evaluable and record.gold_passage_count < 1:
            raise fail("gold_passage_count", "a retrieval-evaluable turn needs >= 1 gold passage")
        if record.answer_evaluable != bool(record.answer_passage_ids):
            raise fail("answer_passage_ids",
                       "must be non-empty exactly when answer_evaluable is true")
        if record.answer_evaluable and not record.retrieval_evaluable:
            raise fail("answer_evaluable", "an answer-evaluable turn must be retrieval-evaluable")
        return record


def label_conversations(conversations: Sequence[Conversation],
                        articles: Mapping[str, TopicArticle],
                        dev_ids: set[str] | frozenset[str] = frozenset()) -> list[LabelledTurn]:
    """Apply the rules to every turn. `articles` maps `topic_key(title)` to the topic's article;
    `dev_ids` are the conversations of the dev split. `answers` are the main answer then any
    additional ones, duplicates kept (the official leave-one-out scoring counts them)."""
    from convqa.loaders.topiocqa import topiocqa_answers

    labelled: list[LabelledTurn] = []
    for conversation in conversations:
        topics = [str(t.meta.get("topic") or "") for t in conversation.turns]
        for number, (turn, qtype) in enumerate(zip(conversation.turns, question_types(topics)), 1):
            topic = topics[number - 1]
            article = articles.get(topic_key(topic)) if topic_key(topic) else None
            answers = topiocqa_answers(turn)
            answer_pids = article.answer_passages(evaluable_answers(answers)) if article else []
            labelled.append(LabelledTurn(
                conversation_id=conversation.id, turn=number, question=turn.question,
                answers=answers, topic=topic,
                topic_section=str(turn.meta.get("topic_section") or ""),
                is_nq=bool(turn.meta.get("is_nq", False)), question_type=qtype,
                retrieval_evaluable=article is not None,
                answer_evaluable=bool(answer_pids),
                gold_article_id=article.article_id if article else None,
                gold_passage_count=len(article.passage_ids) if article else 0,
                answer_passage_ids=answer_pids,
                split="dev" if conversation.id in dev_ids else "train"))
    return labelled


# ---------------------------------------------------------------------------------------------
# Train/dev split by conversation


def dev_conversation_ids(conversation_ids: Iterable[str], dev_fraction: float,
                         seed: int = 0) -> frozenset[str]:
    """The dev conversations: ids ordered by sha256("{seed}:{id}"), the first
    round(n * dev_fraction) of them (at least 1 and at most n - 1 when 0 < dev_fraction and
    n >= 2). Depends only on the set of ids, the fraction and the seed, not on input order."""
    if not 0.0 <= dev_fraction < 1.0:
        raise ConfigError(f"dev fraction must be in [0, 1), got {dev_fraction}")
    ids = sorted(set(conversation_ids),
                 key=lambda cid: hashlib.sha256(f"{seed}:{cid}".encode()).hexdigest())
    count = round(len(ids) * dev_fraction)
    if dev_fraction > 0 and len(ids) >= 2:
        count = min(max(count, 1), len(ids) - 1)
    return frozenset(ids[:count])


def split_by_conversation(turns: Sequence[LabelledTurn], dev_fraction: float,
                          seed: int = 0) -> tuple[list[LabelledTurn], list[LabelledTurn]]:
    """(train, dev) turns, every conversation wholly on one side; order is kept."""
    dev_ids = dev_conversation_ids((t.conversation_id for t in turns), dev_fraction, seed)
    train = [t for t in turns if t.conversation_id not in dev_ids]
    dev = [t for t in turns if t.conversation_id in dev_ids]
    return train, dev


# ---------------------------------------------------------------------------------------------
# Reading for evaluation


class LabelledTurns(NamedTuple):
    turns: list[LabelledTurn]
    conversations: dict[str, Conversation]
    meta: dict[str, Any]


def _turns_path(path: str | os.PathLike) -> Path:
    path = Path(path)
    return path / TURNS_FILE if path.is_dir() else path


def load_conversations(path: str | os.PathLike) -> dict[str, Conversation]:
    conversations: dict[str, Conversation] = {}
    for line, data in iter_jsonl(path):
        cid = require(data, "id", path, line, (str, int))
        turns = require(data, "turns", path, line, list)
        try:
            conversation = Conversation.from_dict(data)
        except (KeyError, TypeError, AttributeError) as exc:
            raise DataError(f"malformed turn ({exc})", path, line, "turns") from None
        if not all(isinstance(t.question, str) for t in conversation.turns) or not turns:
            raise DataError("expected a non-empty list of turns with a question",
                            path, line, "turns")
        if conversation.id in conversations:
            raise DataError(f"duplicate conversation id {cid!r}", path, line, "id")
        conversations[conversation.id] = conversation
    return conversations


def load_labelled_turns(path: str | os.PathLike) -> LabelledTurns:
    """Read a benchmark folder (or its turns.jsonl): the labelled turns in file order, the
    conversations they point into (`conversations[t.conversation_id].history(t.turn)` is the
    history of turn t), and meta.json (empty when absent)."""
    turns_path = _turns_path(path)
    folder = turns_path.parent
    conversations_path = folder / CONVERSATIONS_FILE
    if not conversations_path.exists():
        raise DataError(f"{CONVERSATIONS_FILE} missing next to {turns_path.name}",
                        conversations_path)
    conversations = load_conversations(conversations_path)
    turns: list[LabelledTurn] = []
    seen: set[str] = set()
    for line, data in iter_jsonl(turns_path):
        record = LabelledTurn.from_dict(data, turns_path, line)
        conversation = conversations.get(record.conversation_id)
        if conversation is None:
            raise DataError(f"conversation {record.conversation_id!r} is not in "
                            f"{CONVERSATIONS_FILE}", turns_path, line, "conversation_id")
        if record.turn > len(conversation):
            raise DataError(f"conversation {record.conversation_id!r} has only "
                            f"{len(conversation)} turns", turns_path, line, "turn")
        if record.qid in seen:
            raise DataError(f"duplicate query {record.qid!r}", turns_path, line, "qid")
        seen.add(record.qid)
        turns.append(record)
    meta_path = folder / META_FILE
    meta = load_json(meta_path) if meta_path.exists() else {}
    if not isinstance(meta, dict):
        raise DataError("expected a JSON object", meta_path, 1)
    return LabelledTurns(turns, conversations, meta)


class BenchmarkSource(NamedTuple):
    """A benchmark folder opened to build training examples from."""

    data: LabelledTurns
    corpus: str    # the collection's name: meta.json's corpus, else the folder's name
    source: str    # the examples' source: "topiocqa-wiki:CORPUS"
    store: Any     # the folder's convqa.corpus.PassageStore


def open_benchmark_source(folder: str | os.PathLike) -> BenchmarkSource:
    """The labelled turns, the collection's name and passages of a benchmark folder, as the
    reader's and the reranker's example builders both name and read them."""
    from convqa.corpus import PassageStore

    folder = Path(folder)
    data = load_labelled_turns(folder)
    corpus = str(data.meta.get("corpus") or folder.name)
    return BenchmarkSource(data, corpus, f"topiocqa-wiki:{corpus}",
                           PassageStore.open(folder / "passages"))


def qrels(turns: Iterable[LabelledTurn], level: str = "article") -> dict[str, dict[str, int]]:
    """TREC-style relevance, `{qid: {passage_id: 1}}`. level="article": the retrieval-evaluable
    turns, every passage of the topic article; level="answer": the answer-evaluable turns, their
    answer passages. Turns that are not evaluable at that level are absent."""
    if level == "article":
        return {t.qid: {pid: 1 for pid in t.gold_passage_ids()}
                for t in turns if t.retrieval_evaluable}
    if level == "answer":
        return {t.qid: {pid: 1 for pid in t.answer_passage_ids}
                for t in turns if t.answer_evaluable}
    raise ConfigError(f"unknown qrels level {level!r} (expected 'article' or 'answer')")
