"""Turn a fully fine-tuned dual encoder into a small peft LoRA adapter over its base model.

Why: full fine-tuning trains best on few CPU steps, but a full MiniLM copy is 90 MB while the
change it learned is small. For every linear layer the adapter holds the best rank-r
approximation of the weight change (truncated SVD of `W_tuned - W_base`, so `B @ A * scale`
is the closest rank-r matrix in Frobenius norm); the linear biases and the LayerNorm
parameters, tiny, are stored exactly (peft `bias="lora_only"` and `modules_to_save`). The word
and position embeddings are left at the base: `report` says how large their change was.

    >>> base = DualEncoder.from_pretrained("all-MiniLM-L6-v2")            # doctest: +SKIP
    >>> tuned = DualEncoder.from_pretrained("runs/dpr-ihn-full/iter3/model")  # doctest: +SKIP
    >>> adapted, report = lora_from_finetuned(base, tuned, r=64)          # doctest: +SKIP
    >>> adapted.save_adapter("models/retriever-dpr-ihn")                  # doctest: +SKIP
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from convqa.errors import ConvQAError
from convqa.model_base import lora_targets

from .model import DualEncoder

EXACT_MODULES = ("LayerNorm",)
SMALL_EMBEDDINGS = ("token_type_embeddings", "position_embeddings")


@dataclass
class ExportReport:
    """How faithful the adapter is: kept energy of each weight change, what was left out."""

    rank: int
    layers: int = 0
    mean_energy_kept: float = 0.0        # mean over layers of ||rank-r delta||^2 / ||delta||^2
    min_energy_kept: float = 1.0
    left_out: dict[str, float] = field(default_factory=dict)  # name -> ||delta|| / ||W||

    def to_dict(self) -> dict:
        return {"rank": self.rank, "layers": self.layers,
                "mean_energy_kept": round(self.mean_energy_kept, 4),
                "min_energy_kept": round(self.min_energy_kept, 4),
                "left_out_relative_change": {k: round(v, 6) for k, v in self.left_out.items()}}


def lora_from_finetuned(base: DualEncoder, tuned: DualEncoder, r: int = 64,
                        alpha: int | None = None, exact_modules: tuple[str, ...] = EXACT_MODULES
                        ) -> tuple[DualEncoder, ExportReport]:
    """`base` with LoRA adapters that reproduce `tuned` up to rank `r` (base is modified)."""
    if not base.shared or not tuned.shared:
        raise ConvQAError("LoRA export supports shared-tower dual encoders only")
    if base.has_adapters or tuned.has_adapters:
        raise ConvQAError("LoRA export needs two plain models (merge adapters first)")
    base.query_encoder, report = encoder_lora_from_finetuned(
        base.query_encoder, tuned.query_encoder, r, alpha, exact_modules)
    return base, report


def encoder_lora_from_finetuned(base: torch.nn.Module, tuned: torch.nn.Module, r: int = 64,
                                alpha: int | None = None,
                                exact_modules: tuple[str, ...] = EXACT_MODULES
                                ) -> tuple[torch.nn.Module, ExportReport]:
    """A peft model over `base` (a plain HF encoder, modified) reproducing `tuned` up to
    rank `r`; for any model holding an encoder (dual encoder, extractive reader).
    `exact_modules` are copied whole (default the LayerNorms; add "token_type_embeddings" and
    "position_embeddings", small tables, when fine-tuning moved them, as a reader's does)."""
    from peft import LoraConfig, get_peft_model

    if r < 1:
        raise ConvQAError("LoRA rank must be at least 1")
    base_params = dict(base.named_parameters())
    tuned_params = dict(tuned.named_parameters())
    if base_params.keys() != tuned_params.keys() or any(
            base_params[k].shape != tuned_params[k].shape for k in base_params):
        raise ConvQAError("the fine-tuned model does not have its base model's architecture")
    alpha = alpha if alpha is not None else r
    config = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=0.0, bias="lora_only",
                        target_modules=lora_targets(base),
                        modules_to_save=list(exact_modules))
    report = ExportReport(rank=r)
    energies: list[float] = []
    peft_model = get_peft_model(base, config)
    with torch.no_grad():
        for name, module in peft_model.named_modules():
            if hasattr(module, "lora_A") and "default" in module.lora_A:
                clean = name.removeprefix("base_model.model.")
                delta = (tuned_params[f"{clean}.weight"] - base_params[f"{clean}.weight"]).float()
                a, b, kept = _low_rank(delta, r, alpha / r)
                module.lora_A["default"].weight.copy_(a)
                module.lora_B["default"].weight.copy_(b)
                module.base_layer.bias.copy_(tuned_params[f"{clean}.bias"])
                energies.append(kept)
            elif hasattr(module, "modules_to_save") and "default" in module.modules_to_save:
                clean = name.removeprefix("base_model.model.")
                target = module.modules_to_save["default"]
                for pname, param in target.named_parameters():
                    param.copy_(tuned_params[f"{clean}.{pname}"])
    covered = {n.removeprefix("base_model.model.").replace(".base_layer", "")
               .replace(".modules_to_save.default", "")
               for n, _ in peft_model.named_parameters() if "lora_" not in n}
    for name in base_params:
        covered_here = name in covered and (
            name.endswith(".bias") or any(f"{m}." in name for m in exact_modules))
        if not covered_here and not _is_lora_weight(name, peft_model):
            with torch.no_grad():
                change = (tuned_params[name] - base_params[name]).float().norm()
                size = base_params[name].float().norm().clamp_min(1e-12)
            report.left_out[name] = float(change / size)
    peft_model.eval()
    report.layers = len(energies)
    if energies:
        report.mean_energy_kept = sum(energies) / len(energies)
        report.min_energy_kept = min(energies)
    return peft_model, report


def _is_lora_weight(name: str, peft_model) -> bool:
    """Is `name` (a plain-model weight) the base weight of a LoRA-wrapped linear layer?"""
    module_name = name.rsplit(".", 1)[0]
    try:
        module = peft_model.base_model.model.get_submodule(module_name)
    except AttributeError:
        return False
    return name.endswith(".weight") and hasattr(module, "lora_A")


def _low_rank(delta: torch.Tensor, r: int, scale: float) -> tuple[torch.Tensor, torch.Tensor, float]:
    """A [r, in], B [out, r] with B @ A * scale = the best rank-r approximation of `delta`."""
    u, s, vh = torch.linalg.svd(delta, full_matrices=False)
    k = min(r, s.numel())
    root = s[:k].sqrt()
    a = torch.zeros(r, delta.shape[1], dtype=delta.dtype)
    b = torch.zeros(delta.shape[0], r, dtype=delta.dtype)
    a[:k] = root[:, None] * vh[:k]
    b[:, :k] = u[:, :k] * root[None, :] / scale
    total = float((s ** 2).sum())
    kept = float((s[:k] ** 2).sum() / total) if total > 0 else 1.0
    return a, b, kept
