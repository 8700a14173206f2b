"""The span of a passage that reads most like a free-form answer, as a reader's training span.

TopiOCQA's answers are written, not copied: most of them occur in no passage word for word, so
the exact rule gives a reader no span for them. Where the weak rule has named the passage the
answer was written from (convqa/benchmark/weak_positives.py), the span of that passage with the
best SQuAD F1 against the answer stands in for it, as extractive readers of free-form answer
sets are commonly trained.

    >>> found = best_f1_span("Force is any interaction that, when unopposed, changes the "
    ...                      "motion of an object.", "any interaction that changes motion")
    >>> found.text, found.start, round(found.f1, 2)
    ('any interaction that, when unopposed, changes the motion', 9, 0.83)
"""
from __future__ import annotations

import re
from collections import Counter
from typing import NamedTuple

from convqa.metrics.answer import normalize_answer

_TOKEN = re.compile(r"\S+")
_EDGE_PUNCTUATION = "\"'()[]{}.,;:!?"


class BestSpan(NamedTuple):
    text: str
    start: int   # character offset into the passage text
    f1: float    # SQuAD F1 against the answer, 0-1


def best_f1_span(text: str, answer: str, extra_words: int = 10) -> BestSpan | None:
    """The span of `text` with the best SQuAD F1 against `answer`, at most `extra_words` words
    longer than the answer (the first of equal ones); None when no word of the answer occurs in
    the text."""
    wanted = Counter(normalize_answer(answer).split())
    size = sum(wanted.values())
    if not size:
        return None
    tokens = [(m.start(), m.end(), normalize_answer(m.group())) for m in _TOKEN.finditer(text)]
    longest = size + extra_words
    best, best_f1 = None, 0.0
    for i, (start, _, first) in enumerate(tokens):
        if first not in wanted:
            continue  # a best span starts (and ends) on a word of the answer
        left, overlap, length = Counter(wanted), 0, 0
        for j in range(i, len(tokens)):
            word = tokens[j][2]
            if not word:
                continue  # punctuation or an article: no word to SQuAD's F1
            length += 1
            if length > longest:
                break
            if left[word] > 0:
                left[word] -= 1
                overlap += 1
                f1 = 2 * overlap / (length + size)
                if f1 > best_f1:
                    best, best_f1 = (start, tokens[j][1]), f1
    if best is None:
        return None
    return _trimmed(text, *best, best_f1)


def _trimmed(text: str, start: int, end: int, f1: float) -> BestSpan:
    """The span without the punctuation its edge words carry ("Paris," -> "Paris")."""
    while end > start and text[end - 1] in _EDGE_PUNCTUATION:
        end -= 1
    while start < end and text[start] in _EDGE_PUNCTUATION:
        start += 1
    return BestSpan(text[start:end], start, f1)
