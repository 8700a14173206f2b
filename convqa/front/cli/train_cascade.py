"""`convqa train reranker-cascade`: choose, on training turns, the first stage's lead at which a
two-stage reranker skips its slow second stage (retrievers/rerank/cascade.py), and record it in
the first stage's folder.

    convqa train reranker-cascade --reranker convqa-reranker --then convqa-reranker-large \\
        --top-n 50 --history oldest_first \\
        --benchmark bench/full --retriever '{name: convdr, model: convqa-dpr-ihn-answer, index: ...}' \\
        --benchmark bench/vital --retriever '{name: convdr, model: convqa-dpr-ihn-answer, index: ...}' \\
        --turns 300 --cache /tmp/cascade --write

Each sampled answer-evaluable turn of --split is retrieved (top --top-n), rescored by the first
stage (with the retriever weight its folder records for that retriever) and its best
--then-top-n reordered by the second stage; both are kept in --cache, so choosing again scores
nothing twice. Every margin of cascade.MARGINS is scored by the answer passages' Hits@1 when the
turns that lead by at least it keep the first stage's order; the margin whose smallest gain over
never skipping, across the benchmarks, is largest (on a tie the smallest) is written, for the
retriever's key and the second stage's fingerprint; `--margin M` writes M instead (scored with
the rest; the record names the rule's choice), for turns that favour one stage, e.g. ones the
first stage trained on. Wired into `convqa train` by
`add_cascade_parser(jobs)`.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .train_fusion import (Source, add_turn_arguments, reranker_folder, retrieved_turns, sources,
                           write_report)


def add_cascade_parser(jobs) -> argparse.ArgumentParser:
    p = jobs.add_parser(
        "reranker-cascade",
        help="choose on training turns when a two-stage reranker may skip its second stage",
        description="Rank training turns with a reranker and a second, slower one on its "
                    "best few, and choose the first stage's lead (its best score minus its "
                    "second best) at which a turn keeps the first stage's order and skips the "
                    "second: the one whose smallest Hits@1 gain over never skipping, across "
                    "the benchmarks, is largest (on a tie the smallest). --write records it "
                    "in the first stage's folder.")
    p.add_argument("--reranker", default="convqa-reranker",
                   help="the first stage: folder or shipped alias (default convqa-reranker)")
    p.add_argument("--then", default="convqa-reranker-large", metavar="MODEL",
                   help="the second stage: folder or shipped alias (default "
                        "convqa-reranker-large)")
    p.add_argument("--top-n", type=int, default=50,
                   help="hits the first stage rescores (default 50)")
    p.add_argument("--then-top-n", type=int, default=5,
                   help="of those, how many the second stage reorders (default 5)")
    p.add_argument("--margin", type=float, metavar="M",
                   help="record M rather than the margin the rule chooses (with --write), e.g. "
                        "when the turns favour one stage (it trained on them); M is scored "
                        "beside the others")
    add_turn_arguments(p, "both stages' scores", "margin", "the first stage's folder")
    p.set_defaults(func=run)
    return p


def staged_turns(args: argparse.Namespace, source: Source, first: Any, second: Any, say
                 ) -> tuple[list, dict[str, Any]]:
    """[(first stage's hits, second stage's order of its best, answer passage ids)] of one
    benchmark's sampled turns, and facts."""
    from convqa.front.evaluation.rerank import cached_rerank_turns

    data, turns, hits = retrieved_turns(args, source, args.top_n)
    passages = Path(source.benchmark) / "passages"
    first.for_retriever(source.retriever)
    ranked = cached_rerank_turns(first, turns, data.conversations, hits, passages, args.top_n,
                                 args.cache, progress=not args.quiet)
    reordered = cached_rerank_turns(second, turns, data.conversations, ranked.hits, passages,
                                    args.then_top_n, args.cache, progress=not args.quiet)
    say(f"{Path(source.benchmark).name}: {len(turns)} {args.split} turns, first stage top "
        f"{args.top_n}, second stage its best {args.then_top_n}"
        + (" (cached)" if ranked.cached and reordered.cached else ""))
    facts = {"turns": len(turns),
             "first_ms_p50": ranked.facts.get("rerank_ms_per_turn_p50"),
             "second_ms_p50": reordered.facts.get("rerank_ms_per_turn_p50")}
    return ([(ranked.hits[t.qid], reordered.hits[t.qid], set(t.answer_passage_ids))
             for t in turns], facts)


def _label(margin: float | None) -> str:
    return "never" if margin is None else f"{margin:g}"


