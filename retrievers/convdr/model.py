"""The ConvDR student: a query encoder that reads the conversation, tied to a frozen teacher.

The teacher is any dual encoder (`DualEncoder.from_pretrained` id, path or alias, e.g.
"all-MiniLM-L6-v2" or "convqa-dpr-ihn"; LoRA adapters are merged). The student's query tower
starts as a copy of the teacher's query tower and is the only part ever trained; the student's
passage side IS the teacher's passage tower, so the passage index the teacher built is searched
unchanged and never re-encoded. Pooling and normalisation are the teacher's.

A saved folder holds `convqa_convdr.json` (format, the teacher's name and fingerprint, the
student's settings and fingerprint) and the student tower only: a plain Hugging Face checkpoint
(safetensors + tokenizer), or, for a LoRA student, just the peft adapter over the teacher's
query tower. The teacher's weights are never copied; loading finds the teacher by its recorded
name (or one passed in) and refuses one whose fingerprint differs from the recorded one.
"""
from __future__ import annotations

import copy
import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Sequence

import torch
from torch import Tensor

from convqa.errors import ConfigError, ConvQAError, DataError
from convqa.model_base import ModelBase
from convqa.models import DEFAULT_MODEL, shipped_model_path
from convqa.towers import attach_adapter, save_tower
from retrievers.dense.model import DualEncoder, DualEncoderConfig

META_FILE = "convqa_convdr.json"
FORMAT = "convqa-convdr"
VERSION = 1
DEFAULT_QUERY_MAX_LENGTH = 258  # ConvDR's 256-token questions-only history + [CLS] [SEP]


@dataclass
class ConvDRConfig:
    teacher: str = DEFAULT_MODEL                     # id, path or alias of the teacher
    query_max_length: int = DEFAULT_QUERY_MAX_LENGTH  # student input, special tokens included

    def __post_init__(self) -> None:
        if not isinstance(self.teacher, str) or not self.teacher:
            raise ConfigError("convdr: teacher must be a model id, path or alias")
        value = self.query_max_length
        if isinstance(value, bool) or not isinstance(value, int) or value < 4:
            raise ConfigError(f"convdr: query_max_length must be an int >= 4, got {value!r}")


def teacher_name(teacher: str | os.PathLike | DualEncoder) -> str:
    """How to find a teacher again: our aliases and hub ids as given, local folders absolute."""
    name = str(teacher.source or teacher.config.model) if isinstance(teacher, DualEncoder) \
        else str(teacher)
    if shipped_model_path(name) is None and Path(name).is_dir():
        return str(Path(name).resolve())
    return name


def load_teacher(teacher: str | os.PathLike | DualEncoder) -> DualEncoder:
    """The teacher as given, or loaded with merged adapters (as `convqa index --dense` does, so
    its fingerprint is the one its index records)."""
    if isinstance(teacher, DualEncoder):
        return teacher
    from retrievers.dense.build import load_encoder

    return load_encoder(teacher)


