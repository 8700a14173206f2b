"""The phrase model (DensePhrases mechanics, PRO-ConvQA queries): a phrase tower that gives every
passage token a vector, a learned filter, and a query tower that gives two query vectors.

A phrase (i, j) of a passage scores `q_start . h_i + q_end . h_j`.

- Phrase side: the phrase tower's last hidden states h are used *as they are* for both the
  start and the end of a phrase (DensePhrases does the same). One vector per token is what the
  index stores, so the index is half the size of separate start/end projections; the start/end
  asymmetry lives on the query side. `PhraseVectors.start` and `.end` are therefore the same
  tensor (`PhraseModel.shares_start_end` says so, and an index may store it once).
- Filter: `Linear(h, 2)` on the token vectors, a start and an end logit per token; the index
  keeps only tokens whose filter logit passes its threshold.
- Query side: a separate query tower (default) or the phrase tower itself
  (`shared_query_encoder`), mean-pooled, then two `Linear(h, h)` heads initialised to the
  identity, so an untrained model starts from MiniLM's sentence vector for both.
- Queries are formatted by a history strategy (PRO-ConvQA's `current_first`: q_t, then the last
  6 history utterances newest first, cut on the right).

`fingerprint()` hashes only what the phrase vectors depend on (phrase tower, filter, tokenizer,
passage length): query-side fine-tuning keeps it, so an index built before stays valid.
`full_fingerprint()` covers the query side too.

Saved folders hold `convqa_phrase_model.json`, `phrase_heads.safetensors` (filter and query
heads) and, per tower, either full weights (phrase tower at the root as a plain HF checkpoint,
query tower in `query_encoder/`) or only peft LoRA adapters over `config.base`. The encoder
helpers are convqa/towers.py's and the frame (loading, saving, LoRA, fingerprint)
convqa/model_base.py's, shared by every convqa model.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import NamedTuple, Sequence

import torch
from torch import Tensor

from convqa.errors import ConfigError, ConvQAError, DataError
from convqa.history import HistoryStrategy, build_history_strategy
from convqa.model_base import ModelBase, fingerprint_of
from convqa.models import DEFAULT_MODEL, load_tokenizer, shipped_model_path
from convqa.types import Turn
from convqa.towers import (adapted_encoder, hash_state, hash_tower, head_from, hidden_size,
                           keep_layers, load_encoder, load_encoder_tokenizer, load_heads,
                           save_heads, save_tower)

META_FILE = "convqa_phrase_model.json"
HEADS_FILE = "phrase_heads.safetensors"
QUERY_DIR = "query_encoder"
FORMAT = "convqa-phrase-model"
VERSION = 1
NOT_TEXT = -1  # offset_mapping value of tokens that are not passage text (title, specials)


def _default_history() -> dict:
    return {"name": "current_first", "window": 6}


@dataclass
class PhraseModelConfig:
    base: str = DEFAULT_MODEL            # HF checkpoint id/path (and the base of LoRA adapters)
    shared_query_encoder: bool = False   # True: queries are encoded by the phrase tower
    max_passage_tokens: int = 256        # special and title tokens included
    max_query_tokens: int = 128          # special tokens included
    max_answer_tokens: int = 10          # longest phrase, in tokens
    max_title_tokens: int = 16
    # Keep only the first N transformer layers of each tower (None: all).
    encoder_layers: int | None = None
    # The history strategy spec; `max_tokens` defaults to what fits in max_query_tokens.
    history: dict = field(default_factory=_default_history)

    def __post_init__(self) -> None:
        if not isinstance(self.base, str) or not self.base:
            raise ValueError("base must be a non-empty hub id or path")
        if not isinstance(self.shared_query_encoder, bool):
            raise ValueError(f"shared_query_encoder must be true or false, "
                             f"got {self.shared_query_encoder!r}")
        for name, low in (("max_passage_tokens", 16), ("max_query_tokens", 4),
                          ("max_answer_tokens", 1), ("max_title_tokens", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
        if self.max_title_tokens + 8 > self.max_passage_tokens:
            raise ValueError(f"max_title_tokens={self.max_title_tokens} leaves too little room "
                             f"in max_passage_tokens={self.max_passage_tokens}")
        if self.encoder_layers is not None and (isinstance(self.encoder_layers, bool) or not
                                                isinstance(self.encoder_layers, int)
                                                or self.encoder_layers < 1):
            raise ValueError(f"encoder_layers must be an int >= 1 or null, "
                             f"got {self.encoder_layers!r}")
        if isinstance(self.history, str):
            self.history = {"name": self.history}
        if not isinstance(self.history, dict) or not isinstance(self.history.get("name"), str):
            raise ValueError(f"history must be a strategy spec with a name, got {self.history!r}")


class PhraseVectors(NamedTuple):
    start: Tensor          # [B, L, d] float32
    end: Tensor            # [B, L, d] float32 (the same tensor as start: see the module doc)
    start_filter: Tensor   # [B, L] logits
    end_filter: Tensor     # [B, L] logits


class QueryVectors(NamedTuple):
    start: Tensor          # [B, d] float32
    end: Tensor            # [B, d] float32


def _identity_head(hidden: int) -> torch.nn.Linear:
    head = torch.nn.Linear(hidden, hidden)
    with torch.no_grad():
        head.weight.copy_(torch.eye(hidden))
        head.bias.zero_()
    return head


def _filter_head(hidden: int, std: float) -> torch.nn.Linear:
    head = torch.nn.Linear(hidden, 2)
    torch.nn.init.normal_(head.weight, std=std)
    torch.nn.init.zeros_(head.bias)
    return head


class PhraseModel(ModelBase):
    """Phrase tower + filter + query tower (or the phrase tower shared) + query heads."""

    shares_start_end = True  # PhraseVectors.start is PhraseVectors.end
    META_FILE, FORMAT, VERSION = META_FILE, FORMAT, VERSION
    CONFIG, KIND, NOUN = PhraseModelConfig, "convqa phrase model", "phrase model"
    TOWERS = ("phrase_encoder", "separate_query_encoder")
    LORA_RANK, LORA_ALPHA = 16, 32

    def __init__(self, config: PhraseModelConfig, phrase_encoder: torch.nn.Module, tokenizer,
                 query_encoder: torch.nn.Module | None = None,
                 heads: dict[str, torch.nn.Linear] | None = None):
        super().__init__()
        if config.shared_query_encoder != (query_encoder is None):
            raise ConfigError("a query encoder is given exactly when shared_query_encoder is "
                              "false")
        self.config = config
        self.phrase_encoder = phrase_encoder
        self.separate_query_encoder = query_encoder
        self.tokenizer = tokenizer
        hidden = hidden_size(phrase_encoder)
        if query_encoder is not None and hidden_size(query_encoder) != hidden:
            raise ConfigError(f"query encoder ({hidden_size(query_encoder)}-d) and phrase "
                              f"encoder ({hidden}-d) differ in dimension")
        heads = heads or {}
        std = float(getattr(phrase_encoder.config, "initializer_range", 0.02) or 0.02)
        self.filter_head = heads["filter"] if "filter" in heads else _filter_head(hidden, std)
        self.query_start_head = heads["query_start"] if "query_start" in heads \
            else _identity_head(hidden)
        self.query_end_head = heads["query_end"] if "query_end" in heads \
            else _identity_head(hidden)
        self.source: str | None = None
        self._strategy: HistoryStrategy | None = None

    # -- construction ---------------------------------------------------------------------
    @classmethod
    def build(cls, config: PhraseModelConfig | None = None) -> "PhraseModel":
        """A trainable model from the base checkpoint (both towers start from it)."""
        config = config or PhraseModelConfig()
        phrase = keep_layers(load_encoder(config.base), config.encoder_layers)
        query = None if config.shared_query_encoder else \
            keep_layers(load_encoder(config.base), config.encoder_layers)
        model = cls(config, phrase, load_encoder_tokenizer(config.base), query)
        model.source = config.base
        return model

    @classmethod
    def from_config_random(cls, config: PhraseModelConfig, hf_config, tokenizer=None,
                           seed: int | None = None) -> "PhraseModel":
        """A randomly initialised model from a Hugging Face config (tiny models for tests);
        the tokenizer defaults to MiniLM's."""
        from transformers import AutoModel

        if seed is not None:
            torch.manual_seed(seed)

        def tower() -> torch.nn.Module:
            encoder = AutoModel.from_config(hf_config)
            if getattr(encoder, "pooler", None) is not None:
                encoder.pooler = None
            return encoder

        query = None if config.shared_query_encoder else tower()
        return cls(config, tower(), tokenizer or load_tokenizer(), query)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "PhraseModel":
        """A folder written by `save` (full weights or LoRA adapters), or the alias of a shipped
        model (`convqa-phrase`); the same as `from_pretrained`."""
        return cls.from_pretrained(path)

    @classmethod
    def _from_folder(cls, folder: Path, meta: dict, config: PhraseModelConfig,
                     name: str) -> "PhraseModel":
        heads_path = folder / HEADS_FILE
        state = load_heads(heads_path, "phrase")
        query_dir = folder / QUERY_DIR
        if meta.get("adapter"):
            tokenizer = load_encoder_tokenizer(config.base)
            phrase = adapted_encoder(config.base, config.encoder_layers, folder)
            query = None if config.shared_query_encoder else \
                adapted_encoder(config.base, config.encoder_layers, query_dir)
        else:
            tokenizer = load_encoder_tokenizer(str(folder))
            phrase = load_encoder(str(folder))
            query = None if config.shared_query_encoder else load_encoder(str(query_dir))
        hidden = hidden_size(phrase)
        heads = {name: head_from(state, name, hidden, out, heads_path)
                 for name, out in (("filter", 2), ("query_start", hidden),
                                   ("query_end", hidden))}
        model = cls(config, phrase, tokenizer, query, heads)
        # a shipped model keeps its alias, which an index records
        model.source = name if shipped_model_path(name) is not None else str(folder)
        return model

    # -- properties -----------------------------------------------------------------------
    @property
    def query_encoder(self) -> torch.nn.Module:
        return self.separate_query_encoder if self.separate_query_encoder is not None \
            else self.phrase_encoder

    @property
    def dim(self) -> int:
        return hidden_size(self.phrase_encoder)

    def phrase_parameters(self) -> list[torch.nn.Parameter]:
        """What the phrase vectors and filter depend on (frozen in query-side fine-tuning)."""
        return list(self.phrase_encoder.parameters()) + list(self.filter_head.parameters())

    def query_parameters(self) -> list[torch.nn.Parameter]:
        """What only the query vectors depend on (the heads, and the query tower if separate)."""
        params = list(self.query_start_head.parameters()) + list(self.query_end_head.parameters())
        if self.separate_query_encoder is not None:
            params = list(self.separate_query_encoder.parameters()) + params
        return params

    # -- text -----------------------------------------------------------------------------
    @property
    def history_strategy(self) -> HistoryStrategy:
        """Built on first use, with this model's tokenizer; its token budget defaults to what
        fits in `max_query_tokens` next to the special tokens."""
        if self._strategy is None:
            spec = dict(self.config.history)
            specials = self.tokenizer.num_special_tokens_to_add(pair=False)
            spec.setdefault("max_tokens", self.config.max_query_tokens - specials)
            try:
                strategy = build_history_strategy(spec)
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"phrase model history: {exc}") from None
            self._strategy = type(strategy)(strategy.config, tokenizer=self.tokenizer)
        return self._strategy

    def format_query(self, question: str, history: Sequence[Turn]) -> str:
        """The query text for `question` after the turns `history` (oldest first)."""
        return self.history_strategy.format(question, history)

    def tokenize_queries(self, texts: Sequence[str]):
        """Padded query tensors (`input_ids`, `attention_mask`)."""
        encoding = self.tokenizer(list(texts), padding=True, truncation=True,
                                  max_length=self.config.max_query_tokens, return_tensors="pt",
                                  return_token_type_ids=False)
        return encoding

    def tokenize_passages(self, titles: Sequence[str], texts: Sequence[str],
                          stride: int | None = None):
        """`[CLS] title [SEP] text [SEP]` per passage, padded, as tensors.

        Besides `input_ids` and `attention_mask` the encoding holds `offset_mapping` [B, L, 2]:
        character offsets of each token into its passage *text* (`NOT_TEXT`, -1, for the title,
        special and padding tokens), and `phrase_mask` [B, L] (True for text tokens, the only
        possible phrase boundaries). A text longer than the window is cut, or with `stride`
        split into windows sharing `stride` tokens, at most half a window
        (`overflow_to_sample_mapping` then names each window's passage). Titles are cut to `max_title_tokens`."""
        titles, texts = list(titles), list(texts)
        if len(titles) != len(texts):
            raise ConvQAError(f"{len(titles)} titles for {len(texts)} passage texts")
        for index, (title, text) in enumerate(zip(titles, texts)):
            if not isinstance(title, str) or not isinstance(text, str):
                raise DataError("titles and texts must be strings", field=f"passages[{index}]")
        titles = [self._cut_title(t) for t in titles]
        extra = {}
        if stride is not None:
            # the tokenizer needs the stride below the room a window leaves for the text
            longest = max((len(ids) for ids in self.tokenizer(
                titles, add_special_tokens=False)["input_ids"]), default=0)
            room = self.config.max_passage_tokens - longest - \
                self.tokenizer.num_special_tokens_to_add(pair=True)
            extra = dict(return_overflowing_tokens=True, stride=max(0, min(stride, room // 2)))
        encoding = self.tokenizer(titles, texts, padding=True, truncation="only_second",
                                  max_length=self.config.max_passage_tokens,
                                  return_offsets_mapping=True, return_tensors="pt",
                                  return_token_type_ids=False, **extra)
        offsets = encoding["offset_mapping"].clone()
        mask = torch.zeros(offsets.shape[:2], dtype=torch.bool)
        for row in range(offsets.shape[0]):
            ids = encoding.sequence_ids(row)
            mask[row, :len(ids)] = torch.tensor([s == 1 for s in ids], dtype=torch.bool)
        offsets[~mask] = NOT_TEXT
        encoding["offset_mapping"] = offsets
        encoding["phrase_mask"] = mask
        return encoding

    def _cut_title(self, title: str) -> str:
        limit = self.config.max_title_tokens
        encoded = self.tokenizer(title, add_special_tokens=False, return_offsets_mapping=True)
        offsets = encoded["offset_mapping"]
        return title if len(offsets) <= limit else title[:offsets[limit - 1][1]] if limit else ""

    # -- computation ----------------------------------------------------------------------
    def encode_passages(self, input_ids: Tensor, attention_mask: Tensor) -> PhraseVectors:
        """Token vectors and filter logits (fp32, also under autocast)."""
        hidden = self.phrase_encoder(input_ids=input_ids.to(self.device),
                                     attention_mask=attention_mask.to(self.device)
                                     ).last_hidden_state
        with torch.autocast(device_type=hidden.device.type, enabled=False):
            hidden = hidden.float()
            filters = self.filter_head(hidden)
        return PhraseVectors(hidden, hidden, filters[..., 0], filters[..., 1])

    def encode_queries(self, input_ids: Tensor, attention_mask: Tensor) -> QueryVectors:
        """The start and end query vectors: mean-pooled query tower, then the two heads."""
        tower = self.query_encoder
        device = next(tower.parameters()).device
        mask = attention_mask.to(device)
        hidden = tower(input_ids=input_ids.to(device), attention_mask=mask).last_hidden_state
        with torch.autocast(device_type=hidden.device.type, enabled=False):
            weights = mask.unsqueeze(-1).float()
            pooled = (hidden.float() * weights).sum(1) / weights.sum(1).clamp(min=1.0)
            return QueryVectors(self.query_start_head(pooled), self.query_end_head(pooled))

    def forward(self, passages: dict[str, Tensor] | None = None,
                queries: dict[str, Tensor] | None = None
                ) -> tuple[PhraseVectors | None, QueryVectors | None]:
        """Both sides in one call (what DDP/accelerate need to sync gradients in training)."""
        phrases = None if passages is None else self.encode_passages(
            passages["input_ids"], passages["attention_mask"])
        query = None if queries is None else self.encode_queries(
            queries["input_ids"], queries["attention_mask"])
        return phrases, query

    # -- identity -------------------------------------------------------------------------
    # `fingerprint()` hashes only what the phrase vectors and filter depend on (not the query
    # side, which query-side fine-tuning changes without invalidating an index).
    def fingerprint_settings(self) -> dict:
        return {"max_passage_tokens": self.config.max_passage_tokens,
                "max_title_tokens": self.config.max_title_tokens}

    def hash_weights(self, digest) -> None:
        hash_tower(digest, self.phrase_encoder, self.tokenizer)
        hash_state(digest, {f"filter.{k}": v for k, v in self.filter_head.state_dict().items()})

    def full_fingerprint(self) -> str:
        """Hash of every weight and setting the answers depend on, the query side included."""
        settings = {k: v for k, v in asdict(self.config).items() if k != "base"}

        def feed(digest) -> None:
            if self.separate_query_encoder is not None:
                hash_tower(digest, self.separate_query_encoder, self.tokenizer)
            hash_state(digest, self._query_head_state())

        return fingerprint_of({"phrase": self.fingerprint(), **settings}, feed)

    def _query_head_state(self) -> dict[str, Tensor]:
        state = {f"query_start.{k}": v for k, v in self.query_start_head.state_dict().items()}
        state.update({f"query_end.{k}": v for k, v in self.query_end_head.state_dict().items()})
        return state

    def _head_state(self) -> dict[str, Tensor]:
        state = {f"filter.{k}": v for k, v in self.filter_head.state_dict().items()}
        state.update(self._query_head_state())
        return state

    # -- saving ---------------------------------------------------------------------------
    def _save_files(self, folder: Path, adapter_only: bool, meta: dict) -> None:
        """Phrase tower (with the tokenizer) at the root, the query tower in `query_encoder/`,
        the heads whole."""
        towers = [(self.phrase_encoder, folder, self.tokenizer)]
        if self.separate_query_encoder is not None:
            towers.append((self.separate_query_encoder, folder / QUERY_DIR, None))
        for tower, where, tokenizer in towers:
            where.mkdir(exist_ok=True)
            save_tower(tower, where, adapter_only, self.config.base, tokenizer)
        save_heads(self._head_state(), folder / HEADS_FILE)

    def _meta(self, adapter_only: bool) -> dict:
        return {"config": asdict(self.config), "adapter": adapter_only, "dim": self.dim,
                "fingerprint": self.fingerprint(), "full_fingerprint": self.full_fingerprint()}

    def save(self, path: str | os.PathLike, adapter_only: bool | None = None) -> None:
        """The same as `save_pretrained`."""
        self.save_pretrained(path, adapter_only)