def calibrate(args: argparse.Namespace, say=print) -> dict[str, Any]:
    """Score, choose, and (with --write) record; returns the report."""
    from convqa.errors import ConfigError
    from convqa.registry import RERANKERS
    from retrievers.rerank.cascade import (MARGINS, cascade_key, choose_margin, is_margin,
                                           margin_scores)
    from retrievers.rerank.fusion import retriever_key
    from retrievers.rerank.model import write_margin

    for name in ("turns", "top_n", "then_top_n"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    given = args.margin
    if given is not None and not is_margin(given):
        raise ConfigError(f"--margin must be a number >= 0, got {given:g}")
    if args.then_top_n > args.top_n:
        raise ConfigError(f"--then-top-n {args.then_top_n} is more than the first stage's "
                          f"--top-n {args.top_n}")
    folder = reranker_folder(args.reranker)
    second_folder = reranker_folder(args.then)
    chosen_on = sources(args)
    first = RERANKERS.build({"name": "cross_encoder", "model": str(folder),
                             "top_n": args.top_n})
    second = RERANKERS.build({"name": "cross_encoder", "model": str(second_folder),
                              "top_n": args.then_top_n, "retriever_weight": 0.0})
    key = cascade_key(retriever_key(chosen_on[0].retriever), second.model.known_fingerprint())
    tried = MARGINS if given is None or given in MARGINS else tuple(sorted((*MARGINS, given)))
    benchmarks = []
    for source in chosen_on:
        turns, facts = staged_turns(args, source, first, second, say)
        benchmarks.append({"benchmark": str(source.benchmark), **facts,
                           "scores": margin_scores(turns, tried)})
    margins = list(benchmarks[0]["scores"])
    scores = {m: {metric: sum(b["scores"][m][metric] for b in benchmarks) / len(benchmarks)
                  for metric in ("hits@1", "skipped")} for m in margins}
    chosen = choose_margin([b["scores"] for b in benchmarks])
    margin = chosen if given is None else float(given)
    names = " + ".join(f"{Path(b['benchmark']).name} {b['turns']}" for b in benchmarks)
    report = {"reranker": args.reranker, "folder": str(folder), "then": args.then,
              "key": key, "split": args.split, "top_n": args.top_n,
              "then_top_n": args.then_top_n,
              "turns": sum(b["turns"] for b in benchmarks),
              "benchmarks": [{**b, "scores": {_label(m): s for m, s in b["scores"].items()}}
                             for b in benchmarks],
              "scores": {_label(m): s for m, s in scores.items()},
              "skip_margin": margin, "rule_margin": chosen, "given": given is not None,
              "written": False}
    if args.write and margin is not None:
        write_margin(folder, key, margin, {
            "second_stage": args.then,
            "chosen_on": f"{args.split} turns ({names}), first stage top {args.top_n}, "
                         f"second stage its best {args.then_top_n}"
                         + ("" if given is None else
                            f"; given by --margin (the rule's choice: {_label(chosen)})"),
            "hits@1": round(scores[margin]["hits@1"], 4),
            "hits@1_never_skipping": round(scores[None]["hits@1"], 4),
            "skipped": round(scores[margin]["skipped"], 4)})
        report["written"] = True
    return write_report(args.report, report)


def summary(report: dict[str, Any]) -> str:
    names = [Path(b["benchmark"]).name for b in report["benchmarks"]]
    margin = report["skip_margin"]
    head = ("never skip: every margin ranks worse than never skipping somewhere"
            if margin is None else
            f"skip margin {margin:g}" + (" (written)" if report["written"] else ""))
    if report.get("given"):
        head += f", given (the rule chooses {_label(report['rule_margin'])})"
    lines = [f"{report['reranker']} then {report['then']}: {head}"
             + (f", on the worst gain of {', '.join(names)}" if len(names) > 1 else "")]
    for label, s in report["scores"].items():
        mark = " <-" if label == _label(margin) else ""
        each = "".join(f"; {name} H@1 {100 * b['scores'][label]['hits@1']:.1f}"
                       for name, b in zip(names, report["benchmarks"])) if len(names) > 1 else ""
        lines.append(f"  {label}: H@1 {100 * s['hits@1']:.1f}, skipped "
                     f"{100 * s['skipped']:.1f}%{each}{mark}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    say = (lambda *_: None) if args.quiet else (lambda text: print(text, flush=True))
    print(summary(calibrate(args, say)))
    return 0
