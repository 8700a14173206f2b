"""Building a compact phrase index (the index itself: compact.py).

A compact index is built from a finished dump (dump.py) in three resumable stages under
`OUT/.build`: train (a sample of the kept tokens spread over the dump: the codec and the IVF-PQ
quantizers), parts (each dump shard filtered and encoded into a part folder, atomically; a
rerun skips finished parts), merge (the parts concatenated into the final arrays, the codes
added to the IVF lists); `phrase_index.json` is written last and `.build` removed. The dump is
not needed afterwards.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import string
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from convqa.errors import ConfigError, ConvQAError, DataError
from convqa.io import folder_bytes, write_json
from convqa.model_folder import writing_folder
from retrievers.dense.index import DenseIndex, make_index

from .codec import PQCodec
from .compact import (FORMAT, META_FILE, SIDE_BITS, TOKEN_ARRAYS, VERSION, CompactPhraseIndex,
                      open_tokens)
from .dump import PhraseDump
from .index import side_index_meta
from .vectors import SIDES, save_array

BUILD_DIR = ".build"
DEFAULT_CODE_BYTES = 48       # rescoring code: 8 dimensions per byte at 384-d
DEFAULT_SEARCH_BYTES = 32     # the IVF-PQ code that proposes candidates (16 bytes: vital
                              # dev Hits@5 of the answer passage 54.7 against 65.3)
DEFAULT_TRAIN_SIZE = 200_000  # tokens the codec and the IVF are trained on
MAX_LISTS = 4096


def bytes_per_token(code_bytes: int = DEFAULT_CODE_BYTES,
                    search_bytes: int = DEFAULT_SEARCH_BYTES) -> int:
    """Index bytes of one kept token: its scoring code, its IVF-PQ entry (search code + FAISS's
    8-byte id) and its position (uint16 token, two uint16 character offsets, uint8 sides);
    the IVF centroids and the codec are a few MB on top."""
    return code_bytes + search_bytes + 8 + 2 + 4 + 1


def choose_search_factory(count: int, dim: int, code_bytes: int = DEFAULT_SEARCH_BYTES) -> str:
    """IVF-PQ with up to 4 sqrt(n) lists (a power of two, at most `MAX_LISTS`, at least 39
    training vectors each) and `code_bytes` sub-quantizers."""
    lists = 2 ** math.floor(math.log2(max(16.0, 4 * math.sqrt(count))))
    lists = min(lists, MAX_LISTS)
    while lists > 16 and count < 39 * lists:
        lists //= 2
    if dim % code_bytes:
        raise ConfigError(f"search code bytes must divide the vector size {dim}, got "
                          f"{code_bytes}")
    return f"IVF{lists},PQ{code_bytes}"


# -- filtering a dump shard -------------------------------------------------------------------
PUNCTUATION = frozenset(string.punctuation)


def punctuation_rows(shard, text_of: Callable[[int], str]) -> np.ndarray:
    """True for the shard's token-table rows whose text is ASCII punctuation only ("," "(" "."):
    the characters EM/F1's answer normalization removes, so a phrase never needs one as its
    first or last token (the same phrase without it scores the same). About 13% of the
    word-boundary tokens of Wikipedia text. `text_of(row)` is the text of corpus row `row`."""
    pos = shard.tokens.pos
    dropped = np.zeros(len(pos), dtype=bool)
    text, current = "", -1
    for i, (row, _token, first, last) in enumerate(pos.tolist()):
        if row != current:
            text, current = text_of(row), row
        span = text[first:last]
        dropped[i] = bool(span) and all(ch in PUNCTUATION for ch in span)
    return dropped


def _kept_tokens(shard, thresholds: dict[str, float | None],
                 drop: Callable[[Any], np.ndarray] | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(token-table rows kept, their side bits), rows ascending (= passage, token order).
    `drop(shard)`: rows to leave out on both sides whatever their logits."""
    size = len(shard.tokens)
    bits = np.zeros(size, dtype=np.uint8)
    for side in SIDES:
        arrays = shard.sides[side]
        keep = np.ones(len(arrays.ref), dtype=bool)
        if thresholds.get(side) is not None:
            if arrays.logits is None:
                raise ConvQAError("this dump has no filter logits (dumped before they were "
                                  "stored): dump again, or build without a keep fraction or "
                                  "thresholds")
            keep = arrays.logits.astype(np.float32) > thresholds[side]
        bits[arrays.ref[keep]] |= SIDE_BITS[side]
    if drop is not None:
        bits[drop(shard)] = 0
    rows = np.nonzero(bits)[0]
    return rows, bits[rows]


