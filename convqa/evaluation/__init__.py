"""Running retrievers over benchmarks and scoring them.

- `runs`: the run file format (`write_run`, `read_run`; docs/run_format.md);
- `specs`: retriever/history specs from flags or YAML, `build_retriever`;
- `retrieval`: `evaluate_retrieval` (retrieve, cache, Hits@k / MRR by question type) and
  `markdown_table`.
"""
from .retrieval import evaluate_retrieval, markdown_table, score_run, select_turns
from .runs import Run, read_run, write_run
from .specs import build_retriever, parse_spec

__all__ = ["Run", "build_retriever", "evaluate_retrieval", "markdown_table", "parse_spec",
           "read_run", "score_run", "select_turns", "write_run"]
