"""The HTTP API of `convqa serve`: `create_app(pipelines, config)` returns the FastAPI app.

    POST   /v1/answer                   answer a question (with history or a conversation_id)
    DELETE /v1/conversations/{id}       forget a conversation kept by the server
    GET    /v1/pipelines                the answering paths, their history strategies, limits
    GET    /health                      200 once models and indexes are loaded, else 503
    GET    /docs, /openapi.json         the OpenAPI description

`pipelines` is a `PipelineSource` (built in the background once the server starts) or a
mapping {name: pipeline} already built (tests inject small ones). Every error is one line of
JSON naming the field at fault (convqa.front.serve.errors). FastAPI's OpenTelemetry hooks are
switched off: nothing leaves the process.
"""
from __future__ import annotations

import asyncio
import inspect
from collections.abc import Mapping
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Path
from fastapi.responses import JSONResponse

from convqa import __version__

from .body_limit import BodyLimit
from .config import ServeConfig
from .errors import ApiError, install_error_handlers
from .pipelines import PipelineSource, built
from .schemas import CONVERSATION_ID, AnswerRequest, AnswerResponse, ErrorBody, Health, PipelineList
from .service import AnswerService

NO_TELEMETRY = {"tracing": False, "metrics": False, "logs": False, "operation_spans": False,
                "auto_configure": False}
ERRORS = {status: {"model": ErrorBody} for status in (400, 404, 409, 413, 422, 503)}


def create_app(pipelines: PipelineSource | Mapping[str, Any],
               config: ServeConfig | None = None) -> FastAPI:
    """The API over `pipelines`; loading starts when the server starts (the app's lifespan:
    `with TestClient(app)` or uvicorn) and /health says when it is done."""
    config = config or ServeConfig()
    source = pipelines if isinstance(pipelines, PipelineSource) else built(pipelines)
    service = AnswerService(source, config)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        service.start_loading()
        yield
        await asyncio.to_thread(service.close)  # after uvicorn has drained the connections

    options = {"telemetry": NO_TELEMETRY} if _has_telemetry() else {}
    app = FastAPI(title="convqa", version=__version__, lifespan=lifespan,
                  description="Open-domain conversational question answering with evidence.",
                  **options)
    app.state.service = service
    install_error_handlers(app)
    app.add_middleware(BodyLimit, max_bytes=config.max_body_bytes)

    @app.post("/v1/answer", response_model=AnswerResponse, responses=ERRORS,
              summary="Answer a question in a conversation")
    async def answer(request: AnswerRequest) -> AnswerResponse:
        """With `conversation_id` the server keeps the history: send only the new question.
        503 with Retry-After when every worker is busy and the queue is full."""
        return await service.answer(request)

    @app.delete("/v1/conversations/{conversation_id}", status_code=204, responses=ERRORS,
                summary="Forget a conversation kept by the server")
    async def forget(conversation_id: str = Path(pattern=CONVERSATION_ID)) -> None:
        if not service.conversations.forget(conversation_id):
            raise ApiError(404, "no such conversation (never started, forgotten or expired)",
                           "conversation_id")

    @app.get("/v1/pipelines", response_model=PipelineList, summary="The answering paths")
    async def pipelines_() -> dict[str, Any]:
        return service.pipelines()

    @app.get("/health", response_model=Health, responses={503: {"model": Health}},
             summary="200 when the models and indexes are loaded, else 503")
    async def health() -> JSONResponse:
        body = service.health()
        return JSONResponse(Health(**body).model_dump(), status_code=200 if body["ready"]
                            else 503)

    return app


def _has_telemetry() -> bool:
    """Whether this FastAPI has OpenTelemetry hooks (newer releases) to switch off."""
    return "telemetry" in inspect.signature(FastAPI.__init__).parameters
