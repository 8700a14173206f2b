"""`convqa train dpr` and `mining-corpus`: DPR-IHN's flags in, retrievers/training/ihn.py out.

Wired into `convqa train` by `add_dpr_parsers(jobs)` (convqa/front/cli/train.py).
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from convqa.errors import ConvQAError

from .train_args import (add_process_args, add_schedule_args, count, positive_float, positive_int,
                         schedule_settings, start_run)


def add_dpr_parsers(jobs) -> None:
    _add_dpr(jobs)
    _add_mining_corpus(jobs)


def _add_dpr(jobs) -> None:
    p = jobs.add_parser(
        "dpr", help="DPR with iterative hard negatives (DPR-IHN) on a TopiOCQA x Wikipedia "
        "benchmark", description="Train a dual encoder: iteration 1 with in-batch negatives "
        "(DPR-IBN), then each further iteration retrained from the initial checkpoint with hard "
        "negatives mined by the previous iteration's model. Rerun the same command to resume.")
    p.add_argument("--benchmark", required=True, metavar="DIR",
                   help="benchmark folder (convqa data topiocqa-wiki): turns.jsonl, passages/")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder (iter{n}/model)")
    p.add_argument("--iterations", type=positive_int, default=3,
                   help="1 = DPR-IBN only; 3 = IBN + two hard-negative rounds (default 3)")
    p.add_argument("--init-model", default="all-MiniLM-L6-v2", metavar="ID_OR_PATH",
                   help="initial checkpoint of every iteration (default all-MiniLM-L6-v2)")
    p.add_argument("--history", default="oldest_first", metavar="STRATEGY",
                   help="query formatting: oldest_first (default), current_first, "
                        "history_only (the DPR-shortcut model), ...")
    p.add_argument("--history-max-tokens", type=positive_int, metavar="N",
                   help="token budget of the query (default: the strategy's, 128)")
    p.add_argument("--positives", choices=("answer", "article"), default="answer",
                   help="positives: the turn's answer passages (default) or every passage of "
                        "its gold article")
    p.add_argument("--positive-choice", choices=("random", "first"), default="random",
                   help="which positive an example uses each epoch (default random)")
    p.add_argument("--hard-negatives", type=count, default=1, metavar="N",
                   help="hard negatives per example from iteration 2 on (default 1)")
    p.add_argument("--mine-top-k", type=positive_int, default=100, metavar="K",
                   help="negatives are sampled from the top-K minus positives (default 100)")
    p.add_argument("--keep-positives-in-negatives", action="store_true",
                   help="do not remove positives from the mined negatives (ablation)")
    p.add_argument("--no-exclude-gold-article", action="store_true",
                   help="remove only the positives, not every passage of the gold article")
    p.add_argument("--mining-corpus", metavar="STORE",
                   help="passage store to mine from (default: the benchmark's passages; see "
                        "`convqa train mining-corpus`)")
    p.add_argument("--scale", type=positive_float, metavar="S",
                   help="similarity scale 1/temperature (default 20 for normalised "
                        "embeddings, 1 otherwise)")
    p.add_argument("--passage-max-length", type=positive_int, default=192, metavar="N")
    p.add_argument("--lora", type=count, default=0, metavar="R",
                   help="train LoRA adapters of rank R instead of all weights")
    add_schedule_args(p, batch_size=16, unit="examples", lr=2e-5, weight_decay=0.0,
                      steps_help="cap on optimizer steps per iteration")
    add_process_args(p)
    p.set_defaults(func=run_dpr)


def _add_mining_corpus(jobs) -> None:
    p = jobs.add_parser(
        "mining-corpus", help="a smaller passage store to mine hard negatives from",
        description="Write a passage store holding the passages of the gold articles of the "
        "benchmark's train turns (all, or the first N of each plus the answer passages) plus "
        "SAMPLE random other passages, for mining on a budget.")
    p.add_argument("--benchmark", required=True, metavar="DIR")
    p.add_argument("--out", required=True, metavar="STORE")
    p.add_argument("--sample", type=count, default=20000,
                   help="random passages added besides the gold articles (default 20000)")
    p.add_argument("--per-article", type=positive_int, metavar="N",
                   help="keep only the first N passages of each gold article (plus the answer "
                        "passages); default: every passage")
    p.add_argument("--seed", type=count, default=0)
    p.add_argument("--force", action="store_true", help="replace an existing store")
    p.set_defaults(func=run_mining_corpus)


def _config(args: argparse.Namespace):
    from retrievers.training.ihn import IHNConfig
    from retrievers.training.mining import MiningConfig
    from retrievers.training.trainer import TrainConfig

    history: object = args.history
    if args.history_max_tokens:
        history = {"name": args.history, "max_tokens": args.history_max_tokens}
    train = TrainConfig(hard_negatives=args.hard_negatives, scale=args.scale,
                        positive_choice=args.positive_choice, **schedule_settings(args))
    mining = MiningConfig(top_k=args.mine_top_k,
                          keep_positives_in_negatives=args.keep_positives_in_negatives,
                          exclude_gold_article=not args.no_exclude_gold_article,
                          progress=not args.quiet)
    return IHNConfig(benchmark=args.benchmark, iterations=args.iterations,
                     init_model=args.init_model, history=history, positives=args.positives,
                     mining_corpus=args.mining_corpus,
                     passage_max_length=args.passage_max_length, lora_r=args.lora,
                     train=train, mining=mining)


def run_dpr(args: argparse.Namespace) -> int:
    from retrievers.training.ihn import run_ihn
    from convqa.training.loop import make_accelerator

    config = _config(args)
    start_run(args)
    if args.mining_corpus and not Path(args.mining_corpus).is_dir():
        raise ConvQAError(f"{args.mining_corpus}: mining corpus not found (build one with "
                          "`convqa train mining-corpus`)")
    accelerator = make_accelerator(cpu=args.cpu)
    main = accelerator.is_main_process
    began = time.perf_counter()

    def report(stage: str, event: str) -> None:
        if main and event in ("run", "skip"):
            print(f"[{time.perf_counter() - began:7.1f}s] {stage}: "
                  f"{'running' if event == 'run' else 'already finished, skipped'}", flush=True)

    manifest = run_ihn(config, args.out, accelerator, on_stage=report)
    if main:
        print(summary(manifest, args.out, time.perf_counter() - began))
    return 0


def summary(manifest: dict, out: str, seconds: float) -> str:
    lines = [f"DPR-IHN in {out} ({seconds:.1f}s this run):"]
    for name, info in manifest["stages"].items():
        details = ", ".join(f"{k} {v}" for k, v in info.items()
                            if k not in ("finished", "model_fingerprint"))
        lines.append(f"  {name}: {details}")
    models = sorted(p for p in Path(out).glob("iter*/model") if p.is_dir())
    lines += [f"  model: {p}" for p in models]
    return "\n".join(lines)


def run_mining_corpus(args: argparse.Namespace) -> int:
    from retrievers.training.mining import build_mining_store

    if not (Path(args.benchmark) / "passages").is_dir():
        raise ConvQAError(f"{args.benchmark}: not a benchmark folder (no passages/)")
    store = build_mining_store(args.benchmark, args.out, sample=args.sample, seed=args.seed,
                               per_article=args.per_article, overwrite=args.force)
    print(f"{store.path}: {len(store)} passages ({store.meta.get('source')})")
    return 0
