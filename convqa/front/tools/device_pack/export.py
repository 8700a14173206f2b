"""A trained model folder sent back from a GPU machine in files under its size limit, and the
folder rebuilt here.

`export_back` packs the folder's `model.safetensors` as weights.py does (word embeddings int8
per row, the rest fp16), leaving out every tensor bitwise equal to the same tensor of `base`
(the carried folder it was trained from: a LoRA-trained model merged keeps its embeddings), and
puts it, the folder's other files and any extra files (logs, scores) in one tar with a manifest
of sha256 sums, cut into chunks `export.tar.000-of-NNN`, `export.tar.001-of-NNN`, ... of at
most `chunk_bytes` (the machine returns at most 8 files of 16 MiB). A MiniLM reader trained in
full takes 3 chunks, a merged LoRA reranker with its base given 2.

`import_back` joins the chunks, checks every sum (a missing or damaged chunk is a one-line
error), takes the left-out tensors from `base` (the same carried folder, unpacked here) after
checking their sums, and writes RUN/model/ (full fp32 weights) and the extra files into RUN/.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import re
import tarfile
import tempfile
from pathlib import Path
from typing import Callable, Sequence

import torch

from convqa.errors import ConvQAError, DataError

from .weights import (PACKED, WEIGHTS, check_folder, new_folder, pack_state, read_safetensors,
                      unpack_state, write_safetensors)

FORMAT, VERSION = "convqa-device-export", 1
MANIFEST = "manifest.json"
CHUNK = "export.tar."
MIB = 1 << 20
DEFAULT_CHUNK = 15 * MIB


def tensor_sha256(tensor: torch.Tensor) -> str:
    digest = hashlib.sha256(f"{tensor.dtype}:{tuple(tensor.shape)}:".encode())
    digest.update(tensor.contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def export_back(model_dir: str | os.PathLike, outdir: str | os.PathLike,
                extras: Sequence[str | os.PathLike] = (), base: str | os.PathLike | None = None,
                chunk_bytes: int = DEFAULT_CHUNK, say: Callable[[str], None] = print) -> dict:
    """Write the chunks of `model_dir` (and `extras`) into the new folder `outdir`."""
    model_dir = Path(model_dir)
    check_folder(model_dir, WEIGHTS)
    if chunk_bytes < MIB:
        raise ConvQAError(f"chunk size {chunk_bytes} bytes is under 1 MiB")
    state, _ = read_safetensors(model_dir / WEIGHTS)
    from_base = {}
    if base is not None:
        check_folder(Path(base), WEIGHTS)
        base_state, _ = read_safetensors(Path(base) / WEIGHTS)
        for name, tensor in list(state.items()):
            same = base_state.get(name)
            if same is not None and same.dtype == tensor.dtype and same.shape == tensor.shape \
                    and torch.equal(same, tensor):
                from_base[name] = tensor_sha256(tensor)
                del state[name]
    packed, metadata = pack_state(state)
    metadata["from_base"] = json.dumps(from_base, sort_keys=True)
    members: dict[str, bytes] = {}
    with tempfile.TemporaryDirectory() as scratch:
        write_safetensors(Path(scratch) / PACKED, packed, metadata)
        members[f"model/{PACKED}"] = (Path(scratch) / PACKED).read_bytes()
    for item in sorted(model_dir.iterdir()):
        if item.is_file() and item.name != WEIGHTS and not item.name.startswith("."):
            members[f"model/{item.name}"] = item.read_bytes()
    for extra in extras:
        extra = Path(extra)
        if not extra.is_file():
            say(f"export-back: {extra} is missing; left out")
            continue
        name = f"extra/{extra.name}"
        if extra.name == "model" or extra.name.startswith("."):
            raise ConvQAError(f"{extra}: an extra file may not be named {extra.name!r}")
        if name in members:
            raise ConvQAError(f"two extra files named {extra.name!r}")
        members[name] = extra.read_bytes()
    manifest = {"format": FORMAT, "version": VERSION,
                "files": {n: hashlib.sha256(b).hexdigest() for n, b in members.items()},
                "from_base": from_base}
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        for name, data in [(MANIFEST, json.dumps(manifest, indent=1).encode())] + \
                list(members.items()):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    data = archive.getvalue()
    chunks = [data[i:i + chunk_bytes] for i in range(0, len(data), chunk_bytes)]
    with new_folder(outdir) as tmp:
        for i, chunk in enumerate(chunks):
            (tmp / f"{CHUNK}{i:03d}-of-{len(chunks):03d}").write_bytes(chunk)
    return {"chunks": len(chunks), "bytes": len(data), "tensors_from_base": len(from_base),
            "extras": sorted(n.split("/", 1)[1] for n in members if n.startswith("extra/"))}


def read_chunks(outdir: Path) -> bytes:
    """The bytes of chunks NNN-of-TOTAL, all TOTAL of them, in order."""
    if not outdir.is_dir():
        raise DataError("not a folder", outdir)
    found, totals = {}, set()
    for item in outdir.iterdir():
        match = re.fullmatch(re.escape(CHUNK) + r"(\d{3})-of-(\d{3})", item.name)
        if match:
            found[int(match.group(1))] = item
            totals.add(int(match.group(2)))
    if not found:
        raise DataError(f"no {CHUNK}NNN-of-TOTAL chunks in the folder", outdir)
    if len(totals) != 1:
        raise DataError(f"chunks of several exports (totals {sorted(totals)})", outdir)
    total = totals.pop()
    missing = sorted(set(range(total)) - set(found))
    if missing:
        raise DataError(f"chunk {missing[0]:03d} of {total:03d} is missing", outdir)
    return b"".join(found[i].read_bytes() for i in range(total))


def _members(outdir: Path) -> tuple[dict, dict[str, bytes]]:
    data = read_chunks(outdir)
    members: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
            for info in tar:
                if not info.isfile() or info.name.startswith("/") or ".." in info.name.split("/"):
                    raise DataError(f"unexpected member {info.name!r}", outdir)
                members[info.name] = tar.extractfile(info).read()
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise DataError(f"damaged or incomplete chunks ({type(exc).__name__}: {exc})",
                        outdir) from None
    try:
        manifest = json.loads(members.pop(MANIFEST))
    except (KeyError, ValueError):
        raise DataError(f"no readable {MANIFEST} in the chunks", outdir) from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise DataError(f"not a {FORMAT} export", outdir, field="format")
    if manifest.get("version") != VERSION:
        raise DataError(f"version {manifest.get('version')!r}, expected {VERSION}", outdir,
                        field="version")
    listed = manifest.get("files") or {}
    for name in sorted(set(listed) | set(members)):
        if name not in members:
            raise DataError(f"{name} is listed in the manifest but missing", outdir)
        if hashlib.sha256(members[name]).hexdigest() != listed.get(name):
            raise DataError(f"{name} does not match its sha256 in the manifest (damaged)",
                            outdir)
    return manifest, members


def import_back(outdir: str | os.PathLike, run_dir: str | os.PathLike,
                base: str | os.PathLike | None = None) -> dict:
    """Rebuild RUN/model/ and RUN/<extras> from the chunks in `outdir` (RUN must be new)."""
    outdir = Path(outdir)
    manifest, members = _members(outdir)
    packed_name = f"model/{PACKED}"
    if packed_name not in members:
        raise DataError(f"no {packed_name} in the export", outdir)
    with tempfile.TemporaryDirectory() as scratch:
        packed_path = Path(scratch) / PACKED
        packed_path.write_bytes(members[packed_name])
        packed, metadata = read_safetensors(packed_path)
    state = unpack_state(packed, metadata, outdir / packed_name)
    from_base = manifest.get("from_base") or {}
    if from_base:
        if base is None:
            raise ConvQAError(f"{outdir}: {len(from_base)} tensors were left out as equal to "
                              "the base folder's; give --base (the carried folder, unpacked)")
        check_folder(Path(base), WEIGHTS)
        base_state, _ = read_safetensors(Path(base) / WEIGHTS)
        for name, digest in sorted(from_base.items()):
            tensor = base_state.get(name)
            if tensor is None or tensor_sha256(tensor) != digest:
                raise DataError(f"tensor {name!r} differs from the one the export was made "
                                "against: not the same base folder", base)
            state[name] = tensor
    with new_folder(run_dir) as tmp:
        (tmp / "model").mkdir()
        for name, data in members.items():
            if name == packed_name:
                continue
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / name).write_bytes(data)
        write_safetensors(tmp / "model" / WEIGHTS, state, {"format": "pt"})
        extra = tmp / "extra"
        if extra.is_dir():
            for item in extra.iterdir():
                os.rename(item, tmp / item.name)
            extra.rmdir()
    return {"tensors": len(state), "from_base": len(from_base),
            "files": sorted(n for n in members if n != packed_name)}
