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

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
from torch import Tensor

from convqa.errors import ConfigError, DataError
from convqa.model_base import ModelBase, tower_inputs
from convqa.models import DEFAULT_MODEL
from convqa.towers import (ADAPTER_CONFIG, adapted_encoder, hash_state, hash_tower, head_from,
                           hidden_size, init_std, keep_layers, load_encoder,
                           load_encoder_tokenizer, load_heads, new_head, save_heads, save_tower)
from convqa.types import Passage

from .card import CARD_FILE, model_card
from .cascade import MARGINS_KEY, margins_from_block
from .fusion import WEIGHTS_KEY, weights_from_block
from .learned_shortlist import SHORTLIST_KEY
from .learned_shortlist import weights_from_block as shortlist_from_block

META_FILE = "convqa_reranker.json"
HEAD_FILE = "reranker_head.safetensors"
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


def _heads(tokenizer: Any, texts: Sequence[str], max_tokens: int) -> list[str]:
    """Each text cut to its first `max_tokens` tokens on a word boundary (convqa.history's
    truncation, so the cut text is a substring of the original)."""
    from convqa.history.text import tokenize_texts

    if not texts or max_tokens == 0:
        return ["" for _ in texts]
    return [unit.head(max_tokens, split_words=True).text
            for unit in tokenize_texts(tokenizer, list(texts))]


class CrossEncoder(ModelBase):
    """Encoder + `Linear(hidden, 1)` head on the pooled vector of a (query, passage) pair.

    `build(config)` starts from a pretrained encoder with a fresh head (to train);
    `from_pretrained(path)` loads a trained folder. A bare encoder is refused there: its head
    would be random and every ranking arbitrary."""

    META_FILE, FORMAT, VERSION = META_FILE, FORMAT, VERSION
    CONFIG, KIND, NOUN = CrossEncoderConfig, "convqa cross-encoder reranker", "reranker"
    TOWERS = ("encoder",)
    LORA_RANK, LORA_ALPHA = 16, 32

    def __init__(self, config: CrossEncoderConfig, encoder: torch.nn.Module, tokenizer: Any,
                 head: torch.nn.Linear):
        super().__init__()
        self.config = config
        self.encoder = encoder
        self.tokenizer = tokenizer
        self.head = head
        self.source: str | None = None
        # calibrated weight of each retriever's score in the final score (fusion.py)
        self.retriever_weights: dict[str, float] = {}
        # calibrated first-stage lead that skips a second stage (cascade.py), by cascade key
        self.cascade_margins: dict[str, float] = {}
        # learned shortlist's feature weights (learned_shortlist.py), by retriever key
        self.shortlist_weights: dict[str, dict[str, float]] = {}
        self.saved_fingerprint: str | None = None  # the one its folder records, when loaded
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
        return super().from_pretrained(path)

    @classmethod
    def _from_checkpoint(cls, name: str, folder: Path) -> "CrossEncoder":
        if not folder.is_dir():
            raise DataError("reranker model folder not found", folder)
        what = "a peft adapter" if (folder / ADAPTER_CONFIG).exists() else "a folder"
        raise ConfigError(f"{folder}: {what} without {META_FILE}, not a trained reranker "
                          "(train one with `convqa train reranker`, or start training from "
                          "an encoder with CrossEncoder.build)")

    @classmethod
    def _from_folder(cls, folder: Path, meta: dict, config: CrossEncoderConfig,
                     name: str) -> "CrossEncoder":
        if meta.get("adapter"):
            encoder = adapted_encoder(config.model, config.encoder_layers, folder)
            tokenizer = load_encoder_tokenizer(config.model)
        else:
            encoder, tokenizer = load_encoder(str(folder)), load_encoder_tokenizer(str(folder))
        head = head_from(load_heads(folder / HEAD_FILE, "reranker"), "head",
                         hidden_size(encoder), 1, folder / HEAD_FILE)
        model = cls(config, encoder, tokenizer, head)
        model.source = str(folder)
        model.retriever_weights = weights_from_block(meta.get(WEIGHTS_KEY) or {},
                                                     folder / META_FILE)
        model.cascade_margins = margins_from_block(meta.get(MARGINS_KEY) or {},
                                                   folder / META_FILE)
        model.shortlist_weights = shortlist_from_block(meta.get(SHORTLIST_KEY) or {},
                                                       folder / META_FILE)
        saved = meta.get("fingerprint")
        model.saved_fingerprint = saved if isinstance(saved, str) and saved else None
        return model

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
        hidden = self.encoder(**tower_inputs(self.encoder, {
            "input_ids": input_ids, "attention_mask": attention_mask,
            "token_type_ids": token_type_ids})).last_hidden_state
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

    # -- identity -------------------------------------------------------------------------
    def known_fingerprint(self) -> str:
        """The fingerprint its folder records (read, not hashed: a large model's weights take
        seconds to hash), else computed."""
        return self.saved_fingerprint or self.fingerprint()

    def fingerprint_settings(self) -> dict:
        return {"pooling": self.config.pooling}

    def hash_weights(self, digest) -> None:
        """The vocabulary, the encoder's effective weights (LoRA deltas included, so a merged
        copy hashes the same) and the head."""
        hash_tower(digest, self.encoder, self.tokenizer)
        hash_state(digest, self._head_state())

    def _head_state(self) -> dict[str, Tensor]:
        return {f"head.{k}": v for k, v in self.head.state_dict().items()}

    # -- saving -----------------------------------------------------------------------------
    def _save_files(self, folder: Path, adapter_only: bool, meta: dict) -> None:
        """Encoder (or its adapter), head and the model card."""
        save_tower(self.encoder, folder, adapter_only, self.config.model, self.tokenizer)
        save_heads(self._head_state(), folder / HEAD_FILE)
        (folder / CARD_FILE).write_text(model_card(meta, self.card_facts), encoding="utf-8")

    def _meta(self, adapter_only: bool) -> dict:
        meta = {"config": asdict(self.config), "adapter": adapter_only,
                "hidden_size": hidden_size(self.encoder), "fingerprint": self.fingerprint()}
        if self.retriever_weights:
            meta[WEIGHTS_KEY] = {key: {"weight": weight}
                                 for key, weight in self.retriever_weights.items()}
        if self.cascade_margins:
            meta[MARGINS_KEY] = {key: {"skip_margin": margin}
                                 for key, margin in self.cascade_margins.items()}
        if self.shortlist_weights:
            meta[SHORTLIST_KEY] = {key: dict(weights)
                                   for key, weights in self.shortlist_weights.items()}
        return meta


