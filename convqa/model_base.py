"""The base every convqa model (dual encoder, ConvDR student, extractive reader, FiD reader,
phrase model, cross-encoder reranker) stands on, so they load, adapt, identify and save
themselves one way:

- loading: `from_pretrained(path)` takes a folder the model saved (its metadata file names the
  format and version and holds the settings dataclass as "config"), a shipped model's alias,
  or, where the model allows it (`_from_checkpoint`), a plain Hugging Face checkpoint or a
  bare peft adapter folder;
- saving: `save_pretrained(path)` writes a temporary sibling folder renamed into place,
  safetensors only; a model with LoRA adapters saves only them unless `adapter_only=False`;
- LoRA: `add_lora` wraps every tower (the encoders named in `TOWERS`) with fresh peft adapters
  on the linear layers the architecture has (`lora_targets`: BERT's query/key/value/dense,
  MPNet's q/k/v/o/dense, ...), `merge_adapters` folds them in (the fingerprint is kept);
- identity: `fingerprint()` hashes the settings and weights the outputs depend on;
- placement: `device`, `for_inference` (merged, on a configured device, eval), and
  `tower_inputs` so that inputs such as `token_type_ids` reach only encoders that take them.

A subclass names its files and towers (class attributes) and writes only what is its own: how
a saved folder becomes a model (`_from_folder`), its extra files and metadata (`_save_files`,
`_meta`) and what its fingerprint covers (`fingerprint_settings`, `hash_weights`). Precision
`auto` is measured on first use by the components that run a model (`PrecisionOnFirstUse`,
convqa/precision.py). The tower helpers themselves are convqa/towers.py's.
"""
from __future__ import annotations

import copy
import hashlib
import inspect
import json
import os
from dataclasses import fields
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterator, Sequence

import torch

from convqa.errors import ConfigError, ConvQAError, DataError
from convqa.io import load_format_json, write_json
from convqa.model_folder import writing_folder
from convqa.models import shipped_model_path
from convqa.towers import ADAPTER_CONFIG, adapter_base, attach_adapter, is_peft, merged


def lora_targets(tower: torch.nn.Module) -> list[str]:
    """The names (last component) of every linear layer of a plain `tower`: LoRA's targets,
    read from the architecture itself rather than assumed to be BERT's."""
    names = {name.rsplit(".", 1)[-1] for name, module in tower.named_modules()
             if isinstance(module, torch.nn.Linear) and name}
    if not names:
        raise ConfigError(f"{type(tower).__name__} has no linear layers to put LoRA adapters on")
    return sorted(names)


@lru_cache(maxsize=None)
def _forward_inputs(cls: type) -> frozenset[str]:
    return frozenset(inspect.signature(cls.forward).parameters)


def takes_input(tower: torch.nn.Module, name: str) -> bool:
    """Whether `tower` (peft-wrapped or not) takes the keyword `name`: MPNet, for one, has no
    `token_type_ids`."""
    base = tower.get_base_model() if is_peft(tower) else tower
    return name in _forward_inputs(type(base))


def tower_inputs(tower: torch.nn.Module, tensors: dict[str, Any],
                 device: torch.device | None = None) -> dict[str, Any]:
    """The tensors `tower` takes (None ones dropped), on `device` if given."""
    return {k: v if device is None else v.to(device) for k, v in tensors.items()
            if v is not None and takes_input(tower, k)}


