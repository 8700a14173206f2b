"""The local `evaluate` metric module loads offline and gives the same numbers as convqa.

`evaluate.load("squad")` needs the Hub; `evaluate.load(<path of a local module>)` does not.
Marked slow: `import evaluate` alone takes ~6-10 s here.
"""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow


def test_local_evaluate_module_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    evaluate = pytest.importorskip("evaluate")
    from convqa.metrics import hf_convqa_qa

    metric = evaluate.load(hf_convqa_qa.__file__)
    predictions = ["Paris", "the cat"]
    references = [["Paris", "City of Paris"], ["a cat sat"]]
    # squad (max over golds): q1 EM 1 F1 1; q2 [cat] vs [cat, sat]: EM 0, F1 2/3
    # -> EM 50, F1 100 * (1 + 2/3) / 2 = 83.33
    assert metric.compute(predictions=predictions, references=references) == pytest.approx(
        {"em": 50.0, "f1": 250 / 3, "count": 2})
    # topiocqa (leave-one-out): q1 leave out "Paris" -> vs "city of paris": EM 0, F1 2*1/(1+3)
    # = 1/2; leave out "City of Paris" -> 1, 1 -> EM 1/2, F1 3/4; q2 as above
    # -> EM 100 * (1/2) / 2 = 25, F1 100 * (3/4 + 2/3) / 2 = 70.83
    result = metric.compute(predictions=predictions, references=references, ids=["1_1", "1_2"],
                            convention="topiocqa")
    assert result == pytest.approx({"em": 25.0, "f1": 100 * (3 / 4 + 2 / 3) / 2, "count": 2})
