#!/usr/bin/env python
"""A dense passage prior beside BM25 in phrase search, measured: each turn's DPR-IHN top
`--passages` passages join the candidates, and every phrase of such a passage gains
`weight * (score - worst) / (best - worst)` of the retriever's scores over those passages, on
top of the index's BM25 side (weight `--sparse-weight`) and the question-overlap penalty.

A measurement, not a pipeline option yet (docs/results/phrase.md, session 20): the weight is
chosen on the benchmark's train turns and read on its dev turns.

    OMP_NUM_THREADS=1 python scripts/phrase_dense_prior.py --index PHRASE_INDEX \\
        --benchmark BENCH/vital --dense-index BENCH/vital/indexes/dpr-ihn \\
        --splits train dev --weights 0 2 4 8 16 --json out.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def dense_tables(retriever, store, queries: list[str], passages: int):
    """Per query, (store rows, {row: min-max scaled score}) of the retriever's top passages."""
    out = []
    for hits in retriever.retrieve_batch(queries, k=passages):
        rows = np.array([store.index(h.passage_id) for h in hits], dtype=np.int64)
        scores = np.array([h.score for h in hits], dtype=np.float32)
        if len(scores):
            scores = (scores - scores.min()) / max(float(scores.max() - scores.min()), 1e-6)
        out.append((rows, dict(zip(rows.tolist(), scores.tolist()))))
    return out


def combined(sparse, dense, sparse_weight: float, dense_weight: float):
    """The BM25 prior (scaled) plus the dense one, as one PassagePrior."""
    from phrase_index.search import PassagePrior
    from tune_phrase_sparse import scaled

    rows, table = dense
    bm25 = scaled(sparse, sparse_weight)

    def score(candidates: np.ndarray) -> np.ndarray:
        extra = np.array([table.get(int(r), 0.0) for r in candidates], dtype=np.float32)
        return bm25.scores(candidates) + np.float32(dense_weight) * extra
    return PassagePrior(np.union1d(sparse.rows, rows) if dense_weight else sparse.rows, score)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", required=True, help="phrase index folder with sparse/")
    parser.add_argument("--benchmark", required=True, help="TopiOCQA x Wikipedia corpus folder")
    parser.add_argument("--dense-index", required=True, help="dense (DPR-IHN) index folder")
    parser.add_argument("--history", default="oldest_first", help="the dense query's history")
    parser.add_argument("--passages", type=int, default=20)
    parser.add_argument("--sparse-weight", type=float, default=8.0)
    parser.add_argument("--weights", type=float, nargs="+", default=[0, 2, 4, 8, 16])
    parser.add_argument("--splits", nargs="+", default=["train", "dev"])
    parser.add_argument("--nprobe", type=int, default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)

    from convqa.benchmark import load_labelled_turns
    from convqa.history import build_history_strategy
    from phrase_index.answerer import PhrasePipeline
    from retrievers.dense.retriever import DenseRetriever, DenseRetrieverConfig
    from tune_phrase_sparse import encoded_turns, mean, per_turn

    pipe = PhrasePipeline.from_folder(args.index, None, nprobe=args.nprobe, sparse_weight=1.0,
                                      precision="fp32")
    dense = DenseRetriever.from_config(DenseRetrieverConfig(index=args.dense_index,
                                                            precision="fp32"))
    history = build_history_strategy(args.history)
    data = load_labelled_turns(args.benchmark)
    result = {}
    for split in args.splits:
        turns, earlier, texts, q_start, q_end = encoded_turns(pipe, data, split)
        sparse = pipe.sparse.priors([t.sparse_text or t for t in texts])
        tables = dense_tables(dense, pipe.store, [history.format(t.question, list(h))
                                                  for t, h in zip(turns, earlier)], args.passages)
        result[split] = {}
        for weight in args.weights:
            priors = [combined(s, d, args.sparse_weight, weight) for s, d in zip(sparse, tables)]
            row = mean(per_turn(pipe, turns, priors, q_start, q_end, 1.0), lambda i: True)
            result[split][str(weight)] = row
            print(f"{split} dense weight {weight}: EM {row['em']} F1 {row['f1']} "
                  f"Hits@1 {row['hit']} ({row['turns']} turns)", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"index": args.index, "benchmark": args.benchmark,
                                               "dense_index": args.dense_index,
                                               "sparse_weight": args.sparse_weight,
                                               "passages": args.passages,
                                               "overlap_weight": pipe.overlap_weight,
                                               "splits": result}, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
