"""`convqa train convdr` and `convdr-fidelity`: ConvDR's flags in, retrievers/convdr/run.py
out.

Wired into `convqa train` by `add_convdr_parsers(jobs)` (convqa/front/cli/train.py).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from convqa.errors import ConvQAError

from .train_args import (add_process_args, add_schedule_args, add_weak_positives_arg, count,
                         fraction, positive_float, positive_int, schedule_settings, start_run)


def add_convdr_parsers(jobs) -> None:
    _add_convdr(jobs)
    _add_convdr_fidelity(jobs)


def _add_convdr(jobs) -> None:
    p = jobs.add_parser(
        "convdr", help="ConvDR: a conversational query encoder distilled from an ad hoc teacher",
        description="Train a ConvDR student: it reads the conversation and learns to put its "
        "embedding where the frozen teacher puts the human rewrite (kd), to rank a positive "
        "above teacher-mined negatives (rank), or both (multitask). Passages stay the "
        "teacher's: the teacher's dense index is used unchanged. Writes OUT/model, "
        "OUT/training.json and OUT/fidelity.json; rerun the same command to resume. Several "
        "processes: torchrun ... -m convqa.front.cli.main train convdr ... (the same flags).")
    p.add_argument("--mode", choices=("kd", "rank", "multitask"), default="kd",
                   help="kd (MSE to the teacher's rewrite embedding, default), rank, or both")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder")
    p.add_argument("--data", action="append", default=[], metavar="SOURCE=PATH",
                   help="training data (repeatable): canard=dev.json, orquac=DIR (train "
                        "split), orquac-dev=DIR, cast=DIR (CAsT 2019), benchmark=DIR (a "
                        "benchmark's train turns, answer passages as positives), jsonl=FILE")
    p.add_argument("--teacher", default="all-MiniLM-L6-v2", metavar="ID_OR_PATH",
                   help="frozen teacher dual encoder, also the student's start (default "
                        "all-MiniLM-L6-v2; e.g. convqa-dpr-ihn)")
    p.add_argument("--index", metavar="DIR",
                   help="the teacher's dense index (`convqa index --dense --model TEACHER`): "
                        "negatives are mined from it (rank, multitask)")
    p.add_argument("--passages", metavar="STORE",
                   help="its passage store (default: the one the index records)")
    p.add_argument("--pseudo-positives", action="store_true",
                   help="examples without a given positive use the teacher's top-1 on the "
                        "rewrite as their positive (rank, multitask)")
    p.add_argument("--mine-top-k", type=positive_int, default=50, metavar="K",
                   help="teacher candidates per example; negatives are these minus the "
                        "positives (default 50)")
    p.add_argument("--negatives", type=positive_int, default=4, metavar="N",
                   help="negatives per example and step in the rank loss (default 4)")
    p.add_argument("--anchor", action="store_true",
                   help="an example without a rewrite is KD-trained towards the teacher's own "
                        "embedding of its input (multitask: rank moves the query, the anchor "
                        "keeps it near where the teacher had it)")
    p.add_argument("--in-batch-negatives", action="store_true",
                   help="rank each query also against the other examples' passages of its "
                        "batch (keeps a query tower trained on same-article negatives from "
                        "drifting away from the rest of the collection)")
    p.add_argument("--kd-weight", type=float, default=1.0, help="multitask weight of KD")
    p.add_argument("--rank-weight", type=float, default=1.0, help="multitask weight of Rank")
    p.add_argument("--scale", type=positive_float, metavar="S",
                   help="rank similarity scale 1/temperature (default 20 for normalised "
                        "embeddings, 1 otherwise)")
    p.add_argument("--history", default="questions_only", metavar="STRATEGY",
                   help="the student's input (default questions_only: ConvDR's)")
    p.add_argument("--history-max-tokens", type=positive_int, metavar="N",
                   help="token budget of the student's input (default: the strategy's, 256)")
    p.add_argument("--heldout-fraction", type=fraction, default=0.1,
                   help="fraction of conversations held out for fidelity (default 0.1)")
    p.add_argument("--exclude-benchmark", action="append", default=[], metavar="DIR",
                   help="an OR-QuAC benchmark folder (retrievers/convdr/orquac_bench.py) whose "
                        "dialogs are held out of training (repeatable)")
    p.add_argument("--max-examples", type=positive_int, metavar="N",
                   help="train on a seeded sample of N examples")
    p.add_argument("--cast-min-relevance", type=count, default=1, metavar="R",
                   help="CAsT qrels relevance that makes a positive (default 1)")
    add_weak_positives_arg(p, what="the benchmark= sources'")
    p.add_argument("--lora", type=count, default=0, metavar="R",
                   help="train LoRA adapters of rank R on the student instead of all weights")
    p.add_argument("--fast", action="store_true",
                   help="teacher encoding of rewrites in the fastest precision that agrees "
                        "with fp32 (measured; default fp32)")
    p.add_argument("--encode-batch-size", type=positive_int, default=64, metavar="N")
    p.add_argument("--fidelity-examples", type=count, default=1000, metavar="N",
                   help="held-out turns measured after training (0: skip; default 1000)")
    add_schedule_args(p, batch_size=16, unit="examples", lr=2e-5, weight_decay=0.0)
    add_process_args(p)
    p.set_defaults(func=run_convdr)


def _history_spec(args: argparse.Namespace):
    if args.history_max_tokens:
        return {"name": args.history, "max_tokens": args.history_max_tokens}
    return args.history


def _convdr_config(args: argparse.Namespace):
    from retrievers.convdr.data import parse_data_spec
    from retrievers.convdr.mining import ConvDRMiningConfig
    from retrievers.convdr.run import ConvDRRunConfig
    from retrievers.convdr.train import ConvDRTrainConfig

    data = [parse_data_spec(text) for text in args.data]
    for bench in args.exclude_benchmark:
        if not (Path(bench) / "queries.jsonl").exists():
            raise ConvQAError(f"{bench}: not an OR-QuAC benchmark folder (no queries.jsonl)")
    if args.index and not Path(args.index).is_dir():
        raise ConvQAError(f"{args.index}: index folder not found")
    train = ConvDRTrainConfig(
        mode=args.mode, negatives=args.negatives, in_batch_negatives=args.in_batch_negatives,
        kd_weight=args.kd_weight,
        rank_weight=args.rank_weight, scale=args.scale, **schedule_settings(args))
    mining = ConvDRMiningConfig(top_k=args.mine_top_k, pseudo_positives=args.pseudo_positives,
                                batch_size=args.encode_batch_size)
    return ConvDRRunConfig(
        data=data, teacher=args.teacher, history=_history_spec(args), index=args.index,
        passages=args.passages, heldout_fraction=args.heldout_fraction,
        exclude=list(args.exclude_benchmark), max_examples=args.max_examples,
        cast_min_relevance=args.cast_min_relevance, weak_positives=args.weak_positives,
        lora_r=args.lora,
        fidelity_examples=args.fidelity_examples or None,
        encode_batch_size=args.encode_batch_size, fast=args.fast, anchor=args.anchor,
        mining=mining, train=train)


def run_convdr(args: argparse.Namespace) -> int:
    from retrievers.convdr.run import run_convdr as run
    from convqa.training.loop import make_accelerator

    config = _convdr_config(args)
    say = start_run(args)
    accelerator = make_accelerator(cpu=args.cpu)
    result = run(config, args.out, accelerator, say)
    if accelerator.is_main_process:
        say(f"model: {Path(args.out) / 'model'}")
        if result.get("fidelity"):
            say(f"fidelity: {Path(args.out) / 'fidelity.json'}")
    return 0


def _add_convdr_fidelity(jobs) -> None:
    p = jobs.add_parser(
        "convdr-fidelity", help="how close a ConvDR student lands to the teacher's rewrite "
        "embedding", description="Mean cosine / MSE between student(conversation) and "
        "teacher(rewrite) on examples with rewrites, with the zero-shot baseline (the teacher "
        "reading the conversation) and the question-only baseline.")
    p.add_argument("--model", required=True, metavar="DIR", help="ConvDR folder (OUT/model)")
    p.add_argument("--teacher", metavar="ID_OR_PATH",
                   help="the teacher, if it moved (default: the one the model records)")
    p.add_argument("--examples", action="append", default=[], metavar="JSONL",
                   help="examples in the ConvDR JSONL format, e.g. OUT/examples/heldout.jsonl")
    p.add_argument("--data", action="append", default=[], metavar="SOURCE=PATH",
                   help="or raw data as for `train convdr` (all of it is measured)")
    p.add_argument("--history", default="questions_only", metavar="STRATEGY",
                   help="student input for examples without a formatted query")
    p.add_argument("--history-max-tokens", type=positive_int, metavar="N")
    p.add_argument("--max-examples", type=positive_int, metavar="N",
                   help="a seeded sample of N examples")
    p.add_argument("--batch-size", type=positive_int, default=32)
    p.add_argument("--seed", type=count, default=0)
    p.add_argument("--out", metavar="FILE", help="write the result as JSON")
    p.set_defaults(func=run_convdr_fidelity)


def run_convdr_fidelity(args: argparse.Namespace) -> int:
    import json

    from convqa.io import write_json
    from retrievers.convdr.data import build_examples, load_examples_jsonl, parse_data_spec
    from retrievers.convdr.fidelity import fidelity
    from retrievers.convdr.model import ConvDR

    if not args.examples and not args.data:
        raise ConvQAError("give --examples JSONL or --data SOURCE=PATH")
    examples = [e for path in args.examples for e in load_examples_jsonl(path)]
    if args.data:
        examples += build_examples([parse_data_spec(text) for text in args.data]).examples
    model = ConvDR.from_pretrained(args.model, teacher=args.teacher)
    fingerprint = model.fingerprint()
    if model.has_adapters:
        model.merge_adapters()
    result = fidelity(model, examples, _history_spec(args), args.batch_size,
                      args.max_examples, args.seed)
    result["model"] = args.model
    result["model_fingerprint"] = fingerprint
    if args.out:
        write_json(args.out, result)
    print(json.dumps({k: v for k, v in result.items() if k != "by_source"}))
    return 0
