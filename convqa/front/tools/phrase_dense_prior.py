#!/usr/bin/env python
"""Choose the weight of a phrase index's dense passage prior (phrase_index/dense_prior.py)
beside its BM25 side: each turn's DPR-IHN top `--passages` passages join the candidates, and
every phrase of such a passage gains `weight * (score - worst) / (best - worst)` of the
retriever's scores over those passages, on top of BM25 (weight `--sparse-weight`) and the
question-overlap penalty. EM / F1 / Hits@1 per weight and split; choose on train, read on dev
(docs/results/phrase.md, "A dense passage prior").

    OMP_NUM_THREADS=1 python -m convqa.front.tools.phrase_dense_prior --index PHRASE_INDEX \\
        --benchmark BENCH/vital --dense-index BENCH/vital/indexes/dpr-ihn \\
        --splits train dev --weights 0 2 4 8 16 --json out.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path



def combined(sparse, dense, sparse_weight: float, dense_weight: float):
    """BM25's prior and the dense one (both at weight 1) at their weights, as one prior."""
    from convqa.front.tools.tune_phrase_sparse import scaled

    bm25 = scaled(sparse, sparse_weight)
    return bm25.plus(scaled(dense, dense_weight)) if dense_weight else bm25


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", required=True, help="phrase index folder with sparse/")
    parser.add_argument("--benchmark", required=True, help="TopiOCQA x Wikipedia corpus folder")
    parser.add_argument("--model", default=None,
                        help="the phrase model that answers (default: the index's; a query-only "
                             "retraining shares its index)")
    parser.add_argument("--dense-index", default=None,
                        help="dense (DPR-IHN) index folder (default: the index's dense/)")
    parser.add_argument("--history", default="oldest_first", help="the dense query's history")
    parser.add_argument("--passages", type=int, default=20)
    parser.add_argument("--sparse-weight", type=float, default=8.0)
    parser.add_argument("--weights", type=float, nargs="+", default=[0, 2, 4, 8, 16])
    parser.add_argument("--splits", nargs="+", default=["train", "dev"])
    parser.add_argument("--nprobe", type=int, default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)

    from convqa.benchmark import load_labelled_turns
    from phrase_index.answerer import PhrasePipeline
    from convqa.front.tools.tune_phrase_sparse import encoded_turns, mean, per_turn

    pipe = PhrasePipeline.from_folder(args.index, args.model, nprobe=args.nprobe,
                                      sparse_weight=1.0,
                                      precision="fp32", dense_index=args.dense_index,
                                      dense_weight=1.0, dense_passages=args.passages,
                                      dense_history=args.history)
    data = load_labelled_turns(args.benchmark)
    result = {}
    for split in args.splits:
        turns, _, texts, q_start, q_end = encoded_turns(pipe, data, split)
        sparse = pipe.sparse.priors([t.sparse_text or t for t in texts])
        dense = pipe.dense.priors([t.dense_text or t for t in texts])
        result[split] = {}
        for weight in args.weights:
            priors = [combined(s, d, args.sparse_weight, weight) for s, d in zip(sparse, dense)]
            row = mean(per_turn(pipe, turns, priors, q_start, q_end, 1.0), lambda i: True)
            result[split][str(weight)] = row
            print(f"{split} dense weight {weight}: EM {row['em']} F1 {row['f1']} "
                  f"Hits@1 {row['hit']} ({row['turns']} turns)", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"index": args.index, "model": args.model,
                                               "benchmark": args.benchmark,
                                               "dense": pipe.dense.fingerprint(),
                                               "sparse_weight": args.sparse_weight,
                                               "passages": args.passages,
                                               "overlap_weight": pipe.overlap_weight,
                                               "splits": result}, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
