"""The cache key of a run and a cached run: shared by retrieval (retrieval.py) and the reranker
stage (rerank.py), which caches its reranked run next to the retriever's."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, NamedTuple

from convqa.types import Hit


def run_key(config: dict[str, Any]) -> str:
    """24 hex digits of sha256 over the config's sorted JSON: what a cached run depends on."""
    data = json.dumps(config, sort_keys=True, default=str)
    return hashlib.sha256(data.encode()).hexdigest()[:24]


class CachedRun(NamedTuple):
    """A retrieval run and where it came from (see retrieval.py `retrieve_cached`)."""

    hits: dict[str, list[Hit]]
    config: dict[str, Any]       # what the run depends on (hashed into `key`)
    key: str | None              # None: not cacheable
    path: Path | None            # the run file in the cache
    cached: bool                 # read from the cache instead of retrieving
    timing: dict[str, Any]
