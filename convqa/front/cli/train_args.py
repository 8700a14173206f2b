"""The command-line pieces every `convqa train` job shares (DPR, the readers, ConvDR, FiD, the
phrase model): argparse value types, the flags of the shared training loop
(convqa/training/loop.py) and of the process, and the start of a run."""
from __future__ import annotations

import argparse
import time
from typing import Any, Callable


def int_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer >= `minimum`."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {value}")
        return value

    return parse


positive_int = int_at_least(1)
count = int_at_least(0)


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def positive_float(text: str) -> float:
    value = _number(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text}")
    return value


def non_negative_float(text: str) -> float:
    value = _number(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text}")
    return value


def fraction(text: str) -> float:
    value = _number(text)
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"expected a fraction in [0, 1), got {text}")
    return value


def per_benchmark(values: list[str], count: int, what: str, default: Any) -> list:
    """A repeatable flag matched to `count` --benchmark folders: none (each gets `default`), one
    (for all), or one each in order; any other number is a one-line error."""
    from convqa.errors import ConfigError

    if not values:
        return [default] * count
    if len(values) == 1:
        return values * count
    if len(values) != count:
        raise ConfigError(f"{len(values)} {what} for {count} --benchmark")
    return values


def add_schedule_args(p: argparse.ArgumentParser, *, batch_size: int, unit: str, lr: float,
                      checkpoint_every: int = 200, weight_decay: float | None = None,
                      steps_help: str = "cap on optimizer steps",
                      lr_help: str = "peak learning rate") -> None:
    """The training-loop flags: --epochs, --max-steps, --batch-size (`unit` per process per
    step), --grad-accum, --lr, --warmup-ratio, --weight-decay (when it has a default here),
    --bf16, --checkpoint-every, --seed; read back by `schedule_settings`."""
    p.add_argument("--epochs", type=positive_int, default=1)
    p.add_argument("--max-steps", type=positive_int, metavar="N", help=steps_help)
    p.add_argument("--batch-size", type=positive_int, default=batch_size,
                   help=f"{unit} per process per step (default {batch_size})")
    p.add_argument("--grad-accum", type=positive_int, default=1, metavar="N",
                   help="micro-batches per optimizer step (default 1)")
    p.add_argument("--lr", type=positive_float, default=lr, help=lr_help)
    p.add_argument("--warmup-ratio", type=fraction, default=0.1)
    if weight_decay is not None:
        p.add_argument("--weight-decay", type=non_negative_float, default=weight_decay)
    p.add_argument("--bf16", action="store_true", help="bf16 autocast in training")
    p.add_argument("--checkpoint-every", type=count, default=checkpoint_every, metavar="STEPS")
    p.add_argument("--seed", type=count, default=0)


def add_example_sources(p: argparse.ArgumentParser) -> None:
    """--squad, --benchmark, --examples: where reader-style examples come from (the extractive
    reader and the phrase model train on them)."""
    p.add_argument("--squad", action="append", default=[], metavar="FILE",
                   help="SQuAD-format file (repeatable); articles are held out by "
                        "--heldout-fraction")
    p.add_argument("--benchmark", action="append", default=[], metavar="DIR",
                   help="benchmark folder of `convqa data topiocqa-wiki` (repeatable): train "
                        "turns train, dev turns are held out")
    p.add_argument("--examples", action="append", default=[], metavar="JSONL",
                   help="prepared reader examples (readers/extractive/data.py format)")


def add_weak_positives_arg(p: argparse.ArgumentParser, *, what: str) -> None:
    p.add_argument("--weak-positives", type=fraction, metavar="COVERAGE",
                   help=f"also {what} train turns whose answer occurs in no passage word for "
                        "word: the passage of the topic article holding this share of the "
                        "answer's content words, 0.2 ahead of any other, is their positive (e.g. "
                        "0.7; convqa/benchmark/weak_positives.py)")


def add_training_precision_arg(p: argparse.ArgumentParser) -> None:
    """--precision auto|fp32|bf16 of a trainer whose config has `precision`."""
    p.add_argument("--precision", choices=("auto", "fp32", "bf16"), default="auto",
                   help="arithmetic of training steps (default auto: the faster of fp32 and "
                        "bf16 autocast whose loss agrees, timed on the first batch at each "
                        "start; --bf16 forces bf16); a checkpoint resumes in any precision")


def add_loader_workers_arg(p: argparse.ArgumentParser) -> None:
    """--loader-workers auto|N of a trainer whose config has `loader_workers`."""
    from convqa.training.loader import loader_workers_arg

    p.add_argument("--loader-workers", type=loader_workers_arg, default="auto",
                   metavar="N|auto",
                   help="processes that build training batches (tokenize, pad) ahead of the "
                        "step that uses them (default auto: 0 on a CPU-only run, where workers "
                        "would take the training's cores, min(4, CPUs - 1) with a GPU; 0: each "
                        "batch built in the training process); the batches and their order "
                        "are the same for any value, and a checkpoint resumes with any")


def add_process_args(p: argparse.ArgumentParser) -> None:
    """--cpu and --quiet."""
    p.add_argument("--cpu", action="store_true", help="train on the CPU even if a GPU exists")
    p.add_argument("--quiet", action="store_true", help="no progress bars")


def schedule_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The train-config settings of the flags of `add_schedule_args` (and --quiet)."""
    settings = dict(epochs=args.epochs, batch_size=args.batch_size, grad_accum=args.grad_accum,
                    lr=args.lr, warmup_ratio=args.warmup_ratio, max_steps=args.max_steps,
                    bf16=args.bf16, seed=args.seed, checkpoint_every=args.checkpoint_every,
                    progress=not args.quiet)
    if hasattr(args, "weight_decay"):
        settings["weight_decay"] = args.weight_decay
    return settings


def start_run(args: argparse.Namespace) -> Callable[[str], None]:
    """Quiet transformers' own bars (loading and writing weights) under --quiet; returns a
    `say(message)` that prints with the seconds since now."""
    if args.quiet:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    began = time.perf_counter()

    def say(message: str) -> None:
        print(f"[{time.perf_counter() - began:7.1f}s] {message}", flush=True)

    return say


def add_distillation_args(p: argparse.ArgumentParser, flag: str, teacher_help: str,
                          hard_loss: str, temperature: float) -> None:
    """`flag` (a teacher's outputs, `teacher_help`), --distill-weight and --distill-temperature
    of a trainer that learns from a teacher (`hard_loss`: what the gold labels' loss is)."""
    p.add_argument(flag, metavar="FILE", help=teacher_help)
    p.add_argument("--distill-weight", type=fraction, default=0.5, metavar="W",
                   help=f"with {flag}: loss = (1 - W) x {hard_loss} + W x the teacher's "
                        "(default 0.5)")
    p.add_argument("--distill-temperature", type=positive_float, default=temperature,
                   metavar="T", help=f"with {flag}: softmax temperature of both sides (default "
                                     f"{temperature:g})")
