"""A model folder in a transport form, for a carried folder or one sent back under a size limit.

The folder's `model.safetensors` becomes `model.packed.safetensors`: each word-embedding table
(`*word_embeddings.weight`) as int8 per row with one fp32 scale per row (row max / 127), every
other floating tensor as fp16 (fp32 kept where fp16 would overflow), integer tensors as they
are. The other files (configs, tokenizer, small safetensors such as a reader's heads) are
copied exactly; a pickle checkpoint is refused (safetensors only). Unpacking restores each
tensor's dtype.

Measured on the shipped reader merged into full weights (MiniLM-L6, 22.7M parameters), packed
and unpacked: 90.3 MB -> 33.5 MB; word embeddings' relative Frobenius error 0.0073 (largest
absolute 0.0041); other tensors at most 0.0019 absolute (fp16 rounding); the encoder's last
hidden states for 24 held-out question + passage pairs against the original's, cosine per
token 0.99992 at the least, 0.999994 on average.
With every weight matrix as int8 rows (`matrices`, for a carry that must stay small): 22.8 MB;
other matrices' error at most 0.031 absolute; the same cosine 0.9976 at the least, 0.9997 on
average.
"""
from __future__ import annotations

import json
import lzma
import os
import shutil
from pathlib import Path
from typing import Any

import torch

from convqa.errors import ConvQAError, DataError

WEIGHTS = "model.safetensors"
PACKED = "model.packed.safetensors"
FORMAT = "convqa-device-weights"
QUANTIZED, SCALE = ".q8", ".q8scale"
PICKLES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
FP16_MAX = 60000.0


def quantized(name: str, tensor: torch.Tensor, matrices: bool) -> bool:
    """Whether `tensor` goes as int8 rows: word embeddings always, every other 2-D float
    matrix when `matrices`."""
    if tensor.dim() != 2 or not tensor.is_floating_point() or not tensor.numel():
        return False
    return matrices or name.endswith("word_embeddings.weight")


def pack_state(state: dict[str, torch.Tensor], matrices: bool = False
               ) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """(packed tensors, metadata recording each tensor's dtype); `matrices`: every 2-D float
    matrix as int8 rows, not only the word embeddings."""
    packed: dict[str, torch.Tensor] = {}
    dtypes = {}
    for name, tensor in state.items():
        if name.endswith((QUANTIZED, SCALE)):
            raise DataError(f"tensor name {name!r} ends like a packed one; cannot pack", None)
        dtypes[name] = str(tensor.dtype).removeprefix("torch.")
        if quantized(name, tensor, matrices):
            rows = tensor.float()
            scale = rows.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / 127.0
            packed[name + QUANTIZED] = torch.round(rows / scale).clamp(-127, 127).to(torch.int8)
            packed[name + SCALE] = scale.contiguous()
        elif tensor.is_floating_point() and tensor.numel() and \
                float(tensor.abs().max()) <= FP16_MAX:
            packed[name] = tensor.to(torch.float16).contiguous()
        else:
            packed[name] = tensor.contiguous()
    return packed, {"format": FORMAT, "dtypes": json.dumps(dtypes, sort_keys=True)}