def resolve_device(name: str, what: str) -> torch.device:
    """The device a configuration names: cpu, cuda, cuda:N, or auto (a GPU if there is one)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        return torch.device(name)
    except RuntimeError:
        raise ConfigError(f"{what}: bad device {name!r} (cpu, cuda, cuda:N or auto)") from None


def fingerprint_of(settings: dict[str, Any], feed: Callable[[Any], None]) -> str:
    """24 hex digits of sha256 over `settings` (as sorted JSON) and what `feed(digest)` adds
    (weights, hashed without gradients)."""
    digest = hashlib.sha256()
    digest.update(json.dumps(settings, sort_keys=True).encode())
    with torch.no_grad():
        feed(digest)
    return digest.hexdigest()[:24]


def saved_config(config_cls: type, data: Any, where: str, what: str):
    """The settings dataclass `config_cls` from a saved model's "config" object (missing: the
    defaults); DataError naming `where` for an unknown option or a bad value."""
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise DataError("expected a JSON object", where, None, "config")
    unknown = sorted(set(data) - {f.name for f in fields(config_cls)})
    if unknown:
        raise DataError(f"unknown {what} option '{unknown[0]}'", where, None, "config")
    try:
        return config_cls(**data)
    except (TypeError, ValueError, ConfigError) as exc:
        raise DataError(str(exc), where, None, "config") from None


class ModelBase(torch.nn.Module):
    """See the module docstring. Subclasses set the class attributes below."""

    META_FILE: ClassVar[str]           # the metadata file that marks a saved folder
    FORMAT: ClassVar[str]              # its "format" value
    VERSION: ClassVar[int] = 1
    CONFIG: ClassVar[type]             # the settings dataclass, saved as "config"
    KIND: ClassVar[str]                # "convqa dual encoder": in errors about folders
    NOUN: ClassVar[str]                # "dual encoder": in errors about this model
    TOWERS: ClassVar[tuple[str, ...]]  # attributes holding the encoders LoRA adapts (or None)
    LORA_RANK: ClassVar[int] = 8
    LORA_ALPHA: ClassVar[int] = 16
    LORA_TASK_TYPE: ClassVar[str | None] = None  # peft's task type (e.g. SEQ_2_SEQ_LM)

    source: str | None = None  # the folder or id this model was loaded from

    # -- loading --------------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, **options: Any):
        """A folder written by `save_pretrained` or a shipped model's alias; anything else
        goes to `_from_checkpoint` (which refuses it unless the subclass reads checkpoints)."""
        name = str(path)
        shipped = shipped_model_path(name)
        folder = shipped if shipped is not None else Path(name)
        meta_path = folder / cls.META_FILE
        if folder.is_dir() and meta_path.exists():
            meta = load_format_json(meta_path, cls.FORMAT, cls.VERSION, cls.KIND)
            config = saved_config(cls.CONFIG, meta.get("config"), str(meta_path), cls.NOUN)
            return cls._from_folder(folder, meta, config, name, **options)
        return cls._from_checkpoint(name, folder, **options)

    @classmethod
    def _from_folder(cls, folder: Path, meta: dict, config: Any, name: str, **options: Any):
        """The model of a saved `folder` whose checked metadata is `meta` and settings `config`
        (`name`: the path or alias as given)."""
        raise NotImplementedError

    @classmethod
    def _from_checkpoint(cls, name: str, folder: Path, **options: Any):
        """A path without our metadata: refused unless a subclass reads plain checkpoints
        (`_checkpoint_or_adapter` does it for models built from one checkpoint name)."""
        raise DataError(f"not a {cls.KIND} ({cls.META_FILE} missing)", folder)

    @classmethod
    def _build_from(cls, checkpoint: str, **options: Any):
        """A fresh model over the checkpoint `checkpoint` (for `_checkpoint_or_adapter`)."""
        raise NotImplementedError

    @classmethod
    def _checkpoint_or_adapter(cls, name: str, folder: Path, **options: Any):
        """A bare peft adapter folder (over the base it names; the adapter goes on the first
        tower), a plain checkpoint folder, or a hub id / alias, built with `_build_from`."""
        if folder.is_dir() and (folder / ADAPTER_CONFIG).exists():
            model = cls._build_from(adapter_base(folder), **options)
            setattr(model, cls.TOWERS[0], attach_adapter(getattr(model, cls.TOWERS[0]), folder))
        else:
            model = cls._build_from(str(folder) if folder.is_dir() else name, **options)
        model.source = name
        return model

    # -- towers ---------------------------------------------------------------------------
    def _towers(self) -> Iterator[tuple[str, torch.nn.Module]]:
        for attribute in self.TOWERS:
            tower = getattr(self, attribute)
            if tower is not None:
                yield attribute, tower

    @property
    def device(self) -> torch.device:
        """Where the first tower's weights are (the model is moved as a whole)."""
        return next(getattr(self, self.TOWERS[0]).parameters()).device

    @property
    def has_adapters(self) -> bool:
        return any(is_peft(tower) for _, tower in self._towers())

    def for_inference(self, device: str, what: str):
        """The model as a component runs it: adapters merged (the same outputs, faster), on
        the configured `device` (`resolve_device`; `what` names the component), in eval mode."""
        if self.has_adapters:
            self.merge_adapters()
        return self.to(resolve_device(device, what)).eval()

    # -- LoRA -----------------------------------------------------------------------------
    def _lora_targets(self, tower: torch.nn.Module) -> list[str] | None:
        """Where adapters go by default: every linear layer (None: peft's own default)."""
        return lora_targets(tower)

    def add_lora(self, r: int | None = None, alpha: int | None = None, dropout: float = 0.1,
                 target_modules: Sequence[str] | None = None):
        """Wrap each tower with fresh peft LoRA adapters: only they (and any heads) train.
        `target_modules` defaults to the tower's linear layers (`lora_targets`)."""
        from peft import LoraConfig, get_peft_model

        if self.has_adapters:
            raise ConvQAError(f"this {self.NOUN} already has LoRA adapters")
        for attribute, tower in list(self._towers()):
            targets = list(target_modules) if target_modules else self._lora_targets(tower)
            lora = LoraConfig(r=self.LORA_RANK if r is None else r,
                              lora_alpha=self.LORA_ALPHA if alpha is None else alpha,
                              lora_dropout=dropout, target_modules=targets,
                              task_type=self.LORA_TASK_TYPE)
            setattr(self, attribute, get_peft_model(tower, copy.deepcopy(lora)))
        return self

    def merge_adapters(self):
        """Fold LoRA into the base weights for faster inference (the fingerprint is kept)."""
        for attribute, tower in list(self._towers()):
            setattr(self, attribute, merged(tower))
        return self

    # -- identity -------------------------------------------------------------------------
    def fingerprint_settings(self) -> dict[str, Any]:
        """The settings the outputs depend on (names and paths left out)."""
        raise NotImplementedError

    def hash_weights(self, digest) -> None:
        """Feed the weights (and vocabulary) the outputs depend on to `digest`."""
        raise NotImplementedError

    def fingerprint(self) -> str:
        """Hash of what the outputs depend on: the same weights loaded from two places, or
        merged and unmerged, give the same fingerprint."""
        return fingerprint_of(self.fingerprint_settings(), self.hash_weights)

    # -- saving ---------------------------------------------------------------------------
    def save_pretrained(self, path: str | os.PathLike, adapter_only: bool | None = None) -> None:
        """Write atomically (temporary sibling folder renamed into place), safetensors only.
        A model with LoRA adapters saves only them (and its heads) unless `adapter_only=False`,
        which saves merged full weights (the model itself stays unmerged)."""
        adapter_only = self.has_adapters if adapter_only is None else adapter_only
        if adapter_only and not self.has_adapters:
            raise ConvQAError(f"adapter_only=True but this {self.NOUN} has no LoRA adapters "
                              "(call add_lora first)")
        meta = {"format": self.FORMAT, "version": self.VERSION, **self._meta(adapter_only)}
        with writing_folder(Path(path), self.META_FILE, f"a {self.KIND}") as tmp:
            self._save_files(tmp, adapter_only, meta)
            write_json(tmp / self.META_FILE, meta)

    def _save_files(self, folder: Path, adapter_only: bool, meta: dict[str, Any]) -> None:
        """Write towers, tokenizer and heads into `folder` (the temporary one); `meta` is what
        the metadata file will hold (for a model card)."""
        raise NotImplementedError

    def _meta(self, adapter_only: bool) -> dict[str, Any]:
        """The metadata besides format and version (config, adapter, fingerprint, ...)."""
        raise NotImplementedError
