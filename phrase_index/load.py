"""Opening a saved phrase index of either kind, told apart by the format its folder records.

Apart from both kinds so that neither module imports the other (`compact` builds on `index`).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from .compact import FORMAT as COMPACT_FORMAT, CompactPhraseIndex
from .index import META_FILE, PhraseIndex


def load_phrase_index(folder: str | os.PathLike, mmap: bool = False):
    """A saved phrase index of either kind: dump-based (`PhraseIndex`) or compact
    (`compact.CompactPhraseIndex`, always memory-mapped), told apart by its format."""
    path = Path(folder) / META_FILE
    try:
        kind = json.loads(path.read_text(encoding="utf-8")).get("format")
    except (OSError, ValueError, AttributeError):
        kind = None  # PhraseIndex.load names the problem
    if kind == COMPACT_FORMAT:
        return CompactPhraseIndex.load(folder)
    return PhraseIndex.load(folder, mmap=mmap)
