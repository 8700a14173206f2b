"""`convqa train reranker`, `reranker-examples` and `reranker-teacher`: flags in, run.py out.

    convqa train reranker --out DIR [--benchmark DIR]... [--mined-run DIR=RUN]...
                          [--squad FILE]... | --examples FILE.jsonl[.xz]...
                          [--negatives 7] [--lora 16] [--max-steps N] [--bf16] ...
    convqa train reranker-examples --out FILE.jsonl.xz [--benchmark DIR]... [--squad FILE]...
    convqa train reranker-teacher --teacher MODEL --examples FILE --out SCORES.jsonl

The second writes the examples the first would build into one file, so a machine that sees
neither the benchmark nor the SQuAD files (a GPU box) trains from that file alone. Wired into
`convqa train` by `add_reranker_parsers(jobs)`. The third scores the examples with a teacher
reranker, for `convqa train reranker --teacher-scores` (retrievers/rerank/distill.py).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from .train_args import (add_distillation_args, add_loader_workers_arg, add_process_args,
                         add_schedule_args, add_training_precision_arg, add_weak_positives_arg,
                         count, fraction, int_at_least, positive_int, schedule_settings,
                         start_run)

LORA_LR, FULL_LR = 2e-4, 3e-5  # the default peak learning rates with and without LoRA


def add_reranker_parsers(jobs) -> None:
    p = jobs.add_parser(
        "reranker", help="the cross-encoder passage reranker",
        description="Train the cross-encoder reranker: build examples (OUT/data) from "
        "benchmark turns and SQuAD-format files, or read prepared ones, train (OUT/model, "
        "resumable from OUT/checkpoint), then rank held-out questions (OUT/eval.json). Rerun "
        "the same command to resume. Several processes: torchrun ... -m convqa.front.cli.main "
        "train reranker ... (the same flags).")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder")
    _add_sources(p)
    p.add_argument("--examples", action="append", default=[], metavar="FILE",
                   help="prepared examples (`convqa train reranker-examples`, or the "
                        "reader's `convqa train reader` files: their negatives split by "
                        "article; JSONL, .xz or .gz), instead of building them")
    p.add_argument("--init-model", default="all-MiniLM-L6-v2", metavar="ID_OR_PATH",
                   help="encoder to start from, or a reranker folder to train further "
                        "(default all-MiniLM-L6-v2)")
    p.add_argument("--negatives", type=positive_int, default=7, metavar="K",
                   help="negatives per question in its listwise softmax (default 7)")
    p.add_argument("--lora", type=count, default=16, metavar="R",
                   help="LoRA rank on the encoder (default 16; 0: train all weights)")
    p.add_argument("--pooling", choices=("cls", "mean"), default="cls")
    p.add_argument("--max-length", type=int_at_least(64), default=256, metavar="TOKENS",
                   help="tokens per (query, passage) pair (default 256)")
    p.add_argument("--max-query-length", type=positive_int, default=64, metavar="TOKENS")
    p.add_argument("--encoder-layers", type=positive_int, metavar="N",
                   help="keep only the first N layers of the initial encoder")
    p.add_argument("--history", default="current_first", metavar="STRATEGY",
                   help="query formatting of the conversation (default current_first)")
    p.add_argument("--history-max-tokens", type=positive_int, default=64, metavar="N")
    p.add_argument("--length-pool", type=count, default=64, metavar="BATCHES",
                   help="length buckets: the epoch order is sorted by length in pools of this "
                        "many batches (default 64; 0: none)")
    p.add_argument("--pair-chunk", type=count, default=0, metavar="N",
                   help="pairs per forward pass in order of length (CPUs: e.g. 8; default 0: "
                        "one pass)")
    p.add_argument("--eval-every", type=count, default=0, metavar="STEPS",
                   help="rank a fixed held-out sample every STEPS steps into OUT/log.jsonl")
    p.add_argument("--eval-examples", type=positive_int, default=500, metavar="N",
                   help="held-out questions per source ranked after training (default 500)")
    p.add_argument("--no-eval", action="store_true", help="skip the held-out ranking")
    add_distillation_args(
        p, "--teacher-scores", "learn from a teacher reranker too: its scores of the training "
        "examples (`convqa train reranker-teacher`)", "the positive's loss", 1.0)
    add_schedule_args(p, batch_size=8, unit="questions", lr=None, weight_decay=0.01,
                      lr_help=f"peak learning rate (default {LORA_LR:g} with LoRA, {FULL_LR:g} "
                              "without)")
    add_training_precision_arg(p)
    add_loader_workers_arg(p)
    add_process_args(p)
    p.set_defaults(func=run_reranker)

    e = jobs.add_parser(
        "reranker-examples", help="write reranker training examples into one file",
        description="Build reranker examples from benchmark turns and SQuAD-format files into "
        "one JSONL file (compressed for a .xz name), for `convqa train reranker --examples`.")
    e.add_argument("--out", required=True, metavar="FILE", help="e.g. reranker.jsonl.xz")
    _add_sources(e)
    e.add_argument("--seed", type=count, default=0)
    e.set_defaults(func=run_reranker_examples)

    t = jobs.add_parser(
        "reranker-teacher", help="a teacher reranker's scores of reranker examples (for "
        "--teacher-scores)",
        description="Score every candidate of the training examples (split train) of "
        "reranker example files with a teacher reranker, once: the scores `convqa train "
        "reranker --teacher-scores` distils from. Rerun to resume; several processes share "
        "the examples.")
    t.add_argument("--teacher", required=True, metavar="MODEL",
                   help="the teacher: a reranker folder or shipped alias")
    t.add_argument("--examples", required=True, action="append", metavar="FILE",
                   help="reranker example files, as given to `convqa train reranker`")
    t.add_argument("--out", required=True, metavar="FILE", help="where the scores go (.jsonl)")
    t.add_argument("--precision", choices=("auto", "fp32", "bf16"), default="auto",
                   help="the teacher's arithmetic (default auto: measured on its first pairs)")
    add_process_args(t)
    t.set_defaults(func=run_reranker_teacher)


def _add_sources(p: argparse.ArgumentParser) -> None:
    p.add_argument("--benchmark", action="append", default=[], metavar="DIR",
                   help="benchmark folder (`convqa data topiocqa-wiki`, repeatable): train "
                        "turns train, dev turns are held out")
    p.add_argument("--mined-run", action="append", default=[], metavar="DIR=RUN",
                   help="mine that benchmark's negatives from a run file of its turns (e.g. "
                        "DPR-IHN's, `convqa retrieve`) instead of BM25 (repeatable)")
    p.add_argument("--squad", action="append", default=[], metavar="FILE",
                   help="SQuAD-format file (repeatable); whole articles are held out")
    p.add_argument("--article-negatives", type=count, default=16, metavar="N",
                   help="same-article negatives stored per question (default 16)")
    p.add_argument("--mined-negatives", type=count, default=16, metavar="N",
                   help="mined negatives stored per question (default 16)")
    p.add_argument("--heldout-fraction", type=fraction, default=0.1,
                   help="fraction of SQuAD articles held out (default 0.1)")
    p.add_argument("--max-examples", type=positive_int, metavar="N",
                   help="training questions per source (a seeded sample)")
    p.add_argument("--max-heldout", type=positive_int, default=1000, metavar="N",
                   help="held-out questions kept per source (default 1000)")
    add_weak_positives_arg(p, what="the benchmarks'")


def _sources(args: argparse.Namespace):
    from convqa.benchmark.weak_positives import WeakPositiveRule
    from convqa.errors import ConfigError
    from retrievers.rerank.build_examples import ExampleSources

    runs = {}
    for item in args.mined_run:
        folder, sep, run = item.partition("=")
        if not sep or not folder or not run:
            raise ConfigError(f"--mined-run {item!r}: expected DIR=RUN")
        same = [b for b in args.benchmark if Path(b).resolve() == Path(folder).resolve()]
        if not same:
            raise ConfigError(f"--mined-run {item!r}: {folder} is not one of the --benchmark "
                              "folders")
        runs[same[0]] = run
    history = {"name": getattr(args, "history", "current_first"),
               "max_tokens": getattr(args, "history_max_tokens", 64)}
    return ExampleSources(squad=list(args.squad), benchmarks=list(args.benchmark), runs=runs,
                          article_negatives=args.article_negatives,
                          mined_negatives=args.mined_negatives,
                          heldout_fraction=args.heldout_fraction, max_examples=args.max_examples,
                          max_heldout=args.max_heldout, history=history, seed=args.seed,
                          weak_positives=WeakPositiveRule.for_coverage(
                              getattr(args, "weak_positives", None)))


def run_reranker(args: argparse.Namespace) -> int:
    from retrievers.rerank.run import RerankRunConfig, run_reranker_training
    from retrievers.rerank.train import RerankTrainConfig, make_accelerator

    settings = schedule_settings(args)
    if settings["lr"] is None:
        settings["lr"] = LORA_LR if args.lora else FULL_LR
    train = RerankTrainConfig(
        negatives=args.negatives, precision=args.precision,
        history={"name": args.history, "max_tokens": args.history_max_tokens},
        length_pool=args.length_pool, pair_chunk=args.pair_chunk,
        eval_every=args.eval_every, eval_examples=args.eval_examples,
        loader_workers=args.loader_workers,
        distill_weight=args.distill_weight if args.teacher_scores else 0.0,
        distill_temperature=args.distill_temperature, **settings)
    config = RerankRunConfig(
        sources=_sources(args), examples=list(args.examples), init_model=args.init_model,
        max_length=args.max_length, max_query_length=args.max_query_length,
        pooling=args.pooling, encoder_layers=args.encoder_layers, lora_r=args.lora,
        eval_examples=args.eval_examples, evaluate=not args.no_eval,
        teacher_scores=args.teacher_scores, train=train)
    say = start_run(args)
    accelerator = make_accelerator(cpu=args.cpu)
    summary = run_reranker_training(config, args.out, accelerator, say)
    if accelerator.is_main_process:
        print(json.dumps(summary))
    return 0


def run_reranker_examples(args: argparse.Namespace) -> int:
    from retrievers.rerank.build_examples import export_examples

    report = export_examples(_sources(args), args.out, print)
    print(json.dumps({"out": args.out, "sources": report}))
    return 0


def run_reranker_teacher(args: argparse.Namespace) -> int:
    from convqa.registry import RERANKERS
    from retrievers.rerank.data import load_examples
    from retrievers.rerank.distill import build_teacher_scores
    from retrievers.rerank.train import make_accelerator

    from .train_fusion import reranker_folder

    folder = reranker_folder(args.teacher)
    teacher = RERANKERS.build({"name": "cross_encoder", "model": str(folder),
                               "precision": args.precision,
                               **({"device": "cpu"} if args.cpu else {})})
    examples = [e for path in args.examples for e in load_examples(path) if e.split == "train"]
    if not examples:
        from convqa.errors import ConfigError

        raise ConfigError("no training examples (split train) in " + ", ".join(args.examples))
    accelerator = make_accelerator(cpu=args.cpu)
    path = build_teacher_scores(teacher, examples, args.out, progress=not args.quiet,
                                accelerator=accelerator)
    if accelerator.is_main_process:
        print(f"{path}: the teacher's scores of {len(examples)} training examples")
    return 0
