"""Whether a folder holds a finished index, for the dense and phrase indexes alike: a missing
folder, a build stopped before it wrote its metadata (its work folder is there, and rerunning
the build resumes it) and a folder that is no index at all each get their own one-line error."""
from __future__ import annotations

from pathlib import Path

from convqa.errors import DataError


def finished_index_meta(folder: Path, meta_file: str, work_dir: str, kind: str) -> Path:
    """`folder / meta_file` when it exists; else a DataError that says what the folder is.
    `work_dir` is the subfolder a build of this `kind` ("dense", "phrase") writes first."""
    path = folder / meta_file
    if path.exists():
        return path
    if not folder.exists():
        raise DataError(f"no such index folder (build it with `convqa index --{kind}`)", folder)
    if (folder / work_dir).is_dir():
        raise DataError(f"an unfinished `convqa index --{kind}` build (its {work_dir}, no "
                        f"{meta_file}); run the same command again to resume it", folder)
    raise DataError(f"not a {kind} index (no {meta_file})", folder)
