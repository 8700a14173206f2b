#!/usr/bin/env python
"""Plot a reader training run's held-out curve (written every --eval-every steps into
RUN_DIR/log.jsonl) and its training loss.

    python -m convqa.front.tools.plot_reader_curve /tmp/work/runs/reader-all --out docs/results/reader-curve.png \\
        --history docs/results/reader-curve.jsonl --update-history

A long run outlives machines (it is continued from a promoted reader with `--start-step`, in a
new run folder), so one run folder holds only part of its curve. `--history FILE` keeps the
whole curve in a small committed file: its held-out points and its training loss as means of
10 steps. The plot draws the history merged with the run (the run's record wins where both
have a step); `--update-history` writes that merge back.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from convqa.errors import DataError, reports_errors

LOSS_BUCKET = 10  # steps per loss mean kept in a history file


def read_log(run: Path) -> list[dict]:
    """The records of RUN/log.jsonl (a line cut by a kill ends it)."""
    path = run / "log.jsonl"
    if not path.is_file():
        raise DataError("no log.jsonl (not a training run folder?)", run)
    return read_records(path)


def read_records(path: Path) -> list[dict]:
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return records


def loss_means(log: list[dict], bucket: int = LOSS_BUCKET) -> list[dict]:
    """The training loss of `log` as one record per `bucket` steps: its mean, at the bucket's
    last step; records already in that form (a history's) pass through."""
    sums: dict[int, list[float]] = {}
    for record in log:
        if "loss" not in record or "heldout" in record:
            continue
        key = -(-int(record["step"]) // bucket) * bucket
        weight = float(record.get("loss_steps", 1))
        entry = sums.setdefault(key, [0.0, 0.0])
        entry[0] += float(record["loss"]) * weight
        entry[1] += weight
    return [{"step": step, "loss": round(total / weight, 6), "loss_steps": int(weight)}
            for step, (total, weight) in sorted(sums.items())]


def merge_history(history: list[dict], log: list[dict]) -> list[dict]:
    """Held-out points and loss means of `history` and `log`, by step; where both have a step
    (a held-out point, or a loss bucket) the log's wins."""
    def points(records):
        return {int(r["step"]): r for r in records if isinstance(r.get("heldout"), dict)}

    held = {**points(history), **points(log)}
    losses = {r["step"]: r for r in loss_means(history)}
    losses.update({r["step"]: r for r in loss_means(log)})
    merged = list(held.values()) + list(losses.values())
    return sorted(merged, key=lambda r: (r["step"], "heldout" in r))


@reports_errors("plot_reader_curve")
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", help="training run folder (`convqa train reader --out`)")
    parser.add_argument("--out", required=True, help="PNG to write")
    parser.add_argument("--title", default=None)
    parser.add_argument("--smooth", type=int, default=50, help="loss moving-mean window")
    parser.add_argument("--history", help="JSONL of the curve so far, merged with the run")
    parser.add_argument("--update-history", action="store_true",
                        help="write the merged curve back to --history")
    args = parser.parse_args(argv)
    from convqa.front.evaluation.plots import training_curve

    run = Path(args.run)
    log = read_log(run)
    smooth = args.smooth
    if args.history:
        history_path = Path(args.history)
        history = read_records(history_path) if history_path.exists() else []
        log = merge_history(history, log)
        smooth = max(1, args.smooth // LOSS_BUCKET)
    points = [r for r in log if "heldout" in r]
    if not points:
        raise DataError("no held-out scores in log.jsonl (train with --eval-every N)", run)
    steps = max((r["step"] for r in log), default=0)
    title = args.title or (f"{run.name}: held-out F1 every "
                           f"{points[1]['step'] - points[0]['step'] if len(points) > 1 else steps}"
                           f" steps, {steps} steps so far")
    training_curve(log, args.out, title, smooth,
                   loss_steps=args.smooth if args.history else None)
    if args.history and args.update_history:
        from convqa.io import write_jsonl

        write_jsonl(history_path, log)
    last = points[-1]
    print(f"{args.out}: {len(points)} held-out points, last at step {last['step']}: "
          f"F1 {last['heldout']['f1']:.1f} (mean over {len(last['heldout']['sources'])} sources)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
