"""Dumping a passage corpus into phrase-vector shards: filtered, quantized, resumable, parallel.

Every text token of every passage gets a start and an end vector from the phrase model; only
tokens whose start (end) filter logit passes `start_threshold` (`end_threshold`) are kept on
that side (None, the default, keeps every candidate, as `convqa index --phrase` does), or,
with `keep_fraction`, thresholds set from a sample of passages so that about that fraction of
the candidates is kept (a filter's logit scale depends on its training; a fraction does not).
Candidates are text tokens that begin (start side) or finish (end side) a word: title and
special tokens never bound an answer in the text, nor does the inside of a word.

The corpus is cut into fixed ranges of `shard_size` passages, as in retrievers/dense/encode.py
(both run convqa/corpus/shards.py): `manifest.json` is written first (model
fingerprint, corpus checksum, dtype, thresholds, a size estimate), each shard is written
atomically (see `phrase_index.vectors`), a rerun skips every finished shard, and under
`accelerate launch` shard i is encoded by process i % N. A killed run loses at most the shards
in progress.

Before encoding starts the size is estimated from a sample of passages (kept tokens per passage
x bytes per vector x passages) and printed, so a run that would not fit is stopped early.

Passages longer than the model's `max_passage_tokens` are cut (their tail is not indexed); the
manifest counts them.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from convqa.corpus import PassageStore
from convqa.corpus.shards import (MANIFEST, CorpusRows, ShardedFolder, ShardProcesses,
                                  check_resumable, eval_mode, shard_done)
from convqa.errors import ConfigError, ConvQAError, DataError
from convqa.io import write_json
from convqa.types import Passage
from convqa.precision import (AUTO, FP32, VECTOR_AGREEMENT, autocast, check_resumed_precision,
                              choose_precision, min_cosine, normalize_precision, prepare)

from .vectors import (DTYPES, SIDES, DumpSide, Shard, pack_shard, read_shard, shard_dir_name,
                      write_shard)

FORMAT = "convqa-phrase-dump"
VERSION = 2             # 2: one token table per shard, sides refer to it (vectors.py)
POS_BYTES = 16          # (row, token, char start, char end) as int32
INT8_EXTRA_BYTES = 8    # scale + offset, float32 each
REF_BYTES = 6           # a side's int32 reference into the token table + float16 filter logit
_HEADER_FIELDS = ("fingerprint", "dim", "count", "corpus_checksum", "shard_size", "dtype",
                  "keep_fraction")
_THRESHOLDS = ("start_threshold", "end_threshold")

log = logging.getLogger(__name__)


def bytes_per_vector(dim: int, dtype: str) -> int:
    """Dump bytes of one token-table row (vector, quantization constants, position); each side
    that keeps the token adds `REF_BYTES`."""
    if dtype not in DTYPES:
        raise ConfigError(f"phrase vector dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    return (2 * dim if dtype == "float16" else dim + INT8_EXTRA_BYTES) + POS_BYTES


@dataclass
class DumpEstimate:
    """Sizes predicted from a sample of passages (`sample` of them)."""

    sample: int
    text_tokens: float          # text tokens per passage
    start_kept: float           # start vectors kept per passage
    end_kept: float
    bytes_per_passage: float    # dump bytes (both sides)
    total_bytes: float          # dump bytes for the whole corpus
    flat_index_bytes: float     # what a FAISS Flat index of both sides would add (fp32)

    def describe(self, count: int, dtype: str, compact_bytes_per_token: int | None = None) -> str:
        """One line for the log. `compact_bytes_per_token`: the dump feeds a compact index
        (compact.py) of about that many bytes per kept token, estimated instead of the Flat
        FAISS index a dump-based index would add."""
        mb = 1024 * 1024
        if compact_bytes_per_token:
            tokens = max(self.start_kept, self.end_kept) * count
            then = (f"then a compact index of ~{tokens * compact_bytes_per_token / mb:,.0f} MiB "
                    f"if every token is kept; a keep fraction shrinks it")
        else:
            then = f"+ {self.flat_index_bytes / mb:,.0f} MiB for a Flat FAISS index"
        return (f"phrase dump estimate (from {self.sample} passages): {self.text_tokens:.0f} text "
                f"tokens/passage, keeping {self.start_kept:.1f} start + {self.end_kept:.1f} end "
                f"vectors ({dtype}): {self.bytes_per_passage / 1024:.1f} KiB/passage, "
                f"{self.total_bytes / mb:,.0f} MiB for {count:,} passages ({then})")


@dataclass
class DumpedPassage:
    """The kept vectors of one passage, per side: float32 vectors and (row, token, char start,
    char end) positions."""

    vectors: dict[str, np.ndarray]
    pos: dict[str, np.ndarray]
    logits: dict[str, np.ndarray]   # filter logits of the kept tokens
    text_tokens: int
    truncated: bool


class PhraseDump(ShardedFolder):
    """A finished (or partial) dump folder: the manifest and the two sides, memory-mapped."""

    FORMAT = FORMAT
    VERSION = VERSION
    WHAT = "a phrase dump"
    KIND = "phrase dump"
    JOB = "the phrase dump"

    def __init__(self, folder: Path, manifest: dict[str, Any]):
        super().__init__(folder, manifest)
        self._sides: dict[str, DumpSide] | None = None
        self._shards: list[Shard] = []

    def shard(self, start: int, end: int) -> Shard:
        return read_shard(self.folder, start, end, self.dim, self.dtype)

    def side(self, name: str) -> DumpSide:
        """The start or end vectors of every shard, seen as one array (memory-mapped)."""
        if name not in SIDES:
            raise ValueError(f"side must be one of {SIDES}, got {name!r}")
        if self._sides is None:
            shards = [self.shard(s, e) for s, e in self.ranges()]
            self._shards = shards
            self._sides = {side: DumpSide([sh.sides[side] for sh in shards], self.ranges())
                           for side in SIDES}
        return self._sides[name]

    def nbytes(self) -> int:
        """Bytes of every array of the dump (token tables, side references, pointers)."""
        self.side(SIDES[0])
        return sum(shard.nbytes() for shard in self._shards)


# -- encoding -----------------------------------------------------------------------------
def encode_dump_batch(model, passages: Sequence[Passage], row0: int, batch_size: int = 16,
                      precision: str = FP32, start_threshold: float | None = None,
                      end_threshold: float | None = None, bar=None) -> list[DumpedPassage]:
    """The kept phrase vectors of `passages` (global rows `row0`, `row0 + 1`, ...), in input
    order. Batches are length-sorted (less padding; the vectors do not depend on it)."""
    if not passages:
        return []
    encoding = model.tokenize_passages([p.title for p in passages], [p.text for p in passages])
    ids, mask = encoding["input_ids"], encoding["attention_mask"]
    offsets, text = encoding["offset_mapping"], encoding["phrase_mask"]
    eligible = word_boundaries(encoding, text)
    lengths = mask.sum(1)
    order = torch.argsort(lengths, descending=True, stable=True).tolist()
    out: list[DumpedPassage | None] = [None] * len(passages)
    thresholds = {"start": start_threshold, "end": end_threshold}
    runner = prepare(model, precision)
    with torch.inference_mode(), autocast(precision, model.device):
        for begin in range(0, len(order), batch_size):
            rows = order[begin:begin + batch_size]
            width = int(lengths[rows].max())
            vectors = runner.encode_passages(ids[rows, :width], mask[rows, :width])
            sides = {"start": (vectors.start, vectors.start_filter),
                     "end": (vectors.end, vectors.end_filter)}
            for b, k in enumerate(rows):
                masks = {side: eligible[side][k, :width] for side in SIDES}
                out[k] = _kept(passages[k], row0 + k, sides, b, masks, text[k, :width],
                               offsets[k, :width], thresholds)
            if bar is not None:
                bar.update(len(rows))
    return out  # type: ignore[return-value]


def word_boundaries(encoding, text: torch.Tensor) -> dict[str, torch.Tensor]:
    """Tokens that may start (end) a phrase: text tokens that begin (finish) a word. A phrase
    never starts or ends inside a word ("##ing"); without word ids (a slow tokenizer) every text
    token is allowed."""
    starts, ends = text.clone(), text.clone()
    if getattr(encoding, "encodings", None) is None:
        return {"start": starts, "end": ends}
    for row in range(text.shape[0]):
        words = encoding.word_ids(row)
        sequences = encoding.sequence_ids(row)
        keys = [(s, w) if w is not None else None for s, w in zip(sequences, words)]
        for t, key in enumerate(keys):
            if key is None:
                continue
            if t > 0 and keys[t - 1] == key:
                starts[row, t] = False
            if t + 1 < len(keys) and keys[t + 1] == key:
                ends[row, t] = False
    return {"start": starts, "end": ends}


def _kept(passage: Passage, row: int, sides, b: int, masks: dict[str, torch.Tensor],
          text_mask: torch.Tensor, offsets: torch.Tensor,
          thresholds: dict[str, float | None]) -> DumpedPassage:
    vectors, pos, kept_logits = {}, {}, {}
    text_tokens = int(text_mask.sum())
    for side, (vecs, logits) in sides.items():
        keep = masks[side]
        row_logits = logits[b].float().cpu()
        if thresholds[side] is not None:
            keep = keep & (row_logits > thresholds[side])
        tokens = torch.nonzero(keep).flatten()
        vectors[side] = vecs[b, tokens].float().cpu().numpy()
        kept_logits[side] = row_logits[tokens].numpy()
        chars = offsets[tokens].numpy()
        pos[side] = np.column_stack([np.full(len(tokens), row), tokens.numpy(), chars[:, 0],
                                     chars[:, 1]]).astype(np.int32)
    last = int(offsets[text_mask][-1, 1]) if text_tokens else 0
    truncated = last < len(passage.text.rstrip())
    return DumpedPassage(vectors, pos, kept_logits, text_tokens, truncated)


def _sample(model, corpus: CorpusRows, sample: int, batch_size: int,
            precision: str) -> list[DumpedPassage]:
    """`sample` passages spread evenly over the corpus, every word-boundary token kept."""
    return encode_dump_batch(model, corpus.spread(sample), 0, batch_size, precision, None, None)


def thresholds_for_fraction(sample: Sequence[DumpedPassage],
                            keep_fraction: float) -> dict[str, float | None]:
    """Per-side filter thresholds that keep about `keep_fraction` of the candidate tokens of
    `sample` (dumped with no threshold): the (1 - fraction) quantile of their logits. A filter's
    scale depends on how long it was trained, so a fraction carries over between models where a
    fixed logit does not. 1.0 keeps everything (None)."""
    if keep_fraction >= 1.0:
        return {side: None for side in SIDES}
    out: dict[str, float | None] = {}
    for side in SIDES:
        logits = np.concatenate([d.logits[side] for d in sample])
        out[side] = float(np.quantile(logits, 1.0 - keep_fraction)) if len(logits) else None
    return out


def _estimate(sample: Sequence[DumpedPassage], thresholds: dict[str, float | None], dim: int,
              dtype: str, count: int, shared: bool) -> DumpEstimate:
    """Sizes from a sample dumped with no threshold. `shared`: a token kept on both sides is
    one token-table row (the model's start and end vectors are the same)."""
    kept_tokens: dict[str, list[np.ndarray]] = {side: [] for side in SIDES}
    for d in sample:
        for side in SIDES:
            tokens = d.pos[side][:, 1]
            if thresholds[side] is not None:
                tokens = tokens[d.logits[side] > thresholds[side]]
            kept_tokens[side].append(tokens)
    kept = {side: float(np.mean([len(t) for t in kept_tokens[side]])) for side in SIDES}
    rows = float(np.mean([len(np.union1d(a, b)) if shared else len(a) + len(b)
                          for a, b in zip(kept_tokens["start"], kept_tokens["end"])]))
    per_passage = rows * bytes_per_vector(dim, dtype) + (kept["start"] + kept["end"]) * REF_BYTES
    return DumpEstimate(len(sample), float(np.mean([d.text_tokens for d in sample])),
                        kept["start"], kept["end"], per_passage, per_passage * count,
                        (kept["start"] + kept["end"]) * 4 * dim * count)


def _header(model, corpus: CorpusRows, shard_size: int, dtype: str, start_threshold: float | None,
            end_threshold: float | None, keep_fraction: float | None) -> dict[str, Any]:
    return {"format": FORMAT, "version": VERSION, "model": model.source,
            "fingerprint": model.fingerprint(), "dim": model.dim, "count": len(corpus),
            "corpus_checksum": corpus.checksum, "shard_size": shard_size, "dtype": dtype,
            "start_threshold": start_threshold, "end_threshold": end_threshold,
            "keep_fraction": keep_fraction, "max_passage_tokens": model.config.max_passage_tokens,
            "max_answer_tokens": model.config.max_answer_tokens, "word_boundaries": True}


def _check_resumable(old: dict[str, Any], new: dict[str, Any], folder: Path) -> None:
    # with a keep fraction the thresholds were derived from a sample: the folder's are kept
    fields = _HEADER_FIELDS + (_THRESHOLDS if new["keep_fraction"] is None else ())
    check_resumable(old, new, fields, folder, "a phrase dump")


def choose_dump_precision(model, passages: Sequence[Passage], batch_size: int,
                          requested: str = AUTO, **probe):
    """The precision to dump in: `requested`, or for `auto` the fastest candidate whose token
    vectors for `passages` (a probe sample) agree with fp32 (convqa/precision.py)."""
    encoding = model.tokenize_passages([p.title for p in passages], [p.text for p in passages])

    def tokens(precision: str) -> torch.Tensor:
        vectors = prepare(model, precision).encode_passages(encoding["input_ids"],
                                                            encoding["attention_mask"])
        return vectors.start[encoding["phrase_mask"]].float()

    return choose_precision(tokens, min_cosine, threshold=VECTOR_AGREEMENT,
                            what="phrase dump", device=model.device, requested=requested,
                            **probe)


def _check_options(dtype: str, shard_size: int, batch_size: int, thresholds,
                   keep_fraction: float | None) -> None:
    if dtype not in DTYPES:
        raise ConfigError(f"phrase vector dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    for name, value in (("shard_size", shard_size), ("batch_size", batch_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{name} must be a positive int, got {value!r}")
    for name, value in thresholds:
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not np.isfinite(value)):
            raise ConfigError(f"{name} must be a finite number or None (keep every token), "
                              f"got {value!r}")
    if keep_fraction is not None and (isinstance(keep_fraction, bool) or not isinstance(
            keep_fraction, (int, float)) or not 0 < keep_fraction <= 1):
        raise ConfigError(f"keep_fraction must be in (0, 1], got {keep_fraction!r}")


