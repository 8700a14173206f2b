#!/usr/bin/env python
"""How far below the retriever's best a reranker needs to look: answer-passage Hits@1 / Hits@5
and pairs rescored per turn for each `rescore_within` gap (retrievers/rerank/shortlist.py), with
each `rescore_word_matches` count of --word-matches (retrievers/rerank/word_matches.py), on
sampled answer-evaluable turns, and the setting the rule picks (fewest pairs whose Hits@1 and
Hits@5 are at least rescoring every hit's, or with --against G gap G's, on every benchmark).

    python -m convqa.front.tools.rescore_gaps --reranker convqa-reranker --top-n 50 \\
        --benchmark bench/vital --retriever '{name: convdr, model: convqa-dpr-ihn-answer, \\
        index: bench/vital/indexes/dpr-ihn}' --split train --turns 300 --cache /tmp/c

Each turn's top --top-n is rescored once, every hit (kept in --cache, so another run scores
nothing twice); a gap's ranking is that ranking without the hits it leaves out. Choose on train
turns and check on dev turns; the gap goes into a pipeline as the reranker's `rescore_within`
(and a word-match count as its `rescore_word_matches`; "3+4" in the table: gap 3, 4 matches).

The learned shortlist (retrievers/rerank/learned_shortlist.py, the reranker's `rescore_pairs`):
`--learn` fits its weights on these turns and `--write` records them in the reranker's folder
for the retriever; `--pairs N ...` scores it with N pairs a turn ("learned 26" in the table),
with the weights just fitted or, without --learn, the folder's (how dev turns check them).
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
    p.add_argument("--pairs", type=int, nargs="+", default=[], metavar="N",
                   help="also score the learned shortlist with N pairs a turn (`rescore_pairs`)")
    p.add_argument("--learn", action="store_true",
                   help="fit the learned shortlist's weights on these turns (default: use the "
                        "ones the reranker's folder records for the retriever)")
    add_turn_arguments(p, "the reranker's scores", "learned shortlist's weights",
                       "the reranker's folder (with --learn; a gap goes into a pipeline's "
                       "reranker options)")
    args = p.parse_args(argv)
    if args.write and not args.learn:
        p.error("--write records the learned shortlist's weights: it needs --learn (a gap goes "
                "into a pipeline's reranker options)")
    if any(n < 1 for n in args.pairs):
        p.error("--pairs: counts must be >= 1")
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
    if any(args.word_matches) or args.pairs or args.learn:
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
    chosen_on = sources(args)
    every = [(str(source.benchmark), benchmark_turns(args, source, reranker))
             for source in chosen_on]
    weights = learned_weights(args, reranker, [turns for _, turns in every])
    benchmarks = []
    for name, turns in every:
        scores = {}
        for count in sorted({0, *args.word_matches}):
            for gap, s in gap_scores(turns, at_least=args.at_least,
                                     word_matches=count).items():
                if gap is not None or not count:  # every hit: the same at every count
                    scores[(gap, count)] = s
        benchmarks.append((name, len(turns), scores, learned_scores(args, turns, weights)))
    chosen_gap, chosen_matches = choose_gap([scores for _, _, scores, _ in benchmarks],
                                            baseline=(args.against, 0))
    report = {
        "reranker": args.reranker, "top_n": args.top_n, "at_least": args.at_least,
        "split": args.split, "against": args.against, "chosen": chosen_gap,
        "chosen_word_matches": chosen_matches,
        **({"learned_weights": weights, "learned_on": "these turns" if args.learn
            else "the reranker's folder", "written": False} if weights else {}),
        "benchmarks": [{"benchmark": name, "turns": count,
                        "scores": {**{shortlist_label(g): s for g, s in scores.items()},
                                   **learned}}
                       for name, count, scores, learned in benchmarks]}
    if args.write:
        from retrievers.rerank.learned_shortlist import TARGET_RANK
        from retrievers.rerank.model import write_shortlist

        names = " + ".join(f"{Path(name).name} {count}" for name, count, *_ in benchmarks)
        write_shortlist(folder, reranker.retriever, weights, {
            "chosen_on": f"{args.split} turns ({names}), top {args.top_n}, in the best "
                         f"{TARGET_RANK} when every hit is rescored"})
        report["written"] = True
    return write_report(args.report, report)


def learned_weights(args: argparse.Namespace, reranker: Any, turns: list[list]
                    ) -> dict[str, float] | None:
    """The learned shortlist's weights: fitted on every benchmark's turns (--learn), the
    folder's for the retriever (--pairs alone; a clear error without them), or None."""
    import numpy as np

    from retrievers.rerank.learned_shortlist import fit_weights, training_rows

    if args.learn:
        rows = [training_rows(t, args.at_least) for t in turns]
        return fit_weights(np.vstack([x for x, _ in rows]), np.concatenate([y for _, y in rows]))
    return reranker.shortlist_weights if args.pairs else None


def learned_scores(args: argparse.Namespace, turns: list, weights: dict[str, float] | None
                   ) -> dict[str, dict[str, float]]:
    """{"learned N": Hits@1, Hits@5 and pairs} for each --pairs N."""
    from retrievers.rerank.learned_shortlist import hit_features, learned_shortlist
    from retrievers.rerank.shortlist import shortlist_hits

    def kept_of(count: int):
        return lambda retrieved, matches: learned_shortlist(
            hit_features([s for _, s in retrieved], matches[0], [p for p, _ in retrieved]),
            weights, count, args.at_least)

    return {f"learned {count}": shortlist_hits(turns, kept_of(count))
            for count in args.pairs} if weights else {}


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
    if out.get("learned_weights"):
        weights = ", ".join(f"{k} {v:g}" for k, v in out["learned_weights"].items())
        lines.append(f"learned shortlist ({out['learned_on']}): {weights}"
                     + (" (written)" if out.get("written") else ""))
    for bench in out["benchmarks"]:
        lines.append(f"{Path(bench['benchmark']).name} ({bench['turns']} turns)")
        lines.append("        gap  H@1   H@5   pairs/turn")
        for gap, s in bench["scores"].items():
            mark = (" <-" if chosen is not None and gap == shortlist_label((chosen, matches))
                    else "")
            lines.append(f"  {gap:>10} {100 * s['hits@1']:5.1f} {100 * s['hits@5']:5.1f} "
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
