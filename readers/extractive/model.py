"""The extractive reader model (DPR reader): an encoder with a span head and a selection head.

- span head `Linear(h, 2)`: a start and an end logit for every token;
- selection head `Linear(h, 1)` on the first ([CLS]) token: how relevant the passage is, so
  the reader can pick the passage to answer from among the retrieved ones (DPR's "passage
  selection"). A plain Hugging Face question-answering checkpoint has no such head: it loads
  with `selection_head = None` (a warning says so) and passages are ranked by span score.

Saved folders (`save_pretrained`) hold `convqa_reader.json` (format, version, config,
fingerprint, and optionally the decoding defaults the reader applies: decoding.py),
`reader_heads.safetensors` (the heads) and either the full encoder as a plain HF
checkpoint (so Hugging Face tools read it) or, for a reader trained with LoRA, only the peft
adapter (`adapter_config.json` + `adapter_model.safetensors`) over the base encoder named in
the config: a trained reader then ships as a few MB. safetensors only; remote code never runs.
Loading, saving, LoRA and the fingerprint's frame are convqa/model_base.py's and the encoder
helpers convqa/towers.py's, shared by every convqa model, so all models load, adapt and hash
weights the same way.
"""
from __future__ import annotations

import os
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import Tensor

from convqa.errors import ConfigError, ConvQAError, DataError
from convqa.model_base import ModelBase, tower_inputs
from convqa.models import DEFAULT_MODEL, resolve_model
from convqa.towers import (ADAPTER_CONFIG, adapted_encoder, hash_state, hash_tower, head_from,
                           hidden_size, init_std, keep_layers, load_encoder,
                           load_encoder_tokenizer, load_heads, new_head, save_heads, save_tower)

from .decoding import Decoding

META_FILE = "convqa_reader.json"
HEADS_FILE = "reader_heads.safetensors"
FORMAT = "convqa-extractive-reader"
VERSION = 1

# Current question first, then the newest history: a reader reads the question before all else,
# and 64 tokens leave ~180 of a 256-token window for the passage.
DEFAULT_HISTORY: dict[str, Any] = {"name": "current_first", "max_tokens": 64}

_MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


