"""HTML for an answer's evidence, the retrieved passages and the per-stage latency.

Passage text, titles and answers come from the collection and the models: untrusted, so every
piece of it is escaped here, and the only markup is the one this module writes.
"""
from __future__ import annotations

from collections.abc import Sequence
from html import escape

from convqa.evidence import evidence_passage, span_is_valid
from convqa.types import Answer, Hit, Passage


def highlight(text: str, start: int | None, end: int | None) -> str:
    """`text` escaped, with characters [start, end) wrapped in <mark>; unmarked when the span
    does not fit the text (a mismatched span is shown as no span, never as a wrong one)."""
    if not span_is_valid(text, start, end):
        return escape(text)
    return (escape(text[:start]) + '<mark class="convqa-answer">' + escape(text[start:end])
            + "</mark>" + escape(text[end:]))


def evidence_html(answer: Answer | None, passages: Sequence[Passage]) -> str:
    """The answer's evidence: title, id and passage text with the answer span highlighted."""
    if answer is None:
        return ('<div class="convqa-evidence"><p><em>No answer extracted (retrieval only): '
                'the retrieved passages are listed below.</em></p></div>')
    passage = evidence_passage(answer, passages)
    if passage is None:
        return ('<div class="convqa-evidence"><p><em>The evidence passage is not available.'
                '</em></p></div>')
    note = ""
    if not span_is_valid(passage.text, answer.start, answer.end):
        note = '<p class="convqa-note"><em>The answer span is not marked in this passage.</em></p>'
    return ('<div class="convqa-evidence">'
            f'<h4 class="convqa-title">{escape(passage.title or passage.id)}</h4>'
            f'<p class="convqa-id"><small>passage {escape(passage.id)} · answer score '
            f'{answer.score:.2f}</small></p>'
            f'<p class="convqa-text">{highlight(passage.text, answer.start, answer.end)}</p>'
            f'{note}</div>')


def passages_html(hits: Sequence[Hit], passages: Sequence[Passage],
                  answer: Answer | None = None) -> str:
    """The retrieved passages in rank order with their scores; the answer's span is marked in
    the passage it came from."""
    if not hits:
        return '<div class="convqa-passages"><p><em>Nothing matched.</em></p></div>'
    items = []
    for hit, passage in zip(hits, passages):
        if answer is not None and answer.passage_id == passage.id:
            text = highlight(passage.text, answer.start, answer.end)
        else:
            text = escape(passage.text)
        items.append(f'<li class="convqa-passage"><strong>{escape(passage.title or passage.id)}'
                     f'</strong> <small>(score {hit.score:.2f}, id {escape(passage.id)})</small>'
                     f'<br>{text}</li>')
    return f'<div class="convqa-passages"><ol>{"".join(items)}</ol></div>'


def chat_messages(messages: Sequence[dict[str, str]]) -> list[dict[str, str]]:
    """Chat messages with their text escaped: Gradio's Chatbot renders HTML in messages even
    with markdown off, and questions and answers must show as typed and as read."""
    return [{"role": m["role"], "content": escape(m["content"], quote=False)} for m in messages]


def timings_text(timings_ms: dict[str, float]) -> str:
    """One line of per-stage latency, e.g. "history 0.1 ms · retrieve 2.3 ms · total 2.4 ms"."""
    if not timings_ms:
        return ""
    parts = [f"{stage} {ms:.1f} ms" for stage, ms in timings_ms.items()]
    parts.append(f"total {sum(timings_ms.values()):.1f} ms")
    return "Latency: " + " · ".join(parts)
