"""What one chat turn does, independent of Gradio: answer, record the turn, render the views.

`ask` is the whole behaviour of the demo's send button; `apps.demo` only wires it to widgets, so
it is tested here without a browser.
"""
from __future__ import annotations

from dataclasses import dataclass

from convqa.errors import ConvQAError

from .pipelines import PipelineCache
from .render import chat_messages, evidence_html, passages_html, timings_text
from .session import ChatSession

EMPTY_QUESTION = "Type a question first."


@dataclass(frozen=True)
class TurnView:
    """Everything the page shows after a turn."""

    session: ChatSession
    evidence: str = ""   # HTML
    passages: str = ""   # HTML
    latency: str = ""    # plain text
    query: str = ""      # plain text: the question with its history, as the retriever got it
    notice: str = ""     # plain text: why nothing was answered, if so

    @property
    def messages(self) -> list[dict[str, str]]:
        return chat_messages(self.session.messages())


def reply_text(result) -> str:
    """The assistant's chat message for a pipeline result."""
    if result.answer is not None and result.answer.no_answer:
        return "No answer in the collection."
    if result.answer is not None:
        return result.answer.text
    if result.passages:
        top = result.passages[0]
        return f"(retrieval only) Top passage: {top.title or top.id}"
    return "(retrieval only) Nothing matched."


def ask(pipelines: PipelineCache, session: ChatSession, question: str | None, retriever: str,
        reader: str, top_k: float | None = None) -> TurnView:
    """Answer `question` after the session's earlier turns with the chosen path.

    An empty question or a ConvQAError (bad choice, missing index...) leaves the session as it
    was and says why in `notice`: the conversation is never changed by a failed turn.
    """
    question = (question or "").strip()
    if not question:
        return TurnView(session, notice=EMPTY_QUESTION)
    k = int(top_k) if top_k else None
    if k is not None and k < 1:
        return TurnView(session, notice="top-k must be at least 1.")
    try:
        pipeline = pipelines.get(retriever, reader)
        result = pipeline.answer(question, session.history(), k)
    except ConvQAError as exc:
        return TurnView(session, notice=f"Error: {exc}")
    answer_text = result.answer.text if result.answer is not None else None
    new_session = session.add(question, answer_text, reply_text(result))
    return TurnView(new_session,
                    evidence=evidence_html(result.answer, result.passages),
                    passages=passages_html(result.hits, result.passages, result.answer),
                    latency=timings_text(result.timings_ms), query=result.query_text)