def dump_corpus(model, store_or_passages: PassageStore | Sequence[Passage],
                out_dir: str | os.PathLike, *, dtype: str = "float16",
                start_threshold: float | None = None, end_threshold: float | None = None,
                keep_fraction: float | None = None, batch_size: int = 16,
                shard_size: int = 512, precision: str = AUTO, accelerator=None,
                progress: bool = True, estimate_sample: int = 32,
                compact_bytes_per_token: int | None = None) -> PhraseDump:
    """Dump the kept phrase vectors of every passage into shards under `out_dir`; resume.

    `precision`: auto (a probe sample times fp32, bf16 and int8 and keeps the fastest whose
    vectors agree with fp32) or a fixed one; the choice is recorded and kept on resume. `keep_fraction` (instead of the thresholds) sets both
    thresholds from the size-estimate sample so that about that fraction of the candidate
    tokens is kept (`thresholds_for_fraction`); the manifest records the thresholds used. A
    rerun must use the same model, corpus, dtype, thresholds (or fraction) and shard size
    (else a one-line error). `compact_bytes_per_token`: the dump is for a compact index of
    that many bytes per kept token (only the printed estimate changes). Returns the finished
    dump."""
    precision = normalize_precision(precision)
    _check_options(dtype, shard_size, batch_size, (("start_threshold", start_threshold),
                                                   ("end_threshold", end_threshold)), keep_fraction)
    keep_fraction = None if keep_fraction is None else float(keep_fraction)
    if keep_fraction == 1.0:  # everything: the same dump as no thresholds, recorded the same
        keep_fraction = start_threshold = end_threshold = None
    start_threshold = None if start_threshold is None else float(start_threshold)
    end_threshold = None if end_threshold is None else float(end_threshold)
    corpus = CorpusRows(store_or_passages)
    if len(corpus) == 0:
        raise ConvQAError("cannot dump an empty corpus")
    processes = ShardProcesses(model, accelerator)
    folder = Path(out_dir)
    with eval_mode(model):
        if processes.main:
            _start(model, corpus, folder, dtype, start_threshold, end_threshold, keep_fraction,
                   batch_size, shard_size, precision, progress, estimate_sample,
                   compact_bytes_per_token)
        processes.barrier()
        dump = PhraseDump.open(folder, require_complete=False)
        precision = normalize_precision(dump.manifest["precision"], f"{folder}/{MANIFEST}")
        start_threshold = dump.manifest["start_threshold"]
        end_threshold = dump.manifest["end_threshold"]

        def work(start: int, end: int, bar) -> None:
            dumped = encode_dump_batch(model, corpus.rows(start, end), start, batch_size,
                                       precision, start_threshold, end_threshold, bar)
            _write(folder, start, end, dumped, dtype)

        count = processes.encode(dump.ranges(), lambda s, e: _valid(dump, s, e), work,
                                 f"phrase dump ({precision}, {dtype}, {processes.label})",
                                 progress)
        log.info("process %d/%d dumped %d shards", processes.rank, processes.world, count)
        processes.barrier()
        if processes.main:
            _finish(dump)
        processes.barrier()
    return PhraseDump.open(folder)


