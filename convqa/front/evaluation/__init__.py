"""Running retrievers over benchmarks and scoring them.

- `retrieval`: `evaluate_retrieval` (retrieve, cache, Hits@k / MRR by question type) and
  `markdown_table`;
- `answers`: `evaluate_answers` (retrieve, read the top k, EM / F1 by question type);
- `topiocqa`: the same on an official TopiOCQA file (either release) with a passage store;
- `qrecc` (with `qrecc_data`, `qrecc_tables`): QReCC retrieval and end-to-end evaluation;
- `systems`, `targets`, `tables`, `plots`: the tables of `convqa eval` (systems files checked
  before any run, Markdown + JSON + PNG);
- `reproduce`: the reproduction matrix of `convqa reproduce`.
The run file format (`write_run`, `read_run`; docs/run_format.md) is `convqa.runs`, retriever
and history specs (`parse_spec`, `build_retriever`) `convqa.specs`: both core, re-exported here.
Only the light API below is imported here; the other modules are imported where used.
"""
from convqa.runs import Run, read_run, write_run
from convqa.specs import build_retriever, parse_spec

from .retrieval import evaluate_retrieval, markdown_table, score_run, select_turns

__all__ = ["Run", "build_retriever", "evaluate_retrieval", "markdown_table", "parse_spec",
           "read_run", "score_run", "select_turns", "write_run"]