def read_weights(folder: str | os.PathLike) -> dict[str, float]:
    """The calibrated weights a reranker folder holds ({} when none)."""
    from convqa.io import load_json

    block = load_json(Path(folder) / META_FILE).get(WEIGHTS_KEY) or {}
    return weights_from_block(block, Path(folder) / META_FILE)


def write_weight(folder: str | os.PathLike, key: str, weight: float,
                 provenance: Mapping[str, Any]) -> Path:
    """Record `weight` for retriever `key` in the folder's convqa_reranker.json (atomically;
    the rest of the file and the other retrievers' weights are kept)."""
    return _write_entry(folder, WEIGHTS_KEY, key, {"weight": float(weight), **provenance},
                        weights_from_block)


def write_margin(folder: str | os.PathLike, key: str, margin: float,
                 provenance: Mapping[str, Any]) -> Path:
    """Record the cascade's skip `margin` for `key` (cascade.cascade_key) in the first stage's
    convqa_reranker.json (atomically; everything else in the file is kept)."""
    return _write_entry(folder, MARGINS_KEY, key, {"skip_margin": float(margin), **provenance},
                        margins_from_block)


def write_shortlist(folder: str | os.PathLike, key: str, weights: Mapping[str, float],
                    provenance: Mapping[str, Any]) -> Path:
    """Record the learned shortlist's `weights` for retriever `key` in the folder's
    convqa_reranker.json (atomically; everything else in the file is kept)."""
    return _write_entry(folder, SHORTLIST_KEY, key, {**weights, **provenance},
                        shortlist_from_block)


def _write_entry(folder: str | os.PathLike, block_key: str, key: str, entry: dict,
                 check) -> Path:
    from convqa.io import load_format_json, write_json

    path = Path(folder) / META_FILE
    meta = load_format_json(path, FORMAT, VERSION, "convqa cross-encoder reranker")
    block = dict(meta.get(block_key) or {})
    block[key] = entry
    check(block, path)
    meta[block_key] = block
    write_json(path, meta)
    return path
