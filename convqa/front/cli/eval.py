"""`convqa eval`: the retrieval and end-to-end tables of a systems file (Markdown, JSON, PNG).

    convqa eval retrieval --dataset topiocqa-wiki --benchmark vital=/tmp/bench/vital \\
        [--benchmark full=/tmp/bench/full] [--systems benchmarks/retrieval_systems.yaml] \\
        --out docs/results/retrieval [--split dev] [--only LABEL] [--no-cache] [--no-plots]
    convqa eval retrieval --dataset topiocqa --data dev=topiocqa_dev.json --passages STORE \\
        --systems SYSTEMS.yaml --out OUT [--levels passage,article]
    convqa eval retrieval --dataset qrecc --data qrecc_test.json --passages COLLECTION \\
        [--qrels QRELS] [--relevance gold-ids|span-f1] [--no-gold skip|miss] --systems S --out OUT
    convqa eval answers ... --systems benchmarks/answer_systems.yaml --out docs/results/answers

Datasets: "topiocqa-wiki" = benchmark folders of `convqa data topiocqa-wiki` (one table per folder);
"topiocqa" = an official TopiOCQA file of either release with a passage store
(convqa.front.evaluation.topiocqa); "qrecc" = the official qrecc_*.json with its collection
(convqa.front.evaluation.qrecc). The systems file format is in convqa/front/evaluation/systems.py;
every component it names is checked before anything runs. Runs and predictions are cached by
configuration, so a rerun computes only new rows. Writes OUT.md (the block between the table's
markers when the file exists), OUT.json and OUT-*.png.
"""
from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

from convqa.errors import ConfigError
from convqa.quiet import add_verbose_argument

DATASETS = ("topiocqa-wiki", "topiocqa", "qrecc")
TABLES = {"retrieval": "the retrieval table: Hits@k / MRR by question type, shortcut rows",
          "answers": "the end-to-end table: retriever x reader (or a phrase index) -> EM / F1 by "
                      "passages read"}


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "eval", help="produce the QReCC / TopiOCQA retrieval and end-to-end tables",
        description="Produce the retrieval or end-to-end table of a systems file on a dataset: "
                    "Markdown, JSON and PNG plots; runs are cached by configuration.")
    tables = p.add_subparsers(dest="table", metavar="TABLE", required=True)
    for name, summary in TABLES.items():
        q = tables.add_parser(name, help=summary, description=summary + ".")
        q.add_argument("--dataset", default="topiocqa-wiki", choices=DATASETS,
                       help="what --benchmark / --data are (default: topiocqa-wiki)")
        q.add_argument("--benchmark", action="append", default=[], metavar="[NAME=]DIR",
                       help="topiocqa-wiki: a benchmark folder (repeatable; NAME defaults to "
                            "the folder name, e.g. vital)")
        q.add_argument("--data", metavar="[NAME=]FILE",
                       help="topiocqa / qrecc: the official JSON file")
        q.add_argument("--passages", metavar="STORE",
                       help="topiocqa: the passage store; qrecc: a store or a JSONL/TSV file")
        q.add_argument("--qrels", metavar="FILE", help="qrecc: gold passage ids (JSON or TREC)")
        q.add_argument("--relevance", default="gold-ids", choices=("gold-ids", "span-f1"),
                       help="qrecc: what counts as relevant (default: gold-ids)")
        q.add_argument("--no-gold", default="skip", choices=("skip", "miss"),
                       help="qrecc: turns without gold are left out or count as 0")
        q.add_argument("--levels", metavar="LIST",
                       help="topiocqa: passage,article (default: passage when the file has "
                            "gold passages, else article)")
        q.add_argument("--systems", metavar="YAML", required=name == "answers",
                       help="systems file" + ("" if name == "answers" else
                                              " (default: the BM25 shortcut rows)"))
        q.add_argument("--only", action="append", default=[], metavar="LABEL",
                       help="only systems whose label contains LABEL (repeatable)")
        q.add_argument("--split", default="dev", choices=("train", "dev", "all"),
                       help="topiocqa-wiki: which turns (default: dev)")
        q.add_argument("--out", required=True, metavar="OUT",
                       help="writes OUT.md, OUT.json and OUT-*.png")
        q.add_argument("--cache-dir", metavar="DIR",
                       help="run cache (default ~/.cache/convqa/runs)")
        q.add_argument("--no-cache", action="store_true", help="recompute, ignore the cache")
        q.add_argument("--batch-size", type=int, default=64, help="queries per retriever call")
        q.add_argument("--no-plots", action="store_true", help="no PNG files")
        q.add_argument("--quiet", action="store_true", help="no progress bars")
        add_verbose_argument(q)
        q.set_defaults(func=run)


