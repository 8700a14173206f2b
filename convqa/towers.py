"""Encoder towers and their linear heads, as every convqa model (dual encoder, ConvDR, the
extractive and FiD readers, the phrase model) loads, adapts, hashes and saves them, so all
models do these the same way (the model base, convqa/model_base.py, puts them together):

- loading: Hugging Face checkpoints in fp32 from safetensors only, remote code never run;
- LoRA: peft adapters attached over a base checkpoint, saved with a portable base name, merged;
- identity: the weights a tower computes with (LoRA deltas included, so a merged copy hashes
  the same) and their hash;
- heads: small `Linear` layers saved as one safetensors file next to the towers.
"""
from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from convqa.errors import ConfigError, ConvQAError, DataError
from convqa.io import load_json, write_json
from convqa.lora_storage import INT8_FILE, PEFT_FILE, attach_int8_adapter
from convqa.model_packages import package_named
from convqa.models import resolve_model, shipped_model_path

ADAPTER_CONFIG = "adapter_config.json"
BASE_RECORD = "adapter_base.json"  # which nested base an adapter was computed over


# -- loading ------------------------------------------------------------------------------
def load_encoder(name_or_path: str) -> torch.nn.Module:
    """A pretrained encoder in fp32 from safetensors only, never running remote code.

    No convqa model uses the checkpoint's pooler layer, so it is dropped after loading (unused
    parameters break distributed training); it is loaded only when the checkpoint has one, so
    the library's load report stays quiet unless something real is missing."""
    from transformers import AutoModel

    source = resolve_model(name_or_path)
    base = adapter_only_base(Path(source))
    if base is not None:  # e.g. the shipped reader: its encoder is its base + its LoRA, merged
        encoder = attach_adapter(load_encoder(base), Path(source), base).merge_and_unload()
        # trainable as any loaded checkpoint is: the frozen adapter leaves its base frozen,
        # and a model trained from this encoder with every weight would move only its head
        return encoder.requires_grad_(True)
    kwargs = dict(dtype=torch.float32, use_safetensors=True, trust_remote_code=False)
    try:
        try:
            encoder = AutoModel.from_pretrained(
                source, add_pooling_layer=_has_pooler_weights(source), **kwargs)
        except TypeError:  # not a model with an optional pooler
            encoder = AutoModel.from_pretrained(source, **kwargs)
    except (OSError, ValueError) as exc:
        raise ConvQAError(f"cannot load encoder {name_or_path!r} (safetensors weights needed): "
                          f"{str(exc).splitlines()[0]}") from None
    if getattr(encoder, "pooler", None) is not None:
        encoder.pooler = None
    return encoder


def adapter_only_base(folder: Path) -> str | None:
    """The base a model folder's LoRA adapter names when the folder holds an adapter and no
    full weights (a trained convqa model saved as an adapter, e.g. `convqa-reader`), so another
    model can start from that model's encoder; None for any other folder or name."""
    if not (folder / ADAPTER_CONFIG).is_file() or (folder / "model.safetensors").is_file():
        return None
    return adapter_base(folder)


def adapter_base(folder: Path) -> str:
    """The base checkpoint a peft adapter folder names."""
    base = load_json(folder / ADAPTER_CONFIG).get("base_model_name_or_path")
    if not isinstance(base, str) or not base:
        raise DataError("no base model named", folder / ADAPTER_CONFIG, None,
                        "base_model_name_or_path")
    return base


def _has_pooler_weights(source: str) -> bool:
    """Whether a local checkpoint stores pooler weights (a hub id: assume not)."""
    folder = Path(source)
    files = sorted(folder.glob("*.safetensors")) if folder.is_dir() else []
    if not files:
        return False
    from safetensors import safe_open

    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            if any(key.startswith("pooler.") or ".pooler." in key for key in handle.keys()):
                return True
    return False