def _start(model, corpus: CorpusRows, folder: Path, dtype: str, start_threshold: float | None,
           end_threshold: float | None, keep_fraction: float | None, batch_size: int,
           shard_size: int, precision: str, progress: bool, estimate_sample: int,
           compact_bytes_per_token: int | None = None) -> None:
    """Main process: check (resume) or write the manifest, with the size estimate."""
    header = _header(model, corpus, shard_size, dtype, start_threshold, end_threshold,
                     keep_fraction)
    if (folder / MANIFEST).exists():
        old = PhraseDump.open(folder, require_complete=False).manifest
        _check_resumable(old, header, folder)
        check_resumed_precision(old.get("precision"), precision, folder, "dumped")
        for leftover in folder.glob(".shard-*.tmp"):
            shutil.rmtree(leftover, ignore_errors=True)
        if progress and not old.get("complete"):
            print(f"resuming the phrase dump in {folder}", file=sys.stderr)
        return
    if folder.exists() and any(folder.iterdir()):
        raise ConvQAError(f"{folder}: exists and is not a phrase dump")
    folder.mkdir(parents=True, exist_ok=True)
    choice = choose_dump_precision(model, corpus.spread(16), batch_size, precision)
    precision = choice.precision
    sample = _sample(model, corpus, estimate_sample, batch_size, precision)
    thresholds = {"start": start_threshold, "end": end_threshold}
    if keep_fraction is not None:
        thresholds = thresholds_for_fraction(sample, keep_fraction)
        header.update(start_threshold=thresholds["start"], end_threshold=thresholds["end"])
    estimate = _estimate(sample, thresholds, model.dim, dtype, len(corpus),
                         _shares_start_end(model))
    if progress:
        print(estimate.describe(len(corpus), dtype, compact_bytes_per_token), file=sys.stderr)
    write_json(folder / MANIFEST, {**header, "precision": precision,
                                   "precision_probe": choice.to_dict(),
                                   "estimate": asdict(estimate),
                                   "complete": False})


