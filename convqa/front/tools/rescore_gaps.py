#!/usr/bin/env python
"""How far below the retriever's best a reranker needs to look: answer-passage Hits@1 / Hits@5
and pairs rescored per turn for each `rescore_within` gap (retrievers/rerank/shortlist.py), with
each `rescore_word_matches` count of --word-matches (retrievers/rerank/word_matches.py), on
sampled answer-evaluable turns, and the setting the rule picks (fewest pairs whose Hits@1 and
Hits@5 are at least rescoring every hit's, or with --against G gap G's, on every benchmark).

    python -m convqa.front.tools.rescore_gaps --reranker convqa-reranker --top-n 50 \\
        --benchmark bench/vital --retriever '{name: convdr, model: convqa-dpr-ihn-answer, \\
        index: bench/vital/indexes/dpr-ihn3-lora32}' --split train --turns 300 --cache /tmp/c

Each turn's top --top-n is rescored once, every hit (kept in --cache, so another run scores
nothing twice); a gap's ranking is that ranking without the hits it leaves out. Choose on train
turns and check on dev turns; the gap goes into a pipeline as the reranker's `rescore_within`
(and a word-match count as its `rescore_word_matches`; "3+4" in the table: gap 3, 4 matches).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from convqa.errors import ConvQAError


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from convqa.front.cli.train_fusion import add_turn_arguments
    from retrievers.rerank.shortlist import GAPS

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reranker", default="convqa-reranker",
                   help="folder or shipped alias (default convqa-reranker)")
    p.add_argument("--top-n", type=int, default=50, help="hits rescored at most (default 50)")
    p.add_argument("--at-least", type=int, default=5,
                   help="the first hits always rescored (`rescore_at_least`, default 5)")
    p.add_argument("--against", type=float, metavar="GAP",
                   help="choose the fewest pairs whose Hits are at least this gap's (default: "
                        "rescoring every hit's), e.g. a pipeline's rescore_within")
    p.add_argument("--word-matches", type=int, nargs="+", default=[0], metavar="N",
                   help="also try shortlists that keep the N best word matches they leave out "
                        "(`rescore_word_matches`; default 0: none)")
    add_turn_arguments(p, "the reranker's scores", "gap", "nothing (no folder is written)")
    args = p.parse_args(argv)
    if args.write:
        p.error("--write: this tool reports; put the gap in a pipeline's reranker options")
    if any(n < 0 for n in args.word_matches):
        p.error("--word-matches: counts must be >= 0")
    if args.against is not None and args.against not in GAPS:
        p.error(f"--against: one of the gaps scored ({', '.join(f'{g:g}' for g in GAPS)})")
    return args


def benchmark_turns(args: argparse.Namespace, source: Any, reranker: Any) -> list:
    """[(retrieved (id, score) pairs, reranked ids, answer passage ids, each retrieved hit's
    word match with the turn's question)] of one benchmark."""
    from convqa.corpus.store import PassageStore
    from convqa.front.cli.train_fusion import retrieved_turns
    from convqa.front.evaluation.rerank import cached_rerank_turns
    from retrievers.rerank.word_matches import match_text, passage_match_scores

    data, turns, hits = retrieved_turns(args, source, args.top_n)
    reranker.for_retriever(source.retriever)
    passages = Path(source.benchmark) / "passages"
    ranked = cached_rerank_turns(reranker, turns, data.conversations, hits, passages,
                                 args.top_n, args.cache, progress=not args.quiet)
    retrieved = {t.qid: hits[t.qid][:args.top_n] for t in turns}
    matches: dict[str, list[float]] = {t.qid: [] for t in turns}
    if any(args.word_matches):
        with PassageStore.open(passages) as store:
            for t in turns:
                history = data.conversations[t.conversation_id].history(t.turn)
                matches[t.qid] = passage_match_scores(
                    match_text(t.question, history),
                    [store.get(h.passage_id) for h in retrieved[t.qid]])
    return [([(h.passage_id, float(h.score)) for h in retrieved[t.qid]],
             [h.passage_id for h in ranked.hits[t.qid]], set(t.answer_passage_ids),
             matches[t.qid])
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
        scores = {}
        for count in sorted({0, *args.word_matches}):
            for gap, s in gap_scores(turns, at_least=args.at_least,
                                     word_matches=count).items():
                if gap is not None or not count:  # every hit: the same at every count
                    scores[(gap, count)] = s
        benchmarks.append((str(source.benchmark), len(turns), scores))
    chosen_gap, chosen_matches = choose_gap([scores for _, _, scores in benchmarks],
                                            baseline=(args.against, 0))
    return write_report(args.report, {
        "reranker": args.reranker, "top_n": args.top_n, "at_least": args.at_least,
        "split": args.split, "against": args.against, "chosen": chosen_gap,
        "chosen_word_matches": chosen_matches,
        "benchmarks": [{"benchmark": name, "turns": count,
                        "scores": {shortlist_label(g): s for g, s in scores.items()}}
                       for name, count, scores in benchmarks]})


def shortlist_label(setting: tuple[float | None, int]) -> str:
    """A (gap, word matches) setting as the report names it: "all", "3" or "3+4"."""
    gap, count = setting
    if gap is None:
        return "all"
    return f"{gap:g}" + (f"+{count}" if count else "")


def _choice(chosen: float | None, matches: int, against: float | None) -> str:
    if chosen is None:
        return "rescore every hit (no gap keeps Hits@1 and Hits@5)"
    text = f"rescore_within {chosen:g}" + (f", rescore_word_matches {matches}" if matches else "")
    if against is not None:
        text += f" (fewest pairs with Hits@1 and Hits@5 at least within {against:g}'s)"
    return text


def table(out: dict[str, Any]) -> str:
    chosen = out["chosen"]
    matches = out.get("chosen_word_matches") or 0
    lines = [f"{out['reranker']} over the top {out['top_n']} ({out['split']} turns): "
             + _choice(chosen, matches, out.get("against"))]
    for bench in out["benchmarks"]:
        lines.append(f"{Path(bench['benchmark']).name} ({bench['turns']} turns)")
        lines.append("   gap  H@1   H@5   pairs/turn")
        for gap, s in bench["scores"].items():
            mark = (" <-" if chosen is not None and gap == shortlist_label((chosen, matches))
                    else "")
            lines.append(f"  {gap:>5} {100 * s['hits@1']:5.1f} {100 * s['hits@5']:5.1f} "
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
