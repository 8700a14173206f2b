"""DenseIndex: exact and approximate FAISS search against brute force, save/load with
metadata, detection of interrupted saves, encoder/corpus mismatches and bad factories."""
from __future__ import annotations

import json

import numpy as np
import pytest

from convqa.errors import ConfigError, ConvQAError, DataError
from retrievers.dense.index import DenseIndex

DIM = 24


def clustered(n: int, seed: int = 0, clusters: int = 20) -> np.ndarray:
    """Unit vectors around `clusters` centres, like real embeddings (not uniform noise)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(clusters, DIM))
    vectors = centres[rng.integers(0, clusters, n)] + 0.35 * rng.normal(size=(n, DIM))
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


def exact_top(vectors: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    return np.argsort(-(queries @ vectors.T), axis=1, kind="stable")[:, :k]


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean([len(set(f) & set(t)) / len(t) for f, t in zip(found, truth)]))


VECTORS = clustered(2000)
QUERIES = clustered(50, seed=1)


def test_flat_is_exact_inner_product():
    index = DenseIndex.build(VECTORS, "Flat", fingerprint="fp", corpus_checksum="sha256:x")
    scores, rows = index.search(QUERIES, 10)
    assert rows.shape == (50, 10) and rows.dtype == np.int64
    np.testing.assert_array_equal(rows, exact_top(VECTORS, QUERIES, 10))
    np.testing.assert_allclose(scores, np.take_along_axis(QUERIES @ VECTORS.T, rows, 1),
                               rtol=1e-5)
    assert (np.diff(scores, axis=1) <= 1e-6).all()  # best first
    assert index.search(VECTORS[:1], 1)[1][0, 0] == 0  # a stored vector finds itself


def test_approximate_factories_keep_recall():
    truth = exact_top(VECTORS, QUERIES, 10)
    hnsw = DenseIndex.build(VECTORS, "HNSW32")
    assert hnsw.meta["ef_search"] == 128
    assert recall(hnsw.search(QUERIES, 10)[1], truth) >= 0.95
    ivf = DenseIndex.build(VECTORS, "IVF16,Flat", train_size=1000)
    ivf.set_search_params(nprobe=16)  # every list visited: exact again
    np.testing.assert_array_equal(ivf.search(QUERIES, 10)[1], truth)
    ivf.set_search_params(nprobe=1)
    assert recall(ivf.search(QUERIES, 10)[1], truth) < 1.0  # nprobe really is applied
    pq = DenseIndex.build(VECTORS, "IVF16,PQ8")
    pq.set_search_params(nprobe=16)
    assert recall(pq.search(QUERIES, 10)[1], truth) >= 0.5  # lossy, but far above chance


def test_save_load_round_trip_with_metadata(tmp_path):
    index = DenseIndex.build(VECTORS.astype(np.float16), "HNSW32", encoder="enc",
                             fingerprint="abc", corpus_checksum="sha256:1")
    index.save(tmp_path / "i", passages="/some/store")
    meta = json.loads((tmp_path / "i" / "dense_index.json").read_text())
    assert {k: meta[k] for k in ("encoder", "fingerprint", "dim", "count", "corpus_checksum",
                                 "factory", "vector_dtype", "metric", "passages")} == {
        "encoder": "enc", "fingerprint": "abc", "dim": DIM, "count": 2000,
        "corpus_checksum": "sha256:1", "factory": "HNSW32", "vector_dtype": "float16",
        "metric": "inner_product", "passages": "/some/store"}
    assert meta["index_bytes"] == (tmp_path / "i" / "index.faiss").stat().st_size
    assert not [p for p in (tmp_path / "i").iterdir() if p.name.startswith(".")]
    loaded = DenseIndex.load(tmp_path / "i")
    assert loaded.meta["ef_search"] == 128
    np.testing.assert_array_equal(loaded.search(QUERIES, 5)[1], index.search(QUERIES, 5)[1])


def test_flat_index_can_be_memory_mapped(tmp_path):
    DenseIndex.build(VECTORS, "Flat").save(tmp_path / "f")
    mapped = DenseIndex.load(tmp_path / "f", mmap=True)
    np.testing.assert_array_equal(mapped.search(QUERIES, 5)[1], exact_top(VECTORS, QUERIES, 5))


def test_interrupted_or_damaged_saves_are_detected(tmp_path):
    DenseIndex.build(VECTORS, "Flat").save(tmp_path / "i")
    with pytest.raises(DataError, match="missing: no such index folder"):
        DenseIndex.load(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="not a dense index"):
        DenseIndex.load(tmp_path / "empty")
    (tmp_path / "empty" / "vectors").mkdir()  # a build stopped while encoding
    with pytest.raises(DataError, match="unfinished .*run the same command again to resume"):
        DenseIndex.load(tmp_path / "empty")
    file = tmp_path / "i" / "index.faiss"
    file.write_bytes(file.read_bytes()[:1000])  # as if a newer write was cut short
    with pytest.raises(DataError, match="interrupted save"):
        DenseIndex.load(tmp_path / "i")
    meta = tmp_path / "i" / "dense_index.json"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "index_bytes": 1000}))
    with pytest.raises(DataError, match="cannot read FAISS index"):
        DenseIndex.load(tmp_path / "i")
    meta.write_text(json.dumps({"format": "other"}))
    with pytest.raises(DataError, match="format"):
        DenseIndex.load(tmp_path / "i")


def test_mismatches_name_both_sides():
    index = DenseIndex.build(VECTORS, "Flat", encoder="minilm", fingerprint="aaaa1111",
                             corpus_checksum="sha256:corpus1")
    index.check(fingerprint="aaaa1111", dim=DIM, corpus_checksum="sha256:corpus1")
    with pytest.raises(ConvQAError) as error:
        index.check(fingerprint="bbbb2222", dim=DIM, encoder_name="other-model")
    assert "aaaa1111" in str(error.value) and "bbbb2222" in str(error.value)
    assert "other-model" in str(error.value) and "minilm" in str(error.value)
    with pytest.raises(ConvQAError, match=f"{DIM}-d vectors but encoder .* makes 32-d"):
        index.check(fingerprint="aaaa1111", dim=32)
    with pytest.raises(ConvQAError, match="sha256:corpus1.*sha256:corpus2"):
        index.check(corpus_checksum="sha256:corpus2")


def test_bad_factories_and_queries():
    with pytest.raises(ConfigError, match="bad FAISS factory string 'Bogus'"):
        DenseIndex.build(VECTORS, "Bogus")
    with pytest.raises(ConfigError, match="needs at least 4096 vectors"):
        DenseIndex.build(VECTORS, "IVF4096,Flat")
    with pytest.raises(ConvQAError, match="empty"):
        DenseIndex.build(np.zeros((0, DIM), np.float32), "Flat")
    index = DenseIndex.build(VECTORS[:5], "Flat")
    with pytest.raises(ConvQAError, match=r"\[n, 24\]"):
        index.search(np.zeros((2, 8), np.float32), 3)
    with pytest.raises(ConfigError, match="k must be"):
        index.search(QUERIES, 0)
    scores, rows = index.search(QUERIES[:2], 10)  # k above the corpus size: all 5 rows
    assert rows.shape == (2, 5) and sorted(rows[0]) == [0, 1, 2, 3, 4]
