"""Choose the sparse weight of a phrase index (phrase_index/sparse.py) on a benchmark's dev
(or `--split train`) turns: EM / F1 / Hits@1 for each weight, and a two-fold estimate that
does not tune on the turns it scores (conversations split in two; each half is scored with the
weight best on the other).

    python -m convqa.front.tools.tune_phrase_sparse --index full-phrase-index --benchmark BENCH/full \\
        --weights 0 2 4 6 8 12 16 --json sparse-weights.json

The index must have its sparse side (`convqa index --phrase ... --sparse`). Queries are encoded
and BM25-scored once; each weight is one more phrase search.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from convqa.precision import AUTO, CHOICES as PRECISIONS



def scaled(prior, factor: float):
    from phrase_index.search import PassagePrior

    return PassagePrior(prior.rows, lambda rows: prior.scores(rows) * np.float32(factor))


def encoded_turns(pipe, data, split: str):
    """The answer-evaluable turns of `split`, their earlier turns, the phrase model's query
    texts and the start / end query vectors."""
    turns = [t for t in data.turns if t.split == split and t.answer_evaluable]
    earlier = [data.conversations[t.conversation_id].history(t.turn) for t in turns]
    texts = [pipe.format_query(t.question, h) for t, h in zip(turns, earlier)]
    encoded = [pipe.encode(texts[i:i + 32]) for i in range(0, len(texts), 32)]
    return (turns, earlier, texts, np.concatenate([e[0] for e in encoded]),
            np.concatenate([e[1] for e in encoded]))


def per_turn(pipe, turns, priors, q_start, q_end, weight: float) -> list[dict]:
    """EM, F1 and whether the best phrase's passage is an answer passage, per turn (after the
    pipeline's question-overlap penalty)."""
    from convqa.metrics.answer import score_answer

    spans = pipe.searcher.spans(q_start, q_end, pipe.phrase_pool(1),
                                [scaled(p, weight) for p in priors])
    out = []
    for turn, ranked in zip(turns, pipe.ranked_answers(spans, [t.question for t in turns])):
        answer = ranked[0] if ranked else None
        scores = score_answer(answer.text if answer else "", turn.answers, "topiocqa")
        out.append({"em": scores["em"], "f1": scores["f1"],
                    "hit": bool(answer) and answer.passage_id in set(turn.answer_passage_ids)})
    return out


def mean(rows: list[dict], keep) -> dict[str, float]:
    chosen = [r for i, r in enumerate(rows) if keep(i)]
    return {key: round(100 * sum(r[key] for r in chosen) / len(chosen), 2)
            for key in ("em", "f1", "hit")} | {"turns": len(chosen)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", required=True, help="phrase index folder with sparse/")
    parser.add_argument("--benchmark", required=True, help="TopiOCQA x Wikipedia corpus folder")
    parser.add_argument("--model", default=None,
                        help="the index's phrase model, if it moved since the build")
    parser.add_argument("--weights", type=float, nargs="+", default=[0, 2, 4, 6, 8, 12, 16])
    parser.add_argument("--passages", type=int, default=None, help="sparse passages (20)")
    parser.add_argument("--nprobe", type=int, default=None)
    parser.add_argument("--sparse-history", default=None,
                        help="BM25's query: a history strategy (oldest_first) or 'phrase'")
    parser.add_argument("--overlap-weight", type=float, default=None,
                        help="the question-overlap penalty (phrase_index/overlap.py; 0: none)")
    parser.add_argument("--split", choices=("dev", "train"), default="dev",
                        help="the benchmark's turns to score (train: many more turns, but ones "
                             "the shipped models trained on)")
    parser.add_argument("--precision", choices=PRECISIONS, default=AUTO,
                        help="query encoder precision (auto picks by speed and thread count)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)

    from convqa.benchmark import load_labelled_turns
    from phrase_index.answerer import PhrasePipeline

    pipe = PhrasePipeline.from_folder(args.index, args.model, nprobe=args.nprobe,
                                      sparse_weight=1.0,
                                      sparse_passages=args.passages,
                                      sparse_history=args.sparse_history,
                                      overlap_weight=args.overlap_weight,
                                      precision=args.precision)
    turns, _, texts, q_start, q_end = encoded_turns(pipe, load_labelled_turns(args.benchmark),
                                                    args.split)
    # weight 1: scaled per weight below
    priors = pipe.sparse.priors([t.sparse_text or t for t in texts])
    results = {w: per_turn(pipe, turns, priors, q_start, q_end, w)
               for w in args.weights}
    grid = {str(w): mean(rows, lambda i: True) for w, rows in results.items()}
    for w, row in grid.items():
        print(f"weight {w}: EM {row['em']} F1 {row['f1']} Hits@1 {row['hit']}", flush=True)
    conversations = sorted({t.conversation_id for t in turns})
    fold = {c: i % 2 for i, c in enumerate(conversations)}
    folds, scored = [], []
    for half in (0, 1):
        tune = lambda i, h=half: fold[turns[i].conversation_id] == h  # noqa: E731
        best = max(args.weights, key=lambda w: mean(results[w], tune)["f1"])
        folds.append({"tuned_on_half": half, "weight": best})
        scored += [r for i, r in enumerate(results[best]) if not tune(i)]
    two_fold = mean(scored, lambda i: True)
    print(f"query precision: {pipe.precision}")
    print(f"two-fold (weights {[f['weight'] for f in folds]}): EM {two_fold['em']} "
          f"F1 {two_fold['f1']} Hits@1 {two_fold['hit']}")
    if args.json:
        Path(args.json).write_text(json.dumps({"index": args.index, "benchmark": args.benchmark,
                                               "split": args.split, "turns": len(turns),
                                               "sparse": pipe.sparse.fingerprint(),
                                               "query_precision": pipe.precision,
                                               "overlap_weight": pipe.overlap_weight,
                                               "grid": grid, "folds": folds,
                                               "two_fold": two_fold}, indent=1),
                                   encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