def load_encoder_tokenizer(name_or_path: str):
    """The tokenizer of a checkpoint (hub id, alias or path), remote code never run."""
    from transformers import AutoTokenizer

    source = resolve_model(name_or_path)
    base = adapter_only_base(Path(source))
    if base is not None and not (Path(source) / "tokenizer_config.json").is_file():
        return load_encoder_tokenizer(base)  # an adapter folder reads with its base's tokenizer
    try:
        return AutoTokenizer.from_pretrained(source, trust_remote_code=False)
    except (OSError, ValueError) as exc:
        raise ConvQAError(f"cannot load the tokenizer of {name_or_path!r}: "
                          f"{str(exc).splitlines()[0]}") from None


def hidden_size(tower: torch.nn.Module) -> int:
    config = tower.config
    size = getattr(config, "hidden_size", None) or getattr(config, "d_model", None)
    if not isinstance(size, int):
        raise ConfigError(f"cannot tell the hidden size of encoder {type(tower).__name__}")
    return size


def keep_layers(encoder: torch.nn.Module, count: int | None) -> torch.nn.Module:
    """The encoder with only its first `count` transformer layers (BERT-like layouts:
    `encoder.layer`); None or at least as many as it has: unchanged."""
    if count is None:
        return encoder
    layers = getattr(getattr(encoder, "encoder", None), "layer", None)
    if not isinstance(layers, torch.nn.ModuleList):
        raise ConfigError(f"encoder_layers works on BERT-like encoders (encoder.layer), not "
                          f"{type(encoder).__name__}")
    if count < len(layers):
        encoder.encoder.layer = torch.nn.ModuleList(list(layers)[:count])
        encoder.config.num_hidden_layers = count
    return encoder


# -- LoRA -----------------------------------------------------------------------------------
def is_peft(module: torch.nn.Module) -> bool:
    return hasattr(module, "peft_config")


def lora_targets(encoder: torch.nn.Module) -> list[str]:
    """LoRA's target module names for `encoder`, read from its architecture: the names of the
    Linear layers inside its transformer layers (`...layer.N...`). BERT and MiniLM give query,
    key, value, dense (the names every convqa model used so far); MPNet q, k, v, o, dense."""
    names = {name.rsplit(".", 1)[-1] for name, module in encoder.named_modules()
             if isinstance(module, torch.nn.Linear) and "layer" in name.split(".")}
    if not names:
        raise ConfigError(f"no Linear layers inside transformer layers of "
                          f"{type(encoder).__name__} to put LoRA adapters on")
    return sorted(names)


def merged(tower: torch.nn.Module) -> torch.nn.Module:
    """The tower with its LoRA folded into the base weights (a plain tower: itself)."""
    return tower.merge_and_unload() if is_peft(tower) else tower


def base_digest(name: str, depth: int = 4) -> str | None:
    """What a base that is itself a convqa adapter folder computes with (e.g. `convqa-reader`
    under the shipped reranker): 24 hex digits of sha256 over its adapter files and its own
    base's digest. None for any other base: a checkpoint is fixed by its name (the installed
    models are checked by sha256), and only a folder of ours is retrained in place."""
    if depth < 1 or package_named(name) is not None:
        return None  # an installable checkpoint (it need not be installed to be named)
    folder = shipped_model_path(name) or Path(name)
    if not folder.is_dir():
        return None
    base = adapter_only_base(folder)
    if base is None:
        return None
    digest = hashlib.sha256()
    for file in (ADAPTER_CONFIG, PEFT_FILE, INT8_FILE):
        if (folder / file).is_file():
            digest.update(file.encode())
            digest.update((folder / file).read_bytes())
    digest.update((base_digest(base, depth - 1) or base).encode())
    return digest.hexdigest()[:24]


