"""Seeded choices keyed by a string: reproducible, kept in input order, independent per key."""
from __future__ import annotations

import doctest

import convqa.seeded as seeded_module
from convqa.seeded import seeded_rng, seeded_sample


def test_a_sample_is_reproducible_ordered_and_keyed():
    items = list(range(100))
    first = seeded_sample(items, 10, seed=0, key="full:train")
    assert first == seeded_sample(items, 10, seed=0, key="full:train")
    assert first == sorted(first) and len(set(first)) == 10
    assert first != seeded_sample(items, 10, seed=0, key="vital:train")
    assert first != seeded_sample(items, 10, seed=1, key="full:train")
    assert seeded_sample(items, None, 0, "k") is items and seeded_sample(items, 100, 0, "k") is items
    assert seeded_rng(5, "a").integers(1 << 30) == seeded_rng(5, "a").integers(1 << 30)


def test_module_doctest():
    assert doctest.testmod(seeded_module).failed == 0
