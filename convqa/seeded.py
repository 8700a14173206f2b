"""Seeded choices keyed by a string: the same seed and key give the same draw on every machine
and run (Python's `hash` is salted per process), and another key an independent one, so each
source or example can be sampled on its own without disturbing the others.

    >>> first = seeded_sample(list("abcdef"), 3, seed=0, key="demo")
    >>> first == seeded_sample(list("abcdef"), 3, seed=0, key="demo") and len(first) == 3
    True
    >>> seeded_sample([1, 2], 5, seed=0, key="demo")
    [1, 2]
"""
from __future__ import annotations

import hashlib

import numpy as np


def seeded_rng(seed: int, key: str) -> np.random.Generator:
    """A generator from a seed and a string."""
    digest = hashlib.sha256(f"{seed}:{key}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def seeded_sample(items: list, limit: int | None, seed: int, key: str) -> list:
    """At most `limit` of `items`, a seeded sample kept in input order (all of them, as given,
    when `limit` is None or not below their number)."""
    if limit is None or len(items) <= limit:
        return items
    keep = sorted(seeded_rng(seed, key).choice(len(items), size=limit, replace=False))
    return [items[int(i)] for i in keep]
