"""Where convqa keeps what it builds or downloads once: the embedded collection's indexes,
evaluation runs, measured precision choices. One place, so every layer finds the same folder."""
from __future__ import annotations

import os
from pathlib import Path


def cache_dir(override: str | os.PathLike | None = None) -> Path:
    """`override`, else $CONVQA_CACHE if set, else ~/.cache/convqa."""
    if override:
        return Path(override)
    env = os.environ.get("CONVQA_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "convqa"
