"""Cutting articles into retrieval passages of at most `max_words` words.

Passages are packed greedily from whole sentences (see `sentences.py`), so passage `n` depends
only on the text up to its own end: editing the end of an article never renumbers its earlier
passages. Words are whitespace-separated tokens and a passage's text is its words joined by
single spaces (line breaks and runs of spaces are not kept), so the passages of an article,
joined with spaces, give back exactly the article's words in order.
"""
from __future__ import annotations

from typing import Iterator

from ..types import Passage
from .sentences import split_sentences


def _pieces(words: list[str], max_words: int) -> Iterator[list[str]]:
    """A sentence's words, cut into chunks of `max_words` when it is longer than that."""
    for start in range(0, len(words), max_words):
        yield words[start:start + max_words]


def check_max_words(max_words: int) -> int:
    """`max_words`, or a ValueError when it is not a positive integer."""
    if isinstance(max_words, bool) or not isinstance(max_words, int) or max_words < 1:
        raise ValueError(f"max_words must be a positive integer, got {max_words!r}")
    return max_words


def split_passages(text: str, max_words: int = 100) -> list[str]:
    """Passages of at most `max_words` words, each made of whole sentences where possible.

    Sentences are added to the current passage while it stays within `max_words`; a sentence
    longer than `max_words` is cut into word chunks of `max_words` (the last chunk may share a
    passage with the following sentences). Text without words gives no passage.
    """
    check_max_words(max_words)
    passages: list[str] = []
    current: list[str] = []
    for sentence in split_sentences(text):
        for piece in _pieces(sentence.split(), max_words):
            if current and len(current) + len(piece) > max_words:
                passages.append(" ".join(current))
                current = []
            current.extend(piece)
    if current:
        passages.append(" ".join(current))
    return passages


def article_passages(article_id: str, title: str, text: str,
                     max_words: int = 100) -> Iterator[Passage]:
    """The passages of one article with ids `"{article_id}#{n}"` (n from 0) and its title."""
    for number, passage in enumerate(split_passages(text, max_words)):
        yield Passage(id=f"{article_id}#{number}", text=passage, title=title)
