#!/usr/bin/env python
"""How far below the retriever's best a reranker needs to look: answer-passage Hits@1 / Hits@5
and pairs rescored per turn for each `rescore_within` gap (retrievers/rerank/shortlist.py), on
sampled answer-evaluable turns, and the gap the rule picks (fewest pairs whose Hits@1 and
Hits@5 are at least rescoring every hit's on every benchmark).

    python -m convqa.front.tools.rescore_gaps --reranker convqa-reranker --top-n 50 \\
        --benchmark bench/vital --retriever '{name: convdr, model: convqa-dpr-ihn-answer, \\
        index: bench/vital/indexes/dpr-ihn3-lora32}' --split train --turns 300 --cache /tmp/c

Each turn's top --top-n is rescored once, every hit (kept in --cache, so another run scores
nothing twice); a gap's ranking is that ranking without the hits it leaves out. Choose on train
turns and check on dev turns; the gap goes into a pipeline as the reranker's `rescore_within`.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from convqa.errors import ConvQAError


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from convqa.front.cli.train_fusion import add_turn_arguments

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reranker", default="convqa-reranker",
                   help="folder or shipped alias (default convqa-reranker)")
    p.add_argument("--top-n", type=int, default=50, help="hits rescored at most (default 50)")
    p.add_argument("--at-least", type=int, default=5,
                   help="the first hits always rescored (`rescore_at_least`, default 5)")
    add_turn_arguments(p, "the reranker's scores", "gap", "nothing (no folder is written)")
    args = p.parse_args(argv)
    if args.write:
        p.error("--write: this tool reports; put the gap in a pipeline's reranker options")
    return args


def benchmark_turns(args: argparse.Namespace, source: Any, reranker: Any) -> list:
    """[(retrieved (id, score) pairs, reranked ids, answer passage ids)] of one benchmark."""
    from convqa.front.cli.train_fusion import retrieved_turns
    from convqa.front.evaluation.rerank import cached_rerank_turns

    data, turns, hits = retrieved_turns(args, source, args.top_n)
    reranker.for_retriever(source.retriever)
    ranked = cached_rerank_turns(reranker, turns, data.conversations, hits,
                                 Path(source.benchmark) / "passages", args.top_n, args.cache,
                                 progress=not args.quiet)
    return [([(h.passage_id, float(h.score)) for h in hits[t.qid][:args.top_n]],
             [h.passage_id for h in ranked.hits[t.qid]], set(t.answer_passage_ids))
            for t in turns]


def report(args: argparse.Namespace) -> dict[str, Any]:
    from convqa.front.cli.train_fusion import reranker_folder, sources, write_report
    from convqa.registry import RERANKERS
    from retrievers.rerank.shortlist import choose_gap, gap_scores

    folder = reranker_folder(args.reranker)
    reranker = RERANKERS.build({"name": "cross_encoder", "model": str(folder),
                                "top_n": args.top_n})
    benchmarks = []
    for source in sources(args):
        turns = benchmark_turns(args, source, reranker)
        benchmarks.append((str(source.benchmark), len(turns),
                           gap_scores(turns, at_least=args.at_least)))
    chosen = choose_gap([scores for _, _, scores in benchmarks])
    label = lambda gap: "all" if gap is None else f"{gap:g}"  # noqa: E731
    return write_report(args.report, {
        "reranker": args.reranker, "top_n": args.top_n, "at_least": args.at_least,
        "split": args.split, "chosen": chosen,
        "benchmarks": [{"benchmark": name, "turns": count,
                        "scores": {label(g): s for g, s in scores.items()}}
                       for name, count, scores in benchmarks]})


def table(out: dict[str, Any]) -> str:
    chosen = out["chosen"]
    lines = [f"{out['reranker']} over the top {out['top_n']} ({out['split']} turns): "
             + ("rescore every hit (no gap keeps Hits@1 and Hits@5)" if chosen is None
                else f"rescore_within {chosen:g}")]
    for bench in out["benchmarks"]:
        lines.append(f"{Path(bench['benchmark']).name} ({bench['turns']} turns)")
        lines.append("  gap  H@1   H@5   pairs/turn")
        for gap, s in bench["scores"].items():
            mark = " <-" if chosen is not None and gap == f"{chosen:g}" else ""
            lines.append(f"  {gap:>4} {100 * s['hits@1']:5.1f} {100 * s['hits@5']:5.1f} "
                         f"{s['pairs']:6.1f}{mark}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from convqa.quiet import quiet_third_party

    args = parse_args(argv)
    try:
        with quiet_third_party():
            out = report(args)
    except ConvQAError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(table(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