def thresholds_for(dump: PhraseDump, keep_fraction: float | None,
                   thresholds: dict[str, float | None] | None, sample_shards: int = 32
                   ) -> dict[str, float | None]:
    """Per-side logit thresholds: given, or the (1 - keep_fraction) quantile of the side's
    logits over up to `sample_shards` shards spread over the dump; None keeps everything."""
    if keep_fraction is None or keep_fraction >= 1.0:
        return dict(thresholds or {side: None for side in SIDES})
    if not 0 < keep_fraction < 1:
        raise ConfigError(f"keep_fraction must be in (0, 1], got {keep_fraction!r}")
    logits: dict[str, list[np.ndarray]] = {side: [] for side in SIDES}
    for start, end in _spread(dump.ranges(), sample_shards):
        shard = dump.shard(start, end)
        for side in SIDES:
            if shard.sides[side].logits is None:
                raise ConvQAError(f"{dump.folder}: this dump has no filter logits (dumped "
                                  "before they were stored): dump again to filter it")
            logits[side].append(shard.sides[side].logits.astype(np.float32))
    return {side: float(np.quantile(np.concatenate(logits[side]), 1.0 - keep_fraction))
            for side in SIDES}


def _spread(ranges: list[tuple[int, int]], count: int) -> list[tuple[int, int]]:
    if len(ranges) <= count:
        return list(ranges)
    picks = np.linspace(0, len(ranges) - 1, count).round().astype(int)
    return [ranges[i] for i in sorted(set(picks.tolist()))]


