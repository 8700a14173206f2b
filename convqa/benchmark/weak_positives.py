"""Answer passages for the turns whose answer occurs in no passage word for word.

TopiOCQA answers are free-form sentences written from a passage of the topic article, so most
retrieval-evaluable turns have no answer passage by the benchmark's rule (the normalized
answer inside the normalized passage): 7,578 full-collection train turns against 3,561 with
one. Their passage is usually still plain to see: the one passage of the article that holds
most of the answer's content words, well ahead of its siblings. `weak_label` names it when that
is so (with the siblings that may hold the answer too), for training on more turns than the
exact rule gives; evaluation keeps the exact rule. `weak_labels` labels a benchmark's train
turns for the reranker (`convqa train reranker-examples --weak-positives`), the query tower
(`convqa train convdr --weak-positives`) and the reader (`convqa train reader
--weak-positives`).

    >>> rule = WeakPositiveRule(min_coverage=0.7, min_lead=0.2)
    >>> weak_label("It is a large freshwater fish of North America.", {
    ...     "A#0": "The muskellunge is a large, uncommon freshwater fish of North America.",
    ...     "A#1": "It is the largest member of the pike family."}, rule)
    WeakLabel(passage='A#0', second_sources=())
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Mapping

from convqa.errors import ConfigError
from convqa.metrics.answer import normalize_answer

# Function words carry no evidence of where an answer was read; normalize_answer has already
# dropped the articles.
FUNCTION_WORDS = frozenset(
    "of in on at to and or is was were are be been by for with as from that this it its his "
    "her their he she they them which who whom what when where how not no yes".split())


def content_words(text: str) -> list[str]:
    return [w for w in normalize_answer(text).split() if w not in FUNCTION_WORDS]


def coverage(answer_words: list[str], passage_words: Counter) -> float:
    """The share of the answer's content words (counted with repeats) found in the passage."""
    if not answer_words:
        return 0.0
    found = sum((Counter(answer_words) & passage_words).values())
    return found / len(answer_words)


@dataclass(frozen=True)
class WeakPositiveRule:
    """When a passage counts as the answer passage, and which siblings may be negatives."""

    min_coverage: float = 0.7      # of the answer's content words, in the chosen passage
    min_lead: float = 0.2          # over the passage with the next best coverage
    max_negative_coverage: float = 0.5  # a negative covers less than this: no second source
    min_answer_words: int = 2      # shorter answers ("1997") match too many passages by chance

    def __post_init__(self) -> None:
        for name in ("min_coverage", "min_lead", "max_negative_coverage"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not 0 <= value <= 1:
                raise ConfigError(f"weak positives: {name} must be in [0, 1], got {value!r}")
        if self.max_negative_coverage > self.min_coverage:
            raise ConfigError("weak positives: max_negative_coverage must not exceed "
                              "min_coverage")

    @classmethod
    def for_coverage(cls, min_coverage: float | None) -> "WeakPositiveRule | None":
        """The rule of `--weak-positives COVERAGE` (None without the flag): the defaults with
        that coverage, the negatives' limit lowered to it where it is lower."""
        if min_coverage is None:
            return None
        return cls(min_coverage=min_coverage,
                   max_negative_coverage=min(cls.max_negative_coverage, min_coverage))


@dataclass(frozen=True)
class WeakLabel:
    """A weakly labelled turn's answer passage, and the siblings that may hold the answer too
    (they cover at least `max_negative_coverage` of it): never to be trained as negatives."""

    passage: str
    second_sources: tuple[str, ...] = ()


def weak_label(answer: str, passages: Mapping[str, str],
               rule: WeakPositiveRule) -> WeakLabel | None:
    """The label of an answer among the passages of one article (id -> text), or None where
    no passage covers enough of it or two come close."""
    words = content_words(answer)
    if len(words) < rule.min_answer_words or not passages:
        return None
    ranked = sorted(((pid, coverage(words, Counter(content_words(text))))
                     for pid, text in passages.items()), key=lambda item: (-item[1], item[0]))
    best_id, best = ranked[0]
    runner_up = ranked[1][1] if len(ranked) > 1 else 0.0
    if best < rule.min_coverage or best - runner_up < rule.min_lead:
        return None
    return WeakLabel(best_id, tuple(pid for pid, share in ranked[1:]
                                    if share >= rule.max_negative_coverage))


def written_answer(turn: Any) -> str | None:
    """A labelled turn's first written answer (not yes / no / UNANSWERABLE), normalized."""
    from convqa.benchmark.labelled_turns import evaluable_answers

    return next(iter(evaluable_answers(turn.answers)), None)


def weak_labels(data: Any, store: Any, rule: WeakPositiveRule) -> dict[str, WeakLabel]:
    """qid -> the weak label of each *train* turn of a benchmark (`load_labelled_turns`) that
    is retrieval-evaluable and has a written answer but no answer passage, where its topic
    article has one by `rule`; `store` holds the benchmark's passages. Dev turns are never
    labelled: evaluation keeps the exact rule."""
    found = {}
    for turn in data.turns:
        if turn.split != "train" or turn.answer_evaluable or not turn.retrieval_evaluable:
            continue
        answer = written_answer(turn)
        if answer is None:
            continue
        label = weak_label(answer, {pid: store.get(pid).text
                                    for pid in turn.gold_passage_ids()}, rule)
        if label is not None:
            found[turn.qid] = label
    return found
