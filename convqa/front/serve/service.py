"""What the server does, without HTTP: load the pipelines, then answer on the worker pool,
keeping conversations.

Loading runs in a background thread after the server binds (`start_loading`), so /health can
say "loading" (and orchestrators wait) instead of the port refusing connections for minutes;
answers before that are 503 with Retry-After. A load that fails (bad index, missing model) is
reported by /health with its one-line reason, and the server stays up to say so.
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

from convqa.errors import ConvQAError
from convqa.types import Turn

from .config import ServeConfig
from .conversations import ConversationBusy, ConversationStore
from .errors import ApiError
from .limits import check_answer_request
from .pipelines import PipelineSource, describe
from .responses import answer_response
from .schemas import AnswerRequest, AnswerResponse
from .workers import Overloaded, PoolClosed, WorkerPool

log = logging.getLogger("convqa.front.serve")

LOADING, READY, FAILED, STOPPING = "loading", "ready", "failed", "stopping"


class AnswerService:
    def __init__(self, source: PipelineSource, config: ServeConfig | None = None,
                 clock=time.monotonic):
        self.source = source
        self.config = config or ServeConfig()
        if source.copies is not None and self.config.replicas > source.copies:
            raise ConvQAError(f"serve: {self.config.replicas} replicas asked, but these "
                              f"pipelines can be built {source.copies} time(s)")
        self.conversations = ConversationStore(self.config.conversation_max_turns,
                                               self.config.conversation_idle_s,
                                               self.config.max_conversations, clock)
        self.status = LOADING
        self.detail: str | None = None
        self.pool: WorkerPool | None = None
        self._first: dict[str, Any] = {}  # the first copy, to describe the paths
        self._loader: threading.Thread | None = None

    @property
    def default(self) -> str:
        return self.source.names[0]

    # -- loading and stopping -------------------------------------------------------------
    def start_loading(self) -> threading.Thread:
        self._loader = threading.Thread(target=self.load, name="convqa-load", daemon=True)
        self._loader.start()
        return self._loader

    def load(self) -> None:
        """Build the copies and start the workers; failures end in status "failed"."""
        began = time.perf_counter()
        try:
            _set_torch_threads(self.config.threads_per_replica())
            replicas = []
            for number in range(self.config.replicas):
                log.info("loading copy %d of %d of: %s", number + 1, self.config.replicas,
                         ", ".join(self.source.names))
                replicas.append(self.source.build())
                missing = [name for name in self.source.names if name not in replicas[-1]]
                if missing:
                    raise ConvQAError(f"serve: the pipeline source built no {missing[0]!r}")
            self._first = replicas[0]
            pool = WorkerPool(replicas, self.config.workers, self.config.queue_size)
        except ConvQAError as exc:
            self._fail(str(exc))
            return
        except Exception as exc:  # a bug: keep serving /health with the reason
            log.exception("loading the pipelines failed")
            self._fail(f"{type(exc).__name__}: {exc}")
            return
        if self.status == STOPPING:  # stopped while loading
            pool.close()
            return
        self.pool = pool
        self.status = READY
        log.info("ready in %.1f s: %s", time.perf_counter() - began, ", ".join(self.source.names))

    def _fail(self, reason: str) -> None:
        self.detail = " ".join(reason.split())
        self.status = FAILED
        log.error("cannot serve: %s", self.detail)

    def close(self) -> None:
        """Refuse new questions, finish the accepted ones (SIGTERM, after the HTTP server
        has drained its connections)."""
        self.status = STOPPING
        if self.pool is not None:
            self.pool.close(wait=True)

    # -- reporting ------------------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        return {"status": self.status, "ready": self.status == READY, "detail": self.detail,
                "workers": self.pool.stats() if self.pool is not None else None,
                "conversations": len(self.conversations)}

    def pipelines(self) -> dict[str, Any]:
        ready = self.status == READY
        paths = [describe(p.name, self._first.get(p.name), p, ready) for p in self.source.paths]
        limits = {key: getattr(self.config, key) for key in (
            "max_question_chars", "max_history_turns", "max_history_chars", "max_top_k",
            "conversation_max_turns", "conversation_idle_s", "max_conversations")}
        return {"default": self.default, "pipelines": paths, "limits": limits}

    # -- answering ------------------------------------------------------------------------
    async def answer(self, request: AnswerRequest) -> AnswerResponse:
        self._require_ready()
        check_answer_request(request, self.config, self.source.names)
        name = request.pipeline or self.default
        question = request.question.strip()
        history = [Turn(t.question.strip(), t.answer) for t in request.history or []]
        conversation = request.conversation_id
        existed = False
        if conversation is not None:
            history, existed = self._begin(conversation, history, bool(request.history))
        try:
            result, timings = await self._run(name, question, history, request.top_k)
        except BaseException:
            if conversation is not None:
                self.conversations.abandon(conversation, created=not existed)
            raise
        if conversation is not None:
            answer = result.answer.text if result.answer is not None else None
            self.conversations.finish(conversation, Turn(question, answer))
        return answer_response(result, name, conversation, len(history), timings)

    def _require_ready(self) -> None:
        if self.status == LOADING:
            raise ApiError(503, "the server is loading its models and indexes; see GET /health",
                           headers={"Retry-After": "5"})
        if self.status != READY:
            raise ApiError(503, f"the server is {self.status}"
                                + (f": {self.detail}" if self.detail else ""))

    def _begin(self, conversation: str, seed: list[Turn], sent_history: bool
               ) -> tuple[list[Turn], bool]:
        try:
            history, existed = self.conversations.begin(conversation, seed)
        except ConversationBusy:
            raise ApiError(409, "this conversation is answering another question; send the "
                                "next one after that answer", "conversation_id",
                           {"Retry-After": str(self.config.retry_after_s)}) from None
        if existed and sent_history:
            self.conversations.abandon(conversation, created=False)
            raise ApiError(422, "the server keeps this conversation's history: send only the "
                                "new question (or DELETE the conversation to start over)",
                           "history")
        return history, existed

    async def _run(self, name: str, question: str, history: list[Turn], top_k: int | None):
        submitted = time.perf_counter()
        started: list[float] = []

        def job(replica: dict[str, Any]):
            started.append(time.perf_counter())
            return replica[name].answer(question, history, top_k)

        assert self.pool is not None
        try:
            future = self.pool.submit(job)
        except Overloaded:
            raise ApiError(503, f"all {self.pool.workers} workers are busy and "
                                f"{self.config.queue_size} requests wait; retry later",
                           headers={"Retry-After": str(self.config.retry_after_s)}) from None
        except PoolClosed:
            raise ApiError(503, "the server is stopping") from None
        try:
            result = await asyncio.wrap_future(future)
        except asyncio.CancelledError:  # the client went away: drop the job if still queued
            future.cancel()
            raise
        except ConvQAError as exc:
            raise ApiError(422, f"cannot answer: {exc}") from None
        done = time.perf_counter()
        queue_ms = ((started[0] if started else done) - submitted) * 1000
        timings = {"queue": queue_ms, **result.timings_ms, "total": (done - submitted) * 1000}
        return result, timings


def _set_torch_threads(count: int) -> None:
    import torch

    torch.set_num_threads(count)
