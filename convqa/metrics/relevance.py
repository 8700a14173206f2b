"""QReCC's answer-span relevance: a passage is relevant when it holds a span close to the answer.

QReCC judges only 8k of its 54M passages by id; its paper scores retrieval by reading each
retrieved passage instead: relevant when some span has token F1 >= 0.8 with the gold answer. Two
ways to find that span are offered; say which one a number used.

`method="exact"` (the definition): tokens are the SQuAD-normalized passage split on whitespace
(`answer_tokens`), a span is any contiguous run of those tokens, and the passage is relevant when
the best span's F1 (same float arithmetic as `answer.f1`) is >= threshold. F1 = 2c/(w+n) for a
span of w tokens sharing c tokens with an n-token answer, and c <= min(w, n), so F1 >= t needs
t*n/(2-t) <= w <= n*(2-t)/t (for t = 0.8: 2n/3 <= w <= 1.5n). Only those widths are searched (one
more on each side guards against float rounding), and only spans that start and end on a token of
the answer (trimming a boundary token that adds no overlap raises F1), extending each start one
answer token at a time with a running overlap count; a passage whose total overlap cannot reach
the threshold is rejected at once. No span is missed (checked against brute force in the tests).

`method="qrecc"` (the official script, apple/ml-qrecc utils/span_heuristic.py, re-implemented):
1. if the normalized answer occurs as a *character substring* of the normalized passage, F1 = 1
   (so "art" matches inside "party");
2. else take the first window of n + int(0.05 n) passage tokens with the highest character-multiset
   similarity to the answer (difflib's quick_ratio); a passage shorter than that has no window
   and scores 0;
3. score the best sub-span of that window by token F1 (first best kept).
This can miss a span that `exact` finds (it looks in one window only) and can accept one that
`exact` rejects (step 1). An answer that is empty before normalization is never relevant (the
official rule); one that normalizes to nothing (e.g. "The") is, like the official script, a
substring of every passage. `qrecc` is the default so numbers compare with QReCC's paper. On the
348 pooled SCAI-QReCC-21 passages with their gold answers both methods agree (20 relevant).
"""
from __future__ import annotations

import math
from collections import Counter
from typing import Any, Mapping, Sequence

from convqa.errors import DataError
from convqa.metrics._keys import keyed_by_query
from convqa.metrics.answer import (
    answer_tokens,
    f1,
    f1_from_counts,
    f1_from_tokens,
    normalize_answer,
)
from convqa.metrics.retrieval import Ranking, ranked_ids
from convqa.types import Passage

METHODS = ("qrecc", "exact")
QRECC_THRESHOLD = 0.8


def best_span(passage_text: str, answer: str, method: str = "qrecc") -> tuple[str, float]:
    """The passage span closest to `answer` and its F1 (normalized tokens joined by spaces)."""
    _check_method(method)
    if method == "qrecc":
        return _qrecc_best_span(passage_text, answer)
    tokens = answer_tokens(passage_text)
    score, start, end = _search_spans(tokens, answer_tokens(answer), 1, len(tokens))
    return " ".join(tokens[start:end]), score


def span_relevance(passage_text: str, answer: str, threshold: float = QRECC_THRESHOLD,
                   method: str = "qrecc") -> bool:
    """True when the passage holds a span with token F1 >= `threshold` to `answer`."""
    _check_method(method)
    if not 0.0 < threshold <= 1.0:
        raise DataError(f"threshold must be in (0, 1], got {threshold!r}", field="threshold")
    if method == "qrecc":
        return bool(answer) and _qrecc_best_span(passage_text, answer)[1] >= threshold
    gold = answer_tokens(answer)
    n = len(gold)
    low = max(1, math.floor(threshold * n / (2 - threshold)) - 1)
    high = math.ceil(n * (2 - threshold) / threshold) + 1
    best = _search_spans(answer_tokens(passage_text), gold, low, high, stop_at=threshold)[0]
    return best >= threshold


def qrels_from_spans(run: Mapping[Any, Ranking], passages_lookup: Mapping[str, Passage | str],
                     answers: Mapping[Any, str | Sequence[str]], *,
                     threshold: float = QRECC_THRESHOLD, method: str = "qrecc",
                     depth: int | None = None) -> dict[str, dict[str, int]]:
    """Qrels {qid: {passage_id: 1 or 0}} judging the top `depth` retrieved passages by span F1.

    Only queries in both `run` and `answers` are judged. A query whose answer is empty gets only
    zeros (no relevant passage), as in QReCC's script. With several answers a passage is relevant
    if it matches any. Judged passages only: use hits@k (QReCC's "Recall@k"), not recall@k.
    """
    run_map = keyed_by_query(run, "run")
    answer_map = keyed_by_query(answers, "answers")
    qrels: dict[str, dict[str, int]] = {}
    for qid, ranking in run_map.items():
        if qid not in answer_map:
            continue
        golds = _answer_list(qid, answer_map[qid])
        judged: dict[str, int] = {}
        for pid in ranked_ids(ranking, qid)[:depth]:
            text = _passage_text(passages_lookup, pid)
            judged[pid] = int(any(span_relevance(text, gold, threshold, method) for gold in golds))
        qrels[qid] = judged
    return qrels