def command_line(args: argparse.Namespace) -> str:
    """The command as the user could retype it (recorded in the outputs)."""
    parts = ["convqa", "eval", args.table]
    if args.dataset != "topiocqa-wiki":
        parts += ["--dataset", args.dataset]
    for item in args.benchmark:
        parts += ["--benchmark", item]
    for flag in ("data", "passages", "qrels", "levels", "systems"):
        if getattr(args, flag):
            parts += [f"--{flag}", str(getattr(args, flag))]
    if args.dataset == "qrecc":
        parts += ["--relevance", args.relevance, "--no-gold", args.no_gold]
    for label in args.only:
        parts += ["--only", label]
    if args.split != "dev" and args.dataset == "topiocqa-wiki":
        parts += ["--split", args.split]
    parts += ["--out", args.out]
    return " ".join(shlex.quote(p) for p in parts)


def run(args: argparse.Namespace) -> int:
    if args.batch_size < 1:
        raise ConfigError("--batch-size must be at least 1")
    command = command_line(args)
    if args.dataset == "qrecc":
        written = run_qrecc(args, command)
    else:
        targets = _targets(args)
        levels = [x.strip() for x in args.levels.split(",") if x.strip()] if args.levels else None
        written = make_table(args.table, targets, args.systems, args.out, command=command,
                             split=args.split, only=args.only, cache_dir=args.cache_dir,
                             batch_size=args.batch_size, use_cache=not args.no_cache,
                             progress=not args.quiet, plots=not args.no_plots, levels=levels)
    print("wrote " + ", ".join(str(p) for p in written), file=sys.stderr)
    return 0


def _targets(args: argparse.Namespace) -> list:
    from convqa.front.evaluation.targets import benchmark_target, official_target

    if args.dataset == "topiocqa-wiki":
        if args.data or args.passages:
            raise ConfigError("--dataset topiocqa-wiki reads --benchmark DIR (the folder holds "
                              "its passages); --data / --passages are for topiocqa and qrecc")
        if not args.benchmark:
            raise ConfigError("--dataset topiocqa-wiki needs --benchmark [NAME=]DIR (built by "
                              "`convqa data topiocqa-wiki --out DIR`)")
        targets = [benchmark_target(item) for item in args.benchmark]
    else:
        if args.benchmark:
            raise ConfigError(f"--dataset {args.dataset} reads --data FILE and --passages "
                              "STORE, not --benchmark")
        if not args.data:
            raise ConfigError(f"--dataset {args.dataset} needs --data FILE (the official JSON)")
        targets = [official_target(args.data, args.passages)]
    names = [t.name for t in targets]
    if len(set(names)) != len(names):
        raise ConfigError(f"two targets share a name ({', '.join(names)}): use NAME=DIR")
    return targets


def make_table(table: str, targets: list, systems_path: str | None, out: str, *, command: str,
               split: str = "dev", only: list[str] | None = None, cache_dir: str | None = None,
               batch_size: int = 64, use_cache: bool = True, progress: bool = True,
               plots: bool = True, levels: list[str] | None = None) -> list[Path]:
    """Check the systems file, run every system on every target, write the outputs.
    Shared by `convqa eval` and convqa/front/tools/retrieval_table.py / answer_table.py."""
    from convqa.front.evaluation import tables
    from convqa.front.evaluation.systems import (DEFAULT_RETRIEVAL_SYSTEMS, check_components,
                                                 load_systems)

    if table not in TABLES:
        raise ConfigError(f"unknown table {table!r} (expected {', '.join(TABLES)})")
    if systems_path is None and table == "answers":
        raise ConfigError("the end-to-end table needs --systems FILE (retriever + reader rows)")
    systems = (load_systems(systems_path, table) if systems_path is not None
               else DEFAULT_RETRIEVAL_SYSTEMS).select(only)
    check_components(systems)
    if table == "retrieval":
        results = tables.retrieval_table(targets, systems, split, cache_dir, batch_size,
                                         progress, use_cache, levels)
        return tables.write_retrieval_outputs(out, results, command, split, plots)
    results = tables.answer_table(targets, systems, split, cache_dir, progress, use_cache)
    if not results:
        raise ConfigError(f"{systems.path}: no system runs on "
                          f"{', '.join(t.name for t in targets)} (see 'corpora')")
    return tables.write_answer_outputs(out, results, systems.top_ks, command, plots)


