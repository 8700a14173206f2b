"""Saving a model folder atomically: everything is written into a temporary sibling folder,
which then replaces the target in two renames, so a reader of the folder (or a kill) sees the
old model or the new one, never a mix. Shared by every convqa model's `save_pretrained`."""
from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from convqa.errors import ConvQAError


def replace_folder(tmp: Path, path: Path) -> None:
    """Move the finished folder `tmp` to `path`, replacing what is there."""
    if path.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{path.name}.old-", dir=path.parent))
        os.rename(path, old / "model")
        os.rename(tmp, path)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, path)


@contextmanager
def writing_folder(path: Path, meta_file: str, what: str) -> Iterator[Path]:
    """A temporary folder to write the model into; swapped in for `path` when the block ends,
    removed if it fails. A non-empty `path` without `meta_file` is not `what` ("a convqa
    reader"), and is never replaced."""
    path = Path(path)
    if path.exists() and not (path / meta_file).exists() and any(path.iterdir()):
        raise ConvQAError(f"{path}: exists and is not {what}; not replacing it")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield tmp
        replace_folder(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
