"""The cross-encoder: one encoder reads the conversation and a passage together and a linear
head turns its pooled vector into a relevance logit.

Input of one pair: `[CLS] query [SEP] title [SEP] passage text [SEP]` (BERT's specials; other
tokenizers put their own). The query keeps its first `max_query_length` tokens and the title its
first `max_title_length`, both cut on word boundaries; only the passage text is truncated to fit
`max_length`. Unlike a dual encoder, every query token attends to every passage token, which is
what tells an article's answer passage from its siblings.

A saved folder (`save_pretrained`, written atomically) holds `convqa_reranker.json` (format,
version, config, fingerprint), `reranker_head.safetensors`, a model card `README.md`, and the
encoder: only its peft LoRA adapter over the base named in the config (a few MB), or for a model
trained on all weights a plain Hugging Face checkpoint. safetensors only; remote code never runs.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Sequence

import torch
from torch import Tensor

from convqa.errors import ConfigError, ConvQAError, DataError
from convqa.io import load_format_json, write_json
from convqa.model_folder import writing_folder
from convqa.models import DEFAULT_MODEL, shipped_model_path
from convqa.towers import (ADAPTER_CONFIG, adapted_encoder, hash_state, hash_tower, head_from,
                           hidden_size, init_std, is_peft, keep_layers, load_encoder,
                           load_encoder_tokenizer, load_heads, merged, new_head, save_heads,
                           save_tower)
from convqa.types import Passage

META_FILE = "convqa_reranker.json"
HEAD_FILE = "reranker_head.safetensors"
CARD_FILE = "README.md"
FORMAT = "convqa-cross-encoder-reranker"
VERSION = 1
POOLINGS = ("cls", "mean")
_MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


@dataclass
class CrossEncoderConfig:
    model: str = DEFAULT_MODEL      # the encoder checkpoint (and the base of a LoRA adapter)
    max_length: int = 256           # tokens per pair, special tokens included
    max_query_length: int = 64      # tokens of the (history-formatted) query kept, its start
    max_title_length: int = 16      # tokens of the passage title kept
    pooling: str = "cls"            # cls: the first token's vector | mean: masked mean
    history: str | dict | None = None  # the history strategy trained with (a spec)
    encoder_layers: int | None = None  # keep only the first N layers of `model`

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model:
            raise ValueError("model must be a non-empty hub id or path")
        for name, low in (("max_length", 32), ("max_query_length", 1),
                          ("max_title_length", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
        if self.max_length - 4 - self.max_query_length - self.max_title_length < 16:
            raise ValueError(f"max_length={self.max_length} leaves under 16 tokens for the "
                             f"passage after a query of {self.max_query_length} and a title "
                             f"of {self.max_title_length} tokens")
        if self.pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {', '.join(POOLINGS)}, "
                             f"got {self.pooling!r}")
        if self.history is not None and not isinstance(self.history, (str, dict)):
            raise ValueError(f"history must be a strategy name or spec, got {self.history!r}")
        layers = self.encoder_layers
        if layers is not None and (isinstance(layers, bool) or not isinstance(layers, int)
                                   or layers < 1):
            raise ValueError(f"encoder_layers must be an int >= 1 or null, got {layers!r}")

    @classmethod
    def from_dict(cls, data: Any, where: str) -> "CrossEncoderConfig":
        if not isinstance(data, dict):
            raise DataError("expected a JSON object", where, None, "config")
        unknown = sorted(set(data) - {f.name for f in fields(cls)})
        if unknown:
            raise DataError(f"unknown reranker option '{unknown[0]}'", where, None, "config")
        try:
            return cls(**data)
        except (TypeError, ValueError) as exc:
            raise DataError(str(exc), where, None, "config") from None


def _heads(tokenizer: Any, texts: Sequence[str], max_tokens: int) -> list[str]:
    """Each text cut to its first `max_tokens` tokens on a word boundary (convqa.history's
    truncation, so the cut text is a substring of the original)."""
    from convqa.history.text import tokenize_texts

    if not texts or max_tokens == 0:
        return ["" for _ in texts]
    return [unit.head(max_tokens, split_words=True).text
            for unit in tokenize_texts(tokenizer, list(texts))]


class CrossEncoder(torch.nn.Module):
    """Encoder + `Linear(hidden, 1)` head on the pooled vector of a (query, passage) pair.

    `build(config)` starts from a pretrained encoder with a fresh head (to train);
    `from_pretrained(path)` loads a trained folder. A bare encoder is refused there: its head
    would be random and every ranking arbitrary."""

    def __init__(self, config: CrossEncoderConfig, encoder: torch.nn.Module, tokenizer: Any,
                 head: torch.nn.Linear):
        super().__init__()
        self.config = config
        self.encoder = encoder
        self.tokenizer = tokenizer
        self.head = head
        self.source: str | None = None
        self.card_facts: dict[str, Any] = {}  # training facts written into the model card

    # -- construction -----------------------------------------------------------------------
    @classmethod
    def build(cls, config: CrossEncoderConfig | None = None) -> "CrossEncoder":
        config = config or CrossEncoderConfig()
        encoder = keep_layers(load_encoder(config.model), config.encoder_layers)
        model = cls(config, encoder, load_encoder_tokenizer(config.model),
                    new_head(hidden_size(encoder), 1, init_std(encoder)))
        model.source = config.model
        return model

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike) -> "CrossEncoder":
        """A folder written by `save_pretrained` (or a shipped model's alias)."""
        folder = shipped_model_path(str(path)) or Path(path)
        if not folder.is_dir():
            raise DataError("reranker model folder not found", folder)
        if not (folder / META_FILE).exists():
            what = "a peft adapter" if (folder / ADAPTER_CONFIG).exists() else "a folder"
            raise ConfigError(f"{folder}: {what} without {META_FILE}, not a trained reranker "
                              "(train one with `convqa train reranker`, or start training from "
                              "an encoder with CrossEncoder.build)")
        meta_path = folder / META_FILE
        meta = load_format_json(meta_path, FORMAT, VERSION, "convqa cross-encoder reranker")
        config = CrossEncoderConfig.from_dict(meta.get("config") or {}, str(meta_path))
        if meta.get("adapter"):
            encoder = adapted_encoder(config.model, config.encoder_layers, folder)
            tokenizer = load_encoder_tokenizer(config.model)
        else:
            encoder, tokenizer = load_encoder(str(folder)), load_encoder_tokenizer(str(folder))
        head = head_from(load_heads(folder / HEAD_FILE, "reranker"), "head",
                         hidden_size(encoder), 1, folder / HEAD_FILE)
        model = cls(config, encoder, tokenizer, head)
        model.source = str(folder)
        return model

    # -- properties -------------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return next(self.encoder.parameters()).device

    @property
    def has_adapters(self) -> bool:
        return is_peft(self.encoder)

    # -- inputs and computation -------------------------------------------------------------
    def encode_pairs(self, queries: Sequence[str], passages: Sequence[Passage],
                     max_length: int | None = None) -> dict[str, Tensor]:
        """Padded token tensors of the pairs (queries[i], passages[i]), on the CPU, at most
        `max_length` tokens each (default: the config's)."""
        if len(queries) != len(passages):
            raise ValueError(f"{len(queries)} queries for {len(passages)} passages")
        tokenizer, config = self.tokenizer, self.config
        if not passages:
            return {"input_ids": torch.zeros(0, 0, dtype=torch.long),
                    "attention_mask": torch.zeros(0, 0, dtype=torch.long)}
        distinct = list(dict.fromkeys(queries))
        cut = dict(zip(distinct, _heads(tokenizer, distinct, config.max_query_length)))
        titles = _heads(tokenizer, [p.title for p in passages], config.max_title_length)
        sep = tokenizer.sep_token or "|"
        seconds = [f"{t} {sep} {p.text}" if t.strip() else p.text
                   for t, p in zip(titles, passages)]
        encoding = tokenizer([cut[q] for q in queries], seconds, truncation="only_second",
                             max_length=max_length or config.max_length, padding="longest",
                             return_tensors="pt")
        return {k: encoding[k] for k in _MODEL_INPUTS if k in encoding}

    def forward(self, input_ids: Tensor, attention_mask: Tensor,
                token_type_ids: Tensor | None = None) -> Tensor:
        """One relevance logit per pair, [pairs]; pooling and head in fp32 under autocast."""
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None:
            inputs["token_type_ids"] = token_type_ids
        hidden = self.encoder(**inputs).last_hidden_state
        with torch.autocast(device_type=hidden.device.type, enabled=False):
            hidden = hidden.float()
            if self.config.pooling == "cls":
                pooled = hidden[:, 0]
            else:
                mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
            return self.head(pooled).squeeze(-1)

    def model_inputs(self, tensors: dict[str, Tensor]) -> dict[str, Tensor]:
        device = self.device
        return {k: v.to(device) for k, v in tensors.items() if k in _MODEL_INPUTS}

    # -- identity ---------------------------------------------------------------------------
    def fingerprint(self) -> str:
        """Hash of what the scores depend on: the vocabulary, the encoder's effective weights
        (LoRA deltas included, so a merged copy hashes the same), the head and the pooling."""
        digest = hashlib.sha256()
        digest.update(json.dumps({"pooling": self.config.pooling}).encode())
        with torch.no_grad():
            hash_tower(digest, self.encoder, self.tokenizer)
            hash_state(digest, self._head_state())
        return digest.hexdigest()[:24]

    def _head_state(self) -> dict[str, Tensor]:
        return {f"head.{k}": v for k, v in self.head.state_dict().items()}

    # -- LoRA -------------------------------------------------------------------------------
    def add_lora(self, r: int = 16, alpha: int = 32, dropout: float = 0.1,
                 target_modules: Sequence[str] = ("query", "key", "value", "dense")
                 ) -> "CrossEncoder":
        """peft LoRA adapters on the encoder (its base frozen); the head stays trainable."""
        from peft import LoraConfig, get_peft_model

        if self.has_adapters:
            raise ConvQAError("this reranker already has LoRA adapters")
        self.encoder = get_peft_model(self.encoder, LoraConfig(
            r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=list(target_modules)))
        return self

    def merge_adapters(self) -> "CrossEncoder":
        """Fold LoRA into the encoder weights (faster scoring; the fingerprint is kept)."""
        self.encoder = merged(self.encoder)
        return self

    # -- saving -----------------------------------------------------------------------------
    def save_pretrained(self, path: str | os.PathLike, adapter_only: bool | None = None) -> None:
        """Write atomically (a temporary sibling folder renamed into place), safetensors only:
        adapter + head for a LoRA model unless `adapter_only=False` (merged full weights; the
        model itself stays unmerged), with the model card."""
        from .card import model_card

        adapter_only = self.has_adapters if adapter_only is None else adapter_only
        if adapter_only and not self.has_adapters:
            raise ConvQAError("adapter_only=True but this reranker has no LoRA adapters")
        fingerprint = self.fingerprint()
        meta = {"format": FORMAT, "version": VERSION, "config": asdict(self.config),
                "adapter": adapter_only, "hidden_size": hidden_size(self.encoder),
                "fingerprint": fingerprint}
        with writing_folder(Path(path), META_FILE, "a convqa reranker") as tmp:
            save_tower(self.encoder, tmp, adapter_only, self.config.model, self.tokenizer)
            save_heads(self._head_state(), tmp / HEAD_FILE)
            write_json(tmp / META_FILE, meta)
            (tmp / CARD_FILE).write_text(model_card(meta, self.card_facts), encoding="utf-8")
