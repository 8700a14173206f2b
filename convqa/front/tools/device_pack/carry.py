"""A folder too large for one call to a GPU machine, carried over several calls.

all-mpnet-base-v2 in transport form (weights.py, every matrix int8, xz) is ~93 MiB, and a call
carries at most 64 MiB with the repository. `split_folder` writes the folder's files as N chunks
`carry.tar.000-of-NNN` of equal size; each call carries some of them and the machine
keeps them between calls while it stays warm; `join_folder` rebuilds the folder there from
the chunks found in several folders, every sum checked (a chunk not yet carried is named in a
one-line error).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from convqa.errors import DataError

from .chunks import read_members, write_chunks
from .weights import new_folder

FORMAT, VERSION = "convqa-device-carry", 1
CHUNK = "carry.tar."


def split_folder(src: str | os.PathLike, outdir: str | os.PathLike, pieces: int) -> dict:
    """Every file under `src` (relative paths kept) as `pieces` chunks of equal size, into the
    new folder `outdir`."""
    src = Path(src)
    if not src.is_dir():
        raise DataError("not a folder", src)
    files = sorted(p for p in src.rglob("*") if p.is_file())
    if not files:
        raise DataError("no files to carry", src)
    members = {p.relative_to(src).as_posix(): p.read_bytes() for p in files}
    total, chunks = write_chunks(members, {"format": FORMAT, "version": VERSION}, outdir,
                                 CHUNK, pieces=pieces)
    return {"files": len(members), "bytes": total, "chunks": chunks}


def join_folder(dst: str | os.PathLike, sources: Sequence[str | os.PathLike]) -> dict:
    """The folder split into chunks, rebuilt into the new folder `dst` from the chunks found
    in `sources`."""
    _, members = read_members(sources, CHUNK, FORMAT, VERSION)
    with new_folder(dst) as tmp:
        for name, data in members.items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / name).write_bytes(data)
    return {"files": len(members), "bytes": sum(len(d) for d in members.values())}
