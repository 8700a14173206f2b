"""The TopiOCQA x Wikipedia benchmark: corpus, labelled turns, split (docs/benchmark_format.md).

Only the light reading API is re-exported; building lives in `convqa.benchmark.topiocqa_wiki`.
"""
from .labelled_turns import (LabelledTurn, LabelledTurns, load_labelled_turns, qrels,
                             split_by_conversation)

__all__ = ["LabelledTurn", "LabelledTurns", "load_labelled_turns", "qrels", "split_by_conversation"]
