"""Every systems file under benchmarks/ and every pipeline under examples/ names components
that exist with options they take.

A typo in a row (a misspelt option, a reranker key that moved) otherwise surfaces only when
`convqa eval` reaches that row, which on the full collection is after its index build and
earlier rows: hours in. `check_components` builds nothing, so this costs milliseconds.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from convqa.front.evaluation.systems import System, Systems, check_components, load_systems
from convqa.front.paths import configured_path

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"
PIPELINES = sorted((REPO / "examples").glob("*.yaml"))


def other_layout(path) -> bool:
    """reproduce.yaml (a matrix of reruns) and the convdr_systems*.yaml files (convdr_table's
    own layout) are read by their tools, not by `convqa eval`."""
    return path.name == "reproduce.yaml" or path.name.startswith("convdr_systems")


SYSTEMS_FILES = sorted(p for p in BENCHMARKS.glob("*.yaml") if not other_layout(p))
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


def test_the_examples_hold_a_pipeline():
    assert "pipeline-wikipedia.yaml" in {p.name for p in PIPELINES}


@pytest.mark.parametrize("path", PIPELINES, ids=lambda p: p.name)
def test_every_example_pipeline_names_components_that_take_its_options(path):
    pipeline = configured_path(path)
    assert not pipeline.extra, f"{path.name}: keys a pipeline refuses: {sorted(pipeline.extra)}"
    config = pipeline.pipeline_config()
    row = System(path.name, config["retriever"], config.get("history") or "oldest_first",
                 config.get("reader"), reranker=config.get("reranker"))
    check_components(Systems(str(path), (row,)))
