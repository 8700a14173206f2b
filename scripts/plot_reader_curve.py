#!/usr/bin/env python
"""Plot a reader training run's held-out curve (written every --eval-every steps into
RUN_DIR/log.jsonl) and its training loss.

    python scripts/plot_reader_curve.py /tmp/work/runs/reader-all --out docs/results/reader-curve.png
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from convqa.errors import ConvQAError, DataError


def read_log(run: Path) -> list[dict]:
    """The records of RUN/log.jsonl (a line cut by a kill ends it)."""
    import json

    path = run / "log.jsonl"
    if not path.is_file():
        raise DataError("no log.jsonl (not a training run folder?)", run)
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", help="training run folder (`convqa train reader --out`)")
    parser.add_argument("--out", required=True, help="PNG to write")
    parser.add_argument("--title", default=None)
    parser.add_argument("--smooth", type=int, default=50, help="loss moving-mean window")
    args = parser.parse_args(argv)
    from convqa.evaluation.plots import training_curve

    try:
        run = Path(args.run)
        log = read_log(run)
        points = [r for r in log if "heldout" in r]
        if not points:
            raise DataError("no held-out scores in log.jsonl (train with --eval-every N)", run)
        steps = max((r["step"] for r in log), default=0)
        title = args.title or (f"{run.name}: held-out F1 every "
                               f"{points[1]['step'] - points[0]['step'] if len(points) > 1 else steps}"
                               f" steps, {steps} steps so far")
        training_curve(log, args.out, title, args.smooth)
    except ConvQAError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    last = points[-1]
    print(f"{args.out}: {len(points)} held-out points, last at step {last['step']}: "
          f"F1 {last['heldout']['f1']:.1f} (mean over {len(last['heldout']['sources'])} sources)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
