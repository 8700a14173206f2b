"""build_dense_index + the registered `dense` retriever, end to end on a tiny random BERT:
row -> passage id mapping, ranks and scores, resumable building, and the checks at load."""
from __future__ import annotations

import json

import numpy as np
import pytest

from convqa.corpus import PassageStore
from convqa.errors import ConfigError, ConvQAError
from convqa.registry import RETRIEVERS
from convqa.types import Passage
from retrievers.dense.build import build_dense_index
from retrievers.dense.index import DenseIndex
from retrievers.dense.model import DualEncoder, DualEncoderConfig
from retrievers.dense.retriever import DenseRetriever, DenseRetrieverConfig

from test_dense_encode import corpus
from test_dense_model import make_tiny_bert


@pytest.fixture(scope="module")
def setup(tmp_path_factory, minilm_tokenizer):
    """A tiny encoder, a 30-passage store (no titles, so a query equal to a passage's text is
    tokenized exactly like that passage) and a Flat index over it."""
    root = tmp_path_factory.mktemp("dense")
    tiny = make_tiny_bert(root / "bert", minilm_tokenizer)
    passages = [Passage(p.id, p.text) for p in corpus(30)]
    store = PassageStore.build(passages, root / "store", progress=False)
    index = build_dense_index(str(tiny), store, root / "index", batch_size=8, precision="fp32",
                              shard_size=8, progress=False)
    return root, tiny, store, passages, index


def test_passage_text_as_query_finds_that_passage(setup):
    root, _, _, passages, _ = setup
    retriever = RETRIEVERS.build({"name": "dense", "index": str(root / "index"),
                                  "precision": "fp32"})
    assert isinstance(retriever, DenseRetriever)
    queries = [passages[i].text for i in (0, 7, 29)]
    results = retriever.retrieve_batch(queries, k=5)
    assert [hits[0].passage_id for hits in results] == [passages[i].id for i in (0, 7, 29)]
    for hits in results:
        assert [h.rank for h in hits] == [1, 2, 3, 4, 5]
        assert hits[0].score == pytest.approx(1.0, abs=2e-3)  # same vector (float16 stored)
        assert all(a.score >= b.score for a, b in zip(hits, hits[1:]))
    single = retriever.retrieve(queries[1], k=3)
    assert [h.passage_id for h in single] == [h.passage_id for h in results[1][:3]]
    assert retriever.retrieve_batch([], k=3) == []
    assert len(retriever.retrieve("x", k=100)) == 30  # k above the corpus: every passage


def test_auto_query_precision_is_measured_once(setup, monkeypatch):
    from convqa import precision

    root = setup[0]
    retriever = RETRIEVERS.build({"name": "dense", "index": str(root / "index")})
    assert retriever.precision is None
    calls = []

    def timer(name, run):
        calls.append(name)
        return {"fp32": 1.0, "bf16": 3.0, "int8": 2.0}[name], run()

    monkeypatch.setattr(precision, "time_run", timer)
    first = retriever.retrieve_batch(["river mountain"], k=2)
    assert retriever.precision == "fp32" and calls == ["fp32", "bf16", "int8"]
    assert retriever.precision_choice.seconds == {"fp32": 1.0, "bf16": 3.0, "int8": 2.0}
    assert retriever.retrieve_batch(["river mountain"], k=2) == first and len(calls) == 3


def test_index_metadata_records_encoder_and_store(setup):
    root, tiny, store, _, index = setup
    meta = json.loads((root / "index" / "dense_index.json").read_text())
    assert meta["encoder"] == str(tiny.resolve())
    assert meta["passages"] == str(store.path.resolve())
    assert meta["corpus_checksum"] == store.checksum and meta["count"] == 30
    assert meta["vector_dtype"] == "float16" and meta["precision"] == "fp32"
    assert index.fingerprint == DualEncoder.from_pretrained(tiny).fingerprint()


def test_rebuild_reuses_vectors_and_index(setup, monkeypatch):
    root, tiny, store, _, _ = setup
    before = (root / "index" / "index.faiss").stat().st_mtime_ns
    encoded = []
    import retrievers.dense.encode as encode

    real = encode.encode_passages
    monkeypatch.setattr(encode, "encode_passages",
                        lambda *a, **k: encoded.append(1) or real(*a, **k))
    build_dense_index(str(tiny), store, root / "index", precision="fp32", shard_size=8,
                      progress=False)
    assert encoded == [] and (root / "index" / "index.faiss").stat().st_mtime_ns == before
    # another factory: a new index from the same vectors, no encoding
    hnsw = build_dense_index(str(tiny), store, root / "index", factory="HNSW32", precision="fp32",
                             shard_size=8, progress=False)
    assert encoded == [] and hnsw.meta["factory"] == "HNSW32"
    flat = build_dense_index(str(tiny), store, root / "index", precision="fp32", shard_size=8,
                             progress=False)
    assert flat.meta["factory"] == "Flat"


def test_wrong_encoder_or_store_is_refused(setup, tmp_path, minilm_tokenizer):
    root, tiny, _, passages, index = setup
    other = make_tiny_bert(tmp_path / "other", minilm_tokenizer, seed=9)
    with pytest.raises(ConvQAError) as error:
        RETRIEVERS.build({"name": "dense", "index": str(root / "index"), "model": str(other)})
    other_fingerprint = DualEncoder.from_pretrained(other).fingerprint()
    assert index.fingerprint in str(error.value) and other_fingerprint in str(error.value)
    cls_model = DualEncoder.build(DualEncoderConfig(model=str(tiny), pooling="cls"))
    with pytest.raises(ConvQAError, match="encoder mismatch"):
        DenseRetriever(cls_model, DenseIndex.load(root / "index"),
                       PassageStore.open(root / "store"))
    changed = PassageStore.build(passages[:-1] + [Passage("new", "changed text")],
                                 tmp_path / "changed", progress=False)
    with pytest.raises(ConvQAError, match="corpus mismatch"):
        RETRIEVERS.build({"name": "dense", "index": str(root / "index"),
                          "passages": str(changed.path)})


def test_config_errors(setup, tmp_path):
    root = setup[0]
    with pytest.raises(ConfigError, match="option 'index'"):
        RETRIEVERS.build("dense")
    with pytest.raises(ConfigError, match="bad device"):
        RETRIEVERS.build({"name": "dense", "index": str(root / "index"), "device": "gpu7"})
    with pytest.raises(ConfigError, match="batch_size"):
        RETRIEVERS.build({"name": "dense", "index": str(root / "index"), "batch_size": 0})
    with pytest.raises(ConfigError, match="unknown option 'modle'"):
        RETRIEVERS.build({"name": "dense", "index": str(root / "index"), "modle": "x"})
    with pytest.raises(ConvQAError, match="not a dense index"):
        RETRIEVERS.build({"name": "dense", "index": str(tmp_path)})
    assert DenseRetrieverConfig().precision == "auto"
    with pytest.raises(ConfigError, match="unknown precision 'fp16'"):
        RETRIEVERS.build({"name": "dense", "index": str(root / "index"), "precision": "fp16"})


def test_search_with_precomputed_vectors(setup):
    root, _, _, passages, _ = setup
    retriever = RETRIEVERS.build({"name": "dense", "index": str(root / "index"),
                                  "precision": "fp32"})
    vectors = retriever.encode_queries([passages[3].text, passages[4].text])
    assert vectors.shape == (2, 32) and vectors.dtype == np.float32
    hits = retriever.search(vectors, k=1)
    assert [h[0].passage_id for h in hits] == [passages[3].id, passages[4].id]
