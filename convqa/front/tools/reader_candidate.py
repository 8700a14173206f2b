"""A reader that beat the shipped one held out but was not installed, kept as a folder to commit.

A training run lives on one machine; its export is 12 MB. When `promote_reader --keep DIR`
finds that the run's export reads the held-out questions better than the reader it must beat
but does not install it (a dry run, or a failed `--check` / `--decline`), it writes the export
to DIR with a card, its held-out scores and `candidate.json` (the run's facts: steps,
schedule, data, training time, the held-out file and its checksum, why it was not installed).
The folder is a reader like any other (`--set reader.model=DIR`), and a later
`promote_reader DIR --heldout FILE` compares and installs it as it would the run, without the
run folder: no machine's training is lost with the machine.
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from convqa.errors import DataError

CANDIDATE_FILE = "candidate.json"
# Files of a kept folder that describe the candidate rather than the reader.
CANDIDATE_ONLY = (CANDIDATE_FILE, "README.md", "heldout.json")


def is_kept_candidate(folder: Path) -> bool:
    return (folder / CANDIDATE_FILE).is_file() and (folder / "convqa_reader.json").is_file()


def candidate_record(folder: Path) -> dict[str, Any]:
    """The kept candidate's facts (candidate.json), checked for what promotion needs."""
    from convqa.io import load_json

    path = folder / CANDIDATE_FILE
    record = load_json(path)
    for field in ("facts", "export", "data_lines", "training_seconds", "heldout"):
        if field not in record:
            raise DataError(f"field {field!r} missing: not a candidate kept by "
                            "promote_reader --keep", path)
    return record


def kept_score(folder: Path, heldout: Path) -> float | None:
    """The held-out F1 of the candidate kept in `folder` when it was scored on the same
    held-out file as `heldout` (by sha256); None when the folder holds none, or its score was
    taken on other questions and compares with nothing."""
    from convqa.model_install import sha256_of

    if not is_kept_candidate(folder):
        return None
    record = candidate_record(folder)
    score = (record.get("scores") or {}).get("candidate")
    if score is None or record["heldout"].get("sha256") != sha256_of(heldout):
        return None
    return float(score)


def heldout_file(folder: Path, record: dict[str, Any], given: Path | None, say=print) -> Path:
    """The held-out examples a kept candidate is compared on: `given`, else the file its run
    had (when it is still there). A file other than the recorded one is used as given (both
    readers read the same sample of it), and said. `record`: its candidate_record."""
    from convqa.model_install import sha256_of

    recorded = Path(record["heldout"]["path"])
    path = given if given is not None else recorded
    if not path.is_file():
        raise DataError("the held-out examples of this candidate's run are gone: give "
                        "--heldout RUN/data/heldout.jsonl of a run built with the same data "
                        f"flags (its run recorded {recorded})", folder / CANDIDATE_FILE)
    if sha256_of(path) != record["heldout"]["sha256"]:
        say(f"note: {path} differs from the held-out file the candidate was kept with; both "
            "readers read the same sample of it")
    return path


def prepare(folder: Path, into: Path) -> None:
    """Copy the kept candidate's reader files (not its card and records) into `into`."""
    shutil.copytree(folder, into, ignore=shutil.ignore_patterns(*CANDIDATE_ONLY))


def candidate_card(alias: str, baseline: str, record: dict[str, Any], table: str,
                   folder_hint: str) -> str:
    """The card of a kept candidate: what it beat, why it is not shipped, how to read with it
    and how to install it."""
    facts, why = record["facts"], record["not_installed"]
    schedule = facts.get("schedule", {})
    return "\n".join([
        f"# Candidate for {alias}: an extractive reader kept, not shipped", "",
        f"It reads the held-out questions better than `{baseline}` (mean F1 over sources "
        f"{record['scores']['candidate']:.2f} against {record['scores']['baseline']:.2f}) but "
        f"was not installed: {why}.", "",
        f"Read with it: `convqa answer \"...\" --set reader.model={folder_hint}` (or "
        f"`reader: {{name: extractive, model: {folder_hint}}}` in a pipeline). Install it "
        "when what stopped it is settled:", "",
        f"    python -m convqa.front.tools.promote_reader {folder_hint} "
        "--heldout RUN/data/heldout.jsonl", "",
        "## Training", "",
        f"- Steps: {facts['steps']:,}{'' if facts.get('finished') else ' (a checkpoint of a run in progress)'}"
        f", {schedule.get('batch_size')} questions per step x {facts.get('processes', 1)} "
        f"process(es), lr {schedule.get('lr')}, max steps {schedule.get('max_steps')}, seed "
        f"{schedule.get('seed')}; {record['training_seconds'] / 3600:.1f} h of optimizer steps.",
        f"- Exported: rank-{record['export'].get('rank', '-')} LoRA + exact heads; the fine-tuned "
        f"weights' fingerprint {record['export'].get('tuned_fingerprint')}.",
        "- Data:", *record["data_lines"], "",
        "## Held-out scores", "",
        f"Gold passage alone, a seeded sample of the run's held-out questions "
        f"(sha256 {record['heldout']['sha256'][:16]}...), \"previous\" is `{baseline}`:", "",
        table, "",
        f"Kept by `convqa/front/tools/promote_reader.py --keep` on {record['kept_on']}.", ""])


def write_records(candidate: Path, record: dict[str, Any], card: str) -> None:
    """Give the candidate folder its card and candidate.json (promote_reader then swaps it in
    where it is kept, atomically)."""
    from convqa.io import write_json

    write_json(candidate / CANDIDATE_FILE, record)
    (candidate / "README.md").write_text(card, encoding="utf-8")
