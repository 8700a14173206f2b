"""The FiD reader as a pipeline component: `READERS.build({"name": "fid", "model": PATH})`.

`read(question, history_turns, passages)` formats the conversation with the reader's history
strategy, reads the first `n_passages` passages and generates the answer. Its score is the mean
log-probability per generated token (eos included), so it is <= 0 and comparable between
answers of different lengths.

Evidence (a generative answer need not be a span, so this is a choice, documented here):
1. the first passage, in retrieval order, where the answer occurs as whole words (case-
   insensitive, any whitespace between words): `start`/`end` are its character offsets there
   (the span is the passage's own casing and spacing of the answer);
2. else the first passage whose SQuAD-normalized text contains the normalized answer as whole
   tokens (articles and punctuation ignored: "away from Sun" in "...away from the Sun."):
   no offsets;
3. else the top passage, without offsets (the answer is not in any passage; it may still be
   right, FiD can paraphrase or combine).
Cross-attention scores were not used: they need eager attention, which the default sdpa
kernels do not return, and the string rule is exact when the answer is extractive (TopiOCQA's
answers mostly are).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from convqa.errors import ConfigError
from convqa.metrics.answer import normalize_answer
from convqa.precision import (MeasuredPrecision, PrecisionOnFirstUse, autocast,
                              choose_precision, normalize_precision, prepare)
from convqa.registry import READERS
from convqa.types import Answer, Passage, Turn


@dataclass
class FiDReadConfig:
    model: str                       # a trained FiD folder (or any seq2seq checkpoint)
    n_passages: int | None = None    # None: as saved with the model
    num_beams: int | None = None
    max_new_tokens: int | None = None
    device: str | None = None        # None: cuda if available, else cpu
    precision: str = "auto"          # auto (measured on the first read) | fp32 | bf16 | int8

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model:
            raise ValueError("model must be a trained FiD folder or a seq2seq checkpoint")
        self.precision = normalize_precision(self.precision, "fid reader precision")
        for name in ("n_passages", "num_beams", "max_new_tokens"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 1):
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")

    def overrides(self) -> dict:
        return {name: getattr(self, name) for name in ("n_passages", "num_beams",
                                                        "max_new_tokens")
                if getattr(self, name) is not None}


@READERS.register("fid", config=FiDReadConfig)
class FiDAnswerReader(MeasuredPrecision):
    """Answers one question at a time with a FiDReader (see the module docstring)."""

    def __init__(self, config: FiDReadConfig, reader=None):
        """`reader` (a FiDReader) is used as is instead of loading `config.model`."""
        import torch

        from .model import FiDReader

        self.config = config
        if reader is None:
            reader = FiDReader.from_pretrained(config.model, **config.overrides())
        elif config.overrides():
            raise ConfigError("give settings to the FiDReader itself when passing one in")
        device = config.device or ("cuda" if torch.cuda.is_available() else "cpu")
        try:
            self.reader = reader.to(device).eval()
        except (RuntimeError, AssertionError) as exc:
            raise ConfigError(f"fid reader: cannot use device {device!r}: "
                              f"{str(exc).splitlines()[0]}") from None
        self._precision = PrecisionOnFirstUse(config.precision)

    def read(self, question: str, history_turns: Sequence[Turn],
             passages: Sequence[Passage]) -> Answer:
        query = self.reader.format_question(question, list(history_turns))
        passages = list(passages)[:self.reader.config.n_passages]

        def generate(precision: str) -> list[tuple[str, float]]:
            with autocast(precision, self.reader.device):
                return prepare(self.reader, precision).generate_scored([query], [passages])

        # auto: the candidates must generate the very same answer
        precision = self._precision.resolve(lambda: choose_precision(
            generate, lambda ref, out: float(ref[0][0] == out[0][0]), threshold=1.0,
            what="fid reader", device=self.reader.device, remember=self.reader.fingerprint()))
        [(text, score)] = generate(precision)
        return locate_answer(text, score, passages)

    def fingerprint(self) -> str:
        return self.reader.fingerprint()


def locate_answer(text: str, score: float, passages: Sequence[Passage]) -> Answer:
    """The Answer with its evidence passage and offsets, by the rules of the module docstring."""
    if not passages:
        return Answer(text, score)
    words = text.split()
    if words:
        pattern = re.compile(r"(?<!\w)" + r"\s+".join(re.escape(w) for w in words) + r"(?!\w)",
                             re.IGNORECASE)
        for passage in passages:
            match = pattern.search(passage.text)
            if match:
                return Answer(text, score, passage.id, match.start(), match.end(), passage)
    normalized = normalize_answer(text)
    if normalized:
        for passage in passages:
            if f" {normalized} " in f" {normalize_answer(passage.text)} ":
                return Answer(text, score, passage.id, evidence=passage)
    top = passages[0]
    return Answer(text, score, top.id, evidence=top)