def check_base(folder: Path) -> None:
    """DataError when the adapter in `folder` was computed over a nested base whose weights
    have changed since (a retrained `convqa-reader` under a reranker trained on the old one):
    the adapter would load over the wrong weights and rank or read silently worse."""
    record_path = folder / BASE_RECORD
    if not record_path.is_file():
        return
    record = load_json(record_path)
    base, recorded = record.get("base"), record.get("digest")
    if not isinstance(base, str) or not isinstance(recorded, str):
        raise DataError("expected {base, digest}", record_path)
    current = base_digest(base)
    if current != recorded:
        raise DataError(f"this adapter was computed over {base!r} with weights {recorded}, "
                        f"but {base!r} now has {current or 'other weights'}: load it over the "
                        f"base it was trained on (the model folder's history has it) or export "
                        f"it over a fixed checkpoint", record_path)


def attach_adapter(tower: torch.nn.Module, folder: Path,
                   base: str = "its base model") -> torch.nn.Module:
    """`tower` with the (frozen) peft LoRA adapter saved in `folder`; DataError when the
    folder holds no LoRA adapter, one that does not fit `base` (named in the error), or one
    computed over a nested base that has changed since (`check_base`)."""
    from peft import PeftModel

    check_base(folder)
    config_path = folder / ADAPTER_CONFIG
    if not config_path.exists():
        raise DataError(f"LoRA adapter missing ({ADAPTER_CONFIG})", folder)
    config = load_json(config_path)
    if not isinstance(config, dict) or config.get("peft_type") != "LORA":
        raise DataError("only peft LoRA adapters are supported", config_path, None, "peft_type")
    if config.get("use_dora"):
        raise DataError("DoRA adapters are not supported", config_path, None, "use_dora")
    int8 = not (folder / PEFT_FILE).exists() and (folder / INT8_FILE).exists()
    if not int8 and not (folder / PEFT_FILE).exists():
        raise DataError(f"adapter weights missing ({PEFT_FILE})", folder)
    try:
        if int8:
            return attach_int8_adapter(tower, folder)
        return PeftModel.from_pretrained(tower, str(folder), is_trainable=False)
    except (ValueError, RuntimeError, KeyError) as exc:
        raise DataError(f"adapter does not fit {base}: {str(exc).splitlines()[0]}",
                        folder) from None


def save_adapter(tower: torch.nn.Module, folder: Path, base_name: str) -> None:
    """peft's files with a portable base name (our alias, not this machine's path)."""
    for config in tower.peft_config.values():
        config.base_model_name_or_path = base_name
    # save_embedding_layers=False: peft would otherwise look the base model up on the hub
    tower.save_pretrained(str(folder), safe_serialization=True, save_embedding_layers=False)
    with contextlib.suppress(FileNotFoundError):
        (folder / "README.md").unlink()  # peft's generated stub; the real card is written by hand
    digest = base_digest(base_name)
    if digest is not None:
        write_json(folder / BASE_RECORD, {"base": base_name, "digest": digest})


def save_tower(tower: torch.nn.Module, folder: Path, adapter_only: bool, base_name: str,
               tokenizer: Any = None) -> None:
    """Only the tower's LoRA adapter (over `base_name`), or its full weights with LoRA merged
    into a copy (the tower itself stays unmerged) and `tokenizer`, as a plain HF checkpoint."""
    if adapter_only:
        save_adapter(tower, folder, base_name)
        return
    full = merged(copy.deepcopy(tower)) if is_peft(tower) else tower
    full.save_pretrained(str(folder))
    if tokenizer is not None:
        tokenizer.save_pretrained(str(folder))


def adapted_encoder(base: str, layers: int | None, folder: Path) -> torch.nn.Module:
    """The encoder `base` cut to `layers` with the LoRA adapter of `folder` attached."""
    return attach_adapter(keep_layers(load_encoder(base), layers), folder)


