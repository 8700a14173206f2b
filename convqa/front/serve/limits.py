"""The request checks that depend on the server's settings (`ServeConfig`), each a 422 naming
the field: what the pydantic schema cannot know (lengths, top_k bound, known pipelines)."""
from __future__ import annotations

from collections.abc import Collection

from .config import ServeConfig
from .errors import ApiError
from .schemas import AnswerRequest


def check_answer_request(request: AnswerRequest, config: ServeConfig,
                         pipelines: Collection[str]) -> None:
    _check_unicode(request)
    question = request.question.strip()
    if not question:
        raise ApiError(422, "must not be empty", "question")
    if not any(char.isalnum() for char in question):  # e.g. "?" or control characters only
        raise ApiError(422, "has no letter or digit to search for", "question")
    if len(question) > config.max_question_chars:
        raise ApiError(422, f"{len(question)} characters, the limit is "
                            f"{config.max_question_chars}", "question")
    history = request.history or []
    if len(history) > config.max_history_turns:
        raise ApiError(422, f"{len(history)} turns, the limit is {config.max_history_turns}",
                       "history")
    for number, turn in enumerate(history):
        if not turn.question.strip():
            raise ApiError(422, "must not be empty", f"history[{number}].question")
    chars = sum(len(turn.question) + len(turn.answer or "") for turn in history)
    if chars > config.max_history_chars:
        raise ApiError(422, f"{chars} characters in all, the limit is "
                            f"{config.max_history_chars}", "history")
    if request.top_k is not None and not 1 <= request.top_k <= config.max_top_k:
        raise ApiError(422, f"must be between 1 and {config.max_top_k}, got {request.top_k}",
                       "top_k")
    if request.pipeline is not None and request.pipeline not in pipelines:
        raise ApiError(422, f"unknown pipeline {request.pipeline!r} (known: "
                            f"{', '.join(pipelines)}; see GET /v1/pipelines)", "pipeline")


def _check_unicode(request: AnswerRequest) -> None:
    """JSON may carry lone surrogates ("\\ud800"), which no tokenizer reads and no UTF-8
    reply can hold: refuse them here rather than fail later."""
    texts = [("question", request.question)]
    for number, turn in enumerate(request.history or []):
        texts += [(f"history[{number}].question", turn.question),
                  (f"history[{number}].answer", turn.answer or "")]
    for field, text in texts:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ApiError(422, f"not valid Unicode (a lone surrogate at character "
                                f"{exc.start})", field) from None
