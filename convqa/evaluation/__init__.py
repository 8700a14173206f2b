"""Running retrievers over benchmarks and scoring them.

- `runs`: the run file format (`write_run`, `read_run`; docs/run_format.md);
- `specs`: retriever/history specs from flags or YAML, `build_retriever`;
- `retrieval`: `evaluate_retrieval` (retrieve, cache, Hits@k / MRR by question type) and
  `markdown_table`;
- `answers`: `evaluate_answers` (retrieve, read the top k, EM / F1 by question type);
- `topiocqa`: the same on an official TopiOCQA file (either release) with a passage store;
- `qrecc` (with `qrecc_data`, `qrecc_tables`): QReCC retrieval and end-to-end evaluation;
- `systems`, `targets`, `tables`, `plots`: the tables of `convqa eval` (systems files checked
  before any run, Markdown + JSON + PNG);
- `reproduce`: the reproduction matrix of `convqa reproduce`.
Only the light API below is imported here; the other modules are imported where used.
"""
from .retrieval import evaluate_retrieval, markdown_table, score_run, select_turns
from .runs import Run, read_run, write_run
from .specs import build_retriever, parse_spec

__all__ = ["Run", "build_retriever", "evaluate_retrieval", "markdown_table", "parse_spec",
           "read_run", "score_run", "select_turns", "write_run"]
