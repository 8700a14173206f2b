"""The history-strategy interface: (question, earlier turns) -> the query text an encoder reads.

Token accounting, the same for every strategy:
- `max_tokens` is the budget of the *content* tokens of the returned string, counted with the
  configured tokenizer and `add_special_tokens=False`: the utterances plus the separators
  between them. The encoder's own [CLS] ... [SEP] come on top, so an encoder should use
  `max_length = strategy.encoder_max_length` (`max_tokens` + the tokenizer's special tokens,
  130 for MiniLM at 128) and will then never truncate the query itself.
- The separator between utterances defaults to the tokenizer's sep token with a space on each
  side (" [SEP] " for MiniLM, one token); `separator` in the config replaces it. Its tokens count
  against the budget.
- Every result is checked by tokenizing the final string, so the budget holds even for a
  tokenizer whose tokens of a joined string differ from the sum of its parts.

Text handling: whitespace runs collapse to one space; empty or None answers (and questions of
earlier turns) are left out entirely rather than leaving an empty slot between separators;
answers equal (case-insensitively) to a marker in `unanswerable` are kept as they are unless
`drop_unanswerable` is set, because the reference setups (TopiOCQA's DPR) feed them as-is.
Truncated utterances are substrings of the cleaned originals, cut on word boundaries (see text.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..errors import ConfigError, DataError
from ..models import DEFAULT_MODEL, load_tokenizer, model_names
from ..registry import HISTORY_STRATEGIES, config_to_dict
from ..types import Conversation, Turn
from .text import TokenizedText, clean_text, tokenize_texts


@dataclass
class HistoryConfig:
    """Options every strategy shares."""

    max_tokens: int = 128
    tokenizer: str = DEFAULT_MODEL
    separator: str | None = None  # None: " {sep_token} " of the tokenizer (" [SEP] ")
    drop_unanswerable: bool = False
    unanswerable: tuple[str, ...] = ("UNANSWERABLE",)

    def __post_init__(self) -> None:
        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int):
            raise ValueError(f"max_tokens must be an int, got {self.max_tokens!r}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {self.max_tokens}")
        if not isinstance(self.tokenizer, str) or not self.tokenizer:
            raise ValueError(f"tokenizer must be a model name or path, got {self.tokenizer!r}")
        if self.separator is not None and not isinstance(self.separator, str):
            raise ValueError(f"separator must be a string, got {self.separator!r}")
        if isinstance(self.unanswerable, str):
            raise ValueError(f"unanswerable must be a list of strings, got {self.unanswerable!r}")
        self.unanswerable = tuple(self.unanswerable)
        if not all(isinstance(marker, str) for marker in self.unanswerable):
            raise ValueError(f"unanswerable must be a list of strings, got {self.unanswerable!r}")


class HistoryStrategy:
    """Base class. Subclasses implement `_format(question, history)` on validated input."""

    registered_name: str = ""  # set by HISTORY_STRATEGIES.register
    config_class: type[HistoryConfig] = HistoryConfig
    uses_question: bool = True  # False for the shortcut inputs that leave q_t out

    def __init__(self, config: HistoryConfig | None = None, tokenizer: Any = None):
        """`tokenizer` overrides `config.tokenizer` (for tests with a tokenizer made in code)."""
        self.config = config if config is not None else self.config_class()
        self._tokenizer = tokenizer
        self._separator: str | None = None
        self._separator_tokens: int | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config!r})"

    # -- tokenizer ---------------------------------------------------------------------------
    @property
    def tokenizer(self) -> Any:
        """Loaded on first use (never at import or construction) and kept."""
        if self._tokenizer is None:
            try:
                tokenizer = load_tokenizer(self.config.tokenizer)
            except (OSError, ValueError) as exc:
                raise ConfigError(f"history strategy '{self.registered_name}': cannot load "
                                  f"tokenizer '{self.config.tokenizer}': "
                                  f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
                                  ) from None
            self._tokenizer = tokenizer
        if not getattr(self._tokenizer, "is_fast", False):
            raise ConfigError(f"history strategy '{self.registered_name}': tokenizer "
                              f"'{self.config.tokenizer}' is not a fast tokenizer (offsets needed)")
        return self._tokenizer

    @property
    def separator(self) -> str:
        if self._separator is None:
            if self.config.separator is not None:
                self._separator = self.config.separator
            else:
                sep = getattr(self.tokenizer, "sep_token", None)
                self._separator = f" {sep} " if sep else " "
        return self._separator

    @property
    def separator_tokens(self) -> int:
        if self._separator_tokens is None:
            self._separator_tokens = self.count_tokens(self.separator)
        return self._separator_tokens

    @property
    def encoder_max_length(self) -> int:
        """`max_length` for the encoder: the content budget plus its [CLS]/[SEP]."""
        return self.config.max_tokens + self.tokenizer.num_special_tokens_to_add(pair=False)

    def count_tokens(self, text: str) -> int:
        """Tokens of `text` without special tokens: what `max_tokens` bounds."""
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def tokenize(self, texts: Sequence[str]) -> list[TokenizedText]:
        return tokenize_texts(self.tokenizer, texts)

    # -- formatting --------------------------------------------------------------------------
    def format(self, question: str, history: Sequence[Turn]) -> str:
        """The query text for `question` asked after the turns `history` (oldest first)."""
        if not isinstance(question, str):
            raise DataError(f"expected a string, got {type(question).__name__}", field="question")
        if self.uses_question and not clean_text(question):
            raise DataError("the current question is empty", field="question")
        if isinstance(history, (str, bytes)) or not isinstance(history, Sequence):
            raise DataError(f"expected a list of turns, got {type(history).__name__}",
                            field="history")
        for index, turn in enumerate(history):
            _check_turn(turn, index)
        return self._format(clean_text(question), history)

    def format_turn(self, conversation: Conversation, turn_number: int) -> str:
        """The query text of turn `turn_number` (1-based) of `conversation`."""
        try:
            turn = conversation.turn(turn_number)
        except IndexError as exc:
            raise DataError(str(exc), field="turn") from None
        try:
            return self.format(turn.question, conversation.history(turn_number))
        except DataError as exc:
            raise DataError(f"conversation {conversation.id} turn {turn_number}: {exc.message}",
                            exc.path, exc.line, exc.field) from None

    def _format(self, question: str, history: Sequence[Turn]) -> str:
        raise NotImplementedError

    # -- helpers for subclasses --------------------------------------------------------------
    def answer_text(self, answer: str | None) -> str:
        """The cleaned answer as it enters the query, "" when it is left out."""
        text = clean_text(answer or "")
        if self.config.drop_unanswerable and text.casefold() in {
                clean_text(m).casefold() for m in self.config.unanswerable}:
            return ""
        return text

    def utterances(self, history: Sequence[Turn], answers: bool = True) -> list[str]:
        """The non-empty cleaned utterances q1, a1, q2, ... of `history`, oldest first."""
        result = []
        for turn in history:
            parts = [clean_text(turn.question)]
            if answers:
                parts.append(self.answer_text(turn.answer))
            result.extend(part for part in parts if part)
        return result

    def join(self, parts: Sequence[TokenizedText]) -> str:
        return self.separator.join(part.text for part in parts if part.text)

    def within_budget(self, assemble: Callable[[int], str]) -> str:
        """Call `assemble(budget)` with a smaller budget until the final string fits."""
        limit = self.config.max_tokens
        budget = limit
        while budget > 0:
            text = assemble(budget)
            excess = self.count_tokens(text) - limit
            if excess <= 0:
                return text
            budget -= excess
        raise ConfigError(f"history strategy '{self.registered_name}': tokenizer "
                          f"'{self.config.tokenizer}' cannot fit the query in "
                          f"max_tokens={limit}")

    # -- config round trip -------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """`{"name": ..., **options}`, plain lists and scalars (safe for JSON and YAML)."""
        data = config_to_dict(self.registered_name, self.config)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in data.items()}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | str) -> "HistoryStrategy":
        """Inverse of `to_dict`. On a concrete strategy class the name may be left out."""
        if isinstance(data, dict) and "name" not in data and cls.registered_name:
            data = {"name": cls.registered_name, **data}
        strategy = build_history_strategy(data)
        if not isinstance(strategy, cls):
            raise ConfigError(f"history strategy '{strategy.registered_name}' is not a "
                              f"{cls.__name__}")
        return strategy


def _check_turn(turn: Any, index: int) -> None:
    question = getattr(turn, "question", None)
    if not isinstance(question, str):
        raise DataError(f"expected a Turn with a string question, got {question!r}",
                        field=f"history[{index}].question")
    answer = getattr(turn, "answer", None)
    if answer is not None and not isinstance(answer, str):
        raise DataError(f"expected a string or None, got {type(answer).__name__}",
                        field=f"history[{index}].answer")


def build_history_strategy(spec: str | dict[str, Any] | HistoryStrategy) -> HistoryStrategy:
    """A strategy from its name, `{"name": ..., option: value}`, or an existing strategy."""
    if isinstance(spec, HistoryStrategy):
        return spec
    return HISTORY_STRATEGIES.build(spec)


def model_history_strategy(spec: str | dict[str, Any] | HistoryStrategy, model: Any
                           ) -> HistoryStrategy:
    """The strategy a model (reader, reranker: `model.config.model`, `model.tokenizer`) formats
    its queries with. Where it counts tokens with the tokenizer of the model's own base, it is
    given the tokenizer object the model already holds instead of loading that base by name:
    the same tokenizer, so the same queries, and a model folder that carries its tokenizer files
    is then enough on a machine without the default model's package (a lent GPU)."""
    strategy = build_history_strategy(spec)
    tokenizer = getattr(model, "tokenizer", None)
    if (strategy._tokenizer is None and tokenizer is not None and
            model_names(strategy.config.tokenizer) & model_names(model.config.model)):
        strategy._tokenizer = tokenizer
    return strategy
