"""A Hugging Face `evaluate` metric module wrapping convqa's EM/F1, loadable offline.

`evaluate.load("squad")` fetches its script from the Hub and fails offline; a local module works:

    import evaluate, convqa.metrics.hf_convqa_qa as m
    metric = evaluate.load(m.__file__)            # or the path of this file
    metric.compute(predictions=["Paris"], references=[["Paris", "City of Paris"]], ids=["1_1"],
                   convention="topiocqa")          # {"em": 100.0, "f1": 100.0, "count": 1}

`evaluate` copies this file into its module cache and imports it from there, so it imports convqa
absolutely (convqa must be installed) and holds no logic of its own.
"""
from __future__ import annotations

import datasets
import evaluate

from convqa.metrics.answer import score_answers

_DESCRIPTION = "Exact match and token F1 (SQuAD normalization; squad or topiocqa convention)."
_KWARGS = """
Args:
    predictions: list of predicted answer strings.
    references: list of lists of gold answer strings.
    ids: optional query ids (str(QueryId)); default the row index.
    convention: "squad" (max over golds, SQuAD v2 / QReCC) or "topiocqa" (leave-one-out).
Returns: em and f1 in percent, count.
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS)
class ConvqaQa(evaluate.Metric):
    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=_DESCRIPTION, citation="", inputs_description=_KWARGS,
            features=datasets.Features({"predictions": datasets.Value("string"),
                                        "references": datasets.Sequence(datasets.Value("string"))}),
        )

    def _compute(self, predictions, references, ids=None, convention: str = "squad"):
        keys = [str(i) for i in (ids if ids is not None else range(len(predictions)))]
        result = score_answers(dict(zip(keys, predictions)),
                               {k: list(r) for k, r in zip(keys, references)}, convention)
        return {"em": result["em"], "f1": result["f1"], "count": result["count"]}
