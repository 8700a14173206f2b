"""LoRA factors stored small: fp16 (`--half`) or int8 (`--int8`) instead of fp32.

Every shipped megabyte is in every clone and in the 64 MiB a GPU call carries; a rank-64
adapter over all-mpnet-base-v2 is 23 MB with fp16 factors. Either way the model's factors are
rounded first (`round_lora`) to values the stored form holds exactly, so the stored file
reloads to exactly the weights the model's fingerprint was taken of; `store_lora` then rewrites
the saved adapter files.

- fp16: peft's `adapter_model.safetensors` with fp16 factors (peft loads it as it is).
- int8: each factor as int8 with one fp32 scale per rank component (a row of A, a column of
  B), in `adapter_model.int8.safetensors`: a plain peft load fails on that name instead of
  reading int8 codes as weights; `attach_int8_adapter` loads it (convqa/towers.py).
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch

from convqa.errors import ConvQAError, DataError

INT8_FILE = "adapter_model.int8.safetensors"
PEFT_FILE = "adapter_model.safetensors"
SCALE = ".int8_scale"
FORMAT = "convqa-lora-int8"


FP32, FP16, INT8 = "float32", "float16", "int8"


def _round_factors(model: torch.nn.Module, select: Callable[[str, torch.Tensor], bool],
                   rounded: Callable[[str, torch.Tensor], torch.Tensor]) -> int:
    """Replace each selected LoRA parameter of `model` by its rounded values (fp32 tensors
    still); returns how many."""
    count = 0
    with torch.no_grad():
        for name, param in model.named_parameters():
            if select(name, param):
                param.copy_(rounded(name, param))
                count += 1
    return count


def _rewrite_adapter_files(folder: str | Path,
                           transform: Callable[[Path, dict[str, torch.Tensor]], dict],
                           target: str, metadata: dict[str, str]) -> int:
    """Every peft adapter file under `folder` rewritten by `transform` into `target` beside it
    (atomically; the peft file goes when `target` is another name); returns the bytes saved."""
    from safetensors.torch import load_file, save_file

    saved = 0
    for path in sorted(Path(folder).rglob(PEFT_FILE)):
        before = path.stat().st_size
        state = transform(path, load_file(str(path)))
        written = path.with_name(target)
        partial = written.with_name(written.name + ".partial")
        save_file(state, str(partial), metadata=metadata)
        partial.replace(written)
        if written != path:
            path.unlink()
        saved += before - written.stat().st_size
    return saved


def round_lora(model: torch.nn.Module, storage: str) -> int:
    """Round the LoRA factors to what `storage` holds exactly (nothing for fp32)."""
    if storage == FP16:
        return round_lora_to_half(model)
    if storage == INT8:
        return round_lora_to_int8(model)
    return 0


def store_lora(folder: str | Path, storage: str) -> int:
    """Rewrite the saved adapter files under `folder` in `storage`; returns the bytes saved."""
    if storage == FP16:
        return store_lora_half(folder)
    if storage == INT8:
        return store_lora_int8(folder)
    return 0


def _half_values(name: str, param: torch.Tensor) -> torch.Tensor:
    if param.abs().max().item() >= torch.finfo(torch.float16).max:
        raise ConvQAError(f"LoRA matrix {name} exceeds the fp16 range; export without --half")
    return param.half().float()


def round_lora_to_half(model: torch.nn.Module) -> int:
    """Round every LoRA matrix of `model` to fp16 values (kept as fp32 tensors), so a copy
    stored in fp16 (`store_lora_half`) loads back to exactly these weights and the model's
    fingerprint holds. Returns the number of matrices; refuses values fp16 cannot hold."""
    return _round_factors(model, lambda name, _: ".lora_" in name, _half_values)


def store_lora_half(folder: str | Path) -> int:
    """Rewrite the LoRA matrices of every adapter_model.safetensors under `folder` in fp16
    (LayerNorms, biases and other exact modules stay fp32): half the bytes on disk. Returns the
    bytes saved. Call after `round_lora_to_half` and saving, so nothing changes on reload."""
    return _rewrite_adapter_files(
        folder, lambda _, state: {k: (v.half() if ".lora_" in k and v.is_floating_point()
                                      else v) for k, v in state.items()},
        PEFT_FILE, {"format": "pt"})


def is_lora_factor(name: str, tensor: torch.Tensor) -> bool:
    return ".lora_" in name and tensor.is_floating_point() and tensor.dim() == 2


def quantize_rows(values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(codes int8, scale fp32) with codes * scale closest to `values`, one scale per rank
    component: per row of A [r, in] (scale [r, 1]), per column of B [out, r] (scale [1, r])."""
    values = values.detach().float()
    dim = 1 if values.shape[0] <= values.shape[1] else 0
    scale = values.abs().amax(dim=dim, keepdim=True) / 127.0
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    codes = torch.round(values / scale).clamp(-127, 127).to(torch.int8)
    return codes, scale


