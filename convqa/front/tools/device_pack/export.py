"""A trained model folder sent back from a GPU machine in files under its size limit, and the
folder rebuilt here.

`export_back` packs the folder's `model.safetensors` as weights.py does (word embeddings int8
per row, the rest fp16), leaving out every tensor bitwise equal to the same tensor of `base`
(the carried folder it was trained from: a LoRA-trained model merged keeps its embeddings), and
puts it, the folder's other files and any extra files (logs, scores) in one tar with a manifest
of sha256 sums, cut into chunks `export.tar.000-of-NNN`, `export.tar.001-of-NNN`, ... of at
most `chunk_bytes` (the machine returns at most 8 files of 16 MiB; chunks.py). A MiniLM reader
trained in full takes 3 chunks, a merged LoRA reranker with its base given 2. A folder with no
`model.safetensors` (an adapter exported with export_lora) travels file for file, unchanged.

`import_back` joins the chunks, checks every sum (a missing or damaged chunk is a one-line
error), takes the left-out tensors from `base` (the same carried folder, unpacked here) after
checking their sums, and writes RUN/model/ (full fp32 weights, or the adapter folder as it was
sent) and the extra files into RUN/.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Callable, Sequence

import torch

from convqa.errors import ConvQAError, DataError

from .chunks import MIB, read_members, write_chunks
from .weights import (PACKED, WEIGHTS, check_folder, new_folder, pack_state, read_safetensors,
                      unpack_state, write_safetensors)

FORMAT, VERSION = "convqa-device-export", 1
CHUNK = "export.tar."
DEFAULT_CHUNK = 15 * MIB


def tensor_sha256(tensor: torch.Tensor) -> str:
    digest = hashlib.sha256(f"{tensor.dtype}:{tuple(tensor.shape)}:".encode())
    digest.update(tensor.contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def _packed_weights(model_dir: Path, base: str | os.PathLike | None) -> tuple[bytes, dict]:
    """The transport form of the folder's weights, tensors equal to `base`'s left out."""
    check_folder(model_dir, WEIGHTS)
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
    with tempfile.TemporaryDirectory() as scratch:
        write_safetensors(Path(scratch) / PACKED, packed, metadata)
        return (Path(scratch) / PACKED).read_bytes(), from_base


def export_back(model_dir: str | os.PathLike, outdir: str | os.PathLike,
                extras: Sequence[str | os.PathLike] = (), base: str | os.PathLike | None = None,
                chunk_bytes: int = DEFAULT_CHUNK, say: Callable[[str], None] = print) -> dict:
    """Write the chunks of `model_dir` (and `extras`) into the new folder `outdir`."""
    model_dir = Path(model_dir)
    members: dict[str, bytes] = {}
    from_base: dict[str, str] = {}
    if (model_dir / WEIGHTS).is_file() or not model_dir.is_dir():
        members[f"model/{PACKED}"], from_base = _packed_weights(model_dir, base)
    else:  # an adapter folder: small already, sent file for file
        check_folder(model_dir, None)  # an adapter's safetensors, no pickles
        if base is not None:
            raise ConvQAError(f"{model_dir}: no {WEIGHTS} (an adapter folder); --base applies "
                              "to full weights only")
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
    manifest = {"format": FORMAT, "version": VERSION, "from_base": from_base}
    total, chunks = write_chunks(members, manifest, outdir, CHUNK, chunk_bytes=chunk_bytes)
    return {"chunks": chunks, "bytes": total, "tensors_from_base": len(from_base),
            "extras": sorted(n.split("/", 1)[1] for n in members if n.startswith("extra/"))}


def import_back(outdir: str | os.PathLike, run_dir: str | os.PathLike,
                base: str | os.PathLike | None = None) -> dict:
    """Rebuild RUN/model/ and RUN/<extras> from the chunks in `outdir` (RUN must be new)."""
    outdir = Path(outdir)
    manifest, members = read_members([outdir], CHUNK, FORMAT, VERSION)
    packed_name = f"model/{PACKED}"
    if packed_name not in members:  # an adapter folder, sent file for file
        with new_folder(run_dir) as tmp:
            _write_members(tmp, members)
        return {"tensors": 0, "from_base": 0, "files": sorted(members)}
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
        _write_members(tmp, {n: d for n, d in members.items() if n != packed_name})
        write_safetensors(tmp / "model" / WEIGHTS, state, {"format": "pt"})
    return {"tensors": len(state), "from_base": len(from_base),
            "files": sorted(n for n in members if n != packed_name)}


def _write_members(run: Path, members: dict[str, bytes]) -> None:
    """model/NAME into RUN/model/, extra/NAME into RUN/."""
    (run / "model").mkdir(exist_ok=True)
    for name, data in members.items():
        target = run / name.split("/", 1)[1] if name.startswith("extra/") else run / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
