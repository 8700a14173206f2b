"""Helpers for the `convqa serve` tests: wait for readiness, and a pipeline that holds its
answers until released (to fill the worker pool deterministically)."""
from __future__ import annotations

import threading
import time


def wait_ready(client, timeout: float = 60.0) -> dict:
    """Poll GET /health until it answers 200; its body."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        response = client.get("/health")
        if response.status_code == 200:
            return response.json()
        time.sleep(0.02)
    raise AssertionError(f"not ready after {timeout} s: {response.json()}")


def wait_for(condition, timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


class GatedPipeline:
    """A real pipeline whose `answer` waits for `release()` first and counts the answers that
    run at once: the pool tests use it to keep workers busy for as long as they need."""

    def __init__(self, pipeline):
        self.pipeline = pipeline
        self.kind = pipeline.kind
        self.history = self.history_strategy = pipeline.history
        self.top_k = pipeline.top_k
        self.config = pipeline.config
        self.reader = pipeline.reader
        self._gate = threading.Event()
        self._lock = threading.Lock()
        self.running = 0
        self.most_at_once = 0
        self.started = 0

    def release(self) -> None:
        self._gate.set()

    def answer(self, question, history=(), top_k=None):
        with self._lock:
            self.running += 1
            self.started += 1
            self.most_at_once = max(self.most_at_once, self.running)
        try:
            if not self._gate.wait(30):
                raise TimeoutError("the test never released the pipeline")
            return self.pipeline.answer(question, history, top_k)
        finally:
            with self._lock:
                self.running -= 1


class DelayedPipeline:
    """A real pipeline whose every answer takes at least `delay_s`: requests stay in flight
    long enough for a test to send SIGTERM while they are answered or queued."""

    def __init__(self, pipeline, delay_s: float):
        self.pipeline = pipeline
        self.kind = pipeline.kind
        self.history = self.history_strategy = pipeline.history
        self.top_k = pipeline.top_k
        self.config = pipeline.config
        self.reader = pipeline.reader
        self.delay_s = delay_s

    def answer(self, question, history=(), top_k=None):
        time.sleep(self.delay_s)
        return self.pipeline.answer(question, history, top_k)


def serve_delayed_films(folder: str, delay_s: str) -> None:
    """Serve BM25 over the film passages with `DelayedPipeline` on a free loopback port, with
    the server code of `convqa serve` (bind, uvicorn, graceful shutdown)."""
    from pathlib import Path

    from demo_helpers import build_film_config

    from convqa.pipeline import Pipeline
    from convqa.front.serve import ServeConfig, create_app
    from convqa.front.serve.server import bind, serve, setup_logging

    pipeline = DelayedPipeline(Pipeline.from_config(build_film_config(Path(folder))),
                               float(delay_s))
    app = create_app({"films": pipeline}, ServeConfig(workers=1, queue_size=8))
    setup_logging()
    serve(app, bind("127.0.0.1", 0), grace_s=30)


if __name__ == "__main__":
    import sys

    serve_delayed_films(*sys.argv[1:])
