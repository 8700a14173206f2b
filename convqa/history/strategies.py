"""The history strategies of the reference systems and the shortcut-analysis inputs.

Notation: q_t is the current question, X_t the conversation so far (q1, a1, ..., q_t).

- `oldest_first` (DPR-IHN / TopiOCQA), alias `full` (= X_t): q1 [SEP] a1 [SEP] ... [SEP] q_t,
  truncated from the left: q_t first, then q1, then the newest earlier utterances.
- `questions_only` (ConvDR): q1 [SEP] ... [SEP] q_t, 256 tokens, oldest dropped first.
- `current_first` (PRO-ConvQA): q_t [SEP] u_newest [SEP] ... over the last `window` history
  utterances, truncated on the right so q_t is never cut.
- shortcut inputs: `question_only` (q_t), `last_answer` (a_{t-1}), `history_only` (X_t without q_t).

A q_t longer than the whole budget (never seen in TopiOCQA) keeps its first `max_tokens` tokens
in every strategy: the start of a question carries its question word and subject, and it is what
the encoder's own right truncation would keep, so q_t reads the same in every strategy.

    >>> from convqa.registry import HISTORY_STRATEGIES
    >>> from convqa.types import Turn
    >>> history = [Turn("Who directed Alien?", "Ridley Scott"), Turn("When?", "1979")]
    >>> HISTORY_STRATEGIES.build("oldest_first").format("Where was he born?", history)
    'Who directed Alien? [SEP] Ridley Scott [SEP] When? [SEP] 1979 [SEP] Where was he born?'
    >>> HISTORY_STRATEGIES.build("current_first").format("Where was he born?", history)
    'Where was he born? [SEP] 1979 [SEP] When? [SEP] Ridley Scott [SEP] Who directed Alien?'
    >>> HISTORY_STRATEGIES.build("questions_only").format("Where was he born?", history)
    'Who directed Alien? [SEP] When? [SEP] Where was he born?'
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..registry import HISTORY_STRATEGIES
from ..types import Turn
from .base import HistoryConfig, HistoryStrategy
from .text import TokenizedText


def pack_oldest_first(units: Sequence[TokenizedText], budget: int, sep_tokens: int,
                      keep_first: bool) -> list[TokenizedText]:
    """Left truncation of `units` (oldest first) keeping the last unit and, if `keep_first`,
    the first one: priority last > first > newest earlier units; the first unit that does not
    fit whole is cut on its left (its end is kept, whole words only) and nothing older is added
    after it. Only the last unit alone over the budget keeps its start, splitting a word if
    it must."""
    if not units:
        return []
    last = units[-1]
    if len(last) >= budget:
        return [last.head(budget, split_words=True)]
    remaining = budget - len(last)
    middle = list(units[:-1])
    head: list[TokenizedText] = []
    if keep_first and middle:
        whole = middle.pop(0)
        first = whole.tail(remaining - sep_tokens)
        if not len(first):
            return [last]
        if len(first) < len(whole):  # q1 itself had to be cut: no room for anything else
            return [first, last]
        head = [first]
        remaining -= sep_tokens + len(first)
    newest: list[TokenizedText] = []
    for unit in reversed(middle):
        piece = unit.tail(remaining - sep_tokens)
        if not len(piece):
            break
        newest.append(piece)
        remaining -= sep_tokens + len(piece)
        if len(piece) < len(unit):
            break
    return head + newest[::-1] + [last]


def pack_in_order(units: Sequence[TokenizedText], budget: int,
                  sep_tokens: int) -> list[TokenizedText]:
    """Right truncation: `units` in order until the budget is spent; the first unit that does
    not fit whole keeps its start (whole words; the very first unit may split its first word
    rather than vanish) and ends the list."""
    parts: list[TokenizedText] = []
    remaining = budget + sep_tokens  # the first unit has no separator before it
    for index, unit in enumerate(units):
        piece = unit.head(remaining - sep_tokens, split_words=index == 0)
        if not len(piece):
            break
        parts.append(piece)
        remaining -= sep_tokens + len(piece)
        if len(piece) < len(unit):
            break
    return parts


@dataclass
class OldestFirstConfig(HistoryConfig):
    max_tokens: int = 128
    keep_first: bool = True  # keep q1 when dropping old utterances


@HISTORY_STRATEGIES.register("oldest_first", config=OldestFirstConfig)
class OldestFirst(HistoryStrategy):
    """DPR-IHN / TopiOCQA: `q1 [SEP] a1 [SEP] ... [SEP] q_t`, left-truncated keeping q1, q_t.

    If q1 and q_t together exceed the budget, q_t stays whole and q1 keeps its end."""

    config_class = OldestFirstConfig
    include_answers = True

    def _format(self, question: str, history: Sequence[Turn]) -> str:
        units = self.tokenize(self.utterances(history, self.include_answers) + [question])
        return self.within_budget(lambda budget: self.join(pack_oldest_first(
            units, budget, self.separator_tokens, self.config.keep_first)))


@HISTORY_STRATEGIES.register("full", config=OldestFirstConfig)
class Full(OldestFirst):
    """X_t of the shortcut analysis: the same text as `oldest_first`."""


@dataclass
class QuestionsOnlyConfig(HistoryConfig):
    max_tokens: int = 256
    keep_first: bool = False  # ConvDR simply drops the oldest questions


@HISTORY_STRATEGIES.register("questions_only", config=QuestionsOnlyConfig)
class QuestionsOnly(OldestFirst):
    """ConvDR: `q1 [SEP] q2 [SEP] ... [SEP] q_t`, no answers, oldest questions dropped first."""

    config_class = QuestionsOnlyConfig
    include_answers = False


@dataclass
class CurrentFirstConfig(HistoryConfig):
    max_tokens: int = 128
    window: int = 6  # history utterances (questions and answers each count), newest first

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.window, bool) or not isinstance(self.window, int) or self.window < 0:
            raise ValueError(f"window must be an int >= 0, got {self.window!r}")


@HISTORY_STRATEGIES.register("current_first", config=CurrentFirstConfig)
class CurrentFirst(HistoryStrategy):
    """PRO-ConvQA: `q_t [SEP] a_{t-1} [SEP] q_{t-1} [SEP] ...`, right-truncated.

    The window counts the utterances that are present (empty answers, and unanswerable ones
    when dropped, do not use a slot)."""

    config_class = CurrentFirstConfig

    def _format(self, question: str, history: Sequence[Turn]) -> str:
        window = self.config.window
        recent = self.utterances(history)[::-1][:window] if window else []
        units = self.tokenize([question] + recent)
        return self.within_budget(
            lambda budget: self.join(pack_in_order(units, budget, self.separator_tokens)))


@HISTORY_STRATEGIES.register("question_only", config=HistoryConfig)
class QuestionOnly(HistoryStrategy):
    """Shortcut input: q_t alone (cleaned; cut to `max_tokens` keeping its start)."""

    def _format(self, question: str, history: Sequence[Turn]) -> str:
        units = self.tokenize([question])
        return self.within_budget(lambda budget: self.join(pack_in_order(units, budget, 0)))


@HISTORY_STRATEGIES.register("last_answer", config=HistoryConfig)
class LastAnswer(HistoryStrategy):
    """Shortcut input: a_{t-1} alone. "" at turn 1, when a_{t-1} is None or empty, or when it is
    unanswerable and `drop_unanswerable` is set; an older answer never stands in for it."""

    uses_question = False

    def _format(self, question: str, history: Sequence[Turn]) -> str:
        answer = self.answer_text(history[-1].answer) if history else ""
        if not answer:
            return ""
        units = self.tokenize([answer])
        return self.within_budget(lambda budget: self.join(pack_in_order(units, budget, 0)))


@HISTORY_STRATEGIES.register("history_only", config=OldestFirstConfig)
class HistoryOnly(HistoryStrategy):
    """Shortcut input: X_t without q_t, `q1 [SEP] a1 [SEP] ... [SEP] a_{t-1}`, with the
    truncation of `oldest_first` applied to the history alone and the whole budget (q1 and the
    newest utterance kept). "" at turn 1."""

    config_class = OldestFirstConfig
    uses_question = False

    def _format(self, question: str, history: Sequence[Turn]) -> str:
        units = self.tokenize(self.utterances(history))
        return self.within_budget(lambda budget: self.join(pack_oldest_first(
            units, budget, self.separator_tokens, self.config.keep_first)))
