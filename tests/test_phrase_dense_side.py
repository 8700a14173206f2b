"""The dense side of phrase search (phrase_index/dense_prior.py, `PassagePrior.plus`): the
retriever's scores scaled and looked up exactly; on 30 real Wikipedia passages, `convqa index
--phrase --dense-prior` adds a dense index that `convqa answer`, the pipeline and the
evaluation then use beside BM25 (weight 0: not at all)."""
from __future__ import annotations

import itertools
import json
import pickle
import shutil

import numpy as np
import pytest

from conftest import shared_file
from convqa.front.cli.main import main
from convqa.corpus import PassageStore, iter_article_passages
from convqa.errors import ConfigError, ConvQAError
from convqa.front.evaluation.phrase import PhraseSystem
from convqa.front.paths import phrase_spec
from convqa.history import build_history_strategy
from convqa.types import Turn
from phrase_index.answerer import PhrasePipeline, PhraseQuery
from phrase_index.dense_prior import (DEFAULT_WEIGHT, DENSE_DIR, DensePrior, add_dense_side,
                                      default_factory, scaled_prior)
from phrase_index.search import PassagePrior
from phrase_index.sparse import SPARSE_DIR
from phrase_model_helpers import one_thread, tiny_phrase_model
from test_dense_model import make_tiny_bert

ARTICLES = "wikipedia/topiocqa_wiki_articles.jsonl.gz"


def test_scores_are_min_max_scaled_over_the_retrieved_passages():
    prior = scaled_prior(np.array([9, 2, 7]), np.array([10.0, 30.0, 20.0]), weight=4.0)
    assert prior.rows.tolist() == [2, 7, 9]
    np.testing.assert_allclose(prior.scores(np.array([7, 2, 9, 0, 5, 11])),
                               [2.0, 4.0, 0.0, 0.0, 0.0, 0.0])
    assert prior.scores(np.array([], dtype=np.int64)).shape == (0,)
    tied = scaled_prior(np.array([4, 3]), np.array([5.0, 5.0]), weight=8.0)
    np.testing.assert_allclose(tied.scores(np.array([3, 4, 6])), [8.0, 8.0, 0.0])
    empty = scaled_prior(np.zeros(0), np.zeros(0), weight=8.0)
    assert len(empty.rows) == 0 and not empty.scores(np.arange(3)).any()


def test_two_priors_sum_and_propose_the_passages_of_both():
    sparse = PassagePrior(np.array([1, 2]), lambda rows: rows.astype(np.float32) / 10)
    both = sparse.plus(scaled_prior(np.array([5, 2]), np.array([1.0, 3.0]), weight=4.0))
    assert both.rows.tolist() == [1, 2, 5]
    np.testing.assert_allclose(both.scores(np.array([1, 2, 5, 7])), [0.1, 4.2, 0.5, 0.7],
                               rtol=1e-6)


def passages_of(count: int):
    return list(itertools.islice(iter_article_passages(shared_file(ARTICLES)), count))


@pytest.fixture(scope="module")
def real(tmp_path_factory, minilm_tokenizer):
    """(root, store, index folder, encoder): 30 real passages and a tiny random phrase model's
    index with `--sparse --dense-prior` (a tiny random dual encoder's SQ8 index in dense/)."""
    root = tmp_path_factory.mktemp("dense-side")
    store = PassageStore.build(passages_of(30), root / "store", progress=False)
    tiny_phrase_model(seed=0).save(root / "model")
    encoder = make_tiny_bert(root / "encoder", minilm_tokenizer)
    with one_thread():
        assert main(["index", "--phrase", "--model", str(root / "model"), "--passages",
                     str(root / "store"), "--out", str(root / "index"), "--quiet",
                     "--batch-size", "8", "--precision", "fp32", "--sparse",
                     "--dense-prior", str(encoder)]) == 0
    return root, store, root / "index", encoder


def test_the_dense_side_is_an_index_of_the_same_passages(real):
    root, store, index, encoder = real
    meta = json.loads((index / DENSE_DIR / "dense_index.json").read_text())
    assert meta["factory"] == "SQ8" == default_factory(30) and meta["count"] == 30
    assert default_factory(220_873) == "IVF1024,SQ8"  # an exhaustive scan costs 15 ms there
    assert meta["corpus_checksum"] == store.checksum
    prior = DensePrior.load(index / DENSE_DIR, store, weight=4.0, passages=5, precision="fp32")
    texts = [store.at(row).text for row in (3, 17)]
    found = prior.priors(texts)
    hits = prior.retriever.retrieve_batch(texts, k=5)
    for mine, ranked in zip(found, hits):
        assert sorted(mine.rows.tolist()) == sorted(store.index(h.passage_id) for h in ranked)
        scores = mine.scores(np.arange(len(store)))
        assert scores[store.index(ranked[0].passage_id)] == pytest.approx(4.0)
        assert scores[store.index(ranked[-1].passage_id)] == pytest.approx(0.0)
        assert np.count_nonzero(scores) <= 4   # the 5th is 0, passages outside them too
    off = DensePrior.load(index / DENSE_DIR, store, weight=0.0, precision="fp32")
    assert [len(p.rows) for p in off.priors(texts)] == [0, 0]
    other = PassageStore.build(passages_of(29), root / "other", progress=False)
    with pytest.raises(ConvQAError, match="passages|checksum|corpus"):
        DensePrior.load(index / DENSE_DIR, other)
    with pytest.raises(ConfigError, match="dense weight must be a number >= 0"):
        DensePrior.load(index / DENSE_DIR, store, weight=-1)


