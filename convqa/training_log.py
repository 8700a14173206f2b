"""The `log.jsonl` of a training run: one JSON line per optimizer step, trimmed on resume.

Shared by every trainer (DPR, ConvDR, the readers): only the main process writes; a resumed
run first drops the lines past its checkpoint (those steps are redone), and a line cut by the
kill ends the kept part.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

LOG = "log.jsonl"


def append_log(out: Path, record: dict[str, Any], main_process: bool = True) -> None:
    if main_process:
        out.mkdir(parents=True, exist_ok=True)
        with open(out / LOG, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")


def trim_log(out: Path, step: int, main_process: bool = True) -> None:
    """Drop log lines past `step`, the checkpoint a run resumes from."""
    path = out / LOG
    if not main_process or not path.exists():
        return
    keep = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            try:
                if json.loads(line).get("step", 0) <= step:
                    keep.append(line)
            except json.JSONDecodeError:
                break  # a line cut by the kill
    with open(path, "w", encoding="utf-8") as handle:
        handle.writelines(keep)
