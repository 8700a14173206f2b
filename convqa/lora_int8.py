"""LoRA adapters stored with int8 factors: half the bytes of fp16, for the large models.

A rank-64 adapter over all-mpnet-base-v2 is 23 MB with fp16 factors; every shipped megabyte is
in every clone and in the 64 MiB a GPU call carries. Each LoRA factor is stored as int8 with one
fp32 scale per rank component (a row of A, a column of B) (`round_lora_to_int8` rounds the model's factors to such values first, so the
stored file reloads to exactly the weights the model's fingerprint was taken of). The file is
`adapter_model.int8.safetensors` instead of peft's `adapter_model.safetensors`: a plain peft
load fails loudly on it instead of reading int8 codes as weights; `attach_int8_adapter` loads
it (convqa/towers.py).
"""
from __future__ import annotations

from pathlib import Path

import torch

from convqa.errors import ConvQAError, DataError

INT8_FILE = "adapter_model.int8.safetensors"
PEFT_FILE = "adapter_model.safetensors"
SCALE = ".int8_scale"
FORMAT = "convqa-lora-int8"


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
    count = 0
    with torch.no_grad():
        for name, param in model.named_parameters():
            if is_lora_factor(name, param):
                param.copy_(_fixed_point(param.float()))
                count += 1
    return count


def store_lora_int8(folder: str | Path) -> int:
    """Rewrite every peft adapter file under `folder` with int8 LoRA factors (other tensors
    as they were) into `adapter_model.int8.safetensors`; returns the bytes saved. Call after
    `round_lora_to_int8` and saving: a factor that int8 rows do not hold exactly is refused."""
    from safetensors.torch import load_file, save_file

    saved = 0
    for path in sorted(Path(folder).rglob(PEFT_FILE)):
        before = path.stat().st_size
        state = {}
        for name, tensor in load_file(str(path)).items():
            if is_lora_factor(name, tensor):
                codes, scale = quantize_rows(tensor)
                if not torch.equal(dequantize_rows(codes, scale), tensor.float()):
                    raise ConvQAError(f"{path}: {name} is not rounded to int8 rows "
                                      "(round_lora_to_int8 first)")
                state[name], state[name + SCALE] = codes, scale
            else:
                state[name] = tensor
        target = path.with_name(INT8_FILE)
        partial = target.with_name(target.name + ".partial")
        save_file(state, str(partial), metadata={"format": FORMAT})
        partial.replace(target)
        path.unlink()
        saved += before - target.stat().st_size
    return saved


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
