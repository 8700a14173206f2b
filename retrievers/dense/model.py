"""The dual encoder: a query tower and a passage tower (shared or separate) over any BERT-like
Hugging Face checkpoint, mean or CLS pooling, optional L2 normalisation.

Saved folders (`save_pretrained`) hold `convqa_dual_encoder.json` and either full weights
(the query/shared tower as a plain HF checkpoint at the root, so Hugging Face tools read it,
and `passage_encoder/` when the towers are separate) or, for a model with LoRA adapters, only
the peft adapters (`adapter_config.json` + `adapter_model.safetensors`, same layout) over the
base checkpoint named in the config: trained retrievers ship as a few MB instead of 90.

`fingerprint()` identifies what the vectors depend on, so an index built by one encoder is
never searched with another's queries.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from convqa.errors import ConfigError, ConvQAError
from convqa.model_base import ModelBase, tower_inputs
from convqa.models import DEFAULT_MODEL, shipped_model_path
from convqa.towers import (attach_adapter, hash_tower, hidden_size, load_encoder,
                           load_encoder_tokenizer, save_tower)
from convqa.types import Passage

META_FILE = "convqa_dual_encoder.json"
FORMAT = "convqa-dual-encoder"
VERSION = 1
PASSAGE_DIR = "passage_encoder"
POOLINGS = ("mean", "cls")
# The inputs a BERT-like encoder takes; tokenizers may return more (e.g. offsets).
_MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


@dataclass
class DualEncoderConfig:
    model: str = DEFAULT_MODEL           # hub id or local path (query tower, and passage tower if shared)
    passage_model: str | None = None     # None = one shared encoder for both sides
    pooling: str = "mean"                # "mean" | "cls"
    normalize: bool = True               # L2-normalise embeddings (MiniLM was trained for cosine)
    query_max_length: int = 130          # tokens incl. specials (history budget 128 + [CLS][SEP])
    passage_max_length: int = 192

    def __post_init__(self) -> None:
        if self.pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {', '.join(POOLINGS)}, got {self.pooling!r}")
        for name in ("query_max_length", "passage_max_length"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 4:
                raise ValueError(f"{name} must be an int >= 4, got {value!r}")
        if not isinstance(self.model, str) or not self.model:
            raise ValueError("model must be a non-empty hub id or path")


class DualEncoder(ModelBase):
    """Query and passage encoders; `encode_*` return `[batch, dim]` embeddings with gradients.

    Build from pretrained checkpoints with `build(config)`, load a saved folder (or a plain
    checkpoint, or a peft LoRA adapter folder) with `from_pretrained(path)`.
    """

    META_FILE, FORMAT, VERSION = META_FILE, FORMAT, VERSION
    CONFIG, KIND, NOUN = DualEncoderConfig, "convqa dual encoder", "dual encoder"
    TOWERS = ("query_encoder", "separate_passage_encoder")

    def __init__(self, config: DualEncoderConfig, query_encoder: torch.nn.Module, tokenizer,
                 passage_encoder: torch.nn.Module | None = None, passage_tokenizer=None):
        super().__init__()
        self.config = config
        self.query_encoder = query_encoder
        self.separate_passage_encoder = passage_encoder  # None when shared
        self.query_tokenizer = tokenizer
        self.passage_tokenizer = passage_tokenizer if passage_tokenizer is not None else tokenizer
        self.source: str | None = None  # the folder or id this model was loaded from

    # -- construction ---------------------------------------------------------------------
    @classmethod
    def build(cls, config: DualEncoderConfig) -> "DualEncoder":
        """From pretrained checkpoints (`config.model`, and `config.passage_model` if set)."""
        query = load_encoder(config.model)
        tokenizer = load_encoder_tokenizer(config.model)
        passage = passage_tokenizer = None
        if config.passage_model is not None:
            passage = load_encoder(config.passage_model)
            passage_tokenizer = load_encoder_tokenizer(config.passage_model)
        model = cls(config, query, tokenizer, passage, passage_tokenizer)
        model._check_dimensions()
        model.source = config.model if config.passage_model is None else None
        return model

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike) -> "DualEncoder":
        """A folder written by `save_pretrained` (full or adapter), a shipped model's alias, a
        peft LoRA adapter folder over a BERT-like checkpoint, or any plain HF checkpoint
        id/path (shared tower, mean pooling)."""
        return super().from_pretrained(path)

    @classmethod
    def _from_checkpoint(cls, name: str, folder: Path) -> "DualEncoder":
        return cls._checkpoint_or_adapter(name, folder)

    @classmethod
    def _build_from(cls, checkpoint: str) -> "DualEncoder":
        return cls.build(DualEncoderConfig(model=checkpoint))

    @classmethod
    def _from_folder(cls, folder: Path, meta: dict, config: DualEncoderConfig,
                     name: str) -> "DualEncoder":
        shared = bool(meta.get("shared", config.passage_model is None))
        if meta.get("adapter"):
            model = cls.build(config)
            model.query_encoder = attach_adapter(model.query_encoder, folder)
            if not shared:
                model.separate_passage_encoder = attach_adapter(
                    model.separate_passage_encoder, folder / PASSAGE_DIR)
        else:
            query, tokenizer = load_encoder(str(folder)), load_encoder_tokenizer(str(folder))
            passage = passage_tokenizer = None
            if not shared:
                passage = load_encoder(str(folder / PASSAGE_DIR))
                passage_tokenizer = load_encoder_tokenizer(str(folder / PASSAGE_DIR))
            model = cls(config, query, tokenizer, passage, passage_tokenizer)
        model._check_dimensions()
        # a shipped model names its folder, so an index built with it records where it is
        model.source = str(folder) if shipped_model_path(name) is not None else name
        return model

    def _check_dimensions(self) -> None:
        if self.dim != hidden_size(self.passage_encoder):
            raise ConfigError(f"query encoder ({self.dim}-d) and passage encoder "
                              f"({hidden_size(self.passage_encoder)}-d) differ in dimension")

    # -- properties -----------------------------------------------------------------------
    @property
    def passage_encoder(self) -> torch.nn.Module:
        return self.separate_passage_encoder if self.separate_passage_encoder is not None \
            else self.query_encoder

    @property
    def shared(self) -> bool:
        return self.separate_passage_encoder is None

    @property
    def dim(self) -> int:
        return hidden_size(self.query_encoder)

    def towers(self) -> list[torch.nn.Module]:
        return [self.query_encoder] if self.shared else [self.query_encoder,
                                                         self.separate_passage_encoder]

    # -- tokenization and encoding ---------------------------------------------------------
    def tokenize_queries(self, texts: Sequence[str], padding: bool = True) -> dict[str, Tensor]:
        """Padded tensors, or (padding=False) lists of token ids for length-sorted batching."""
        return self._tokenize(self.query_tokenizer, list(texts), self.config.query_max_length,
                              padding)

    def passage_texts(self, passages: Iterable[Passage]) -> list[str]:
        """`title [SEP] text` as one sequence (the text alone when there is no title)."""
        sep = self.passage_tokenizer.sep_token or "|"
        return [f"{p.title} {sep} {p.text}" if p.title else p.text for p in passages]

    def tokenize_passages(self, passages: Sequence[Passage], padding: bool = True
                          ) -> dict[str, Tensor]:
        texts = self.passage_texts(passages)
        return self._tokenize(self.passage_tokenizer, texts, self.config.passage_max_length,
                              padding)

    @staticmethod
    def _tokenize(tokenizer, texts: list[str], max_length: int, padding: bool = True):
        if padding:
            return dict(tokenizer(texts, padding=True, truncation=True, max_length=max_length,
                                  return_tensors="pt"))
        return dict(tokenizer(texts, truncation=True, max_length=max_length))

    def encode_query(self, batch: dict[str, Tensor]) -> Tensor:
        return self._encode(self.query_encoder, batch)

    def encode_passage(self, batch: dict[str, Tensor]) -> Tensor:
        return self._encode(self.passage_encoder, batch)

    def forward(self, queries: dict[str, Tensor] | None = None,
                passages: dict[str, Tensor] | None = None) -> tuple[Tensor | None, Tensor | None]:
        """Both sides in one call (what DDP/accelerate need to sync gradients in training)."""
        return (None if queries is None else self.encode_query(queries),
                None if passages is None else self.encode_passage(passages))

    def _encode(self, tower: torch.nn.Module, batch: dict[str, Tensor]) -> Tensor:
        device = next(tower.parameters()).device
        inputs = tower_inputs(tower, {k: v for k, v in batch.items() if k in _MODEL_INPUTS},
                              device)
        if "attention_mask" not in inputs:
            raise ConvQAError("encoder batch needs an attention_mask (use tokenize_*)")
        hidden = tower(**inputs).last_hidden_state.float()  # pool in fp32 under autocast too
        if self.config.pooling == "cls":
            pooled = hidden[:, 0]
        else:
            mask = inputs["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        return F.normalize(pooled, dim=-1) if self.config.normalize else pooled

    # -- identity -------------------------------------------------------------------------
    def fingerprint_settings(self) -> dict:
        """What the vectors depend on besides the weights: pooling, normalisation, passage
        length, shared or not. Names and paths are left out (the same weights loaded from two
        places match), and so is `query_max_length`, which a retriever may change without
        re-encoding the corpus."""
        return {"pooling": self.config.pooling, "normalize": self.config.normalize,
                "passage_max_length": self.config.passage_max_length, "shared": self.shared}

    def hash_weights(self, digest) -> None:
        """Tokenizer vocabulary and every weight (LoRA deltas included, as fp32)."""
        hash_tower(digest, self.query_encoder, self.query_tokenizer)
        if not self.shared:
            hash_tower(digest, self.separate_passage_encoder, self.passage_tokenizer)

    # -- saving ---------------------------------------------------------------------------
    def _save_files(self, folder: Path, adapter_only: bool, meta: dict) -> None:
        for tower, tokenizer, where in self._tower_dirs(folder):
            save_tower(tower, where, adapter_only, self._base_name(where != folder), tokenizer)

    def _meta(self, adapter_only: bool) -> dict:
        return {"config": asdict(self.config), "shared": self.shared, "adapter": adapter_only,
                "dim": self.dim, "fingerprint": self.fingerprint()}

    def save_adapter(self, path: str | os.PathLike) -> None:
        """Only the LoRA adapters (a few MB) plus our json; loads with `from_pretrained`."""
        self.save_pretrained(path, adapter_only=True)

    def _tower_dirs(self, root: Path):
        yield self.query_encoder, self.query_tokenizer, root
        if not self.shared:
            (root / PASSAGE_DIR).mkdir()
            yield self.separate_passage_encoder, self.passage_tokenizer, root / PASSAGE_DIR

    def _base_name(self, passage_side: bool) -> str:
        if passage_side:
            return self.config.passage_model or self.config.model
        return self.config.model
