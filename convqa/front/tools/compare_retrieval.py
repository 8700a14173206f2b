#!/usr/bin/env python
"""Two systems of one `convqa eval retrieval` run compared turn by turn: at each level (article,
answer) and k, the Hits@k difference in points, how many turns each wins, and a paired
bootstrap 95% interval, so a gap of a turn or two is read as what it is.

    python -m convqa.front.tools.compare_retrieval OUT.json --benchmark full \\
        --a "answer-passage query tower, --weak-positives 0.7" --b "answer-passage query tower"

A system is named by its label or the start of it. The run files the eval JSON records are
scored against the benchmark's turns of the eval's split, so the eval's cache must still hold
them.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from convqa.errors import ConvQAError, DataError
from convqa.metrics.paired import paired_bootstrap

from .compare_answers import comparison_parser, row_by_label

LEVELS = ("article", "answer")


def _ranked_ids(row: dict) -> dict[str, list[str]]:
    from convqa.runs import read_run

    path = Path(row.get("run_file") or "")
    if not path.is_file():
        raise DataError("run file gone (rerun the eval with its --cache-dir)", path)
    return {qid: [hit.passage_id for hit in hits] for qid, hits in read_run(path).hits.items()}


def compare(eval_json: Path, benchmark: str, first: str, second: str,
            ks: tuple[int, ...] = (1, 5, 20), bench_dir: str | None = None) -> dict:
    from convqa.benchmark import load_labelled_turns, qrels

    report = json.loads(eval_json.read_text(encoding="utf-8"))
    results = report.get("results", {})
    if benchmark not in results:
        raise DataError(f"no benchmark {benchmark!r} (has {', '.join(results)})", eval_json)
    rows = [row_by_label(results[benchmark], name, str(eval_json)) for name in (first, second)]
    split = rows[0].get("split") or "dev"
    folder = Path(bench_dir or rows[0]["benchmark"])
    turns = [t for t in load_labelled_turns(folder).turns if t.split == split]
    runs = [_ranked_ids(row) for row in rows]
    out = {"a": rows[0]["label"], "b": rows[1]["label"], "split": split, "levels": {}}
    for level in LEVELS:
        relevant = qrels(turns, level)
        if not relevant:
            continue
        qids = sorted(relevant)
        by_k = {}
        for k in ks:
            a, b = (np.array([100.0 * any(pid in relevant[q] for pid in run.get(q, [])[:k])
                              for q in qids]) for run in runs)
            by_k[str(k)] = {"hits_a": float(a.mean()), "hits_b": float(b.mean()),
                            **paired_bootstrap(a, b)}
        out["levels"][level] = {"turns": len(qids), "by_k": by_k}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = comparison_parser(__doc__.split("\n\n")[0], "retrieval", "label (or its start)")
    parser.add_argument("--ks", type=int, nargs="+", default=[1, 5, 20], metavar="K")
    args = parser.parse_args(argv)
    try:
        if any(k < 1 for k in args.ks):
            raise ValueError(f"--ks: every k must be >= 1, got {args.ks}")
        result = compare(Path(args.eval_json), args.benchmark, args.a, args.b,
                         tuple(args.ks), args.bench_dir)
    except (ConvQAError, OSError, ValueError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"a: {result['a']}\nb: {result['b']}  ({result['split']} turns)")
    for level, entry in result["levels"].items():
        for k, d in entry["by_k"].items():
            print(f"{level} ({entry['turns']}) H@{k}: {d['hits_a']:.1f} against "
                  f"{d['hits_b']:.1f}, a - b {d['mean']:+.2f} [{d['low']:+.2f}, "
                  f"{d['high']:+.2f}], a wins {d['wins']} turns, loses {d['losses']}")
    if args.json:
        from convqa.io import write_json

        write_json(args.json, result, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
