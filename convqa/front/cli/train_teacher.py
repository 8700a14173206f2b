"""`convqa train reader-teacher`: a teacher reader's targets of a reader run's training
examples, for distilling it into the run's student (readers/extractive/distill.py).

    convqa train reader --out run ... --data-only          # the examples, in run/data
    convqa train reader-teacher --teacher runs/reader-large/model --run run
    convqa train reader --out run ... --teacher-targets run/data/teacher-targets.jsonl

The teacher reads every passage of every answerable training example once (with
--max-passage-chars N, not an example with a longer passage); rerun to resume a killed
build. Several processes (`accelerate launch` / torchrun ... -m convqa.front.cli.main train
reader-teacher ...) share the examples. Wired into `convqa train` by
`add_teacher_parser(jobs)`.
"""
from __future__ import annotations

import argparse
from pathlib import Path

TARGETS_FILE = "teacher-targets.jsonl"


def add_teacher_parser(jobs) -> argparse.ArgumentParser:
    from .train_args import add_process_args, positive_int

    p = jobs.add_parser(
        "reader-teacher", help="a teacher reader's targets of a reader run's examples "
        "(for --teacher-targets)",
        description="Read every passage of a reader run's training examples (OUT/data/"
                    "train.jsonl of `convqa train reader`, e.g. made with --data-only) with a "
                    "teacher reader and keep its selection logits and its most likely answer "
                    "starts and ends, by character: the targets `convqa train reader "
                    "--teacher-targets` distils from. Rerun to resume.")
    p.add_argument("--teacher", required=True, metavar="MODEL",
                   help="the teacher: a reader folder or shipped alias")
    p.add_argument("--run", required=True, metavar="DIR",
                   help="the student's run folder (its data/train.jsonl is read)")
    p.add_argument("--out", metavar="FILE",
                   help=f"where the targets go (default DIR/data/{TARGETS_FILE})")
    p.add_argument("--top-k", type=positive_int, default=20, metavar="K",
                   help="answer starts and ends kept per passage (default 20)")
    p.add_argument("--max-passage-chars", type=positive_int, metavar="N",
                   help="leave examples with a passage longer than N characters unread (their "
                        "passages get empty targets; the student learns them from their gold "
                        "labels): whole papers cost the teacher a read of every window while "
                        "the student reads one (default: read everything)")
    p.add_argument("--precision", choices=("auto", "fp32", "bf16"), default="auto",
                   help="the teacher's arithmetic (default auto: measured on its first read, "
                        "as the reader measures it)")
    add_process_args(p)
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    import readers.extractive.reader  # noqa: F401 (registers "extractive")
    from convqa.errors import ConfigError
    from convqa.registry import READERS
    from convqa.training.loop import make_accelerator
    from readers.extractive.data import load_examples
    from readers.extractive.distill import build_teacher_targets

    from .train_decoding import reader_folder

    examples_file = Path(args.run) / "data" / "train.jsonl"
    if not examples_file.is_file():
        raise ConfigError(f"{args.run}: no data/train.jsonl (build the run's examples first: "
                          "`convqa train reader --out DIR ... --data-only`)")
    teacher = READERS.build({"name": "extractive", "model": str(reader_folder(args.teacher)),
                             "precision": args.precision,
                             **({"device": "cpu"} if args.cpu else {})})
    if not teacher.model.has_selection_head:
        raise ConfigError(f"{args.teacher}: the teacher has no passage-selection head")
    examples = load_examples(examples_file)
    out = Path(args.out) if args.out else Path(args.run) / "data" / TARGETS_FILE
    accelerator = make_accelerator(cpu=args.cpu)
    path = build_teacher_targets(teacher, examples, out, args.top_k, progress=not args.quiet,
                                 accelerator=accelerator, max_chars=args.max_passage_chars)
    if accelerator.is_main_process:
        print(f"{path}: the teacher's targets of {len(examples)} examples")
    return 0
