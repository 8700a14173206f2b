"""convqa/front/tools/convdr_table.py: rows of models not trained yet are skipped with a note, the page's
prose around the generated block is kept, and the tables show what score_benchmark measured."""
from __future__ import annotations

import pytest

from retrievers.convdr.orquac_bench import score_benchmark

from test_convdr_bench import Echo, _tiny_bench


@pytest.fixture(scope="module")
def table():
    from convqa.front.tools import convdr_table
    return convdr_table


def test_missing_models_are_skipped_with_a_note(table, tmp_path):
    systems = [{"label": "ConvDR KD", "input": "conversation",
                "retriever": {"name": "convdr", "model": "{runs}/nothing/model",
                              "index": "{bench}/idx"}}]
    rows, notes = table.orquac_rows(systems, {"runs": str(tmp_path), "bench": "b"}, "b", False)
    assert rows == [] and notes == [f"skipped 'ConvDR KD': {tmp_path}/nothing/model does not exist yet"]
    fid_rows, fid_notes = table.fidelity_rows([{"label": "KD", "model": "{runs}/nothing"}],
                                              {"runs": str(tmp_path)})
    assert fid_rows == [] and "does not exist yet" in fid_notes[0]


def test_render_shows_measured_values_and_keeps_the_prose(table, tmp_path):
    bench = _tiny_bench(tmp_path / "b")
    result = score_benchmark(bench, Echo(), "rewrite", k=20, ks=(1, 5, 20))
    fidelity = {"count": 4, "student": {"cosine": 0.9, "mse": 0.001},
                "zero_shot": {"cosine": 0.6, "mse": 0.002},
                "question_only": {"cosine": 0.7, "mse": 0.0015},
                "by_source": {"canard": {"count": 4, "student": {"cosine": 0.9, "mse": 0.001}}}}
    text = table.render([{"label": "Echo", "result": result}],
                        [{"label": "KD", "fidelity": fidelity}], ["a note"])
    # reranker set: ranks 1 and 3 -> MRR 0.667, Hits@1 50.0; gold set: rank 1
    assert "| Echo | rewrite | 2 | 0.667 | 50.0 | 100.0 | 100.0 |" in text
    assert "| Echo | rewrite | 1 | 1.000 | 100.0 | 100.0 | 100.0 |" in text
    assert "| KD | 4 | 0.900 / 0.00100 | 0.600 / 0.00200 | 0.700 / 0.00150 |" in text
    assert "| KD: canard | 4 | 0.900 / 0.00100 | - | - |" in text
    assert "- a note" in text
    page = tmp_path / "convdr.md"
    page.write_text(f"# Title\n\nprose before\n\n{table.START}\nstale table\n{table.END}\n\nprose after\n")
    table._write_block(page, text)
    written = page.read_text()
    assert written.startswith("# Title\n\nprose before\n\n") and written.endswith("prose after\n")
    assert "stale table" not in written and "| Echo | rewrite | 2 |" in written