def unpack_state(packed: dict[str, torch.Tensor], metadata: dict[str, str] | None,
                 path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """The tensors `pack_state` packed, each in its recorded dtype."""
    if not metadata or metadata.get("format") != FORMAT:
        raise DataError(f"not a {FORMAT} file (its metadata says otherwise)", path)
    try:
        dtypes = json.loads(metadata["dtypes"])
    except (KeyError, ValueError):
        raise DataError("damaged metadata: 'dtypes' missing or not JSON", path) from None
    state = {}
    for name, dtype in dtypes.items():
        target = getattr(torch, str(dtype), None)
        if not isinstance(target, torch.dtype):
            raise DataError(f"unknown dtype {dtype!r} of tensor {name!r}", path)
        if name + QUANTIZED in packed:
            if name + SCALE not in packed:
                raise DataError(f"tensor {name!r}: quantized rows without their scales", path)
            state[name] = (packed[name + QUANTIZED].float() * packed[name + SCALE]).to(target)
        elif name in packed:
            state[name] = packed[name].to(target)
        else:
            raise DataError(f"tensor {name!r} is listed but missing", path)
    return state


def read_safetensors(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """(tensors, metadata) of a safetensors file; a damaged one is a one-line error."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt") as handle:
            return {k: handle.get_tensor(k) for k in handle.keys()}, handle.metadata() or {}
    except FileNotFoundError:
        raise DataError("file not found", path) from None
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise DataError(f"not a readable safetensors file ({str(exc).splitlines()[0]})",
                        path) from None


def write_safetensors(path: Path, state: dict[str, torch.Tensor], metadata: dict[str, str]
                      ) -> None:
    from safetensors.torch import save_file

    tmp = path.with_name(f".{path.name}.tmp")
    save_file(state, str(tmp), metadata=metadata)
    os.replace(tmp, path)


def check_folder(folder: Path, weights: str | None) -> None:
    """A folder with no pickle checkpoint and the file `weights`, or with `weights` None (an
    adapter folder) any safetensors file."""
    if not folder.is_dir():
        raise DataError("not a folder", folder)
    pickles = [p.name for p in folder.iterdir() if p.suffix in PICKLES]
    if pickles:
        raise DataError(f"holds a pickle checkpoint ({pickles[0]}); safetensors only", folder)
    if weights is None:
        if not any(p.is_file() for p in folder.glob("*.safetensors")):
            raise DataError(f"no {WEIGHTS} and no adapter safetensors in the folder", folder)
    elif not (folder / weights).is_file():
        raise DataError(f"no {weights} in the folder", folder)


class new_folder:
    """A folder written under a temporary sibling name and renamed into place when the block
    ends without an error; `path` must not exist or be empty."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    def __enter__(self) -> Path:
        if self.path.exists() and (not self.path.is_dir() or any(self.path.iterdir())):
            raise ConvQAError(f"{self.path}: exists and is not empty; give a new folder")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = self.path.with_name(f".{self.path.name}.tmp")
        shutil.rmtree(self.tmp, ignore_errors=True)
        self.tmp.mkdir()
        return self.tmp

    def __exit__(self, kind: Any, *_: Any) -> None:
        if kind is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            return
        if self.path.exists():
            self.path.rmdir()
        os.rename(self.tmp, self.path)


def pack_model(src: str | os.PathLike, dst: str | os.PathLike, matrices: bool = False,
               xz: bool = False) -> dict[str, int]:
    """Write the transport form of model folder `src` into the new folder `dst`; `xz`: every
    file over 64 KiB xz-compressed (NAME.xz), which `unpack_model` undoes."""
    src = Path(src)
    check_folder(src, WEIGHTS)
    state, _ = read_safetensors(src / WEIGHTS)
    packed, metadata = pack_state(state, matrices)
    with new_folder(dst) as tmp:
        _copy_others(src, tmp, skip=WEIGHTS)
        write_safetensors(tmp / PACKED, packed, metadata)
        if xz:
            for item in sorted(tmp.iterdir()):
                if item.is_file() and item.stat().st_size > 64 * 1024:
                    with open(item, "rb") as raw, \
                            lzma.open(item.with_name(item.name + ".xz"), "wb", preset=9) as out:
                        shutil.copyfileobj(raw, out, 1 << 20)
                    item.unlink()
    return {"tensors": len(state), "bytes": sum(f.stat().st_size for f in Path(dst).iterdir())}


def unpack_model(src: str | os.PathLike, dst: str | os.PathLike) -> dict[str, int]:
    """Rebuild the model folder packed in `src` into the new folder `dst`."""
    src = Path(src)
    if not (src / PACKED).is_file() and (src / f"{PACKED}.xz").is_file():
        packed_file = src / f"{PACKED}.xz"
    else:
        check_folder(src, PACKED)
        packed_file = src / PACKED
    with new_folder(dst) as tmp:
        _copy_others(src, tmp, skip=packed_file.name)
        for item in sorted(tmp.glob("*.xz")):  # copies: decompressed in place
            _unxz(item, item.with_name(item.name[:-3]))
            item.unlink()
        if packed_file.suffix == ".xz":
            _unxz(packed_file, tmp / PACKED)
            packed, metadata = read_safetensors(tmp / PACKED)
            (tmp / PACKED).unlink()
        else:
            packed, metadata = read_safetensors(packed_file)
        state = unpack_state(packed, metadata, packed_file)
        write_safetensors(tmp / WEIGHTS, state, {"format": "pt"})
    return {"tensors": len(state)}


def _unxz(src: Path, dst: Path) -> None:
    try:
        with lzma.open(src, "rb") as raw, open(dst, "wb") as out:
            shutil.copyfileobj(raw, out, 1 << 20)
    except (lzma.LZMAError, EOFError, OSError) as exc:
        raise DataError(f"damaged xz file ({type(exc).__name__})", src) from None


def _copy_others(src: Path, dst: Path, skip: str) -> None:
    for item in sorted(src.iterdir()):
        if item.name == skip or item.name.startswith("."):
            continue
        if item.is_dir():
            shutil.copytree(item, dst / item.name)
        else:
            shutil.copy2(item, dst / item.name)
