"""Markdown tables of QReCC results (`evaluate_qrecc_retrieval` / `evaluate_qrecc_answers`).

The retrieval table labels its columns so the two "recalls" cannot be confused: `H@k` is Hits@k
(any relevant passage in the top k; QReCC's official script prints it as "Recall@k"), `R@k` is
trec recall@k (share of the gold passages found; DPR-IHN's QReCC numbers), only with gold-id
relevance. Each row says its relevance and how turns without gold were counted.
"""
from __future__ import annotations

from typing import Any, Sequence

NOTE = ("H@k = Hits@k (QReCC's script calls it Recall@k); R@k = trec recall@k over the gold "
        "passage ids (DPR-IHN); MRR within the retrieved top k. no gold: skip = turns without "
        "gold left out, miss = counted as 0.")


def _pct(value: float) -> str:
    return f"{100 * value:.1f}"


def retrieval_markdown(results: Sequence[dict[str, Any]], group: str = "all") -> str:
    """One row per result (its `label`, else retriever + history) for question group `group`;
    the cutoffs are those of the first result."""
    if not results:
        return ""
    ks = results[0]["ks"]
    header = (["system", "relevance", "no gold", "n"] + [f"H@{k}" for k in ks]
              + [f"R@{k}" for k in ks] + ["MRR"])
    lines = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    for result in results:
        relevance = result["relevance"]
        level = result["levels"][relevance]
        values = level["groups"].get(group, {"count": 0})
        name = result.get("label") or f"{_name(result['retriever'])}, {_name(result['history'])}"
        row = [name, relevance, f"{level['no_gold']} ({level['num_no_gold']})",
               str(int(values.get("count", 0)))]
        for prefix in ("hits", "recall"):
            row += [_pct(values[f"{prefix}@{k}"]) if f"{prefix}@{k}" in values else "-"
                    for k in ks]
        row.append(f"{values['mrr']:.3f}" if "mrr" in values else "-")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines + ["", NOTE])


def answers_markdown(results: Sequence[dict[str, Any]], group: str = "all") -> str:
    """One row per result and k: EM and F1 (percent, SQuAD normalization) of group `group`."""
    header = ["system", "reader", "top k", "n", "EM", "F1", "reader ms (p50)"]
    lines = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    for result in results:
        name = result.get("label") or f"{_name(result['retriever'])}, {_name(result['history'])}"
        for top, entry in result["by_k"].items():
            values = entry["groups"].get(group, {"count": 0})
            count = int(values.get("count", 0))
            lines.append("| " + " | ".join([
                name, _name(result["reader"]), top, str(count),
                f"{values['em']:.1f}" if count else "-", f"{values['f1']:.1f}" if count else "-",
                f"{entry['reader_ms']['p50']:.1f}"]) + " |")
    return "\n".join(lines)


def _name(spec: Any) -> str:
    if isinstance(spec, dict):
        return str(spec.get("name", spec))
    return str(spec)