def _qrecc_module():
    """convqa.front.evaluation.qrecc, or a one-line error when this checkout does not have it."""
    try:
        from convqa.front.evaluation import qrecc
    except ImportError as exc:
        raise ConfigError(f"--dataset qrecc: the QReCC evaluation is not available in this "
                          f"checkout ({exc})") from None
    if not hasattr(qrecc, "evaluate_qrecc_retrieval"):
        raise ConfigError("--dataset qrecc: convqa.front.evaluation.qrecc has no "
                          "evaluate_qrecc_retrieval yet")
    return qrecc


def run_qrecc(args: argparse.Namespace, command: str) -> list[Path]:
    """QReCC: the rows of the systems file on one official file (convqa.front.evaluation.qrecc)."""
    from convqa.front.evaluation import plots, tables
    from convqa.front.evaluation.systems import check_components, load_systems
    from convqa.front.evaluation.targets import named_path
    from convqa.io import write_json

    qrecc = _qrecc_module()
    if args.benchmark or not args.data or not args.passages:
        raise ConfigError("--dataset qrecc needs --data qrecc_*.json and --passages "
                          "COLLECTION (and --qrels FILE for gold passage ids), not --benchmark")
    if args.systems is None:
        raise ConfigError("--dataset qrecc needs --systems FILE")
    systems = load_systems(args.systems, args.table).select(args.only)
    check_components(systems, extra_histories=("rewrite",))
    name, path = named_path(args.data, "--data")
    name = name or path.name.split(".")[0]
    for key in ("phrase_index", "reranker"):
        rows = [s.label for s in systems.systems
                if getattr(s, key) is not None and s.runs_on(name)]
        if rows:
            raise ConfigError(f"{systems.path}: system '{rows[0]}': {key} rows do not run on "
                              "--dataset qrecc yet (leave them out with 'corpora' or --only)")
    dataset = qrecc.load_qrecc_eval(path, args.passages, args.qrels, cache_dir=args.cache_dir,
                                    progress=not args.quiet)
    placeholders = {"corpus": str(Path(dataset.store).parent), "passages": str(dataset.store)}
    results: list[dict[str, Any]] = []
    for system in systems.systems:
        if not system.runs_on(name):
            continue
        system = system.resolved(placeholders)
        common = dict(cache_dir=args.cache_dir, progress=not args.quiet, label=system.label,
                      use_cache=not args.no_cache)
        if args.table == "retrieval":
            result = qrecc.evaluate_qrecc_retrieval(
                dataset, system.retriever, system.history, relevance=args.relevance,
                no_gold=args.no_gold, batch_size=args.batch_size, **common)
        else:
            result = qrecc.evaluate_qrecc_answers(dataset, system.retriever, system.reader,
                                                  system.history, top_ks=systems.top_ks,
                                                  **common)
        results.append(result)
        print(f"{name}: {system.label}{' (cached)' if result.get('cached') else ''}",
              file=sys.stderr)
    if not results:
        raise ConfigError(f"{systems.path}: no system runs on {name} (see 'corpora')")
    outputs = tables.Outputs.for_out(args.out)
    outputs.base.parent.mkdir(parents=True, exist_ok=True)
    render = (qrecc.retrieval_markdown if args.table == "retrieval"
              else qrecc.answers_markdown)
    groups = list(dict.fromkeys(g for r in results for g in _qrecc_groups(r)))
    markers = (tables.RETRIEVAL_MARKERS if args.table == "retrieval" else tables.ANSWER_MARKERS)
    lines = [markers[0], "", f"Generated by `{command}`.", ""]
    for group in groups:
        lines += [f"### {name}, {group} turns", "", render(results, group), ""]
    written = [outputs.markdown, outputs.json]
    if not args.no_plots and args.table == "retrieval":
        level = args.relevance
        hits = outputs.png(name, level, "hits")
        plots.hits_curve(results, level, hits, f"Hits@k, {name}, {level}")
        lines += [f"![{name}]({hits.name})", ""]
        written.append(hits)
    lines.append(markers[1])
    tables.write_block(outputs.markdown, "\n".join(lines), markers,
                       "QReCC retrieval results" if args.table == "retrieval"
                       else "QReCC end-to-end results")
    write_json(outputs.json, {"command": command, "dataset": "qrecc", "results": {name: results}})
    return written


def _qrecc_groups(result: dict[str, Any]) -> list[str]:
    if "levels" in result:
        level = next(iter(result["levels"].values()))
        return list(level["groups"])
    return list(next(iter(result["by_k"].values()))["groups"]) if result.get("by_k") else []


__all__ = ["add_parser", "make_table", "run"]
