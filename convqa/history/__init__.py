"""History formatting: one configurable strategy turns a conversation turn into query text.

    from convqa.history import build_history_strategy
    strategy = build_history_strategy({"name": "current_first", "window": 6, "max_tokens": 128})
    query = strategy.format(turn.question, conversation.history(n))

Strategies are registered in `convqa.registry.HISTORY_STRATEGIES`; see `strategies.py` for the
list and `base.py` for how tokens are counted.
"""
from .base import HistoryConfig, HistoryStrategy, build_history_strategy, model_history_strategy
from .strategies import (CurrentFirst, CurrentFirstConfig, Full, HistoryOnly, LastAnswer,
                         OldestFirst, OldestFirstConfig, QuestionOnly, QuestionsOnly,
                         QuestionsOnlyConfig, pack_in_order, pack_oldest_first)
from .text import TokenizedText, clean_text

__all__ = ["CurrentFirst", "CurrentFirstConfig", "Full", "HistoryConfig", "HistoryOnly",
           "HistoryStrategy", "LastAnswer", "OldestFirst", "OldestFirstConfig", "QuestionOnly",
           "QuestionsOnly", "QuestionsOnlyConfig", "TokenizedText", "build_history_strategy",
           "clean_text", "model_history_strategy", "pack_in_order", "pack_oldest_first"]
