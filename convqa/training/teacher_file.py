"""A file of a teacher model's outputs, one JSON line per training example, for distillation
(readers/extractive/distill.py, retrievers/rerank/distill.py).

    write_teacher_file(path, meta, examples, lambda example: {...}, accelerator=acc)
    records = read_teacher_file(path, parse)   # {id: parsed record}, meta

- `meta` (format, teacher fingerprint, examples digest, settings) is written beside the file as
  FILE.json: a finished file with the same meta is kept as it is, another is rebuilt.
- Each process writes every n-th example into FILE.part-I-of-N (with its own meta), flushed a
  line at a time; a rerun after a kill reads the complete lines back and goes on (a line cut
  by the kill is dropped). The main process then joins the parts in the examples' order and
  writes FILE atomically.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable, Sequence

from convqa.errors import DataError
from convqa.io import load_json, write_json


def meta_path(path: Path) -> Path:
    return path.with_name(path.name + ".json")


def _part(path: Path, index: int, count: int) -> Path:
    return path.with_name(f"{path.name}.part-{index}-of-{count}")


def write_teacher_file(path: str | os.PathLike, meta: dict[str, Any], examples: Sequence[Any],
                       record_of: Callable[[Any], dict[str, Any]], *, progress: bool = True,
                       desc: str = "teacher", accelerator: Any = None) -> Path:
    """Write (or finish, or keep) `record_of(example)` (a dict with the example's `id`) for
    every example into `path`."""
    from tqdm.auto import tqdm

    path = Path(path)
    if path.is_file() and meta_path(path).is_file() and load_json(meta_path(path)) == meta:
        return path
    index, count = (accelerator.process_index, accelerator.num_processes) \
        if accelerator is not None else (0, 1)
    part = _part(path, index, count)
    done = _resume_part(part, meta)
    mine = [e for e in list(examples)[index::count] if e.id not in done]
    with part.open("a", encoding="utf-8") as sink:
        for example in tqdm(mine, desc=desc, unit=" q", disable=not progress or index != 0):
            sink.write(json.dumps(record_of(example), separators=(",", ":")) + "\n")
            sink.flush()
    if accelerator is not None:
        accelerator.wait_for_everyone()
    if index == 0:
        parts = [_part(path, i, count) for i in range(count)]
        _join_parts(path, parts, examples)
        write_json(meta_path(path), meta)
        for each in parts:
            each.unlink(missing_ok=True)
            meta_path(each).unlink(missing_ok=True)
    if accelerator is not None:
        accelerator.wait_for_everyone()
    return path


def _resume_part(part: Path, meta: dict[str, Any]) -> set[str]:
    """Ids already in a part made for the same meta (a cut last line dropped); otherwise a
    new, empty part."""
    if part.is_file() and meta_path(part).is_file() and load_json(meta_path(part)) == meta:
        kept, ids = [], set()
        for line in part.read_text(encoding="utf-8").split("\n"):
            try:
                ids.add(json.loads(line)["id"])
                kept.append(line)
            except (ValueError, KeyError, TypeError):
                continue
        part.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
        return ids
    part.parent.mkdir(parents=True, exist_ok=True)
    part.write_text("", encoding="utf-8")
    write_json(meta_path(part), meta)
    return set()


def _join_parts(path: Path, parts: Sequence[Path], examples: Sequence[Any]) -> None:
    lines: dict[str, str] = {}
    for part in parts:
        for line in part.read_text(encoding="utf-8").splitlines():
            if line.strip():
                lines[json.loads(line)["id"]] = line
    missing = [e.id for e in examples if e.id not in lines]
    if missing:
        raise DataError(f"teacher outputs missing for {len(missing)} examples (e.g. "
                        f"{missing[0]!r}); rerun to finish them", path)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text("".join(lines[e.id] + "\n" for e in examples), encoding="utf-8")
    os.replace(temporary, path)


def read_teacher_file(path: str | os.PathLike, parse: Callable[[Any, Path, int], Any],
                      command: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """({id: parse(record, path, line)}, meta) of a finished file; `command` (what makes it)
    goes into the errors."""
    path = Path(path)
    if not path.is_file():
        unfinished = path.parent.is_dir() and any(path.parent.glob(f"{path.name}.part-*"))
        hint = f" (unfinished: rerun `{command}` to finish it)" if unfinished else \
            f" (made by `{command}`)"
        raise DataError(f"no teacher outputs{hint}", path)
    if not meta_path(path).is_file():
        raise DataError(f"no {meta_path(path).name} beside the teacher outputs (made by "
                        f"`{command}`)", path)
    records: dict[str, Any] = {}
    with path.open(encoding="utf-8") as source:
        for number, line in enumerate(source, 1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except ValueError:
                raise DataError("not JSON", path, number) from None
            parsed = parse(data, path, number)
            records[parsed.id] = parsed
    return records, load_json(meta_path(path))