def dequantize_rows(codes: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return codes.float() * scale


def _fixed_point(values: torch.Tensor) -> torch.Tensor:
    """Values that int8 rows hold exactly: quantizing them again gives them back bit for bit."""
    for _ in range(8):
        rounded = dequantize_rows(*quantize_rows(values))
        if torch.equal(rounded, values):
            return rounded
        values = rounded
    raise ConvQAError("LoRA factor rows do not settle on int8 values; export without --int8")


def round_lora_to_int8(model: torch.nn.Module) -> int:
    """Round every LoRA factor of `model` to int8 rows (kept as fp32 tensors), so that
    `store_lora_int8` stores them exactly; returns the number of factors."""
    return _round_factors(model, is_lora_factor, lambda _, param: _fixed_point(param.float()))


def _int8_state(path: Path, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`state` with each LoRA factor as int8 codes and its scales."""
    stored = {}
    for name, tensor in state.items():
        if is_lora_factor(name, tensor):
            codes, scale = quantize_rows(tensor)
            if not torch.equal(dequantize_rows(codes, scale), tensor.float()):
                raise ConvQAError(f"{path}: {name} is not rounded to int8 rows "
                                  "(round_lora_to_int8 first)")
            stored[name], stored[name + SCALE] = codes, scale
        else:
            stored[name] = tensor
    return stored


def store_lora_int8(folder: str | Path) -> int:
    """Rewrite every peft adapter file under `folder` with int8 LoRA factors (other tensors
    as they were) into `adapter_model.int8.safetensors`; returns the bytes saved. Call after
    `round_lora_to_int8` and saving: a factor that int8 rows do not hold exactly is refused."""
    return _rewrite_adapter_files(folder, _int8_state, INT8_FILE, {"format": FORMAT})


def load_int8_state(path: Path) -> dict[str, torch.Tensor]:
    """The adapter's state with its factors back in fp32, exactly as they were rounded."""
    from safetensors import safe_open

    with safe_open(str(path), "pt") as stored:
        if (stored.metadata() or {}).get("format") != FORMAT:
            raise DataError(f"not a {FORMAT} file", path, field="format")
        tensors = {name: stored.get_tensor(name) for name in stored.keys()}
    state = {}
    for name, tensor in tensors.items():
        if name.endswith(SCALE):
            continue
        if tensor.dtype == torch.int8:
            scale = tensors.get(name + SCALE)
            if scale is None or tuple(scale.shape) not in ((tensor.shape[0], 1),
                                                            (1, tensor.shape[1])):
                raise DataError(f"{name}: int8 factor without its row scales", path)
            state[name] = dequantize_rows(tensor, scale)
        else:
            state[name] = tensor
    return state


def attach_int8_adapter(tower: torch.nn.Module, folder: Path) -> torch.nn.Module:
    """`tower` wrapped with the (frozen) LoRA adapter of `folder`'s int8 file."""
    from peft import LoraConfig, PeftModel, set_peft_model_state_dict

    config = LoraConfig.from_pretrained(str(folder))
    config.inference_mode = True
    model = PeftModel(tower, config)
    result = set_peft_model_state_dict(model, load_int8_state(folder / INT8_FILE))
    missing = [k for k in getattr(result, "missing_keys", []) if ".lora_" in k]
    if missing:
        raise DataError(f"the adapter lacks {len(missing)} LoRA weights the model has "
                        f"(e.g. {missing[0]})", folder / INT8_FILE)
    for param in model.parameters():
        param.requires_grad_(False)
    return model.eval()
