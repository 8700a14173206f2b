"""Every systems file under benchmarks/ names components that exist with options they take.

A typo in a row (a misspelt option, a reranker key that moved) otherwise surfaces only when
`convqa eval` reaches that row, which on the full collection is after its index build and
earlier rows: hours in. `check_components` builds nothing, so this costs milliseconds.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from convqa.front.evaluation.systems import check_components, load_systems

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
# reproduce.yaml (a matrix of reruns) and convdr_systems.yaml (convdr_table's own layout) are
# read by their tools, not by `convqa eval`
OTHER_LAYOUTS = ("reproduce.yaml", "convdr_systems.yaml")
SYSTEMS_FILES = sorted(p for p in BENCHMARKS.glob("*.yaml") if p.name not in OTHER_LAYOUTS)
# query names a dataset adds beside the registered history strategies (QReCC, OR-QuAC)
DATASET_QUERIES = ("rewrite",)


def test_the_benchmark_folder_has_systems_files():
    names = {p.name for p in SYSTEMS_FILES}
    assert {"answer_systems.yaml", "retrieval_systems.yaml"} <= names


@pytest.mark.parametrize("path", SYSTEMS_FILES, ids=lambda p: p.name)
def test_every_row_names_components_that_take_its_options(path):
    kind = "answers" if path.name.startswith("answer_systems") else "retrieval"
    systems = load_systems(path, kind)
    check_components(systems, extra_histories=DATASET_QUERIES)
    assert systems.systems
