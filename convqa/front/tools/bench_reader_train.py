#!/usr/bin/env python
"""Seconds per optimizer step and questions per second of reader training, for a few settings
(passages per question, length bucketing, bf16), on real training examples.

    OMP_NUM_THREADS=1 python -m convqa.front.tools.bench_reader_train \\
        --examples /tmp/work/runs/reader-all/data/train.jsonl --steps 12 \\
        --passages 2 3 4 8 --batch-size 4

Each setting trains the same fresh reader (MiniLM, fp32 unless --bf16) for --steps optimizer
steps in a temporary folder; the first step (warm-up of the allocator) is left out of the
median and mean.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from convqa.errors import reports_errors


def measure(examples, passages: int, pool: int, batch_size: int, steps: int, bf16: bool,
            init_model: str) -> dict:
    import torch

    from readers.extractive.run import ReaderRunConfig, initial_reader
    from readers.extractive.train import ReaderTrainConfig, train_reader

    config = ReaderTrainConfig(batch_size=batch_size, passages_per_question=passages,
                               max_steps=steps, length_pool=pool, bf16=bf16, progress=False,
                               checkpoint_every=0, warmup_ratio=0.0)
    reader = initial_reader(ReaderRunConfig(init_model=init_model, train=config))
    with tempfile.TemporaryDirectory(prefix="convqa-bench-reader-") as out:
        train_reader(reader, examples, out, config)
        log = [json.loads(line) for line in (Path(out) / "log.jsonl").read_text().splitlines()]
    seconds = [line["seconds"] for line in log][1:]
    median = statistics.median(seconds)
    return {"passages_per_question": passages, "length_pool": pool, "bf16": bf16,
            "batch_size": batch_size, "steps_timed": len(seconds),
            "s_per_step_median": round(median, 3),
            "s_per_step_mean": round(statistics.fmean(seconds), 3),
            "questions_per_s": round(batch_size / median, 2),
            "threads": torch.get_num_threads(),
            "cpu": torch.backends.cpu.get_cpu_capability()}


@reports_errors("bench_reader_train")
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", required=True, help="reader examples (train.jsonl)")
    parser.add_argument("--passages", type=int, nargs="+", default=[2, 3, 4])
    parser.add_argument("--pools", type=int, nargs="+", default=[64],
                        help="length_pool settings (0: no bucketing)")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--init-model", default="all-MiniLM-L6-v2")
    args = parser.parse_args(argv)
    from readers.extractive.data import load_examples

    examples = load_examples(args.examples)
    print("| passages/question | length pool | s/step (median) | s/step (mean) | "
          "questions/s |\n|---:|---:|---:|---:|---:|")
    for pool in args.pools:
        for passages in args.passages:
            row = measure(examples, passages, pool, args.batch_size, args.steps, args.bf16,
                          args.init_model)
            print(f"| {passages} | {pool} | {row['s_per_step_median']} | "
                  f"{row['s_per_step_mean']} | {row['questions_per_s']} |", flush=True)
            print(json.dumps(row), file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
