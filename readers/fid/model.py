"""Fusion-in-Decoder (Izacard & Grave, 2021) over any Hugging Face seq2seq checkpoint of the T5
family (T5, mT5, Flan-T5: `AutoModelForSeq2SeqLM`, safetensors, no remote code).

Each (question, passage) pair is encoded on its own, [B, n, L] -> [B*n, L], so the encoder's cost
grows linearly with the number of passages; the encoder outputs are then laid end to end,
[B, n*L, h], with their attention masks, and the decoder cross-attends over all of them at once:
that is where evidence from several passages is combined. The underlying model is never
modified (the fused states are handed to it as `encoder_outputs`), so saved folders are plain
seq2seq checkpoints that Hugging Face tools read, plus `convqa_fid.json`.

The conversational question is formatted by a history strategy (convqa.history) that counts
tokens with the reader's own tokenizer; the default is `current_first` (q_t first, then the most
recent history, never cutting q_t) with " [SEP] " between utterances, since T5 has no sep token.
`passage_max_length` bounds each whole input "question: ... title: ... context: ...", special
tokens included (the passage is what gets cut).

Saved folders (`save_pretrained`, atomic, safetensors only) hold full weights and the tokenizer,
or, for a model with LoRA adapters, only the peft adapters over the base checkpoint named in the
config. `fingerprint()` hashes everything the generated answers depend on.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Sequence

import torch
from torch import Tensor

from convqa.errors import ConfigError, ConvQAError
from convqa.model_base import ModelBase
from convqa.models import resolve_model
from convqa.registry import HISTORY_STRATEGIES
from convqa.types import Passage, Turn
from convqa.towers import (attach_adapter, effective_state, hash_state, is_peft,
                           load_encoder_tokenizer, save_tower)

from .data import check_template, collate, special_token_id

META_FILE = "convqa_fid.json"
FORMAT = "convqa-fid"
VERSION = 1
DEFAULT_MODEL = "google/flan-t5-base"
DEFAULT_TEMPLATE = "question: {question} title: {title} context: {text}"
DEFAULT_HISTORY: dict[str, Any] = {"name": "current_first", "separator": " [SEP] "}


@dataclass
class FiDConfig:
    model: str = DEFAULT_MODEL             # hub id or local path of the seq2seq checkpoint
    template: str = DEFAULT_TEMPLATE       # one encoder input per (question, passage) pair
    passage_max_length: int = 256          # tokens of each whole input, special tokens included
    n_passages: int = 10                   # passages read per question (the first n retrieved)
    answer_max_length: int = 32            # training targets, eos included
    max_new_tokens: int = 32               # generation
    num_beams: int = 1                     # 1 = greedy
    history: dict[str, Any] | str = field(default_factory=lambda: dict(DEFAULT_HISTORY))

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model:
            raise ValueError("model must be a non-empty hub id or path")
        check_template(self.template)
        for name, least in (("passage_max_length", 8), ("n_passages", 1),
                            ("answer_max_length", 2), ("max_new_tokens", 1), ("num_beams", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"{name} must be an int >= {least}, got {value!r}")
        if isinstance(self.history, str):
            self.history = {"name": self.history}
        if not isinstance(self.history, dict) or not isinstance(self.history.get("name"), str):
            raise ValueError(f"history must be a strategy name or {{name: ..., option: ...}}, "
                             f"got {self.history!r}")
        if "tokenizer" in self.history:
            raise ValueError("history: no 'tokenizer' option (the FiD reader counts history "
                             "tokens with its own tokenizer)")

    def answer_settings(self) -> dict[str, Any]:
        """The settings generated answers depend on (not the model's name, not training-only
        settings such as `answer_max_length`)."""
        return {"template": self.template, "passage_max_length": self.passage_max_length,
                "n_passages": self.n_passages, "max_new_tokens": self.max_new_tokens,
                "num_beams": self.num_beams, "history": self.history}


def _load_seq2seq(name_or_path: str) -> torch.nn.Module:
    from transformers import AutoModelForSeq2SeqLM

    try:
        return AutoModelForSeq2SeqLM.from_pretrained(
            resolve_model(name_or_path), dtype=torch.float32, use_safetensors=True,
            trust_remote_code=False)
    except (OSError, ValueError) as exc:
        raise ConvQAError(f"cannot load seq2seq model {name_or_path!r} (a T5-family checkpoint "
                          f"with safetensors weights is needed): {str(exc).splitlines()[0]}"
                          ) from None


def make_history(spec: dict[str, Any], tokenizer: Any, model_name: str):
    """The configured history strategy, counting tokens with `tokenizer`."""
    options = {k: v for k, v in spec.items() if k != "name"}
    options["tokenizer"] = model_name  # provenance only: the tokenizer object is passed in
    name = spec["name"]
    config = HISTORY_STRATEGIES.make_config(name, options)
    return HISTORY_STRATEGIES.entry(name).cls(config, tokenizer=tokenizer)


class FiDReader(ModelBase):
    """A seq2seq model read Fusion-in-Decoder style. `forward` returns the training loss;
    `generate` answers. Build from a checkpoint with `build(config)`, load a saved folder (or a
    plain seq2seq checkpoint, or a peft LoRA adapter folder) with `from_pretrained(path)`."""

    META_FILE, FORMAT, VERSION = META_FILE, FORMAT, VERSION
    CONFIG, KIND, NOUN = FiDConfig, "convqa FiD reader", "FiD reader"
    TOWERS = ("seq2seq",)
    LORA_TASK_TYPE = "SEQ_2_SEQ_LM"

    def __init__(self, config: FiDConfig, seq2seq: torch.nn.Module, tokenizer: Any):
        super().__init__()
        model_config = seq2seq.config
        if not getattr(model_config, "is_encoder_decoder", False):
            raise ConfigError(f"{config.model!r} is not an encoder-decoder model")
        if getattr(model_config, "decoder_start_token_id", None) is None:
            raise ConfigError(f"{config.model!r}: the model config has no decoder_start_token_id")
        special_token_id(tokenizer, "pad")
        special_token_id(tokenizer, "eos")
        self.config = config
        self.seq2seq = seq2seq
        self.tokenizer = tokenizer
        try:
            self.history = make_history(config.history, tokenizer, config.model)
        except ConvQAError as exc:
            raise ConfigError(f"FiD history: {exc}") from None
        self.source: str | None = None  # the folder or id this model was loaded from

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def build(cls, config: FiDConfig) -> "FiDReader":
        """From a pretrained seq2seq checkpoint `config.model`."""
        model = cls(config, _load_seq2seq(config.model), load_encoder_tokenizer(config.model))
        model.source = config.model
        return model

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, **overrides: Any) -> "FiDReader":
        """A folder written by `save_pretrained` (full or adapter), a peft LoRA adapter folder
        over a seq2seq checkpoint, or any plain seq2seq checkpoint id/path (default settings).
        `overrides` replace saved settings (e.g. `n_passages=20`); `model` cannot be replaced."""
        if "model" in overrides:
            raise ConfigError("from_pretrained: the model comes from the path, not an override")
        return super().from_pretrained(path, **overrides)

    @classmethod
    def _from_checkpoint(cls, name: str, folder: Path, **overrides: Any) -> "FiDReader":
        return cls._checkpoint_or_adapter(name, folder, **overrides)

    @classmethod
    def _build_from(cls, checkpoint: str, **overrides: Any) -> "FiDReader":
        return cls.build(_config(FiDConfig(model=checkpoint), overrides))

    @classmethod
    def _from_folder(cls, folder: Path, meta: dict, config: FiDConfig, name: str,
                     **overrides: Any) -> "FiDReader":
        config = _config(config, overrides)
        if meta.get("adapter"):
            model = cls.build(config)
            model.seq2seq = attach_adapter(model.seq2seq, folder)
        else:
            model = cls(config, _load_seq2seq(str(folder)), load_encoder_tokenizer(str(folder)))
        model.source = name
        return model

    # -- properties ---------------------------------------------------------------------------
    @property
    def core(self) -> torch.nn.Module:
        """The seq2seq model that computes (peft injects LoRA into its layers in place)."""
        return self.seq2seq.get_base_model() if is_peft(self.seq2seq) else self.seq2seq

    def gradient_checkpointing(self, enabled: bool = True) -> "FiDReader":
        """Recompute activations in the backward pass (less memory, ~30% more time); the
        non-reentrant variant, which works under DDP and with frozen LoRA base weights."""
        core = self.core
        kwargs = {"use_reentrant": False}
        if hasattr(core, "activation_checkpointing_enable"):  # transformers >= 5.x naming
            if enabled:
                core.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
            else:
                core.activation_checkpointing_disable()
        elif enabled:
            core.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
        else:
            core.gradient_checkpointing_disable()
        return self

    # -- inputs -------------------------------------------------------------------------------
    def format_question(self, question: str, history: Sequence[Turn] = ()) -> str:
        """The question as the reader reads it: the conversation formatted by the strategy."""
        return self.history.format(question, list(history))

    def tokenize(self, questions: Sequence[str], passages: Sequence[Sequence[Passage]],
                 answers: Sequence[str] | None = None) -> dict[str, Tensor]:
        """Tensors for already formatted `questions` (see data.collate)."""
        c = self.config
        return collate(self.tokenizer, c.template, questions, passages, c.n_passages,
                       c.passage_max_length, answers, c.answer_max_length)

    # -- computation --------------------------------------------------------------------------
    def encode(self, input_ids: Tensor, attention_mask: Tensor,
               passage_mask: Tensor | None = None) -> tuple[Any, Tensor]:
        """Encode every passage on its own and fuse: ([B, n*L, h] encoder output, [B, n*L]
        mask over real tokens of real passages)."""
        from transformers.modeling_outputs import BaseModelOutput

        if input_ids.dim() != 3 or input_ids.shape != attention_mask.shape:
            raise ValueError(f"expected input_ids and attention_mask of shape [B, n, L], got "
                             f"{tuple(input_ids.shape)} and {tuple(attention_mask.shape)}")
        device = self.device
        batch, n, length = input_ids.shape
        hidden = self.core.get_encoder()(
            input_ids=input_ids.to(device).reshape(batch * n, length),
            attention_mask=attention_mask.to(device).reshape(batch * n, length),
        ).last_hidden_state
        fused = hidden.reshape(batch, n * length, hidden.shape[-1])
        mask = attention_mask.to(device)
        if passage_mask is not None:
            mask = mask * passage_mask.to(device)[..., None].to(mask.dtype)
        return BaseModelOutput(last_hidden_state=fused), mask.reshape(batch, n * length)

    def forward(self, input_ids: Tensor, attention_mask: Tensor, labels: Tensor,
                passage_mask: Tensor | None = None) -> Tensor:
        """Mean token cross-entropy of `labels` ([B, T], -100 = ignored) given the passages."""
        encoded, mask = self.encode(input_ids, attention_mask, passage_mask)
        output = self.core(encoder_outputs=encoded, attention_mask=mask,
                           labels=labels.to(self.device), use_cache=False)
        return output.loss

    @torch.no_grad()
    def generate(self, questions: Sequence[str], passages_per_question: Sequence[Sequence[Passage]],
                 batch_size: int = 8) -> list[str]:
        """Answers for formatted `questions`, each reading its ranked passages."""
        return [text for text, _ in self.generate_scored(questions, passages_per_question,
                                                         batch_size)]

    @torch.no_grad()
    def generate_scored(self, questions: Sequence[str],
                        passages_per_question: Sequence[Sequence[Passage]],
                        batch_size: int = 8) -> list[tuple[str, float]]:
        """(answer, mean log-probability per generated token, eos included) per question."""
        if len(questions) != len(passages_per_question):
            raise ValueError(f"{len(questions)} questions but {len(passages_per_question)} "
                             "passage lists")
        was_training = self.training
        self.eval()
        results: list[tuple[str, float]] = []
        try:
            for start in range(0, len(questions), batch_size):
                batch = self.tokenize(questions[start:start + batch_size],
                                      passages_per_question[start:start + batch_size])
                results.extend(self._generate_batch(batch))
        finally:
            self.train(was_training)
        return results

    def _generate_batch(self, batch: dict[str, Tensor]) -> list[tuple[str, float]]:
        encoded, mask = self.encode(batch["input_ids"], batch["attention_mask"],
                                    batch["passage_mask"])
        c = self.config
        # generate() expands its encoder_outputs for beam search in place: give it a copy
        sequences = self.core.generate(
            encoder_outputs=type(encoded)(last_hidden_state=encoded.last_hidden_state),
            attention_mask=mask, max_new_tokens=c.max_new_tokens,
            num_beams=c.num_beams, num_return_sequences=1, do_sample=False)
        scores = self._sequence_scores(encoded, mask, sequences)
        texts = self.tokenizer.batch_decode(sequences, skip_special_tokens=True)
        return [(text.strip(), score) for text, score in zip(texts, scores)]

    def _sequence_scores(self, encoded, mask: Tensor, sequences: Tensor) -> list[float]:
        """Rescore the generated tokens with one teacher-forced pass (the same numbers for
        greedy and beam search): mean log-probability up to and including the first eos."""
        eos = special_token_id(self.tokenizer, "eos")
        targets = sequences[:, 1:]  # sequences start with the decoder start token
        if targets.shape[1] == 0:
            return [0.0] * sequences.shape[0]
        logits = self.core(encoder_outputs=encoded, attention_mask=mask,
                           decoder_input_ids=sequences[:, :-1], use_cache=False).logits
        logprobs = torch.log_softmax(logits.float(), dim=-1).gather(
            -1, targets.unsqueeze(-1)).squeeze(-1)
        is_eos = (targets == eos).int()
        before_eos = (torch.cumsum(is_eos, dim=1) - is_eos) == 0  # up to the first eos
        total = (logprobs * before_eos).sum(1)
        return (total / before_eos.sum(1).clamp(min=1)).tolist()

    # -- identity -----------------------------------------------------------------------------
    def fingerprint_settings(self) -> dict:
        """The answer settings (template, lengths, number of passages, generation, history
        strategy) and the decoder start token; not names or paths."""
        settings = self.config.answer_settings()
        settings["decoder_start_token_id"] = self.core.config.decoder_start_token_id
        return settings

    def hash_weights(self, digest) -> None:
        """Every weight (LoRA deltas included, as fp32), the tokenizer's vocabulary and
        special tokens."""
        hash_state(digest, effective_state(self.seq2seq))
        tok = self.tokenizer
        digest.update(json.dumps([sorted(tok.get_vocab().items()), tok.pad_token,
                                  tok.eos_token, tok.unk_token]).encode())

    # -- LoRA ---------------------------------------------------------------------------------
    def _lora_targets(self, tower: torch.nn.Module) -> None:
        """peft's default for the architecture (T5: q and v)."""
        return None

    def train_adapters(self) -> "FiDReader":
        """Make loaded LoRA adapters trainable again (they load frozen), the base stays frozen:
        to continue training an adapter folder."""
        if not self.has_adapters:
            raise ConvQAError("this FiD reader has no LoRA adapters")
        for name, parameter in self.seq2seq.named_parameters():
            parameter.requires_grad = ".lora_" in name
        return self

    # -- saving -------------------------------------------------------------------------------
    def _save_files(self, folder: Path, adapter_only: bool, meta: dict) -> None:
        save_tower(self.seq2seq, folder, adapter_only, self.config.model, self.tokenizer)

    def _meta(self, adapter_only: bool) -> dict:
        return {"config": asdict(self.config), "adapter": adapter_only,
                "fingerprint": self.fingerprint()}


def _config(config: FiDConfig, overrides: dict[str, Any]) -> FiDConfig:
    if not overrides:
        return config
    known = {f.name for f in fields(FiDConfig)} - {"model"}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ConfigError(f"unknown FiD option '{unknown[0]}' "
                          f"(options: {', '.join(sorted(known))})")
    try:
        return replace(config, **overrides)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"FiD options: {exc}") from None
