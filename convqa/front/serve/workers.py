"""A bounded pool of answering threads in front of models that must not be called concurrently.

Tokenizers (and the models' scratch state) are not safe to use from two threads at once, so
each model copy ("replica") is used by one thread at a time: worker i uses replica
i % len(replicas) under that replica's lock. With one replica the workers take turns on it;
with as many replicas as workers each worker has its own copy.

Waiting work is bounded: `submit` refuses with `Overloaded` when `queue_size` jobs already wait,
so a burst gets a fast 503 instead of an ever longer wait. `close` stops taking work, lets the
workers finish everything already accepted, then ends them.
"""
from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

_STOP = object()


class Overloaded(Exception):
    """Every worker is busy and the queue is full."""


class PoolClosed(Exception):
    """The pool is shutting down and takes no new work."""


class WorkerPool:
    def __init__(self, replicas: Sequence[Any], workers: int, queue_size: int,
                 name: str = "convqa-worker"):
        if not replicas:
            raise ValueError("a worker pool needs at least one replica")
        if workers < 1 or queue_size < 1:
            raise ValueError("a worker pool needs at least one worker and one queue slot")
        self._replicas = list(replicas)
        self._locks = [threading.Lock() for _ in self._replicas]
        self._queue: queue.Queue = queue.Queue(maxsize=queue_size)
        self._closed = False
        self._state = threading.Lock()
        self._busy = 0
        self._threads = [threading.Thread(target=self._work, args=(i,), daemon=True,
                                          name=f"{name}-{i}") for i in range(workers)]
        for thread in self._threads:
            thread.start()

    @property
    def workers(self) -> int:
        return len(self._threads)

    def stats(self) -> dict[str, int]:
        """Jobs being answered and jobs waiting, now."""
        with self._state:
            return {"workers": len(self._threads), "replicas": len(self._replicas),
                    "busy": self._busy, "queued": self._queue.qsize(),
                    "queue_size": self._queue.maxsize}

    def submit(self, job: Callable[[Any], Any]) -> Future:
        """Run `job(replica)` on a worker; a Future of its result. Raises `Overloaded` when
        the queue is full, `PoolClosed` after `close`."""
        future: Future = Future()
        with self._state:
            if self._closed:
                raise PoolClosed()
            try:
                self._queue.put_nowait((job, future))
            except queue.Full:
                raise Overloaded() from None
        return future

    def close(self, wait: bool = True) -> None:
        """Take no new work; the workers finish what was accepted, then stop."""
        with self._state:
            if self._closed:
                return
            self._closed = True
        for _ in self._threads:
            self._queue.put(_STOP)  # blocks only while accepted jobs still fill the queue
        if wait:
            for thread in self._threads:
                thread.join()

    def _work(self, index: int) -> None:
        replica = index % len(self._replicas)
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            job, future = item
            if not future.set_running_or_notify_cancel():
                continue
            with self._state:
                self._busy += 1
            try:
                with self._locks[replica]:
                    result = job(self._replicas[replica])
            except BaseException as exc:  # the caller decides what an error means
                future.set_exception(exc)
            else:
                future.set_result(result)
            finally:
                with self._state:
                    self._busy -= 1
