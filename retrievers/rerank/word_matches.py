"""Hits a shortlist keeps for their words: the passages whose words best match the question.

On a large collection a dense retriever's top_n is mostly one article, and the passage that
answers often sits far below the retriever's best among its siblings, so `rescore_within`
(shortlist.py) leaves it out. The words it shares with the question find many of those for a
few pairs more: `rescore_word_matches: N` also rescores the N hits left out whose words match
best.

A passage's match is the sum, over the question's distinct words that it contains, of the
word's rarity among the turn's own candidates:

    match(p) = sum over w in words(question) & words(p) of log((n + 1) / (df(w) + 0.5))

n the number of candidates, df(w) how many of them contain w. A word that every sibling
shares (the article's subject) weighs little and one that singles a passage out weighs most;
no collection statistics are needed. Words are lower-cased runs of letters and digits, less a
short list of English function words (`STOP_WORDS`). The question text is the current question
and the one before it (`match_text`): a follow-up often names its subject only there.

    >>> scores = word_match_scores("when was the bridge opened",
    ...                            ["The bridge was opened in 1932.", "The bridge is long.",
    ...                             "Its towers are tall."])
    >>> scores.index(max(scores))
    0
    >>> with_word_matches([0, 1], [0.0, 5.0, 1.0, 3.0], 1)
    [0, 1, 3]
"""
from __future__ import annotations

import math
import re
from collections import Counter
from typing import Sequence

from convqa.types import Passage, Turn

STOP_WORDS = frozenset(
    "a an and are as at be been but by did do does for from had has have he her his how i if "
    "in into is it its of on or she so than that the their them then there these they this "
    "to was we were what when where which who whom whose why will with you".split())
_WORD = re.compile(r"\w+")


def words(text: str) -> set[str]:
    """The distinct content words of `text`, lower-cased."""
    return {w for w in _WORD.findall(text.lower()) if w not in STOP_WORDS}


def match_text(question: str, history: Sequence[Turn] = ()) -> str:
    """The text a turn's passages are matched against: its question and the previous one."""
    return question if not history else f"{question} {history[-1].question}"


def word_match_scores(query: str, texts: Sequence[str]) -> list[float]:
    """Each text's match with `query`, weighted by the words' rarity among `texts`."""
    sets = [words(text) for text in texts]
    counts = Counter(word for found in sets for word in found)
    wanted = words(query)
    n = len(texts)
    return [sum(math.log((n + 1) / (counts[word] + 0.5)) for word in wanted & found)
            for found in sets]


def passage_match_scores(query: str, passages: Sequence[Passage]) -> list[float]:
    """Each passage's match with `query` (`word_match_scores` of its title and text)."""
    return word_match_scores(query, [f"{p.title} {p.text}" for p in passages])


def with_word_matches(kept: Sequence[int], scores: Sequence[float], count: int) -> list[int]:
    """`kept` (indices of a shortlist) plus the `count` best-matching indices it left out
    (ties: the earlier hit), in index order; a hit that matches no word is not added."""
    inside = set(kept)
    outside = sorted((i for i in range(len(scores)) if i not in inside and scores[i] > 0),
                     key=lambda i: (-scores[i], i))
    return sorted(inside | set(outside[:count]))