# -- identity -------------------------------------------------------------------------------
def effective_state(tower: torch.nn.Module) -> dict[str, Tensor]:
    """The weights a tower computes with: for a peft model, base weights plus the (unmerged)
    LoRA deltas under the plain model's names, so a merged copy fingerprints the same."""
    if not is_peft(tower):
        return dict(tower.state_dict())
    deltas = {}
    for name, module in tower.named_modules():
        if hasattr(module, "get_delta_weight") and hasattr(module, "merged"):
            if not module.merged:
                for adapter in module.active_adapters:
                    if adapter in getattr(module, "lora_A", {}):
                        delta = module.get_delta_weight(adapter)
                        key = f"{name}.base_layer.weight"
                        deltas[key] = deltas[key] + delta if key in deltas else delta
    state = {}
    for name, tensor in tower.state_dict().items():
        if ".lora_" in name or ".original_module." in name:
            continue  # adapters are in the deltas; a module kept whole computes with its copy
        if name in deltas:
            tensor = tensor + deltas[name]  # the same float op peft's merge performs
        clean = name.removeprefix("base_model.model.").replace(".base_layer.", ".")
        clean = re.sub(r"\.modules_to_save\.[^.]+\.", ".", clean)
        state[clean] = tensor
    return state


def hash_state(digest, state: dict[str, Tensor]) -> None:
    """Feed named tensors to `digest` in name order, as fp32 with their shapes."""
    for name, tensor in sorted(state.items()):
        value = tensor.detach().to("cpu", torch.float32).contiguous()
        digest.update(f"{name}:{tuple(value.shape)};".encode())
        digest.update(value.numpy().tobytes())


def hash_tower(digest, tower: torch.nn.Module, tokenizer) -> None:
    """Feed a tower's effective weights and its tokenizer's vocabulary to `digest`."""
    # position_ids, token_type_ids: fixed index buffers, present or not by library version
    hash_state(digest, {name: tensor for name, tensor in effective_state(tower).items()
                        if not (name.endswith("position_ids")
                                or name.endswith("token_type_ids"))})
    vocab = sorted(tokenizer.get_vocab().items())
    digest.update(json.dumps([vocab, tokenizer.sep_token, tokenizer.cls_token]).encode())


# -- heads ----------------------------------------------------------------------------------
def init_std(encoder: torch.nn.Module) -> float:
    """The encoder's initializer range, for fresh heads on it."""
    return float(getattr(encoder.config, "initializer_range", 0.02) or 0.02)


def new_head(hidden: int, out: int, std: float) -> torch.nn.Linear:
    head = torch.nn.Linear(hidden, out)
    torch.nn.init.normal_(head.weight, std=std)
    torch.nn.init.zeros_(head.bias)
    return head


def head_from(state: dict[str, Tensor], name: str, hidden: int, out: int,
              where: Path) -> torch.nn.Linear:
    """The `Linear(hidden, out)` stored as NAME.weight / NAME.bias in `state` (read from
    `where`); DataError when missing or of another shape."""
    weight, bias = state.get(f"{name}.weight"), state.get(f"{name}.bias")
    if weight is None or bias is None:
        raise DataError(f"{name} head missing", where)
    if tuple(weight.shape) != (out, hidden) or tuple(bias.shape) != (out,):
        raise DataError(f"{name} head has shape {tuple(weight.shape)}, expected "
                        f"{(out, hidden)} for this encoder", where)
    head = torch.nn.Linear(hidden, out)
    with torch.no_grad():
        head.weight.copy_(weight.float())
        head.bias.copy_(bias.float())
    return head


def save_heads(state: dict[str, Tensor], path: Path) -> None:
    """The heads' tensors as one safetensors file."""
    from safetensors.torch import save_file

    save_file({k: v.detach().to("cpu").contiguous() for k, v in state.items()}, str(path))


def load_heads(path: Path, what: str) -> dict[str, Tensor]:
    """What `save_heads` wrote; DataError naming `what` ("reader") when missing or damaged."""
    from safetensors.torch import load_file

    if not path.exists():
        raise DataError(f"{what} heads missing ({path.name})", path.parent)
    try:
        return load_file(str(path))
    except Exception as exc:  # noqa: BLE001 - any unreadable file is a damaged model
        raise DataError(f"cannot read {what} heads ({type(exc).__name__})", path) from None