class ConvDR(ModelBase):
    """Student query tower (`query_encoder`, trainable) plus the frozen `teacher`.

    `encode_query` / `forward` run the student on conversation text; `encode_teacher_query` runs
    the teacher's query tower (on rewrites); `encode_passage` is the teacher's passage tower."""

    META_FILE, FORMAT, VERSION = META_FILE, FORMAT, VERSION
    CONFIG, KIND, NOUN = ConvDRConfig, "ConvDR model", "ConvDR student"
    TOWERS = ("query_encoder",)  # the student: only it is trained, adapted and saved

    def __init__(self, config: ConvDRConfig, teacher: DualEncoder,
                 query_encoder: torch.nn.Module | None = None,
                 teacher_fingerprint: str | None = None):
        super().__init__()
        self.config = config
        self.teacher = teacher
        for parameter in teacher.parameters():
            parameter.requires_grad_(False)
        teacher.eval()
        if query_encoder is None:  # the student starts as the teacher
            query_encoder = copy.deepcopy(teacher.query_encoder)
            for parameter in query_encoder.parameters():
                parameter.requires_grad_(True)
        self.query_encoder = query_encoder
        self._teacher_fingerprint = teacher_fingerprint
        self.source: str | None = None
        self.teacher_source = teacher_name(teacher)

    # -- construction ---------------------------------------------------------------------
    @classmethod
    def build(cls, teacher: str | os.PathLike | DualEncoder = DEFAULT_MODEL,
              query_max_length: int = DEFAULT_QUERY_MAX_LENGTH) -> "ConvDR":
        """A fresh student, initialised from `teacher`'s query tower."""
        encoder = load_teacher(teacher)
        return cls(ConvDRConfig(teacher_name(teacher), query_max_length), encoder)

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike,
                        teacher: str | os.PathLike | DualEncoder | None = None) -> "ConvDR":
        """A folder written by `save_pretrained`. `teacher` overrides the recorded teacher name
        (e.g. after moving it); either way its fingerprint must be the recorded one."""
        return super().from_pretrained(path, teacher=teacher)

    @classmethod
    def _from_folder(cls, folder: Path, meta: dict, config: ConvDRConfig, name: str,
                     teacher: str | os.PathLike | DualEncoder | None = None) -> "ConvDR":
        meta_path = folder / META_FILE
        recorded = meta.get("teacher_fingerprint")
        if not isinstance(recorded, str) or not recorded:
            raise DataError("missing", meta_path, None, "teacher_fingerprint")
        encoder = load_teacher(teacher if teacher is not None else config.teacher)
        found = encoder.fingerprint()
        if found != recorded:
            raise ConvQAError(
                f"{folder}: the student was distilled from teacher {config.teacher!r} "
                f"(fingerprint {recorded}), but the teacher loaded from "
                f"{teacher_name(teacher if teacher is not None else config.teacher)!r} has "
                f"fingerprint {found}; pass the original teacher")
        if meta.get("adapter"):
            student = attach_adapter(copy.deepcopy(encoder.query_encoder), folder,
                                     "the teacher's query tower")
        else:
            student = DualEncoder.build(DualEncoderConfig(model=str(folder))).query_encoder
        model = cls(config, encoder, student, teacher_fingerprint=found)
        if model.dim != encoder.dim:
            raise DataError(f"student is {model.dim}-d, teacher {encoder.dim}-d", folder)
        model.source = str(folder)
        return model

    # -- properties -----------------------------------------------------------------------
    @property
    def teacher_fingerprint(self) -> str:
        """The teacher's fingerprint: what its passage index records (computed once)."""
        if self._teacher_fingerprint is None:
            self._teacher_fingerprint = self.teacher.fingerprint()
        return self._teacher_fingerprint

    @property
    def dim(self) -> int:
        return int(self.query_encoder.config.hidden_size)

    @property
    def normalize(self) -> bool:
        return bool(self.teacher.config.normalize)

    @property
    def query_tokenizer(self):
        return self.teacher.query_tokenizer

    @property
    def passage_tokenizer(self):
        return self.teacher.passage_tokenizer

    def train(self, mode: bool = True) -> "ConvDR":
        """Only the student changes mode: the teacher stays in eval (no dropout), always."""
        super().train(mode)
        self.teacher.eval()
        return self

    # -- views as dual encoders -----------------------------------------------------------
    def as_dual_encoder(self) -> DualEncoder:
        """The retrieval model: student query tower + teacher passage tower (shared modules,
        nothing copied). Anything that takes a DualEncoder (query encoding, fast-path checks)
        takes this."""
        return self._view(self.query_encoder, self.source)

    def zero_shot_encoder(self) -> DualEncoder:
        """The untrained student: the teacher's query tower reading the conversation, with the
        student's input length (the fidelity baseline)."""
        return self._view(self.teacher.query_encoder, self.teacher_source)

    def _view(self, query_tower: torch.nn.Module, source: str | None) -> DualEncoder:
        config = replace(self.teacher.config, query_max_length=self.config.query_max_length)
        view = DualEncoder(config, query_tower, self.teacher.query_tokenizer,
                           self.teacher.passage_encoder, self.teacher.passage_tokenizer)
        view.source = source
        return view

    # -- encoding -------------------------------------------------------------------------
    def tokenize_queries(self, texts: Sequence[str], padding: bool = True) -> dict:
        """Student inputs (conversation texts), cut at `config.query_max_length` tokens."""
        return self.as_dual_encoder().tokenize_queries(texts, padding)

    def encode_query(self, batch: dict[str, Tensor]) -> Tensor:
        return self.as_dual_encoder().encode_query(batch)

    def forward(self, queries: dict[str, Tensor]) -> Tensor:
        """The student's embeddings (what DDP wraps in training)."""
        return self.encode_query(queries)

    def tokenize_teacher_queries(self, texts: Sequence[str], padding: bool = True) -> dict:
        return self.teacher.tokenize_queries(texts, padding)

    def encode_teacher_query(self, batch: dict[str, Tensor]) -> Tensor:
        with torch.no_grad():
            return self.teacher.encode_query(batch)

    def tokenize_passages(self, passages, padding: bool = True) -> dict:
        return self.teacher.tokenize_passages(passages, padding)

    def encode_passage(self, batch: dict[str, Tensor]) -> Tensor:
        with torch.no_grad():
            return self.teacher.encode_passage(batch)

    # -- identity -------------------------------------------------------------------------
    def fingerprint(self) -> str:
        """The retrieval model's fingerprint: student query tower (LoRA deltas included) with
        the teacher's passage tower and settings (see `DualEncoder.fingerprint`)."""
        return self.as_dual_encoder().fingerprint()

    # -- saving ---------------------------------------------------------------------------
    def _save_files(self, folder: Path, adapter_only: bool, meta: dict) -> None:
        """The student tower only: the teacher's weights are never copied."""
        save_tower(self.query_encoder, folder, adapter_only,
                   f"convdr-teacher:{self.config.teacher}", self.query_tokenizer)

    def _meta(self, adapter_only: bool) -> dict:
        return {"config": asdict(self.config), "teacher_fingerprint": self.teacher_fingerprint,
                "teacher_config": asdict(self.teacher.config), "adapter": adapter_only,
                "dim": self.dim, "fingerprint": self.fingerprint()}
