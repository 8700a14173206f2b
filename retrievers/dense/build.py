"""Encode a passage store and index it in one resumable call (what `convqa index --dense` runs).

Layout of `out_dir`: `vectors/` (the shards of `encode_corpus`, kept so another factory or a
hard-negative mining pass needs no re-encoding), `index.faiss` and `dense_index.json`. A rerun
resumes the encoding and reuses an index that already matches encoder, corpus and factory.
"""
from __future__ import annotations

import os
from pathlib import Path

from convqa.corpus import PassageStore
from convqa.errors import ConvQAError

from convqa.corpus.shards import launched_accelerator

from .encode import encode_corpus
from .index import META_FILE, VECTORS_DIR, DenseIndex
from .model import DualEncoder


def load_encoder(model: DualEncoder | str | os.PathLike) -> DualEncoder:
    """A DualEncoder as given, or loaded (LoRA adapters merged for speed) from a path or id."""
    if isinstance(model, DualEncoder):
        return model
    encoder = DualEncoder.from_pretrained(model)
    if encoder.has_adapters:
        encoder.merge_adapters()
    return encoder.eval()


def _source_name(model: DualEncoder | str | os.PathLike, encoder: DualEncoder) -> str:
    """How to find the encoder again: an absolute path for local folders, else the id."""
    name = str(model) if not isinstance(model, DualEncoder) else (encoder.source or
                                                                  encoder.config.model)
    return str(Path(name).resolve()) if Path(name).is_dir() else name


def build_dense_index(model: DualEncoder | str | os.PathLike,
                      store: PassageStore | str | os.PathLike, out_dir: str | os.PathLike,
                      factory: str = "Flat", batch_size: int = 32, precision: str = "auto",
                      accelerator=None, *, dtype: str = "float16", shard_size: int = 1024,
                      train_size: int | None = None, progress: bool = True) -> DenseIndex:
    """Encode `store` with `model` into `out_dir/vectors` (resumable, sharded, parallel under
    `accelerate launch`), then build and save the FAISS `factory` index in `out_dir`.

    The index metadata records the encoder (absolute path or id) and the store path, so a
    `dense` retriever needs only `index=out_dir`. Returns the index (on every process)."""
    encoder = load_encoder(model)
    accelerator = accelerator if accelerator is not None else launched_accelerator()
    if not isinstance(store, PassageStore):
        store = PassageStore.open(store)
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ConvQAError(f"{out}: exists and is not a folder")
    vectors = encode_corpus(encoder, store, out / VECTORS_DIR, batch_size, precision, accelerator,
                            shard_size=shard_size, dtype=dtype, progress=progress)
    rank = accelerator.process_index if accelerator is not None else 0
    if rank == 0 and not _up_to_date(out, vectors.fingerprint, store.checksum, factory):
        index = DenseIndex.build(vectors, factory, encoder=_source_name(model, encoder),
                                 train_size=train_size, progress=progress)
        index.save(out, passages=str(Path(store.path).resolve()),
                   precision=vectors.manifest.get("precision"))
    if accelerator is not None:
        accelerator.wait_for_everyone()
    return DenseIndex.load(out)


def _up_to_date(out: Path, fingerprint: str, checksum: str, factory: str) -> bool:
    if not (out / META_FILE).exists():
        return False
    try:
        meta = DenseIndex.read_meta(out)
    except ConvQAError:
        return False
    return (meta.get("fingerprint") == fingerprint and meta.get("corpus_checksum") == checksum
            and meta.get("factory") == factory)
