"""Cutting an utterance to a number of tokens without breaking its text.

Truncation works on character offsets from a fast tokenizer, so a cut utterance is always a
substring of the (whitespace-cleaned) original: no "##" word pieces, no re-decoded lowercase text.
Cuts fall on word boundaries (words as the tokenizer's pre-tokenizer sees them: BERT splits on
spaces and punctuation). A word longer than the room left is dropped whole, except where the
caller asks for `split_words` (the current question alone over the budget): then the cut falls
between two of its word pieces, still at a token offset.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence


def clean_text(text: str) -> str:
    """Collapse every run of whitespace (newlines, tabs, no-break spaces) to one space."""
    return " ".join(text.split())


@dataclass(frozen=True)
class TokenizedText:
    """A cleaned utterance with its token offsets and word ids (add_special_tokens=False)."""

    text: str
    offsets: tuple[tuple[int, int], ...]
    word_ids: tuple[int | None, ...]

    def __len__(self) -> int:
        return len(self.offsets)

    def head(self, n: int, split_words: bool = False) -> "TokenizedText":
        """At most the first `n` tokens, cut on the right on a word boundary; if the first word
        alone is longer than `n`: its first `n` word pieces with `split_words`, else nothing."""
        if n >= len(self):
            return self
        if n <= 0:
            return self._slice(0, 0)
        cut = n  # index of the first token dropped
        if self._same_word(cut - 1, cut):
            start = cut - 1
            while start >= 0 and self._same_word(start, cut):
                start -= 1
            if start >= 0:  # step back to the end of the previous whole word
                cut = start + 1
            elif not split_words:
                cut = 0
        return self._slice(0, cut)

    def tail(self, n: int, split_words: bool = False) -> "TokenizedText":
        """At most the last `n` tokens, cut on the left on a word boundary; if the last word
        alone is longer than `n`: its last `n` word pieces with `split_words`, else nothing."""
        if n >= len(self):
            return self
        if n <= 0:
            return self._slice(len(self), len(self))
        first = len(self) - n  # index of the first token kept
        if self._same_word(first - 1, first):
            end = first
            while end < len(self) and self._same_word(end, first - 1):
                end += 1
            if end < len(self):  # step forward to the start of the next whole word
                first = end
            elif not split_words:
                first = len(self)
        return self._slice(first, len(self))

    def _slice(self, first: int, stop: int) -> "TokenizedText":
        """Tokens [first, stop) with their text, a substring of `self.text` between offsets."""
        if first >= stop:
            return TokenizedText("", (), ())
        begin, end = self.offsets[first][0], self.offsets[stop - 1][1]
        offsets = tuple((a - begin, b - begin) for a, b in self.offsets[first:stop])
        return TokenizedText(self.text[begin:end], offsets, self.word_ids[first:stop])

    def _same_word(self, i: int, j: int) -> bool:
        a, b = self.word_ids[i], self.word_ids[j]
        return a is not None and a == b


def tokenize_texts(tokenizer: Any, texts: Sequence[str]) -> list[TokenizedText]:
    """Tokenize several cleaned texts in one call of a fast tokenizer."""
    if not texts:
        return []
    encoding = tokenizer(list(texts), add_special_tokens=False, return_offsets_mapping=True)
    result = []
    for index, text in enumerate(texts):
        offsets = tuple(tuple(pair) for pair in encoding["offset_mapping"][index])
        result.append(TokenizedText(text, offsets, tuple(encoding.word_ids(index))))
    return result
