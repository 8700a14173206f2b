#!/usr/bin/env python
"""Seconds per step the extractive reader's training spends on its batches (tokenizing and
padding question x passage windows), with the batches built in the training process
(`--loader-workers 0`) or ahead by worker processes.

    OMP_NUM_THREADS=1 python -m convqa.front.tools.bench_train_batches \\
        --squad ../shared/data/squad/dev-v2.0.json --batch-size 16 --passages 24 --steps 6
    OMP_NUM_THREADS=1 python -m convqa.front.tools.bench_train_batches \\
        --squad ../shared/data/squad/dev-v2.0.json --batch-size 4 --passages 8 --steps 6 --train

Without --train, the first --steps batches of a run are drawn through the loader alone: with 0
workers that is the time a step waits while its batch is built; with workers, the time one
batch takes them (what a training step must at least last for the wait to vanish). With
--train, a fresh reader (MiniLM unless --init-model) trains that many steps with each setting
and the table gives the median wait for the batches (log.jsonl `batch_seconds`) and the median
step; the first step is left out of both (it plans the epoch and warms the allocator).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from convqa.errors import reports_errors


def reader_examples(args):
    from readers.extractive.build_examples import squad_examples
    from readers.extractive.data import load_examples

    if args.examples:
        examples = load_examples(args.examples)
    else:
        examples = squad_examples(args.squad, negatives=args.passages - 1,
                                  max_examples=args.max_examples, max_heldout=1)
    return [e for e in examples if e.split == "train"]


def train_config(args, workers: int):
    from readers.extractive.train import ReaderTrainConfig

    return ReaderTrainConfig(batch_size=args.batch_size, passages_per_question=args.passages,
                             max_steps=args.steps, progress=False, checkpoint_every=0,
                             warmup_ratio=0.0, loader_workers=workers)


def draw(trainer, workers: int, steps: int) -> list[float]:
    """Seconds for each of the first `steps` batches of the run, drawn through the loader."""
    from convqa.training.loader import BatchStream, MicroBatches
    from convqa.training.schedule import plan_steps

    config = trainer.config
    per_epoch, total = plan_steps(trainer.num_examples(), config, 1)
    dataset = MicroBatches(lambda epoch: trainer.epoch_batches(epoch, config.batch_size),
                           trainer.make_batch, start=0, total=min(total, steps),
                           per_epoch=per_epoch, grad_accum=1, rank=0, size=config.batch_size)
    stream = BatchStream(dataset, workers, "cpu")
    seconds = []
    try:
        for _ in range(len(dataset)):
            began = time.perf_counter()
            stream.next()
            seconds.append(time.perf_counter() - began)
    finally:
        stream.close()
    return seconds


def measure(args, examples, workers: int) -> dict:
    import torch

    from readers.extractive.run import ReaderRunConfig, initial_reader
    from readers.extractive.train import ReaderTrainer

    config = train_config(args, workers)
    reader = initial_reader(ReaderRunConfig(init_model=args.init_model, train=config))
    row = {"loader_workers": workers, "batch_size": args.batch_size,
           "passages_per_question": args.passages, "threads": torch.get_num_threads(),
           "cpu": torch.backends.cpu.get_cpu_capability()}
    with tempfile.TemporaryDirectory(prefix="convqa-bench-batches-") as out:
        trainer = ReaderTrainer(reader, examples, out, config)
        if not args.train:
            seconds = draw(trainer, workers, args.steps)[1:]
            return {**row, "steps_timed": len(seconds),
                    "batch_s_median": round(statistics.median(seconds), 3),
                    "batch_s_mean": round(statistics.fmean(seconds), 3)}
        trainer.train()
        log = [json.loads(line) for line in (Path(out) / "log.jsonl").read_text().splitlines()]
    log = log[1:]
    return {**row, "steps_timed": len(log), "training": True,
            "batch_s_median": round(statistics.median(r["batch_seconds"] for r in log), 3),
            "step_s_median": round(statistics.median(r["seconds"] for r in log), 3)}


@reports_errors("bench_train_batches")
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--squad", help="SQuAD-format file (examples built with BM25 negatives)")
    source.add_argument("--examples", help="prepared reader examples (train.jsonl)")
    parser.add_argument("--max-examples", type=int, default=400,
                        help="questions sampled from --squad (default 400)")
    parser.add_argument("--batch-size", type=int, default=16, help="questions per step")
    parser.add_argument("--passages", type=int, default=24, help="passages per question")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--train", action="store_true",
                        help="train that many steps (else only draw the batches)")
    parser.add_argument("--init-model", default="all-MiniLM-L6-v2")
    args = parser.parse_args(argv)
    examples = reader_examples(args)
    print("| loader workers | questions x passages | s/step waiting for batches (median) "
          "| s/step (median) |\n|---:|---:|---:|---:|")
    for workers in args.workers:
        row = measure(args, examples, workers)
        print(f"| {workers} | {args.batch_size} x {args.passages} | {row['batch_s_median']} "
              f"| {row.get('step_s_median', '-')} |", flush=True)
        print(json.dumps(row), file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
