"""The question-overlap penalty: a phrase that repeats the question is rarely its answer.

A phrase model scores start and end tokens against the question, and the tokens that name the
question's own subject score high: asked "who was the lakota leader who was arrested by the us
army", the shipped model's best phrase is "Hunkpapa Lakota leader", in the right passage, where
the answer, "Sitting Bull", is a few tokens before it. A reader learns this from its
cross-attention; phrase vectors, encoded without the question, cannot. So the best `POOL`
phrases of a query are re-ranked by

    score - weight * overlap(phrase, question)

where `overlap` is the fraction of the phrase's content words (lowercased words outside a short
list of function words) that occur in the current question. Only the current question counts:
an answer may well repeat an earlier turn. The weight is in units of phrase score; the default
was chosen reading gold passages of held-out SQuAD-format questions and TopiOCQA dev turns
(docs/results/phrase.md, "The question-overlap penalty"); 0 turns it off.

    from phrase_index.overlap import rerank
    answers = rerank(answers, "who was the lakota leader arrested by the us army", 4.0)
"""
from __future__ import annotations

import dataclasses
import re
from typing import Sequence

from convqa.errors import ConfigError
from convqa.types import Answer

DEFAULT_WEIGHT = 4.0
POOL = 20  # phrases re-ranked per query: the answer is almost always among them

FUNCTION_WORDS = frozenset(
    "a an and are as at be by did do does for from he her his how in is it its of on or she "
    "that the their they this to was were what when where which who whom whose why with".split())
_WORD = re.compile(r"\w+")


def check_weight(weight) -> float:
    """The weight checked (None: the default): a number >= 0."""
    weight = DEFAULT_WEIGHT if weight is None else weight
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight >= 0:
        raise ConfigError(f"overlap weight must be a number >= 0, got {weight!r}")
    return float(weight)


def content_words(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if w not in FUNCTION_WORDS]


def question_overlap(phrase: str, question: str | set[str]) -> float:
    """The fraction of `phrase`'s content words that occur in `question` (0 for a phrase with
    none)."""
    words = content_words(phrase)
    if not words:
        return 0.0
    asked = question if isinstance(question, set) else set(content_words(question))
    return sum(w in asked for w in words) / len(words)


def rerank(answers: Sequence[Answer], question: str, weight: float) -> list[Answer]:
    """`answers` (best first) with `weight * question_overlap` taken off each score, best
    first again; ties keep their order. A weight of 0 or an empty question changes nothing."""
    answers = list(answers)
    asked = set(content_words(question or ""))
    if not weight or not asked:
        return answers
    scored = [dataclasses.replace(a, score=a.score - weight * question_overlap(a.text, asked))
              for a in answers]
    return sorted(scored, key=lambda a: -a.score)