def _search_spans(tokens: Sequence[str], gold: Sequence[str], low: int, high: int,
                  stop_at: float | None = None) -> tuple[float, int, int]:
    """Best F1 over spans tokens[s:e] with low <= e - s <= high, as (f1, s, e); first best kept.

    Only spans that start and end on a token of the answer are tried: trimming a boundary token
    that adds no overlap keeps c and shortens w, so it never lowers F1 = 2c/(w+n).
    """
    n = len(gold)
    if not n or not tokens:
        return 0.0, 0, 0
    need = Counter(gold)
    reachable = sum(min(count, need[tok]) for tok, count in Counter(tokens).items() if tok in need)
    if reachable == 0 or (stop_at is not None and 2 * reachable / (reachable + n) < stop_at - 1e-9):
        return 0.0, 0, 0
    positions = [i for i, tok in enumerate(tokens) if tok in need]
    best = (0.0, 0, 0)
    for a, start in enumerate(positions):
        have: Counter[str] = Counter()
        common = 0
        for end in positions[a:]:
            width = end - start + 1
            if width > high or 2 * n / (width + n) <= best[0]:
                break  # wider spans can only score lower than the bound or the best so far
            tok = tokens[end]
            if have[tok] < need[tok]:
                common += 1
            have[tok] += 1
            if width >= low:
                score = f1_from_counts(common, width, n)
                if score > best[0]:
                    best = (score, start, end + 1)
                    if stop_at is not None and score >= stop_at:
                        return best
    return best


def _qrecc_best_span(passage_text: str, answer: str) -> tuple[str, float]:
    """The official QReCC heuristic (see module doc), tie-breaking included."""
    passage = normalize_answer(passage_text)
    target = normalize_answer(answer)
    if target in passage:
        return target, f1(answer, target)
    window = _most_similar_window(passage.split(), target)
    span_tokens = answer_tokens(window)
    gold = answer_tokens(answer)
    need = Counter(gold)
    best, best_i, best_j = 0.0, 0, len(span_tokens)  # nothing better: the whole window (scores 0)
    for i in range(len(span_tokens)):
        have: Counter[str] = Counter()
        common = 0
        for j in range(i + 1, len(span_tokens) + 1):
            tok = span_tokens[j - 1]
            if have[tok] < need[tok]:
                common += 1
            have[tok] += 1
            score = f1_from_counts(common, j - i, len(gold))
            if score > best:
                best, best_i, best_j = score, i, j
    span = " ".join(span_tokens[best_i:best_j])
    return span, f1_from_tokens(answer_tokens(span), gold)


def _most_similar_window(words: Sequence[str], target: str) -> str:
    """First window of n + int(0.05 n) words with the highest difflib quick_ratio to `target`.

    quick_ratio = 2 * (shared characters, as multisets) / (total length); the window's character
    counts slide word by word instead of being recounted, with the same integers and float.
    """
    width = len(target.split()) + int(0.05 * len(target.split()))
    if width == 0 or len(words) < width:
        return ""
    want = Counter(target)
    have: Counter[str] = Counter(" " * (width - 1))
    matches = min(width - 1, want[" "])
    length = width - 1
    for word in words[:width]:
        matches, length = _add_chars(word, have, want, matches, length, +1)
    best, best_start = 0.0, 0
    found = False
    for start in range(len(words) - width + 1):
        if start:
            matches, length = _add_chars(words[start - 1], have, want, matches, length, -1)
            matches, length = _add_chars(words[start + width - 1], have, want, matches, length, +1)
        similarity = 2.0 * matches / (length + len(target))
        if similarity > best:
            best, best_start, found = similarity, start, True
        if similarity == 1.0:
            break
    return " ".join(words[best_start:best_start + width]) if found else ""


def _add_chars(word: str, have: Counter, want: Counter, matches: int, length: int,
               sign: int) -> tuple[int, int]:
    for ch in word:
        if sign > 0:
            if have[ch] < want[ch]:
                matches += 1
            have[ch] += 1
        else:
            if have[ch] <= want[ch]:
                matches -= 1
            have[ch] -= 1
    return matches, length + sign * len(word)


def _answer_list(qid: str, value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, Sequence) and all(isinstance(v, str) for v in value):
        return list(value)
    raise DataError(f"answer must be a string or a list of strings, got {type(value).__name__}",
                    path="answers", field=qid)


def _passage_text(lookup: Mapping[str, Passage | str], pid: str) -> str:
    try:
        passage = lookup[pid]
    except KeyError:
        raise DataError("retrieved passage is not in the passage lookup", path="passages",
                        field=pid) from None
    if isinstance(passage, Passage):
        return passage.text
    if isinstance(passage, str):
        return passage
    raise DataError(f"passage must be a Passage or a string, got {type(passage).__name__}",
                    path="passages", field=pid)


def _check_method(method: str) -> None:
    if method not in METHODS:
        raise DataError(f"unknown span method {method!r}; choose one of {METHODS}", field="method")

