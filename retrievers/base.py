"""What every retriever offers: text query in, ranked `Hit`s out.

Conversational retrieval is a retriever plus a history strategy (`ConversationalRetriever`),
so the same BM25 or dense index serves q_t alone, X_t, or any shortcut input by one setting.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Sequence

from convqa.types import Hit, Turn


class Retriever(ABC):
    @abstractmethod
    def retrieve_batch(self, queries: Sequence[str], k: int = 10) -> list[list[Hit]]:
        """Top-`k` hits for each query, best first, ranks 1-based."""

    def retrieve(self, query: str, k: int = 10) -> list[Hit]:
        return self.retrieve_batch([query], k)[0]


class ConversationalRetriever:
    """Formats the conversation with a history strategy, then retrieves with the query text."""

    def __init__(self, retriever: Retriever, history):
        self.retriever = retriever
        self.history = history

    def query_text(self, question: str, history: Sequence[Turn] = ()) -> str:
        return self.history.format(question, list(history))

    def retrieve(self, question: str, history: Sequence[Turn] = (), k: int = 10) -> list[Hit]:
        return self.retriever.retrieve(self.query_text(question, history), k)
