#!/usr/bin/env python
"""Retrieval with the shipped DPR-IHN in each precision, like for like: the vital corpus encoded
in that precision and the queries encoded in it, scored on the benchmark's dev turns (Hits@k at
article level, MRR). The check behind `auto`'s agreement bound: a precision whose vectors keep
cosine >= 0.99 to fp32 must keep Hits@5 within 0.5 point.

    python -m convqa.front.tools.precision_retrieval --benchmark /tmp/bench/vital --work /tmp/prec \\
        --precision fp32 --precision bf16 --precision int8 --out docs/results/precision-retrieval.json

Indexes are built resumably under WORK/<precision> (a few minutes each on 2 CPU cores).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


from convqa.errors import reports_errors


@reports_errors("precision_retrieval")
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--benchmark", required=True, help="a vital (or full) benchmark folder")
    p.add_argument("--work", required=True, help="folder for the per-precision indexes")
    p.add_argument("--precision", action="append", required=True)
    p.add_argument("--model", default="convqa-dpr-ihn")
    p.add_argument("--out")
    args = p.parse_args(argv)
    from convqa.front.evaluation.retrieval import evaluate_retrieval
    from convqa.precision import cpu_capability
    from retrievers.dense.build import build_dense_index
    from retrievers.dense.retriever import DenseRetriever, DenseRetrieverConfig

    rows = {}
    passages = Path(args.benchmark) / "passages"
    for precision in args.precision:
        index_dir = Path(args.work) / precision
        index = build_dense_index(args.model, passages, index_dir, precision=precision)
        retriever = DenseRetriever.from_config(DenseRetrieverConfig(
            index=str(index_dir), model=args.model, passages=str(passages),
            precision=precision))
        result = evaluate_retrieval(args.benchmark, retriever, "oldest_first",
                                    use_cache=False, progress=True, label=precision)
        rows[precision] = {"index_precision": index.meta.get("precision"),
                           "levels": result["levels"]}
        overall = result["levels"]["article"]["groups"]["all"]
        print(precision, json.dumps(overall), flush=True)
    out = {"cpu_capability": cpu_capability(), "benchmark": args.benchmark, "rows": rows}
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