@dataclass
class ExtractiveReaderConfig:
    model: str = DEFAULT_MODEL     # the encoder checkpoint (and the base of a LoRA adapter)
    max_length: int = 256          # tokens per window, special tokens included
    doc_stride: int = 64           # tokens shared by consecutive windows of a long passage
    max_query_length: int = 64     # tokens of the (history-formatted) query kept, its start
    max_title_length: int = 16     # tokens of the passage title kept
    use_title: bool = True         # read "query [SEP] title" against the passage text
    max_answer_length: int = 30    # tokens of an answer span
    # The history strategy the reader was trained with (a spec); readers default to it.
    history: str | dict | None = None
    # Keep only the first N transformer layers of `model` (None: all). A 3-layer MiniLM reader
    # reads about twice as fast; it is trained as such, so nothing is lost that it relied on.
    encoder_layers: int | None = None
    # Trained with a "no passage answers" option (a constant logit 0 beside the passages'
    # selection logits, loss.py): a selection logit > 0 then says "this passage answers it"
    # more than "none does", and the confidence gets an `answerable` feature (decoding.py).
    null_option: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model:
            raise ValueError("model must be a non-empty hub id or path")
        for name, low in (("max_length", 32), ("doc_stride", 0), ("max_query_length", 1),
                          ("max_title_length", 0), ("max_answer_length", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
        room = self.passage_room
        if room < 16:
            raise ValueError(f"max_length={self.max_length} leaves {room} tokens for the passage "
                             f"after a query of {self.max_query_length} and a title of "
                             f"{self.max_title_length} tokens; at least 16 are needed")
        if not isinstance(self.use_title, bool):
            raise ValueError(f"use_title must be true or false, got {self.use_title!r}")
        if self.history is not None and not isinstance(self.history, (str, dict)):
            raise ValueError(f"history must be a strategy name or spec, got {self.history!r}")
        if self.encoder_layers is not None and (isinstance(self.encoder_layers, bool) or not
                                                isinstance(self.encoder_layers, int)
                                                or self.encoder_layers < 1):
            raise ValueError(f"encoder_layers must be an int >= 1 or null, "
                             f"got {self.encoder_layers!r}")
        if not isinstance(self.null_option, bool):
            raise ValueError(f"null_option must be true or false, got {self.null_option!r}")

    def record(self) -> dict[str, Any]:
        """The settings as saved and hashed: `null_option` only when set, so a reader without
        it is written, fingerprinted and cached exactly as before the option existed."""
        data = asdict(self)
        if not self.null_option:
            del data["null_option"]
        return data

    @property
    def passage_room(self) -> int:
        """Passage tokens a window holds at the longest query and title (BERT: 3 specials and
        the [SEP] between query and title)."""
        title = self.max_title_length + 1 if self.use_title else 0
        return self.max_length - 3 - self.max_query_length - title


class ReaderLogits(NamedTuple):
    start: Tensor                # [windows, length]
    end: Tensor                  # [windows, length]
    selection: Tensor | None     # [windows], None without a selection head


def _qa_architecture(source: str) -> bool:
    """Whether `source` is a Hugging Face *ForQuestionAnswering checkpoint."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(source, trust_remote_code=False)
    except (OSError, ValueError) as exc:
        raise ConvQAError(f"cannot load the config of {source!r}: "
                          f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
                          ) from None
    return any(str(a).endswith("ForQuestionAnswering") for a in config.architectures or ())


def _load_qa_checkpoint(source: str) -> tuple[torch.nn.Module, torch.nn.Linear]:
    """(encoder, span head) of a Hugging Face question-answering checkpoint: its `qa_outputs`
    Linear(h, 2) computes start and end logits exactly as our span head does."""
    from transformers import AutoModelForQuestionAnswering

    try:
        qa = AutoModelForQuestionAnswering.from_pretrained(
            source, dtype=torch.float32, use_safetensors=True, trust_remote_code=False)
    except (OSError, ValueError) as exc:
        raise ConvQAError(f"cannot load question-answering checkpoint {source!r} (safetensors "
                          f"weights needed): {str(exc).splitlines()[0]}") from None
    head = getattr(qa, "qa_outputs", None)
    if not isinstance(head, torch.nn.Linear) or head.out_features != 2:
        raise ConvQAError(f"{source!r}: expected a qa_outputs Linear(hidden, 2) span head, got "
                          f"{type(head).__name__}")
    encoder = qa.base_model
    if getattr(encoder, "pooler", None) is not None:
        encoder.pooler = None  # unused: it would break distributed training
    return encoder, head


class ExtractiveReader(ModelBase):
    """Encoder + span head + (optional) selection head.

    `build(config)` starts a reader from a pretrained encoder (fresh heads) or from a Hugging
    Face QA checkpoint (its span head, a fresh selection head); `from_pretrained(path)` loads a
    trained reader folder or a Hugging Face QA checkpoint for inference.
    """

    META_FILE, FORMAT, VERSION = META_FILE, FORMAT, VERSION
    CONFIG, KIND, NOUN = ExtractiveReaderConfig, "convqa extractive reader", "reader"
    TOWERS = ("encoder",)

    def __init__(self, config: ExtractiveReaderConfig, encoder: torch.nn.Module, tokenizer,
                 span_head: torch.nn.Linear, selection_head: torch.nn.Linear | None):
        super().__init__()
        self.config = config
        self.encoder = encoder
        self.tokenizer = tokenizer
        self.span_head = span_head
        self.selection_head = selection_head
        self.source: str | None = None
        self.decoding: Decoding | None = None  # the folder's decoding defaults (decoding.py)

    # -- construction ---------------------------------------------------------------------
    @classmethod
    def build(cls, config: ExtractiveReaderConfig | None = None) -> "ExtractiveReader":
        """A trainable reader starting from `config.model`."""
        config = config or ExtractiveReaderConfig()
        source = resolve_model(config.model)
        tokenizer = load_encoder_tokenizer(config.model)
        if _qa_architecture(source):
            encoder, span = _load_qa_checkpoint(source)
        else:
            encoder = load_encoder(config.model)
            span = new_head(hidden_size(encoder), 2, init_std(encoder))
        encoder = keep_layers(encoder, config.encoder_layers)
        reader = cls(config, encoder, tokenizer, span, None)
        reader.add_selection_head()
        reader.source = config.model
        return reader

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike,
                        config: ExtractiveReaderConfig | None = None) -> "ExtractiveReader":
        """A folder written by `save_pretrained` (full or adapter), a shipped reader's alias,
        or a Hugging Face *ForQuestionAnswering checkpoint (hub id or path; `config` sets the
        window sizes). A bare encoder is refused: its heads would be random and every answer
        arbitrary."""
        return super().from_pretrained(path, checkpoint_config=config)

    @classmethod
    def _from_checkpoint(cls, name: str, folder: Path,
                         checkpoint_config: ExtractiveReaderConfig | None = None
                         ) -> "ExtractiveReader":
        if folder.is_dir() and (folder / ADAPTER_CONFIG).exists():
            raise DataError(f"a peft adapter without {META_FILE}: the reader heads are missing",
                            folder)
        if not folder.is_dir() and (os.sep in name or name.startswith(".")):
            raise DataError("reader model not found", folder)
        source = resolve_model(name)
        if not _qa_architecture(source):
            raise ConfigError(f"{name}: an encoder without reader heads, not a trained reader "
                              "(train one with `convqa train reader`, or start training from it "
                              "with ExtractiveReader.build)")
        encoder, span = _load_qa_checkpoint(source)
        config = checkpoint_config or ExtractiveReaderConfig(model=name)
        warnings.warn(f"{name}: a question-answering checkpoint without a passage-selection "
                      "head; passages are ranked by their best span score", UserWarning,
                      stacklevel=4)
        reader = cls(config, encoder, load_encoder_tokenizer(source), span, None)
        reader.source = name
        return reader

    @classmethod
    def _from_folder(cls, folder: Path, meta: dict, config: ExtractiveReaderConfig, name: str,
                     checkpoint_config: ExtractiveReaderConfig | None = None
                     ) -> "ExtractiveReader":
        """A saved reader keeps its own settings (`checkpoint_config` is for checkpoints)."""
        heads_path = folder / HEADS_FILE
        heads = load_heads(heads_path, "reader")
        if meta.get("adapter"):
            encoder = adapted_encoder(config.model, config.encoder_layers, folder)
            tokenizer = load_encoder_tokenizer(config.model)
        else:
            encoder, tokenizer = load_encoder(str(folder)), load_encoder_tokenizer(str(folder))
        hidden = hidden_size(encoder)
        span = head_from(heads, "span", hidden, 2, heads_path)
        selection = head_from(heads, "selection", hidden, 1, heads_path) \
            if "selection.weight" in heads else None
        if bool(meta.get("selection_head")) != (selection is not None):
            raise DataError("selection head listed in the metadata but not in the weights, or "
                            "the reverse", heads_path)
        if config.null_option and selection is None:
            raise DataError("null_option needs a selection head", folder / META_FILE, None,
                            "config.null_option")
        reader = cls(config, encoder, tokenizer, span, selection)
        reader.source = str(folder)
        if meta.get("decoding") is not None:
            reader.decoding = Decoding.from_dict(meta["decoding"], folder / META_FILE)
        return reader

    def add_selection_head(self) -> "ExtractiveReader":
        """A fresh selection head, if there is none (to train one on a QA checkpoint)."""
        if self.selection_head is None:
            self.selection_head = new_head(self.hidden_size, 1, init_std(self.encoder))
        return self

    # -- properties -----------------------------------------------------------------------
    @property
    def hidden_size(self) -> int:
        return hidden_size(self.encoder)

    @property
    def has_selection_head(self) -> bool:
        return self.selection_head is not None

    # -- computation ----------------------------------------------------------------------
    def forward(self, input_ids: Tensor, attention_mask: Tensor,
                token_type_ids: Tensor | None = None) -> ReaderLogits:
        """Logits for a batch of windows. The heads run in fp32 even under autocast, so the
        loss and the span scores keep their precision."""
        hidden = self.encoder(**tower_inputs(self.encoder, {
            "input_ids": input_ids, "attention_mask": attention_mask,
            "token_type_ids": token_type_ids})).last_hidden_state
        with torch.autocast(device_type=hidden.device.type, enabled=False):
            hidden = hidden.float()
            span = self.span_head(hidden)
            selection = None
            if self.selection_head is not None:
                selection = self.selection_head(hidden[:, 0]).squeeze(-1)
        return ReaderLogits(span[..., 0], span[..., 1], selection)

    def model_inputs(self, tensors: dict[str, Tensor]) -> dict[str, Tensor]:
        """The tensors of a tokenizer output that the encoder takes, on the model's device."""
        device = self.device
        return {k: v.to(device) for k, v in tensors.items() if k in _MODEL_INPUTS}

    # -- identity -------------------------------------------------------------------------
    def fingerprint_settings(self) -> dict:
        """Window sizes are left out: a reader may change them without retraining. The null
        option changes what the selection logits mean, so it counts (only when set)."""
        settings: dict[str, Any] = {"selection_head": self.has_selection_head}
        if self.config.null_option:
            settings["null_option"] = True
        return settings

    def hash_weights(self, digest) -> None:
        """Tokenizer vocabulary, encoder (LoRA deltas included, so a merged copy hashes the
        same) and heads."""
        hash_tower(digest, self.encoder, self.tokenizer)
        hash_state(digest, self._head_state())

    def _head_state(self) -> dict[str, Tensor]:
        state = {f"span.{k}": v for k, v in self.span_head.state_dict().items()}
        if self.selection_head is not None:
            state.update({f"selection.{k}": v for k, v in self.selection_head.state_dict().items()})
        return state

    # -- saving ---------------------------------------------------------------------------
    def _save_files(self, folder: Path, adapter_only: bool, meta: dict) -> None:
        """The encoder (or its adapter) and the heads, which are always saved whole."""
        save_tower(self.encoder, folder, adapter_only, self.config.model, self.tokenizer)
        save_heads(self._head_state(), folder / HEADS_FILE)

    def _meta(self, adapter_only: bool) -> dict:
        meta = {"config": self.config.record(), "adapter": adapter_only,
                "selection_head": self.has_selection_head, "hidden_size": self.hidden_size,
                "fingerprint": self.fingerprint()}
        if self.decoding is not None and self.decoding.to_dict():
            meta["decoding"] = self.decoding.to_dict()
        return meta


def write_decoding(folder: str | os.PathLike, decoding: Decoding) -> Path:
    """Set the decoding block of a reader folder's convqa_reader.json (atomically: the file
    is written beside and renamed); the rest of the file is kept. Returns the file."""
    from convqa.io import load_format_json, write_json

    path = Path(folder) / META_FILE
    meta = load_format_json(path, FORMAT, VERSION, "convqa extractive reader")
    Decoding.from_dict(decoding.to_dict(), path)  # what is written reads back
    block = decoding.to_dict()
    if block:
        meta["decoding"] = block
    else:
        meta.pop("decoding", None)
    write_json(path, meta)
    return path