def _training_sample(dump: PhraseDump, thresholds, size: int, seed: int, drop=None
                     ) -> tuple[np.ndarray, int]:
    """About `size` kept token vectors (float32), drawn from up to 64 shards spread over the
    dump, and the dump's kept tokens estimated from those shards."""
    rng = np.random.default_rng(seed)
    ranges = _spread(dump.ranges(), 64)
    per_shard = max(1, -(-size // len(ranges)))
    parts, kept, passages = [], 0, 0
    for start, end in ranges:
        shard = dump.shard(start, end)
        rows, _ = _kept_tokens(shard, thresholds, drop)
        kept, passages = kept + len(rows), passages + end - start
        if len(rows) > per_shard:
            rows = np.sort(rng.choice(rows, per_shard, replace=False))
        parts.append(shard.tokens.take(rows))
    sample = np.concatenate(parts) if parts else np.zeros((0, dump.dim), np.float32)
    return sample, int(round(kept * dump.count / max(1, passages)))


# -- writing ------------------------------------------------------------------------------
def _chars_dtype(max_char: int) -> np.dtype:
    return np.dtype(np.uint16) if max_char < 2 ** 16 else np.dtype(np.uint32)


class _Stages:
    """The build folder (`OUT/.build`) and what each stage left there."""

    def __init__(self, out: Path):
        self.out = out
        self.root = out / BUILD_DIR

    @property
    def trained(self) -> Path:
        return self.root / "trained"

    @property
    def parts(self) -> Path:
        return self.root / "parts"

    def part(self, start: int, end: int) -> Path:
        return self.parts / f"part-{start:010d}-{end:010d}"


def build_compact_index(dump: PhraseDump | str | os.PathLike, out: str | os.PathLike, *,
                        keep_fraction: float | None = None,
                        thresholds: dict[str, float | None] | None = None,
                        code_bytes: int = DEFAULT_CODE_BYTES, opq: bool = True,
                        factory: str | None = None, search_bytes: int = DEFAULT_SEARCH_BYTES,
                        train_size: int = DEFAULT_TRAIN_SIZE,
                        seed: int = 0, model: str | None = None, passages: str | None = None,
                        skip_punctuation: bool = False,
                        progress: bool = True) -> "CompactPhraseIndex":
    """Build (or resume building) a compact index of a finished dump into `out` (see the
    module docstring); returns it loaded. `skip_punctuation` leaves out the tokens that are
    only punctuation (`punctuation_rows`); it reads their text from `passages`, the dumped
    passage store."""
    began = time.perf_counter()
    if not isinstance(dump, PhraseDump):
        dump = PhraseDump.open(dump)
    drop = _punctuation_dropper(dump, passages) if skip_punctuation else None
    out = Path(out)
    if (out / META_FILE).exists():
        raise ConvQAError(f"{out}: a phrase index is already there; choose another folder")
    stages = _Stages(out)
    settings = {"keep_fraction": keep_fraction, "thresholds": thresholds,
                "code_bytes": code_bytes, "opq": opq, "factory": factory,
                "search_bytes": search_bytes, "skip_punctuation": bool(skip_punctuation),
                "train_size": train_size, "seed": seed, "dump_fingerprint": dump.fingerprint,
                "corpus_checksum": dump.corpus_checksum, "count": dump.count}
    trained = _train_stage(dump, stages, settings, progress, drop)
    codec = PQCodec.load(stages.trained / "codec")
    search = DenseIndex.load(stages.trained / "search")
    cuts = {side: trained["thresholds"][side] for side in SIDES}
    _parts_stage(dump, stages, codec, search.index, cuts, progress, drop)
    index = _merge_stage(dump, stages, codec, search, trained, progress)
    index.meta.update({"model": model or dump.manifest.get("model"), "passages": passages,
                       "build_seconds": round(time.perf_counter() - began, 2)})
    write_json(out / META_FILE, index.meta)
    shutil.rmtree(stages.root, ignore_errors=True)
    return CompactPhraseIndex.load(out)


def build_compact_phrase_index(model, store, out_dir: str | os.PathLike, *,
                               keep_fraction: float | None = None,
                               thresholds: dict[str, float | None] | None = None,
                               code_bytes: int = DEFAULT_CODE_BYTES, opq: bool = True,
                               factory: str | None = None,
                               search_bytes: int = DEFAULT_SEARCH_BYTES,
                               batch_size: int = 16, shard_size: int = 512,
                               precision: str = "auto", accelerator=None,
                               drop_dump: bool = False, skip_punctuation: bool = False,
                               progress: bool = True) -> "CompactPhraseIndex":
    """Dump `store` with `model` into `out_dir/dump` (int8, every word-boundary token with its
    filter logits; resumable, parallel under `accelerate launch`), then build the compact
    index in `out_dir` (main process; resumable). `drop_dump` deletes the dump afterwards
    (it is only needed to rebuild with other settings)."""
    from .dump import dump_corpus
    from .index import DUMP_DIR, _source_name, build_inputs

    accelerator, store, out = build_inputs(model, store, out_dir, accelerator)
    if (out / META_FILE).exists():
        return CompactPhraseIndex.load(out)
    dump = dump_corpus(model, store, out / DUMP_DIR, dtype="int8", start_threshold=None,
                       end_threshold=None, batch_size=batch_size, shard_size=shard_size,
                       precision=precision, accelerator=accelerator, progress=progress,
                       compact_bytes_per_token=bytes_per_token(code_bytes, search_bytes))
    rank = accelerator.process_index if accelerator is not None else 0
    if rank == 0:
        build_compact_index(dump, out, keep_fraction=keep_fraction, thresholds=thresholds,
                            code_bytes=code_bytes, opq=opq, factory=factory,
                            search_bytes=search_bytes, model=_source_name(model.source),
                            passages=str(Path(store.path).resolve()),
                            skip_punctuation=skip_punctuation, progress=progress)
        if drop_dump:
            shutil.rmtree(out / DUMP_DIR, ignore_errors=True)
    if accelerator is not None:
        accelerator.wait_for_everyone()
    return CompactPhraseIndex.load(out)


def _punctuation_dropper(dump: PhraseDump, passages: str | os.PathLike | None
                         ) -> Callable[[Any], np.ndarray]:
    """`punctuation_rows` of a shard, reading texts from the dumped passage store."""
    from convqa.corpus import PassageStore

    if passages is None:
        raise ConfigError("skip_punctuation needs the dumped passage store (passages=...)")
    store = PassageStore.open(passages)
    if store.checksum != dump.corpus_checksum:
        raise DataError(f"not the passages of the dump {dump.folder} (checksum "
                        f"{store.checksum}, dumped {dump.corpus_checksum})", passages)
    return lambda shard: punctuation_rows(shard, lambda row: store.at(row).text)


def _train_stage(dump: PhraseDump, stages: _Stages, settings: dict[str, Any],
                 progress: bool, drop=None) -> dict[str, Any]:
    record_path = stages.trained / "trained.json"
    if record_path.exists():
        record = json.loads(record_path.read_text(encoding="utf-8"))
        if record.get("settings") != settings:
            raise ConvQAError(f"{stages.root} holds a build with other settings "
                              f"({record.get('settings')}); delete it or use another folder")
        return record
    if stages.root.exists():
        shutil.rmtree(stages.root)  # parts of an untrained build cannot be reused
    cuts = thresholds_for(dump, settings["keep_fraction"], settings["thresholds"])
    started = time.perf_counter()
    sample, kept = _training_sample(dump, cuts, settings["train_size"], settings["seed"],
                                    drop)
    if kept == 0:
        raise ConvQAError(f"the filter keeps no token of {dump.folder} (thresholds {cuts})")
    factory = settings["factory"] or choose_search_factory(kept, dump.dim,
                                                           settings["search_bytes"])
    if progress:
        print(f"compact phrase index: training the codec ({settings['code_bytes']} bytes, "
              f"{'OPQ' if settings['opq'] else 'no rotation'}) and {factory} on "
              f"{len(sample):,} of ~{kept:,} kept tokens", flush=True)
    codec = PQCodec.train(sample, settings["code_bytes"], opq=settings["opq"],
                          seed=settings["seed"])
    index = make_index(factory, dump.dim)
    _train_faiss(index, sample, settings["seed"])
    meta = side_index_meta(index, factory, dump, "both", 0)

    with writing_folder(stages.trained, "trained.json", "a compact index build") as folder:
        codec.save(folder / "codec")
        DenseIndex(index, dict(meta)).save(folder / "search")
        write_json(folder / "trained.json", {
            "settings": settings, "thresholds": cuts, "factory": factory,
            "estimated_tokens": kept, "sample": len(sample),
            "train_seconds": round(time.perf_counter() - started, 2)})
    return json.loads(record_path.read_text(encoding="utf-8"))


def _train_faiss(index, sample: np.ndarray, seed: int) -> None:
    import faiss

    ivf = faiss.extract_index_ivf(index)
    ivf.cp.seed = seed
    ivf = faiss.downcast_index(ivf)
    if hasattr(ivf, "do_polysemous_training"):
        ivf.do_polysemous_training = False
    index.train(np.ascontiguousarray(sample, dtype=np.float32))


def _parts_stage(dump: PhraseDump, stages: _Stages, codec: PQCodec, search, cuts,
                 progress: bool, drop=None) -> None:
    from tqdm.auto import tqdm

    ranges = dump.ranges()
    todo = [(s, e) for s, e in ranges if not (stages.part(s, e) / "part.json").exists()]
    for leftover in stages.parts.glob(".part-*.tmp") if stages.parts.exists() else []:
        shutil.rmtree(leftover, ignore_errors=True)
    bar = tqdm(total=dump.count, initial=dump.count - sum(e - s for s, e in todo),
               desc="compact phrase index (encoding)", unit="psg", disable=not progress)
    for start, end in todo:
        shard = dump.shard(start, end)
        rows, bits = _kept_tokens(shard, cuts, drop)
        vectors = shard.tokens.take(rows)
        pos = shard.tokens.pos[rows]
        counts = np.bincount(pos[:, 0] - start, minlength=end - start).astype(np.int32)
        max_char = int(pos[:, 3].max()) if len(pos) else 0
        if len(pos) and int(pos[:, 1].max()) >= 2 ** 16:
            raise ConvQAError(f"passages {start}-{end}: a token index above 65535")
        arrays = {"codes": codec.encode(vectors),
                  "search": search.sa_encode(np.ascontiguousarray(vectors)),
                  "token": pos[:, 1].astype(np.uint16),
                  "chars": pos[:, 2:4].astype(np.uint32), "sides": bits, "counts": counts}

        with writing_folder(stages.part(start, end), "part.json",
                            "a compact index part") as folder:
            for name, array in arrays.items():
                save_array(folder / f"{name}.npy", array)
            write_json(folder / "part.json", {"rows": [start, end], "tokens": len(rows),
                                              "max_char": max_char})
        bar.update(end - start)
    bar.close()


def _merge_stage(dump: PhraseDump, stages: _Stages, codec: PQCodec, search: DenseIndex,
                 trained: dict[str, Any], progress: bool) -> "CompactPhraseIndex":
    """Concatenate the parts into `tokens/` and the IVF lists into `search/`."""
    from tqdm.auto import tqdm

    ranges = dump.ranges()
    infos = [json.loads((stages.part(s, e) / "part.json").read_text()) for s, e in ranges]
    total = sum(info["tokens"] for info in infos)
    max_char = max((info["max_char"] for info in infos), default=0)
    chars_dtype = _chars_dtype(max_char)
    out = stages.out
    shapes = {"codes": ((total, codec.m), np.uint8), "token": ((total,), np.uint16),
              "chars": ((total, 2), chars_dtype), "sides": ((total,), np.uint8)}
    ptr = np.zeros(dump.count + 1, dtype=np.int64)
    side_counts = {side: 0 for side in SIDES}

    with writing_folder(out / "tokens", "ptr.npy", "compact index tokens") as folder:
        targets = {name: np.lib.format.open_memmap(folder / f"{name}.npy", mode="w+",
                                                   dtype=dtype, shape=shape)
                   for name, (shape, dtype) in shapes.items()}
        at = 0
        bar = tqdm(total=len(ranges), desc="compact phrase index (merging)", unit="shard",
                   disable=not progress)
        for (start, end), info in zip(ranges, infos):
            part = stages.part(start, end)
            n = info["tokens"]
            for name in TOKEN_ARRAYS:
                array = np.load(part / f"{name}.npy", allow_pickle=False)
                targets[name][at:at + n] = array.astype(shapes[name][1], copy=False)
            sides = targets["sides"][at:at + n]
            for side in SIDES:
                side_counts[side] += int(np.count_nonzero(sides & SIDE_BITS[side]))
            counts = np.load(part / "counts.npy", allow_pickle=False)
            ptr[start + 1:end + 1] = at + np.cumsum(counts)
            codes = np.load(part / "search.npy", allow_pickle=False)
            search.index.add_sa_codes(codes, np.arange(at, at + n, dtype=np.int64))
            at += n
            bar.update(1)
        bar.close()
        for array in targets.values():
            array.flush()
        save_array(folder / "ptr.npy", ptr)

    codec.save(out / "codec")
    search.meta.update(count=int(search.index.ntotal))
    search.save(out / "search")
    bytes_of = {name: folder_bytes(out / name) for name in ("tokens", "codec", "search")}
    bytes_of["total"] = sum(bytes_of.values())
    manifest = dump.manifest
    meta = {"format": FORMAT, "version": VERSION, "fingerprint": dump.fingerprint,
            "corpus_checksum": dump.corpus_checksum, "count": dump.count, "dim": dump.dim,
            "tokens": total, "vectors": side_counts, "thresholds": trained["thresholds"],
            "keep_fraction": trained["settings"]["keep_fraction"],
            "skip_punctuation": bool(trained["settings"].get("skip_punctuation")),
            "code_bytes": codec.m, "opq": trained["settings"]["opq"],
            "factory": trained["factory"], "chars_dtype": str(np.dtype(chars_dtype)),
            "max_answer_tokens": manifest.get("max_answer_tokens"),
            "dump_tokens": int(manifest.get("tokens_count", 0)),
            "bytes": bytes_of, "bytes_per_passage": round(bytes_of["total"] / max(1, dump.count),
                                                          1),
            "train_seconds": trained.get("train_seconds")}
    return CompactPhraseIndex(out, meta, search, codec, open_tokens(out, meta))
