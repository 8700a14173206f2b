"""A small rule-based sentence splitter for Wikipedia-style English text.

Passages must end on sentence boundaries, and the benchmark corpus must be reproducible
without downloading a tokenizer model, so the rules are spelled out here:

1. Every line is its own unit: WikiExtractor text puts paragraphs and section headings
   ("Early life.") on separate lines, so a newline always ends a sentence.
2. Inside a line, a boundary is a run of `.`, `!` or `?` (plus any closing quotes or brackets)
   followed by whitespace, unless
   - the next word starts with a lowercase letter ("approx. five", "e.g. the", '"Help!" she said');
   - the period belongs to an abbreviation: a known short form ("Dr.", "St.", "vs.", "Inc."),
     a single capital initial ("J. R. R. Tolkien", "George W. Bush") or a dotted acronym
     ("U.S.", "e.g.", "a.m.").
   Decimals ("3.5") and dotted names ("Node.js") never split because no whitespace follows
   the period.

The rules err on the side of too few boundaries ("He moved to the U.S. It was ..." stays one
sentence): a missed boundary only makes a sentence longer, and `split_passages` cuts overlong
sentences anyway. Splitting never loses or reorders text: the sentences of a line, joined with
single spaces, have exactly the line's whitespace-separated words.
"""
from __future__ import annotations

import re
from typing import Iterator

# Short forms that end in a period but rarely end a sentence (compared in lowercase, without the
# final period). "etc." is deliberately absent: it ends sentences more often than not.
ABBREVIATIONS = frozenset("""
    mr mrs ms dr prof sr jr st mt ft fr rev hon gen col lt maj capt cpt sgt cmdr adm gov sen rep
    pres supt insp messrs mme mlle
    vs v cf ca c approx est fl no nos vol vols fig figs pp p ch sec art op ed eds trans
    inc ltd co corp bros dept univ assn intl
    jan feb mar apr jun jul aug sep sept oct nov dec
    ave blvd rd
    al
""".split())

_TERMINAL = re.compile(r"[.!?]+[\"'\u201d\u2019)\]]*(?=\s)")
_OPENERS = "\"'([\u201c\u2018"
_INITIAL = re.compile(r"[A-Z]")
_ACRONYM = re.compile(r"(?:[A-Za-z]\.)+[A-Za-z]")  # "U.S." / "e.g." after the final period is cut


def _is_abbreviation(word: str) -> bool:
    """`word` is the token before a single final period, without that period."""
    word = word.lstrip(_OPENERS)
    return (word.lower() in ABBREVIATIONS or _INITIAL.fullmatch(word) is not None
            or _ACRONYM.fullmatch(word) is not None)


def _is_boundary(line: str, match: re.Match[str]) -> bool:
    rest = line[match.end():].lstrip()
    if not rest or rest[0].islower():
        return False
    punct = match.group().rstrip("\"'\u201d\u2019)]")
    if punct != ".":
        return True  # "!", "?", "...", "?!" end a sentence when a non-lowercase word follows
    word_start = line.rfind(" ", 0, match.start()) + 1  # tabs etc. are rare inside a line
    word = line[word_start:match.start()].split()
    return not (word and _is_abbreviation(word[-1]))


def split_line(line: str) -> Iterator[str]:
    """Sentences of one line (no newline inside), stripped, never empty."""
    start = 0
    for match in _TERMINAL.finditer(line):
        if _is_boundary(line, match):
            sentence = line[start:match.end()].strip()
            if sentence:
                yield sentence
            start = match.end()
    sentence = line[start:].strip()
    if sentence:
        yield sentence


def split_sentences(text: str) -> Iterator[str]:
    """Sentences of `text` in order; every line break is a boundary, blank lines are skipped."""
    for line in text.splitlines():
        yield from split_line(line)
