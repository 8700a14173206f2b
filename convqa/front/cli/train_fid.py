"""`convqa train fid`: train a Fusion-in-Decoder reader on an examples file (readers/fid/data.py).

    convqa train fid --examples train.jsonl --model google/flan-t5-base --out runs/fid
                     [--passages 10] [--max-steps N] [--batch-size 2] [--lr 1e-4] [--bf16]
                     [--lora R] [--checkpoint-every 200] [--eval-examples dev.jsonl] ...

Rerunning the same command resumes from the last checkpoint (or reports the finished run).
`--model` may also be a trained FiD folder: its saved settings are kept unless a flag is given.
Multi-process: `accelerate launch -m convqa.front.cli.main train fid ...` (the same flags).
Wired into `convqa train` by `add_fid_parser(jobs)` from convqa/front/cli/train.py.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from .train_args import (add_process_args, add_schedule_args, count, int_at_least, positive_int,
                         schedule_settings, start_run)


def add_fid_parser(jobs) -> argparse.ArgumentParser:
    """Add the `fid` subcommand to the `convqa train` subparsers `jobs`."""
    from readers.fid.model import DEFAULT_MODEL

    p = jobs.add_parser(
        "fid", help="Fusion-in-Decoder generative reader (T5 family)",
        description="Train a Fusion-in-Decoder reader: every (question, passage) pair is "
        "encoded on its own and the decoder reads all of them. Rerun the same command to "
        "resume after an interruption.")
    p.add_argument("--examples", required=True, metavar="FILE",
                   help="training examples, JSONL: {id, question, history, answers, passages}")
    p.add_argument("--model", default=DEFAULT_MODEL, metavar="ID_OR_PATH",
                   help=f"seq2seq checkpoint (T5, mT5, Flan-T5) or a trained FiD folder "
                        f"(default {DEFAULT_MODEL})")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder (OUT/model)")
    p.add_argument("--passages", type=positive_int, metavar="N",
                   help="passages read per question (default 10, or the folder's)")
    p.add_argument("--passage-max-length", type=int_at_least(8), metavar="N",
                   help="tokens of each question+passage input (default 256)")
    p.add_argument("--answer-max-length", type=int_at_least(2), metavar="N",
                   help="tokens of a training answer, eos included (default 32)")
    p.add_argument("--history", metavar="STRATEGY",
                   help="conversation formatting (default current_first with ' [SEP] ')")
    p.add_argument("--template", metavar="TEXT",
                   help="encoder input of a pair, with {question}, {title}, {text} "
                        "(default 'question: {question} title: {title} context: {text}')")
    p.add_argument("--lora", type=count, default=0, metavar="R",
                   help="train LoRA adapters of rank R instead of all weights")
    p.add_argument("--gradient-checkpointing", action="store_true",
                   help="recompute activations in the backward pass (less memory)")
    p.add_argument("--eval-examples", metavar="FILE",
                   help="after training, generate for these examples and write OUT/eval.json")
    add_schedule_args(p, batch_size=2, unit="questions", lr=1e-4, weight_decay=0.01)
    add_process_args(p)
    p.set_defaults(func=run_fid)
    return p


def _reader_overrides(args: argparse.Namespace) -> dict:
    pairs = {"n_passages": args.passages, "passage_max_length": args.passage_max_length,
             "answer_max_length": args.answer_max_length, "history": args.history,
             "template": args.template}
    return {k: v for k, v in pairs.items() if v is not None}


def run_fid(args: argparse.Namespace) -> int:
    from convqa.io import write_json
    from convqa.training.loop import make_accelerator

    from readers.fid.data import load_examples
    from readers.fid.model import FiDReader
    from readers.fid.train import FiDTrainConfig, evaluate_fid, train_fid

    start_run(args)
    examples = load_examples(args.examples)
    held_out = load_examples(args.eval_examples) if args.eval_examples else None
    config = FiDTrainConfig(**schedule_settings(args))
    reader = FiDReader.from_pretrained(args.model, **_reader_overrides(args))
    if args.lora:
        reader.add_lora(r=args.lora)
    elif reader.has_adapters:  # --model is an adapter folder: keep training its adapters
        reader.train_adapters()
    if args.gradient_checkpointing:
        reader.gradient_checkpointing(True)
    accelerator = make_accelerator(cpu=args.cpu)
    began = time.perf_counter()
    result = train_fid(reader, examples, args.out, config, accelerator,
                       info={"examples_file": str(args.examples), "init_model": args.model,
                             "lora_r": args.lora})
    if not accelerator.is_main_process:
        return 0
    resumed = f", resumed from step {result.resumed_from}" if result.resumed_from else ""
    print(f"FiD reader in {args.out}: {result.steps} steps{resumed}, last loss "
          f"{result.last_loss if result.last_loss is None else round(result.last_loss, 4)} "
          f"({time.perf_counter() - began:.1f}s this run)")
    print(f"  model: {result.model_dir}")
    if held_out is not None:
        trained = FiDReader.from_pretrained(result.model_dir).to(accelerator.device)
        scores = evaluate_fid(trained, held_out, progress=not args.quiet)
        write_json(Path(args.out) / "eval.json", {
            "examples_file": str(args.eval_examples), "fingerprint": trained.fingerprint(),
            **scores})
        print(f"  {args.eval_examples}: EM {scores['em']:.2f} F1 {scores['f1']:.2f} "
              f"({scores['count']} examples) -> {Path(args.out) / 'eval.json'}")
    return 0
