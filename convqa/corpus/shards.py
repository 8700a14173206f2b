"""Encoding a corpus in resumable shards, split across processes: what the dense encoder
(retrievers/dense/encode.py) and the phrase dump (phrase_index/dump.py) share.

The corpus is cut into fixed row ranges of `shard_size` passages, in store order; shard i is
encoded by process i % N (N from `accelerate launch` or torchrun), each written atomically by
its owner, so a killed run loses at most the shards in progress and a rerun, with any number of
processes, skips every finished one. The main process writes the folder's manifest before and
marks it complete after (each caller has its own manifest); the processes meet at barriers.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch

from convqa.errors import ConfigError, ConvQAError, DataError
from convqa.io import load_format_json
from convqa.types import Passage

from .store import PassageStore

MANIFEST = "manifest.json"

log = logging.getLogger(__name__)


def passages_checksum(passages: Sequence[Passage]) -> str:
    """The checksum a `PassageStore` built from `passages` would record (same bytes hashed)."""
    digest = hashlib.sha256()
    for passage in passages:
        digest.update((json.dumps(passage.to_dict(), ensure_ascii=False) + "\n").encode("utf-8"))
    return f"sha256:{digest.hexdigest()}"


class CorpusRows:
    """Uniform row access to a PassageStore or an in-memory sequence of passages."""

    def __init__(self, source: PassageStore | Sequence[Passage]):
        if isinstance(source, PassageStore):
            self.store: PassageStore | None = source
            self.passages: Sequence[Passage] = ()
            self.checksum = source.checksum
        elif isinstance(source, Sequence) and not isinstance(source, (str, bytes)):
            bad = next((i for i, p in enumerate(source) if not isinstance(p, Passage)), None)
            if bad is not None:
                raise ConfigError(f"passage {bad + 1}: expected a Passage, got "
                                  f"{type(source[bad]).__name__}")
            self.store, self.passages = None, source
            self.checksum = passages_checksum(source)
        else:
            raise ConfigError("expected a PassageStore or a list of Passage, got "
                              f"{type(source).__name__}")

    def __len__(self) -> int:
        return len(self.store) if self.store is not None else len(self.passages)

    def rows(self, start: int, end: int) -> list[Passage]:
        if self.store is not None:
            return [self.store.at(i) for i in range(start, end)]
        return list(self.passages[start:end])

    def spread(self, count: int) -> list[Passage]:
        """About `count` passages spread evenly over the corpus (a sample for checks)."""
        positions = np.unique(np.linspace(0, len(self) - 1, min(count, len(self))).astype(int))
        return [self.rows(int(i), int(i) + 1)[0] for i in positions]


def shard_ranges(count: int, shard_size: int) -> list[tuple[int, int]]:
    """The (start, end) rows of every shard of a `count`-row corpus."""
    return [(s, min(s + shard_size, count)) for s in range(0, count, shard_size)]


class ShardedFolder:
    """A finished (or partial) folder of shards and its manifest.json (count, dim, dtype,
    fingerprint, corpus_checksum, shard_size, complete). A subclass names its FORMAT and
    VERSION and says what it is: WHAT ("a phrase dump"), KIND (the manifest's label) and JOB
    (what is unfinished while `complete` is false)."""

    FORMAT = ""
    VERSION = 0
    WHAT = "a sharded folder"
    KIND = "sharded folder"
    JOB = "the encoding"

    def __init__(self, folder: Path, manifest: dict[str, Any]):
        self.folder = folder
        self.manifest = manifest

    @classmethod
    def open(cls, folder: str | os.PathLike, require_complete: bool = True):
        folder = Path(folder)
        path = folder / MANIFEST
        if not path.exists():
            raise DataError(f"not {cls.WHAT} (no {MANIFEST})", folder)
        manifest = load_format_json(path, cls.FORMAT, cls.VERSION, f"{cls.KIND} manifest")
        if require_complete and not manifest.get("complete"):
            raise ConvQAError(f"{folder}: {cls.JOB} is not finished; rerun it to resume")
        return cls(folder, manifest)

    count = property(lambda self: int(self.manifest["count"]))
    dim = property(lambda self: int(self.manifest["dim"]))
    dtype = property(lambda self: str(self.manifest["dtype"]))
    fingerprint = property(lambda self: str(self.manifest["fingerprint"]))
    corpus_checksum = property(lambda self: str(self.manifest["corpus_checksum"]))

    def ranges(self) -> list[tuple[int, int]]:
        return shard_ranges(self.count, int(self.manifest["shard_size"]))


def launched_accelerator():
    """An Accelerator when this process was started by `accelerate launch` or torchrun, else
    None. Without GPUs it must be told `cpu=True`, or it silently runs as a single process."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return None
    from accelerate import Accelerator

    return Accelerator(cpu=not torch.cuda.is_available())


def same_device(a: torch.device, b: torch.device | str) -> bool:
    """cpu and cpu:0 are the same place (moving would copy every weight for nothing)."""
    a, b = torch.device(a), torch.device(b)
    return a.type == b.type and (a.type == "cpu" or (a.index or 0) == (b.index or 0))


@contextmanager
def eval_mode(model) -> Iterator[None]:
    """`model` in eval mode for the block, its training flag restored after."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def shard_done(path: Path, read: Callable[[], Any], redo: str) -> bool:
    """Whether the shard at `path` exists and `read()` accepts it; a damaged one is logged
    ("`redo` <why>") and counts as not done."""
    if not path.exists():
        return False
    try:
        read()
    except DataError as exc:
        log.warning("%s %s", redo, exc)
        return False
    return True


class ShardProcesses:
    """This process's place among those encoding a corpus: `rank` of `world`, and barriers.
    With no accelerator (and none launched) it is the only process."""

    def __init__(self, model, accelerator=None):
        accelerator = accelerator if accelerator is not None else launched_accelerator()
        self.accelerator = accelerator
        self.rank, self.world = ((accelerator.process_index, accelerator.num_processes)
                                 if accelerator else (0, 1))
        launched = int(os.environ.get("WORLD_SIZE", "1"))
        if launched > 1 and self.world != launched:
            raise ConvQAError(f"{launched} processes were launched but the accelerator sees "
                              f"{self.world}; on a machine without GPUs create it with "
                              "Accelerator(cpu=True)")
        if accelerator is not None and not same_device(model.device, accelerator.device):
            model.to(accelerator.device)

    @property
    def main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.accelerator is not None:
            self.accelerator.wait_for_everyone()

    @property
    def label(self) -> str:
        """"1 process", "4 processes": for progress bars."""
        return f"{self.world} process{'es' if self.world > 1 else ''}"

    def encode(self, ranges: Sequence[tuple[int, int]], done: Callable[[int, int], bool],
               work: Callable[[int, int, Any], None], desc: str, progress: bool = True) -> int:
        """Run `work(start, end, bar)` on each shard of this process that is not `done`, with
        a progress bar (`desc`, in passages) on the main process; returns how many it ran. A
        resumed job's bar starts at the passages its earlier runs encoded and says so."""
        from tqdm.auto import tqdm

        mine = [(s, e) for n, (s, e) in enumerate(ranges) if n % self.world == self.rank]
        todo = [(s, e) for s, e in mine if not done(s, e)]
        total = sum(e - s for s, e in mine)
        before = total - sum(e - s for s, e in todo)
        bar = tqdm(total=total, initial=before, unit=" psg", smoothing=0.05,
                   desc=f"{desc}, resumed" if before and todo else desc,
                   disable=not (progress and self.main))
        with bar:
            for start, end in todo:
                work(start, end, bar)
        return len(todo)


def check_resumable(old: dict[str, Any], new: dict[str, Any], fields: Sequence[str],
                    folder: Path, holds: str) -> None:
    """A rerun into `folder` must match its manifest `old` on `fields` (`holds` says what the
    folder holds); else a one-line error naming the first difference and both fingerprints."""
    for field in fields:
        if old.get(field) != new[field]:
            raise ConvQAError(
                f"{folder} holds {holds} with another {field} ({old.get(field)!r}, now "
                f"{new[field]!r}); fingerprints: folder {old.get('fingerprint')}, model "
                f"{new['fingerprint']}. Use another folder or delete this one")
