"""The settings of `convqa serve`: request limits, worker pool, conversation memory.

One typed dataclass, read from an optional YAML file (`convqa serve --serve-config FILE`, keys
as the fields below; an unknown key or a wrong type is a one-line error) and overridden by the
command line's flags. Every limit is a bound on memory or time, so none can be switched off.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, fields


@dataclass
class ServeConfig:
    # requests
    max_question_chars: int = 1000      # a longer question is refused (422)
    max_history_turns: int = 50         # turns a request may send in `history`
    max_history_chars: int = 20000      # all questions and answers of `history` together
    max_top_k: int = 50                 # largest `top_k` a request may ask for
    max_body_bytes: int = 262144        # larger request bodies are refused (413) unread
    # worker pool
    workers: int = 1                    # threads answering at once
    replicas: int = 1                   # model copies; workers share them, one at a time each
    torch_threads: int = 0              # torch threads per process; 0: cores / replicas
    queue_size: int = 32                # requests waiting for a worker; more get 503
    retry_after_s: int = 1              # Retry-After of a 503
    # conversations kept by the server (requests with `conversation_id`)
    conversation_max_turns: int = 20    # turns kept per conversation (oldest dropped)
    conversation_idle_s: float = 1800.0  # a conversation unused this long is forgotten
    max_conversations: int = 10000      # beyond this the least recently used is forgotten
    # shutdown
    shutdown_grace_s: float = 30.0      # SIGTERM: longest wait for requests in flight

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"{item.name} must be a number, got {value!r}")
            smallest = 0 if item.name == "torch_threads" else 1
            if value < smallest:
                raise ValueError(f"{item.name} must be at least {smallest}, got {value!r}")
        if self.replicas > self.workers:
            raise ValueError(f"replicas ({self.replicas}) cannot exceed workers "
                             f"({self.workers}): a copy no worker uses is wasted memory")

    def threads_per_replica(self, cores: int | None = None) -> int:
        """Torch threads: the cores shared by the copies that can run at once."""
        if self.torch_threads:
            return self.torch_threads
        return max(1, (cores or usable_cores()) // self.replicas)


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS tells)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def load_serve_config(path: str | os.PathLike | None = None, **overrides) -> ServeConfig:
    """The settings of `path` (YAML; None: the defaults) with `overrides` (None values are
    ignored, so unset command-line flags keep the file's value)."""
    from convqa.config import load_yaml
    from convqa.registry import build_dataclass

    values = load_yaml(path) if path else {}
    values.update({key: value for key, value in overrides.items() if value is not None})
    return build_dataclass(ServeConfig, values,
                           where=f"serve config {path}" if path else "serve settings")
