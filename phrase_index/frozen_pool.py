"""The query stage's frozen phrase matrix: the phrase vectors of a pool of training passages,
computed once with the frozen phrase tower (which the query stage does not train) and searched
as the index is (start-vector MIPS, then the best end within `max_answer_tokens`), so each
query learns against the phrases it will meet; a resumed run reloads the matrix from its file.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from torch import Tensor

from .data import PhraseExample
from .model import PhraseModel


def digest_ids(ids) -> str:
    """A short digest of an ordered sequence of ids (what a cached pool or run was made of)."""
    digest = hashlib.sha256()
    for pid in ids:
        digest.update(str(pid).encode() + b"\0")
    return digest.hexdigest()[:16]


class FrozenPhrases:
    """Phrase vectors of a pool of passages, computed once with the frozen phrase tower:
    `vectors` [N, d] (fp16) over every text token, in window order, with each token's window
    and character offsets; searched by start-vector MIPS then the best end within
    `max_answer_tokens` of the same window."""

    SEARCH_CHUNK = 262_144   # rows scored at once (bounds the fp32 copy of a large pool)
    FP32_CACHE_BYTES = 4 << 30   # up to this size the pool is also kept as fp32 for search

    def __init__(self, model: PhraseModel, passages: Sequence[Any], batch_size: int = 32,
                 bf16: bool = False, stride: int = 64, progress: bool = False):
        from tqdm.auto import tqdm

        self.passages = list(passages)
        self.max_answer_tokens = model.config.max_answer_tokens
        vectors, windows, offsets, owners = [], [], [], []
        window_count = 0
        was_training = model.training
        model.eval()
        bar = tqdm(total=len(self.passages), desc="query stage: frozen phrase pool",
                   unit="psg", disable=not progress)
        with torch.no_grad():
            for first in range(0, len(self.passages), batch_size):
                chunk = self.passages[first:first + batch_size]
                bar.update(len(chunk))
                encoding = model.tokenize_passages([p.title for p in chunk],
                                                   [p.text for p in chunk], stride=stride)
                with torch.autocast(device_type=model.device.type, dtype=torch.bfloat16,
                                    enabled=bf16):
                    out = model.encode_passages(encoding["input_ids"], encoding["attention_mask"])
                mask = encoding["phrase_mask"]
                mapping = encoding["overflow_to_sample_mapping"]
                for row in range(mask.shape[0]):
                    keep = mask[row]
                    count = int(keep.sum())
                    vectors.append(out.start[row][keep.to(out.start.device)].to("cpu",
                                                                                 torch.float16))
                    offsets.append(encoding["offset_mapping"][row][keep])
                    windows.append(torch.full((count,), window_count, dtype=torch.long))
                    owners.append(torch.full((count,), first + int(mapping[row]),
                                             dtype=torch.long))
                    window_count += 1
        bar.close()
        model.train(was_training)
        self.vectors = torch.cat(vectors) if vectors else torch.zeros(0, model.dim)
        self.windows = torch.cat(windows) if windows else torch.zeros(0, dtype=torch.long)
        self.offsets = torch.cat(offsets) if offsets else torch.zeros(0, 2, dtype=torch.long)
        self.owners = torch.cat(owners) if owners else torch.zeros(0, dtype=torch.long)
        self._matrix: Tensor | None = None

    @classmethod
    def cached(cls, model: PhraseModel, passages: Sequence[Any], path: Path, save: bool = True,
               **options: Any) -> "FrozenPhrases":
        """The pool of `passages` read back from `path` (a safetensors file) when it was
        encoded by the same phrase tower with the same settings, else encoded (and, with
        `save`, written atomically): a resumed run does not pay for encoding a corpus again."""
        from safetensors.torch import load_file, save_file

        passages = list(passages)
        key = hashlib.sha256(json.dumps({
            "fingerprint": model.fingerprint(), "ids": digest_ids(p.id for p in passages),
            "bf16": bool(options.get("bf16", False)), "stride": options.get("stride", 64)},
            sort_keys=True).encode()).hexdigest()[:24]
        if path.exists():
            try:
                from safetensors import safe_open

                with safe_open(str(path), "pt") as handle:
                    stored = (handle.metadata() or {}).get("key")
                if stored == key:
                    tensors = load_file(str(path))
                    pool = cls.__new__(cls)
                    pool.passages, pool.max_answer_tokens = passages, \
                        model.config.max_answer_tokens
                    for name in ("vectors", "windows", "offsets", "owners"):
                        setattr(pool, name, tensors[name])
                    pool._matrix = None
                    return pool
            except Exception:  # noqa: BLE001 - an unreadable cache is encoded again
                pass
        pool = cls(model, passages, **options)
        if save:
            tensors = {name: getattr(pool, name).contiguous()
                       for name in ("vectors", "windows", "offsets", "owners")}
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.tmp")
            save_file(tensors, str(tmp), metadata={"key": key})
            os.replace(tmp, path)
        return pool

    def __len__(self) -> int:
        return int(self.vectors.shape[0])

    def search(self, q_start: Tensor, q_end: Tensor, starts: int, k: int
               ) -> list[list[tuple[int, int]]]:
        """For each query, its top `k` phrases as (start row, end row) into `vectors`,
        distinct by (passage, character span)."""
        n, span = len(self), self.max_answer_tokens
        if n == 0:
            return [[] for _ in range(len(q_start))]
        top_scores, top_rows = self._top_starts(q_start.detach().float().cpu(), min(starts, n))
        ends = top_rows.unsqueeze(-1) + torch.arange(span)                 # [B, S, A]
        valid = ends < n
        ends = ends.clamp(max=n - 1)
        valid &= self.windows[ends] == self.windows[top_rows].unsqueeze(-1)
        end_scores = torch.einsum("bd,bsad->bsa", q_end.detach().float().cpu(),
                                  self.vectors[ends].float())
        totals = (top_scores.unsqueeze(-1) + end_scores).masked_fill(~valid, float("-inf"))
        results = []
        for b in range(len(q_start)):
            flat = totals[b].flatten()
            order = torch.argsort(flat, descending=True)
            chosen, seen = [], set()
            for position in order.tolist():
                if not math.isfinite(float(flat[position])) or len(chosen) == k:
                    break
                s, a = divmod(position, span)
                first, last = int(top_rows[b, s]), int(ends[b, s, a])
                key = (int(self.owners[first]), int(self.offsets[first, 0]),
                       int(self.offsets[last, 1]))
                if key not in seen:
                    seen.add(key)
                    chosen.append((first, last))
            results.append(chosen)
        return results

    def _top_starts(self, queries: Tensor, k: int) -> tuple[Tensor, Tensor]:
        """(scores, rows) of each query's `k` best start vectors: exact MIPS, a chunk of rows
        at a time (a pool of a whole corpus has millions of rows: only one chunk is ever
        converted to fp32)."""
        if self._matrix is None and self.vectors.numel() * 4 <= self.FP32_CACHE_BYTES:
            self._matrix = self.vectors.float()   # converted once, not at every step
        matrix = self.vectors if self._matrix is None else self._matrix
        values, indices = [], []
        for first in range(0, len(self), self.SEARCH_CHUNK):
            chunk = matrix[first:first + self.SEARCH_CHUNK].float()
            top = (queries @ chunk.T).topk(min(k, chunk.shape[0]), dim=1)
            values.append(top.values)
            indices.append(top.indices + first)
        best = torch.cat(values, dim=1).topk(k, dim=1)
        return best.values, torch.cat(indices, dim=1).gather(1, best.indices)

    def text(self, first: int, last: int) -> str:
        passage = self.passages[int(self.owners[first])]
        return passage.text[int(self.offsets[first, 0]):int(self.offsets[last, 1])]


def pool_passages(examples: Sequence[PhraseExample], size: int, seed: int, store: str | None = None,
               store_size: int | None = None) -> list[Any]:
    """The distinct passages of the examples (by id), a seeded sample of at most `size`; with
    `store`, also the passages of that passage store (a seeded sample of `store_size`), so the
    query learns against the corpus it will search, neighbours of each gold passage included."""
    unique = {}
    for example in examples:
        unique.setdefault(example.passage.id, example.passage)
    ids = sorted(unique)
    if len(ids) > size:
        keep = np.random.default_rng([seed, 11]).choice(len(ids), size=size, replace=False)
        ids = [ids[i] for i in sorted(keep)]
    pool = [unique[i] for i in ids]
    if store is not None:
        from convqa.corpus import PassageStore

        taken = set(ids)
        with PassageStore.open(store) as opened:
            rows = range(len(opened))
            if store_size is not None and store_size < len(opened):
                rows = sorted(np.random.default_rng([seed, 13]).choice(
                    len(opened), size=store_size, replace=False).tolist())
            for row in rows:
                passage = opened.at(int(row))
                if passage.id not in taken:
                    taken.add(passage.id)
                    pool.append(passage)
    return pool
