"""Files as one tar with a manifest of sha256 sums, cut into chunks of a size limit, and read
back from chunks that may lie in several folders.

A lent GPU machine takes at most 64 MiB a call (the repository included) and gives back at most
8 files of 16 MiB: a model too large for one call travels as chunks over two calls (carry.py),
a trained folder comes back as chunks (export.py). Chunks are named `PREFIX000-of-NNN`; a
missing, foreign or damaged chunk is a one-line error.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import re
import tarfile
from pathlib import Path
from typing import Sequence

from convqa.errors import ConvQAError, DataError

from .weights import new_folder

MANIFEST = "manifest.json"
MIB = 1 << 20


def write_chunks(members: dict[str, bytes], manifest: dict, outdir: str | os.PathLike,
                 prefix: str, chunk_bytes: int | None = None,
                 pieces: int | None = None) -> tuple[int, int]:
    """Write `members` (name -> bytes) and `manifest` (with their sums added under "files")
    as chunks of at most `chunk_bytes` (at least 1 MiB), or as `pieces` chunks of equal size,
    into the new folder `outdir`; returns (bytes, chunks)."""
    if (chunk_bytes is None) == (pieces is None):
        raise ConvQAError("give a chunk size or a number of pieces")
    if chunk_bytes is not None and chunk_bytes < MIB:
        raise ConvQAError(f"chunk size {chunk_bytes} bytes is under 1 MiB")
    if pieces is not None and pieces < 1:
        raise ConvQAError(f"{pieces} pieces: give at least 1")
    manifest = {**manifest,
                "files": {n: hashlib.sha256(b).hexdigest() for n, b in members.items()}}
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        for name, data in [(MANIFEST, json.dumps(manifest, indent=1).encode())] + \
                list(members.items()):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    data = archive.getvalue()
    size = chunk_bytes or -(-len(data) // pieces)
    chunks = [data[i:i + size] for i in range(0, len(data), size)]
    with new_folder(outdir) as tmp:
        for i, chunk in enumerate(chunks):
            (tmp / f"{prefix}{i:03d}-of-{len(chunks):03d}").write_bytes(chunk)
    return len(data), len(chunks)


def read_chunk_bytes(folders: Sequence[Path], prefix: str) -> bytes:
    """The bytes of chunks NNN-of-TOTAL found in `folders`, all TOTAL of them, in order."""
    found: dict[int, Path] = {}
    totals = set()
    for folder in folders:
        if not folder.is_dir():
            raise DataError("not a folder", folder)
        for item in folder.iterdir():
            match = re.fullmatch(re.escape(prefix) + r"(\d{3})-of-(\d{3})", item.name)
            if match:
                found.setdefault(int(match.group(1)), item)
                totals.add(int(match.group(2)))
    where = folders[0] if len(folders) == 1 else Path(", ".join(map(str, folders)))
    if not found:
        raise DataError(f"no {prefix}NNN-of-TOTAL chunks", where)
    if len(totals) != 1:
        raise DataError(f"chunks of several packs (totals {sorted(totals)})", where)
    total = totals.pop()
    missing = sorted(set(range(total)) - set(found))
    if missing:
        raise DataError(f"chunk {missing[0]:03d} of {total:03d} is missing", where)
    return b"".join(found[i].read_bytes() for i in range(total))


def read_members(folders: Sequence[Path], prefix: str, fmt: str,
                 version: int) -> tuple[dict, dict[str, bytes]]:
    """(manifest, name -> bytes) of the chunks in `folders`, every sum checked."""
    folders = [Path(f) for f in folders]
    where = folders[0]
    data = read_chunk_bytes(folders, prefix)
    members: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
            for info in tar:
                if not info.isfile() or info.name.startswith("/") or ".." in info.name.split("/"):
                    raise DataError(f"unexpected member {info.name!r}", where)
                members[info.name] = tar.extractfile(info).read()
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise DataError(f"damaged or incomplete chunks ({type(exc).__name__}: {exc})",
                        where) from None
    try:
        manifest = json.loads(members.pop(MANIFEST))
    except (KeyError, ValueError):
        raise DataError(f"no readable {MANIFEST} in the chunks", where) from None
    if not isinstance(manifest, dict) or manifest.get("format") != fmt:
        raise DataError(f"not a {fmt} pack", where, field="format")
    if manifest.get("version") != version:
        raise DataError(f"version {manifest.get('version')!r}, expected {version}", where,
                        field="version")
    listed = manifest.get("files") or {}
    for name in sorted(set(listed) | set(members)):
        if name not in members:
            raise DataError(f"{name} is listed in the manifest but missing", where)
        if hashlib.sha256(members[name]).hexdigest() != listed.get(name):
            raise DataError(f"{name} does not match its sha256 in the manifest (damaged)",
                            where)
    return manifest, members