def _shares_start_end(model) -> bool:
    return bool(getattr(model, "shares_start_end", False))


def _write(folder: Path, start: int, end: int, dumped: list[DumpedPassage], dtype: str) -> None:
    sides = {}
    for side in SIDES:
        vectors = [d.vectors[side] for d in dumped]
        dim = vectors[0].shape[1] if vectors else 0
        stacked = np.concatenate(vectors) if vectors else np.zeros((0, dim), np.float32)
        sides[side] = (stacked, np.concatenate([d.pos[side] for d in dumped]),
                       np.concatenate([d.logits[side] for d in dumped]))
    try:
        tokens, packed = pack_shard(sides, start, end - start, dtype)
    except ValueError as exc:
        raise ConvQAError(f"passages {start}-{end}: {exc}") from None
    info = {"text_tokens": int(sum(d.text_tokens for d in dumped)),
            "truncated": int(sum(d.truncated for d in dumped))}
    write_shard(folder, start, end, tokens, packed, info)


def _valid(dump: PhraseDump, start: int, end: int) -> bool:
    return shard_done(dump.folder / shard_dir_name(start, end), lambda: dump.shard(start, end),
                      "re-dumping")


def _finish(dump: PhraseDump) -> None:
    totals = {"text_tokens": 0, "truncated": 0, "start_count": 0, "end_count": 0,
              "tokens_count": 0}
    for start, end in dump.ranges():
        dump.shard(start, end)  # raises if any process left its part undone
        info = json.loads((dump.folder / shard_dir_name(start, end) / "shard.json").read_text())
        for key in totals:
            totals[key] += int(info.get(key, 0))
    expected = {shard_dir_name(s, e) for s, e in dump.ranges()}
    stray = sorted(p.name for p in dump.folder.glob("shard-*") if p.name not in expected)
    if stray:
        raise DataError(f"unexpected shards {stray[:3]} (another shard size?)", dump.folder)
    if totals["truncated"]:
        log.warning("%d passages were longer than max_passage_tokens=%s: their tails are not "
                    "indexed", totals["truncated"], dump.manifest.get("max_passage_tokens"))
    write_json(dump.folder / MANIFEST, {**dump.manifest, **totals, "complete": True})
