#!/usr/bin/env python
"""Two systems of one `convqa eval answers` run compared turn by turn: the mean F1 difference,
how many turns each wins, and a paired bootstrap 95% interval, so a gap of a turn or two on a
small benchmark is read as what it is.

    python -m convqa.front.tools.compare_answers OUT.json --benchmark vital \\
        --a "phrase + BM25 (8) + overlap penalty (4)@1" --b "DPR-IHN + reader@1"

A system is named by the start of its label and `@k` (the top-k row; default 1). The answer
files the eval JSON records (its `predictions` per k) are scored against the benchmark's turns
(`turns.jsonl`, with the row's scoring convention), so the eval's cache must still hold them.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from convqa.errors import ConvQAError, DataError
from convqa.metrics.paired import paired_bootstrap


def row_by_label(rows: list[dict], label: str, where: str) -> dict:
    """The eval row whose label is `label`, else the one label that starts with it."""
    found = [row for row in rows if row.get("label", "") == label] or \
        [row for row in rows if row.get("label", "").startswith(label)]
    if len(found) != 1:
        labels = "; ".join(row.get("label", "") for row in rows)
        raise DataError(f"{len(found)} systems' labels start with {label!r} (labels: {labels})",
                        where)
    return found[0]


def find_row(rows: list[dict], name: str, where: str) -> tuple[dict, str]:
    """The eval row named by `name` (`row_by_label` of its part before the last `@k`, so a
    label may hold '@', as "BM25 + reranker@20@5" does) and its k."""
    label, at, k = name.rpartition("@")
    if not at or not k.isdigit():
        label, k = name, "1"
    row = row_by_label(rows, label, where)
    if k not in row.get("by_k", {}):
        raise DataError(f"system {row['label']!r} has no top-{k} row "
                        f"(has {', '.join(row.get('by_k', {}))})", where)
    if not row["by_k"][k].get("predictions"):
        raise DataError(f"system {row['label']!r} records no answer file at top {k}", where)
    return row, k


def turn_f1(predictions: Path, turns: dict[str, dict], convention: str) -> dict[str, float]:
    """qid -> F1 of each prediction of an answer file, for the turns given."""
    from convqa.io import iter_jsonl
    from convqa.metrics.answer import score_answer

    if not predictions.is_file():
        raise DataError("answer file gone (rerun the eval with its --cache-dir)", predictions)
    return {row["qid"]: 100 * score_answer(row.get("prediction") or "",
                                           turns[row["qid"]]["answers"], convention)["f1"]
            for _, row in iter_jsonl(predictions) if row["qid"] in turns}


def compare(eval_json: Path, benchmark: str, first: str, second: str,
            bench_dir: str | None = None) -> dict:
    report = json.loads(eval_json.read_text(encoding="utf-8"))
    if benchmark not in report:
        raise DataError(f"no benchmark {benchmark!r} (has {', '.join(report)})", eval_json)
    rows = report[benchmark]
    systems = [find_row(rows, name, str(eval_json)) for name in (first, second)]
    folder = Path(bench_dir or systems[0][0]["benchmark"])
    from convqa.io import iter_jsonl

    turns = {t["qid"]: t for _, t in iter_jsonl(folder / "turns.jsonl")}
    scores = [turn_f1(Path(row["by_k"][k]["predictions"]), turns,
                      row.get("convention") or "topiocqa") for row, k in systems]
    qids = sorted(set(scores[0]) & set(scores[1]))
    if len(qids) != len(scores[0]) or len(qids) != len(scores[1]):
        raise DataError(f"the systems answered different turns ({len(scores[0])} and "
                        f"{len(scores[1])}, {len(qids)} shared)", eval_json)
    a, b = (np.array([per_turn[q] for q in qids]) for per_turn in scores)
    kinds = np.array([turns[q].get("question_type") or "all" for q in qids])
    return {"a": f"{systems[0][0]['label']}@{systems[0][1]}",
            "b": f"{systems[1][0]['label']}@{systems[1][1]}", "turns": len(qids),
            "f1_a": float(a.mean()), "f1_b": float(b.mean()),
            "a_minus_b": paired_bootstrap(a, b),
            "by_type": {str(kind): {"turns": int((kinds == kind).sum()),
                               **paired_bootstrap(a[kinds == kind], b[kinds == kind])}
                        for kind in sorted(set(kinds))}}


def comparison_parser(description: str, table: str, name: str) -> argparse.ArgumentParser:
    """The arguments of a comparison of two rows of one `convqa eval TABLE` run; `name` says
    how a row is named."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("eval_json", help=f"OUT.json of `convqa eval {table} --out OUT`")
    parser.add_argument("--benchmark", required=True, help="its benchmark name (NAME=FOLDER)")
    parser.add_argument("--a", required=True, help=f"{name} of the first system")
    parser.add_argument("--b", required=True, help=f"{name} of the second system")
    parser.add_argument("--bench-dir", help="the benchmark folder, if it moved since the eval")
    parser.add_argument("--json", help="also write the comparison here")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = comparison_parser(__doc__.split("\n\n")[0], "answers", "label prefix[@k]")
    args = parser.parse_args(argv)
    try:
        result = compare(Path(args.eval_json), args.benchmark, args.a, args.b, args.bench_dir)
    except (ConvQAError, OSError, ValueError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    d = result["a_minus_b"]
    print(f"{result['turns']} turns: F1 {result['f1_a']:.2f} ({result['a']}) against "
          f"{result['f1_b']:.2f} ({result['b']})")
    print(f"a - b: {d['mean']:+.2f} F1, 95% CI [{d['low']:+.2f}, {d['high']:+.2f}]; a wins "
          f"{d['wins']} turns, loses {d['losses']}, ties {d['ties']}")
    for kind, row in result["by_type"].items():
        print(f"  {kind} ({row['turns']}): {row['mean']:+.2f} [{row['low']:+.2f}, "
              f"{row['high']:+.2f}], {row['wins']}/{row['losses']}/{row['ties']}")
    if args.json:
        from convqa.io import write_json

        write_json(args.json, result, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
