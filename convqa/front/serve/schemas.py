"""The JSON of the HTTP API: pydantic models, so /openapi.json and /docs describe every field.

Requests are strict (no coercion: `"top_k": "5"` or `"question": 3` is an error, not a guess)
and closed (an unknown field is an error naming it, so a typo never passes silently). Limits
that come from the server's settings (lengths, top_k) are checked in `convqa.front.serve.limits`.
"""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

CONVERSATION_ID = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"


class Request(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class HistoryTurn(Request):
    question: str = Field(description="an earlier question of the conversation")
    answer: str | None = Field(None, description="the answer it got (null or absent: none)")


class AnswerRequest(Request):
    question: str = Field(description="the new question", examples=["When was it released?"])
    history: list[HistoryTurn] | None = Field(
        None, description="earlier turns, oldest first. With a conversation_id the server keeps "
                          "the history itself: then this only starts a conversation it does not "
                          "know yet")
    conversation_id: str | None = Field(
        None, pattern=CONVERSATION_ID,
        description="keep this conversation's history on the server: send only the new "
                    "question each turn (1-128 characters: letters, digits, _ . : -)")
    top_k: int | None = Field(None, description="passages to retrieve (default: the pipeline's)")
    pipeline: str | None = Field(None, description="an answering path of GET /v1/pipelines "
                                                   "(default: the server's default)")


class Evidence(BaseModel):
    passage_id: str
    title: str
    text: str
    start: int | None = Field(description="character offset of the answer in text")
    end: int | None = Field(description="end of the answer in text (exclusive)")


class RetrievedPassage(BaseModel):
    passage_id: str
    title: str
    score: float


class AnswerResponse(BaseModel):
    answer: str | None = Field(description="null when the pipeline has no reader")
    no_answer: bool = Field(False, description="the collection holds no answer (answer is \"\"; "
                                                "evidence: the best passage)")
    score: float | None
    evidence: Evidence | None
    passages: list[RetrievedPassage]
    query: str = Field(description="the text the retriever saw: the question with its history")
    timings_ms: dict[str, float] = Field(
        description="per stage: queue (waiting for a worker), the pipeline's stages, total")
    pipeline: str
    conversation_id: str | None
    history_turns: int = Field(description="earlier turns the answer was computed with")


class PipelineInfo(BaseModel):
    name: str
    retriever: str
    reader: str | None = Field(description="null: retrieval only, or a phrase index")
    history: dict | None = Field(description="the history strategy that makes `query`")
    top_k: int | None
    ready: bool


class PipelineList(BaseModel):
    default: str
    pipelines: list[PipelineInfo]
    limits: dict[str, int | float]


class Health(BaseModel):
    status: str = Field(description="loading | ready | failed | stopping")
    ready: bool
    detail: str | None = None
    workers: dict[str, int] | None = None
    conversations: int


class ErrorBody(BaseModel):
    error: str = Field(description="one line: the field, then what is wrong with it")
    field: str | None = Field(None, description="the request field at fault, if any")
