"""The data model every part of convqa shares.

A query is identified by `QueryId(conversation_id, turn)`, never by its text: the same question
text occurs in many conversations. `turn` is 1-based, as in the official TopiOCQA, QReCC and CAsT
files, so `str(QueryId("31", 2)) == "31_2"` matches their qrels keys.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Iterator, NamedTuple


class QueryId(NamedTuple):
    conversation_id: str
    turn: int  # 1-based turn number

    def __str__(self) -> str:
        return f"{self.conversation_id}_{self.turn}"

    @classmethod
    def parse(cls, key: str) -> "QueryId":
        """Inverse of `str()`: the turn is after the last underscore."""
        conv, sep, turn = key.rpartition("_")
        if not sep or not turn.isdigit():
            raise ValueError(f"not a query key '<conversation>_<turn>': {key!r}")
        return cls(conv, int(turn))


@dataclass
class Turn:
    """One exchange: the user's question, the system's answer, and optional human rewrite."""

    question: str
    answer: str | None = None
    rewrite: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Turn":
        return cls(question=data["question"], answer=data.get("answer"),
                   rewrite=data.get("rewrite"), meta=dict(data.get("meta") or {}))


@dataclass
class Conversation:
    id: str
    turns: list[Turn] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.turns)

    def turn(self, number: int) -> Turn:
        """The turn with 1-based `number`."""
        if not 1 <= number <= len(self.turns):
            raise IndexError(f"conversation {self.id} has {len(self.turns)} turns, no turn {number}")
        return self.turns[number - 1]

    def history(self, number: int) -> list[Turn]:
        """The turns before turn `number` (what the user had said and heard when asking it)."""
        return self.turns[: number - 1]

    def query_ids(self) -> Iterator[QueryId]:
        for number in range(1, len(self.turns) + 1):
            yield QueryId(self.id, number)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "turns": [t.to_dict() for t in self.turns]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Conversation":
        return cls(id=str(data["id"]), turns=[Turn.from_dict(t) for t in data.get("turns", [])])


@dataclass(frozen=True)
class Passage:
    id: str
    text: str
    title: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "title": self.title, "text": self.text}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Passage":
        return cls(id=str(data["id"]), text=data["text"], title=data.get("title") or "")


@dataclass(frozen=True)
class Hit:
    """One retrieved passage: `rank` is 1-based."""

    passage_id: str
    score: float
    rank: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Hit":
        return cls(str(data["passage_id"]), float(data["score"]), int(data["rank"]))


@dataclass(frozen=True)
class RerankedHit(Hit):
    """A hit after a reranker: `score` and `rank` are the reranker's, the retriever's are kept
    (its score is on another scale, so the two are never compared)."""

    retriever_score: float
    retriever_rank: int

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RerankedHit":
        return cls(str(data["passage_id"]), float(data["score"]), int(data["rank"]),
                   float(data["retriever_score"]), int(data["retriever_rank"]))


@dataclass
class Answer:
    """An answer with its evidence: `start`/`end` are character offsets into the passage text
    (end exclusive), so `evidence.text[start:end] == text` for extractive answers.

    `no_answer`: the reader judged that the collection holds no answer (text "", no span); the
    passage it would have answered from is still its evidence. `confidence`: the reader's
    calibrated probability that its answer is right, when it has a calibration."""

    text: str
    score: float = 0.0
    passage_id: str | None = None
    start: int | None = None
    end: int | None = None
    evidence: Passage | None = None
    no_answer: bool = False
    confidence: float | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["evidence"] = self.evidence.to_dict() if self.evidence else None
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Answer":
        evidence = data.get("evidence")
        return cls(text=data["text"], score=float(data.get("score", 0.0)),
                   passage_id=data.get("passage_id"), start=data.get("start"), end=data.get("end"),
                   evidence=Passage.from_dict(evidence) if evidence else None,
                   no_answer=bool(data.get("no_answer", False)),
                   confidence=data.get("confidence"))
