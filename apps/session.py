"""One browser session's conversation, kept in `gr.State` so sessions never share history.

The state is an immutable value: every turn returns a new `ChatSession`, so Gradio's per-session
copy of the initial value is the only thing that is ever mutated, and a handler that fails
half-way leaves the previous conversation intact.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from convqa.types import Turn


@dataclass(frozen=True)
class ChatTurn:
    """A finished exchange: what goes into the history (`turn`) and what the chat shows."""

    turn: Turn
    reply: str  # the text shown as the assistant's message (the answer, or a retrieval note)


@dataclass(frozen=True)
class ChatSession:
    turns: tuple[ChatTurn, ...] = field(default_factory=tuple)

    def history(self) -> list[Turn]:
        """The earlier turns, oldest first, as the pipeline's history strategies expect."""
        return [chat.turn for chat in self.turns]

    def add(self, question: str, answer: str | None, reply: str) -> ChatSession:
        """A new session with one more turn; `answer` None means no answer was extracted."""
        return replace(self, turns=self.turns + (ChatTurn(Turn(question, answer), reply),))

    def messages(self) -> list[dict[str, str]]:
        """The conversation in Gradio's chat format (`role`/`content` dicts)."""
        out: list[dict[str, str]] = []
        for chat in self.turns:
            out.append({"role": "user", "content": chat.turn.question})
            out.append({"role": "assistant", "content": chat.reply})
        return out

    def __len__(self) -> int:
        return len(self.turns)
