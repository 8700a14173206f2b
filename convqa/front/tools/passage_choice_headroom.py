"""How much the choice of the passage to answer from could still give. On turns read once and
kept by `convqa train reader-decoding --cache` (its `turn-reads-*.jsonl` files: each turn's
top k passages with the reader's best span in each), F1 at each k of:

- the first passage's span (what reading one passage gives);
- the reader's choice under a fusion (the folder's, its after-reranker one, or given);
- the same fusion with agreement: spans that read the same (normalised) answer pool their fused
  scores (log-sum-exp), so an answer several passages give outweighs one that only one gives;
- the best span among the k read (the ceiling of any passage choice with these spans).

    python -m convqa.front.tools.passage_choice_headroom CACHE/turn-reads-KEY.jsonl \\
        --reader convqa-reader --after-reranker --ks 1 5

The gap between the choice and the ceiling is what a better chooser could win without a better
reader; the agreement row asks whether a simple vote already takes part of it.
"""
from __future__ import annotations

import argparse
import math
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence

from convqa.errors import ConvQAError, DataError


def read_turns(path: str | Path) -> list:
    """The read turns of a `turn-reads-*.jsonl` cache file (its first line is the cache key)."""
    from convqa.io import iter_jsonl
    from readers.extractive.calibration_data import turn_read_from_dict

    rows = [row for _, row in iter_jsonl(path)]
    if not rows or "key" not in rows[0]:
        raise DataError("not a reads cache file (its first line is not a cache key)", path, 1)
    try:
        return [turn_read_from_dict(row) for row in rows[1:]]
    except (KeyError, TypeError) as exc:
        raise DataError(f"malformed read turn ({exc})", path) from None


def span_text(turn: Any, span: Any) -> str:
    return turn.passages[span.passage].text[span.start:span.end]


def agreed_answer(turn: Any, k: int, fusion: Any) -> str:
    """The answer whose spans among the first `k` passages have the largest log-sum-exp of
    fused scores (ties: the earlier passage)."""
    from convqa.metrics.answer import normalize_answer
    from readers.extractive.decode import fused_score, retriever_evidence

    spans = turn.spans[:k]
    evidence = retriever_evidence(turn.scores[:k], len(spans))
    groups: dict[str, list[tuple[float, int, str]]] = defaultdict(list)
    for span in spans:
        if span is not None:
            text = span_text(turn, span)
            groups[normalize_answer(text)].append(
                (fused_score(span, evidence[span.passage], fusion), span.passage, text))
    if not groups:
        return ""

    def pooled(members: list[tuple[float, int, str]]) -> tuple[float, int]:
        top = max(score for score, _, _ in members)
        total = top + math.log(sum(math.exp(score - top) for score, _, _ in members))
        return total, -min(passage for _, passage, _ in members)

    best = max(groups.values(), key=pooled)
    return max(best, key=lambda member: (member[0], -member[1]))[2]


def headroom(turns: Sequence[Any], ks: Sequence[int], fusion: Any,
             convention: str = "topiocqa") -> dict[str, dict[str, float]]:
    """{row: {k: mean F1 in percent}} for the four rows of the module docstring."""
    from convqa.metrics.answer import score_answer
    from readers.extractive.fusion_tuning import answer_at

    def f1(text: str, turn: Any) -> float:
        return score_answer(text, turn.answers, convention)["f1"]

    def mean(values: list[float]) -> float:
        return round(100.0 * sum(values) / len(values), 2) if values else 0.0

    rows: dict[str, dict[str, float]] = {name: {} for name in (
        "first passage", "fusion", "fusion + agreement", "best of the k read")}
    first = mean([f1(answer_at(t, 1, None), t) for t in turns])  # the same at every k
    for k in ks:
        rows["first passage"][str(k)] = first
        rows["fusion"][str(k)] = mean([f1(answer_at(t, k, fusion), t) for t in turns])
        rows["fusion + agreement"][str(k)] = mean([f1(agreed_answer(t, k, fusion), t)
                                                   for t in turns])
        rows["best of the k read"][str(k)] = mean(
            [max([f1(span_text(t, s), t) for s in t.spans[:k] if s is not None] or [0.0])
             for t in turns])
    return rows


def chosen_fusion(args: argparse.Namespace) -> Any:
    """--fusion, else the reader folder's (its after-reranker block's with --after-reranker)."""
    from readers.extractive.decode import Fusion

    if args.fusion:
        return Fusion(*args.fusion)
    from convqa.io import load_json
    from convqa.models import resolve_model
    from readers.extractive.decoding import Decoding
    from readers.extractive.model import META_FILE

    path = Path(resolve_model(args.reader)) / META_FILE
    decoding = Decoding.from_dict(load_json(path).get("decoding") or {}, path)
    decoding = decoding.reranked() if args.after_reranker else decoding
    if decoding.fusion is None:
        raise ConvQAError(f"{path}: the reader's decoding has no passage fusion; give --fusion")
    return decoding.fusion


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("reads", type=Path, help="a turn-reads-*.jsonl file of a --cache folder")
    p.add_argument("--reader", default="convqa-reader",
                   help="the reader folder whose fusion chooses (default convqa-reader)")
    p.add_argument("--after-reranker", action="store_true",
                   help="its after-reranker fusion (the reads came after a reranker)")
    p.add_argument("--fusion", type=float, nargs=3, metavar=("SELECTION", "SPAN", "RETRIEVER"),
                   help="these weights instead of the folder's")
    p.add_argument("--ks", type=int, nargs="+", default=[1, 5], help="passages read (default 1 5)")
    p.add_argument("--convention", choices=("topiocqa", "squad"), default="topiocqa")
    p.add_argument("--json", type=Path, help="also write the table here")
    args = p.parse_args(argv)
    if any(k < 1 for k in args.ks):
        p.error("--ks: counts must be >= 1")
    try:
        turns = read_turns(args.reads)
        fusion = chosen_fusion(args)
    except ConvQAError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    rows = headroom(turns, args.ks, fusion, args.convention)
    print(f"{len(turns)} turns, fusion {fusion.to_dict()}; F1 at k passages read")
    print("  " + " " * 20 + "".join(f"{'@' + str(k):>8}" for k in args.ks))
    for name, values in rows.items():
        print(f"  {name:<20}" + "".join(f"{values[str(k)]:8.2f}" for k in args.ks))
    if args.json:
        from convqa.io import write_json

        write_json(args.json, {"reads": str(args.reads), "turns": len(turns),
                               "fusion": fusion.to_dict(), "f1": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
