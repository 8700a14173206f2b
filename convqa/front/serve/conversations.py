"""The conversations the server remembers for clients that send only the new question.

Bounded three ways, so no client can grow the server's memory without limit: each keeps its
last `max_turns` turns, one unused for `idle_s` seconds is forgotten, and past
`max_conversations` the least recently used is forgotten.

A conversation answers one question at a time: `begin` hands out its history and marks it
busy until `finish` (the answered turn is appended) or `abandon`. A second request for a busy
conversation is refused (`ConversationBusy`) instead of being answered with a history that is
about to change, which would make the order of the turns depend on thread timing.
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from convqa.types import Turn


class ConversationBusy(Exception):
    """The conversation is answering another question."""


@dataclass
class _Conversation:
    turns: list[Turn] = field(default_factory=list)
    last_used: float = 0.0
    busy: bool = False


class ConversationStore:
    def __init__(self, max_turns: int, idle_s: float, max_conversations: int,
                 clock: Callable[[], float] = time.monotonic):
        self.max_turns = max_turns
        self.idle_s = idle_s
        self.max_conversations = max_conversations
        self._clock = clock
        self._items: OrderedDict[str, _Conversation] = OrderedDict()  # least recent first
        self._lock = threading.Lock()

    def begin(self, conversation_id: str, seed: Sequence[Turn] = ()) -> tuple[list[Turn], bool]:
        """(the conversation's history, whether it already existed), and mark it busy. A new
        conversation starts with `seed` (the request's own history, newest `max_turns` kept)."""
        with self._lock:
            now = self._clock()
            self._expire(now)
            item = self._items.get(conversation_id)
            existed = item is not None
            if item is None:
                item = self._items[conversation_id] = _Conversation(
                    list(seed)[-self.max_turns:])
            elif item.busy:
                raise ConversationBusy(conversation_id)
            item.busy = True
            item.last_used = now
            self._items.move_to_end(conversation_id)
            self._evict(keep=conversation_id)
            return list(item.turns), existed

    def finish(self, conversation_id: str, turn: Turn) -> None:
        """Append the answered `turn` and free the conversation (recreated if it was evicted
        or forgotten meanwhile: the client's next question still follows this answer)."""
        with self._lock:
            item = self._items.get(conversation_id)
            if item is None:
                item = self._items[conversation_id] = _Conversation()
            item.turns = (item.turns + [turn])[-self.max_turns:]
            item.busy = False
            item.last_used = self._clock()
            self._items.move_to_end(conversation_id)
            self._evict(keep=conversation_id)

    def abandon(self, conversation_id: str, created: bool) -> None:
        """Free the conversation after a failed answer; one that the failed request created is
        dropped again, so a refused first question leaves nothing behind."""
        with self._lock:
            item = self._items.get(conversation_id)
            if item is None:
                return
            if created and item.busy:
                del self._items[conversation_id]
            else:
                item.busy = False

    def forget(self, conversation_id: str) -> bool:
        """Drop a conversation; False when it was not known (or had expired)."""
        with self._lock:
            self._expire(self._clock())
            return self._items.pop(conversation_id, None) is not None

    def __len__(self) -> int:
        with self._lock:
            self._expire(self._clock())
            return len(self._items)

    def _expire(self, now: float) -> None:
        """Drop idle conversations unused for `idle_s`: the oldest come first (every use moves
        a conversation to the end), so the scan stops at the first recent one."""
        stale = []
        for key, item in self._items.items():
            if now - item.last_used <= self.idle_s:
                break
            if not item.busy:
                stale.append(key)
        for key in stale:
            del self._items[key]

    def _evict(self, keep: str) -> None:
        """Drop least recently used idle conversations past the bound; busy ones (their answer
        is being computed) and `keep` (just used) stay."""
        excess = len(self._items) - self.max_conversations
        if excess > 0:
            idle = [key for key, item in self._items.items() if not item.busy and key != keep]
            for key in idle[:excess]:
                del self._items[key]
