"""`convqa train reranker-fusion`: choose how much of a retriever's score a reranker keeps
(retrievers/rerank/fusion.py) on training turns, and record it in the reranker's folder.

    convqa train reranker-fusion --reranker convqa-reranker \\
        --benchmark bench/full --retriever '{name: dense, index: bench/full/indexes/dpr-ihn}' \\
        --benchmark bench/vital --retriever '{name: dense, index: bench/vital/indexes/dpr-ihn}' \\
        --history oldest_first --turns 300 --cache /tmp/fusion --write

Each sampled answer-evaluable turn of --split is retrieved (top --top-n), rescored by the
reranker alone (kept in --cache: choosing again scores nothing twice), then every weight of
fusion.WEIGHTS is scored by the answer passages' mean reciprocal rank; the best is written for
the retriever's key (`dense:convqa-dpr-ihn`, `bm25`). With several --benchmark the weight is
chosen on the mean of their MRRs, each collection counting the same: one weight per retriever
serves every collection it is used on, and a retriever that is strong on a small collection
and weak at the passage level of a large one (DPR-IHN) is weighed on both. Wired into
`convqa train` by `add_fusion_parser(jobs)`.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def add_fusion_parser(jobs) -> argparse.ArgumentParser:
    p = jobs.add_parser(
        "reranker-fusion",
        help="choose the weight of a retriever's score in a reranker's, on training turns",
        description="Rescore training turns' retrieved passages with a reranker and choose "
                    "the weight of the retriever's standardised score in the final score "
                    "(0: the reranker alone) by the answer passages' MRR; --write records it "
                    "in the reranker's folder for that retriever.")
    p.add_argument("--reranker", default="convqa-reranker",
                   help="reranker folder or shipped alias (default convqa-reranker)")
    add_turn_arguments(p, "the reranker's scores", "weight", "the reranker's folder")
    p.add_argument("--top-n", type=int, default=None,
                   help="hits rescored (default the reranker's top_n, 20)")
    p.set_defaults(func=run)
    return p


def add_turn_arguments(p: argparse.ArgumentParser, cached: str, chosen: str,
                       folder: str) -> None:
    """The options of a job that chooses a reranker setting on sampled benchmark turns
    (`reranker-fusion`, `reranker-cascade`): the turns, their retriever, the cache, the report
    and --write."""
    p.add_argument("--benchmark", required=True, action="append", metavar="DIR",
                   help="`convqa data topiocqa-wiki` folder (repeat for several collections)")
    p.add_argument("--retriever", required=True, action="append", metavar="SPEC",
                   help="the retriever the reranker follows, one per --benchmark in order or "
                        "one for all: a name, inline YAML/JSON or a YAML file (its key in the "
                        "folder: name, and model when it has one; the same for every "
                        "--benchmark)")
    p.add_argument("--history", action="append", default=[], metavar="SPEC",
                   help="the retriever's query formatting, one per --benchmark or one for all "
                        "(default oldest_first)")
    p.add_argument("--split", default="train", help="benchmark turns to use (default train)")
    p.add_argument("--turns", type=int, default=300,
                   help="answer-evaluable turns per benchmark, a seeded sample (default 300)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed")
    p.add_argument("--unseen-by", action="append", default=[], metavar="EXAMPLES",
                   help="leave out the turns among these training examples (a `convqa train "
                        "reranker-examples` or reader data file; ids `<collection>/<qid>`, "
                        "matched on the qid), so a setting is chosen on turns the models did "
                        "not train on (repeatable)")
    p.add_argument("--cache", metavar="DIR", help=f"keep {cached} here")
    p.add_argument("--report", metavar="FILE", help=f"write the scores of every {chosen} as JSON")
    p.add_argument("--write", action="store_true",
                   help=f"record the chosen {chosen} in {folder}")
    p.add_argument("--quiet", action="store_true", help="no progress")


def write_report(path: str | None, report: dict[str, Any]) -> dict[str, Any]:
    """`report` written as JSON to `path` (None: not written); returns it."""
    if path:
        from convqa.io import write_json

        write_json(path, report)
    return report


def reranker_folder(name: str) -> Path:
    from convqa.errors import ConfigError
    from convqa.models import shipped_model_path
    from retrievers.rerank.model import META_FILE

    folder = shipped_model_path(name) or Path(name)
    if not (folder / META_FILE).is_file():
        raise ConfigError(f"{name}: not a reranker folder (no {META_FILE}; train one with "
                          "`convqa train reranker`)")
    return folder


@dataclass(frozen=True)
class Source:
    """One --benchmark with its retriever spec and history spec."""

    benchmark: str
    retriever: Any
    history: Any


def sources(args: argparse.Namespace) -> list[Source]:
    """The --benchmark folders paired with their --retriever and --history (one for all, or one
    each in order); every retriever must have the same key, the one the weight is recorded for."""
    from convqa.errors import ConfigError
    from convqa.specs import parse_spec
    from retrievers.rerank.fusion import retriever_key

    from .train_args import per_benchmark

    count = len(args.benchmark)
    retrievers = [parse_spec(spec, "retriever")[0]
                  for spec in per_benchmark(args.retriever, count, "--retriever", "")]
    histories = [parse_spec(spec, "history")[0]
                 for spec in per_benchmark(args.history, count, "--history", "oldest_first")]
    keys = {retriever_key(spec) for spec in retrievers}
    if len(keys) > 1:
        raise ConfigError("one weight is chosen for one retriever: the --retriever specs name "
                          f"{', '.join(sorted(map(str, keys)))}")
    return [Source(b, r, h) for b, r, h in zip(args.benchmark, retrievers, histories)]


def retrieved_turns(args: argparse.Namespace, source: Source, top_n: int
                    ) -> tuple[Any, list, dict[str, list]]:
    """(the benchmark's data, its sampled answer-evaluable --split turns that have answer
    passages, their retriever's top `top_n` hits by qid), for the jobs that choose a reranker
    setting on sampled turns."""
    from convqa.benchmark import load_labelled_turns
    from convqa.errors import ConfigError
    from readers.extractive.calibration_data import benchmark_turns, retrieve

    data = load_labelled_turns(source.benchmark)
    pool = data.turns
    if args.unseen_by:
        pool = unseen_turns(pool, args.unseen_by, source.benchmark)
    turns, _ = benchmark_turns(pool, args.split, args.turns, 0, args.seed)
    turns = [t for t in turns if t.answer_passage_ids]
    if not turns:
        raise ConfigError(f"{source.benchmark}: no answer-evaluable turns with answer passages "
                          f"in split {args.split!r}")
    hits = retrieve(turns, data.conversations, source.retriever, source.history, top_n,
                    progress=not args.quiet)
    return data, turns, hits


def unseen_turns(turns: list, example_files: list[str], benchmark: str) -> list:
    """`turns` less those whose qid an example of `example_files` holds (ids
    `<collection>/<qid>`, the same TopiOCQA turn whichever collection it was read against: a
    model that trained on a turn against the vital collection has seen its question and answer
    passage on the full one too). A model ranks the turns it trained on better than new ones, so
    a setting chosen on them trusts it too much. Files that hold none of the benchmark's turns
    are refused (the wrong file) rather than leaving nothing out in silence."""
    from convqa.errors import ConfigError, DataError
    from convqa.io import iter_jsonl

    seen: set[str] = set()
    for path in example_files:
        for line, record in iter_jsonl(path):
            if not isinstance(record, dict) or not isinstance(record.get("id"), (str, int)):
                raise DataError('expected a training example with an "id"', path, line)
            seen.add(str(record["id"]).split("/", 1)[-1])
    kept = [t for t in turns if t.qid not in seen]
    if len(kept) == len(turns):
        raise ConfigError(f"--unseen-by {', '.join(example_files)}: no example is a turn of "
                          f"{benchmark} (their ids would be '<collection>/<qid>')")
    return kept


def scored_turns(args: argparse.Namespace, source: Source, reranker: Any, say
                 ) -> tuple[list, dict[str, Any]]:
    """[(the turn's hits rescored by the reranker alone, its answer passage ids)] of one
    benchmark, and facts."""
    from convqa.front.evaluation.rerank import cached_rerank_turns

    top_n = reranker.options.top_n
    data, turns, hits = retrieved_turns(args, source, top_n)
    reranked = cached_rerank_turns(reranker, turns, data.conversations, hits,
                                   Path(source.benchmark) / "passages", top_n, args.cache,
                                   progress=not args.quiet)
    say(f"{Path(source.benchmark).name}: {len(turns)} {args.split} turns, rescored top {top_n}"
        + (" (cached)" if reranked.cached else ""))
    return ([(reranked.hits[t.qid], set(t.answer_passage_ids)) for t in turns],
            reranked.facts)


def mean_scores(each: list[dict[float, dict[str, float]]]) -> dict[float, dict[str, float]]:
    """Each weight's metrics averaged over the benchmarks (each counts the same)."""
    return {w: {m: sum(s[w][m] for s in each) / len(each) for m in each[0][w]} for w in each[0]}


def calibrate(args: argparse.Namespace, say=print) -> dict[str, Any]:
    """Score, choose, and (with --write) record; returns the report."""
    from convqa.errors import ConfigError
    from convqa.registry import RERANKERS
    from retrievers.rerank.fusion import choose_weight, retriever_key, weight_scores
    from retrievers.rerank.model import write_weight

    if args.turns is not None and args.turns < 1:
        raise ConfigError(f"--turns must be at least 1, got {args.turns}")
    folder = reranker_folder(args.reranker)
    chosen_on = sources(args)
    options = {"name": "cross_encoder", "model": str(folder), "retriever_weight": 0.0}
    if args.top_n is not None:
        options["top_n"] = args.top_n
    reranker = RERANKERS.build(options)
    key = retriever_key(chosen_on[0].retriever)
    benchmarks = []
    for source in chosen_on:
        turns, facts = scored_turns(args, source, reranker, say)
        benchmarks.append({"benchmark": str(source.benchmark), **facts,
                           "scores": weight_scores(turns)})
    scores = mean_scores([b["scores"] for b in benchmarks])
    weight = choose_weight(scores)
    names = " + ".join(f"{Path(b['benchmark']).name} {b['turns']}" for b in benchmarks)
    report = {"reranker": args.reranker, "folder": str(folder), "retriever": key,
              "split": args.split, "top_n": benchmarks[0]["top_n"],
              "turns": sum(b["turns"] for b in benchmarks),
              "benchmarks": [{**b, "scores": {str(w): s for w, s in b["scores"].items()}}
                             for b in benchmarks],
              "scores": {str(w): s for w, s in scores.items()}, "weight": weight,
              "written": False}
    if args.write:
        write_weight(folder, key, weight, {
            "chosen_on": f"{args.split} turns ({names}), top {report['top_n']}",
            "mrr": round(scores[weight]["mrr"], 4),
            "mrr_reranker_alone": round(scores[0.0]["mrr"], 4)})
        report["written"] = True
    return write_report(args.report, report)


def summary(report: dict[str, Any]) -> str:
    names = [Path(b["benchmark"]).name for b in report["benchmarks"]]
    several = len(names) > 1
    lines = [f"retriever {report['retriever']}: weight {report['weight']:g}"
             + (" (written)" if report["written"] else "")
             + (f", on the mean MRR of {', '.join(names)}" if several else "")]
    for weight, s in report["scores"].items():
        mark = " <-" if float(weight) == report["weight"] else ""
        each = "".join(f"; {name} {b['scores'][weight]['mrr']:.3f}"
                       for name, b in zip(names, report["benchmarks"])) if several else ""
        lines.append(f"  w={float(weight):g}: MRR {s['mrr']:.3f}, H@1 "
                     f"{100 * s['hits@1']:.1f}{each}{mark}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    say = (lambda *_: None) if args.quiet else (lambda text: print(text, flush=True))
    print(summary(calibrate(args, say)))
    return 0