def test_answer_and_evaluation_use_the_dense_side(real, capsys):
    root, store, index, encoder = real
    capsys.readouterr()
    with one_thread():  # a rerun keeps the dense index it finds
        assert main(["index", "--phrase", "--model", str(root / "model"), "--passages",
                     str(root / "store"), "--out", str(index), "--dense-prior",
                     str(encoder)]) == 0
    assert "dense side: kept the dense index" in capsys.readouterr().out
    question = "when was it " + " ".join(w for w in store.at(4).text.split() if len(w) > 6)[:80]
    assert main(["answer", "--phrase-index", str(index), question, "--json"]) == 0
    both = json.loads(capsys.readouterr().out)
    assert {"sparse", "dense"} <= set(both["timings_ms"])
    assert main(["answer", "--phrase-index", str(index), question, "--json",
                 "--dense-weight", "0"]) == 0
    assert "dense" not in json.loads(capsys.readouterr().out)["timings_ms"]
    assert main(["answer", "--dense-weight", "1", question]) == 2
    assert "--dense-weight goes with --phrase-index" in capsys.readouterr().err

    # BM25 and the overlap penalty off, a weight far above the tiny model's phrase scores
    # (about 7): the best retrieved passage answers the turn
    pipe = PhrasePipeline.from_folder(index, precision="fp32", sparse_weight=0,
                                      overlap_weight=0, dense_weight=1000)
    assert pipe.sparse is None and pipe.dense.weight == 1000
    assert PhrasePipeline.from_folder(index).dense.weight == DEFAULT_WEIGHT
    turns = [Turn("who was the king", "a king")]
    query = pipe.format_query(question, turns)
    assert isinstance(query, PhraseQuery) and pickle.loads(pickle.dumps(query)).dense_text == \
        build_history_strategy("oldest_first").format(question, turns) == query.dense_text
    both = PhrasePipeline.from_folder(index, precision="fp32").format_query(question, turns)
    assert both.dense_text is both.sparse_text  # one rendering, formatted once
    assert both.dense_text == query.dense_text
    result = pipe.answer(question, turns)
    prior = pipe.dense.priors([query.dense_text])[0]
    best = int(prior.rows[np.argmax(prior.scores(prior.rows))])
    assert result.answer.passage_id == store.at(best).id
    spans = pipe.searcher.spans(*pipe.encode([query]), 40, [prior])[0]
    assert spans[0].row == best and spans[0].passage_score == pytest.approx(1000)

    # an evaluation row's fingerprint depends on the dense settings; a row without one
    # keeps the fingerprint it had before the dense side existed
    prints = {PhraseSystem.load({"index": str(index), **extra}).fingerprint()
              for extra in ({}, {"dense_weight": 0}, {"dense_weight": 2.0},
                            {"dense_passages": 5}, {"dense_history": "question_only"})}
    assert len(prints) == 5
    with pytest.raises(ConfigError, match="phrase_index: dense weight must be"):
        phrase_spec({"index": str(index), "dense_weight": -2})
    with pytest.raises(ConfigError, match="phrase_index: dense_history"):
        phrase_spec({"index": str(index), "dense_history": "no-such-strategy"})

    # a folder without dense/ answers without it, and refuses a dense weight; another dense
    # index can be named
    bare = root / "bare"
    shutil.copytree(index, bare, ignore=shutil.ignore_patterns(DENSE_DIR, SPARSE_DIR))
    assert PhrasePipeline.from_folder(bare).dense is None
    with pytest.raises(ConfigError, match="has no dense index for dense_weight 2"):
        PhrasePipeline.from_folder(bare, dense_weight=2)
    named = PhrasePipeline.from_folder(bare, dense_index=index / DENSE_DIR, precision="fp32")
    assert named.dense is not None and named.dense.retriever.store.checksum == store.checksum
    with pytest.raises(ConfigError, match="not a dense index"):
        PhrasePipeline.from_folder(bare, dense_index=root / "store")


def test_drop_dump_removes_the_dense_vectors(real, tmp_path):
    root, store, index, encoder = real
    copy = tmp_path / "index"
    shutil.copytree(index, copy)
    assert (copy / DENSE_DIR / "vectors").is_dir()
    assert add_dense_side(copy, store, str(encoder), drop_vectors=True) is False
    assert not (copy / DENSE_DIR / "vectors").exists()
    assert PhrasePipeline.from_folder(copy, precision="fp32").dense is not None
    other = PassageStore.build(passages_of(29), tmp_path / "other", progress=False)
    with pytest.raises(ConvQAError, match="corpus mismatch"):
        add_dense_side(copy, other, str(encoder))
