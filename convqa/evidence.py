"""Where an answer came from: its evidence passage and whether its span fits that passage.
Shared by every front end (the demo's HTML, `convqa serve`'s JSON), so they agree."""
from __future__ import annotations

from typing import Sequence

from .types import Answer, Passage


def span_is_valid(text: str, start: int | None, end: int | None) -> bool:
    """Whether [start, end) is a non-empty character span inside `text`."""
    return (isinstance(start, int) and isinstance(end, int) and not isinstance(start, bool)
            and not isinstance(end, bool) and 0 <= start < end <= len(text))


def evidence_passage(answer: Answer, passages: Sequence[Passage]) -> Passage | None:
    """The passage the answer was read from: its own evidence, else the retrieved passage with
    its id."""
    if answer.evidence is not None:
        return answer.evidence
    return next((p for p in passages if p.id == answer.passage_id), None)
