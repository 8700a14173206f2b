"""The runnable examples of the pipeline components' modules (and of `default_pipeline`) run,
offline, with the shipped models: what a user copies from a docstring works."""
import doctest
import importlib

import pytest

from reader_helpers import single_thread  # noqa: F401 (autouse fixture: one thread)


@pytest.mark.parametrize("module", ["readers.extractive.reader", "retrievers.rerank.reranker",
                                    "retrievers.dense.retriever", "retrievers.convdr.retriever",
                                    "retrievers.fusion", "convqa.history.strategies",
                                    "convqa.front.paths", "phrase_index.answerer"])
def test_module_examples_run(module):
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
