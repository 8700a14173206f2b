"""The sparse side of phrase search (phrase_index/sparse.py, `PassagePrior` in search.py):
on synthetic vectors, a prior's passages become candidates and its scores join the phrase
scores exactly; on 30 real Wikipedia passages, BM25 turns a conversation into priors, and
`convqa index --phrase --sparse` adds the BM25 index that `convqa answer` and the evaluation
then use (weight 0: the phrase vectors alone)."""
from __future__ import annotations

import itertools
import json
import shutil

import numpy as np
import pytest

from conftest import shared_file
from convqa.front.cli.main import main
from convqa.corpus import PassageStore, iter_article_passages
from convqa.errors import ConfigError, ConvQAError
from convqa.front.evaluation.phrase import PhraseSystem
from phrase_index.answerer import PhrasePipeline
from phrase_index.search import PassagePrior, search_phrases
from phrase_index.sparse import DEFAULT_WEIGHT, SPARSE_DIR, SparsePrior
from phrase_model_helpers import one_thread, tiny_phrase_model
from test_phrase_search import Q_END, Q_START, build, spans, two_plants  # noqa: F401 (the fixture)


def table_prior(rows, scores: dict[int, float]) -> PassagePrior:
    return PassagePrior(np.asarray(rows, dtype=np.int64),
                        lambda asked: np.array([scores.get(int(r), 0.0) for r in asked],
                                               dtype=np.float32))


def test_a_prior_adds_its_passages_and_its_scores(tmp_path, two_plants):  # noqa: F811
    start, end = two_plants
    start[7, 1] += 0.9 * start[3, 2] / np.linalg.norm(start[3, 2])  # a weak phrase in passage 7
    end[7, 3] += 0.9 * end[11, 6] / np.linalg.norm(end[11, 6])
    index = build(tmp_path, start, end)
    plain = search_phrases(index, Q_START, Q_END, 50, candidates=3)[0]
    assert (7, 1, 3) not in spans(plain)  # FAISS proposes neither its start nor its end
    # the prior proposes passage 7 and lifts it above both plants; passage 3 gains 0.5
    prior = table_prior([7], {7: 3.0, 3: 0.5})
    found = search_phrases(index, Q_START, Q_END, 50, candidates=3, priors=[prior])[0]
    assert spans(found)[0] == (7, 1, 3)
    for span in found:
        assert span.passage_score == {7: 3.0, 3: 0.5}.get(span.row, 0.0)
        assert span.score == pytest.approx(span.start_score + span.end_score
                                           + span.passage_score, abs=1e-5)
    # every phrase of passage 7 is a candidate, not only the ones a pass proposed
    assert {(s.start_token, s.end_token) for s in found if s.row == 7} >= {(0, 0), (1, 3)}
    # the plants keep their own phrase scores; a prior that proposes nothing changes nothing
    before = {(s.row, s.start_token, s.end_token): s.score for s in plain}
    assert next(s for s in found if s.row == 11).score == before[(11, 5, 6)]
    empty = search_phrases(index, Q_START, Q_END, 50, candidates=3,
                           priors=[table_prior([], {})])[0]
    assert [(s.row, s.start_token, s.end_token, s.score) for s in empty] == \
        [(s.row, s.start_token, s.end_token, s.score) for s in plain]
    with pytest.raises(ConvQAError, match="2 passage priors for 1 queries"):
        search_phrases(index, Q_START, Q_END, 5, priors=[prior, prior])


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """(root, store, index folder): 30 real passages, a tiny random phrase model's index with
    `--sparse` (BM25 of the same store in index/sparse)."""
    articles = shared_file("wikipedia/topiocqa_wiki_articles.jsonl.gz")
    root = tmp_path_factory.mktemp("sparse")
    passages = list(itertools.islice(iter_article_passages(articles), 30))
    store = PassageStore.build(passages, root / "store", progress=False)
    tiny_phrase_model(seed=0).save(root / "model")
    with one_thread():
        assert main(["index", "--phrase", "--model", str(root / "model"), "--passages",
                     str(root / "store"), "--out", str(root / "index"), "--quiet",
                     "--batch-size", "8", "--sparse", "--preset", "topiocqa"]) == 0
    return root, store, root / "index"


def test_bm25_priors_of_real_passages(real):
    root, store, index = real
    prior = SparsePrior.load(index / SPARSE_DIR, store, weight=4.0, passages=3)
    target = store.at(17)
    question = f"what do you know about {target.title}? [SEP] tell me more"
    words = [w for w in target.text.split() if len(w) > 6][:3]
    (mine, nothing) = prior.priors([question + " " + " ".join(words), "the of and"])
    assert 17 in mine.rows and 1 <= len(mine.rows) <= 3
    assert list(mine.rows) == sorted(mine.rows)
    all_rows = np.arange(len(store))
    scores = mine.scores(all_rows)
    assert scores.max() == pytest.approx(4.0) and scores.min() >= 0
    assert set(np.argsort(-scores)[:len(mine.rows)]) == set(mine.rows.tolist())
    assert len(nothing.rows) == 0 and not nothing.scores(all_rows).any()  # stopwords only
    off = SparsePrior.load(index / SPARSE_DIR, store, weight=0.0).priors([question])[0]
    assert len(off.rows) == 0
    other = PassageStore.build(list(itertools.islice(iter_article_passages(
        shared_file("wikipedia/topiocqa_wiki_articles.jsonl.gz")), 29)), root / "other",
        progress=False)
    with pytest.raises(ConvQAError, match="passages"):
        SparsePrior.load(index / SPARSE_DIR, other)
    with pytest.raises(ConfigError, match="sparse weight must be a number >= 0"):
        SparsePrior.load(index / SPARSE_DIR, store, weight=-1)


def test_answer_and_evaluation_use_the_sparse_side(real, capsys):
    root, store, index = real
    capsys.readouterr()
    with one_thread():  # a rerun keeps the BM25 index it finds
        assert main(["index", "--phrase", "--model", str(root / "model"), "--passages",
                     str(root / "store"), "--out", str(index), "--sparse"]) == 0
    assert "sparse side: kept the BM25 index" in capsys.readouterr().out
    question = "when was it " + " ".join(w for w in store.at(4).text.split() if len(w) > 6)[:80]
    assert main(["answer", "--phrase-index", str(index), question, "--json"]) == 0
    with_sparse = json.loads(capsys.readouterr().out)
    assert "sparse" in with_sparse["timings_ms"]
    assert main(["answer", "--phrase-index", str(index), question, "--json",
                 "--sparse-weight", "0"]) == 0
    without = json.loads(capsys.readouterr().out)
    assert "sparse" not in without["timings_ms"]
    # the tiny model's phrase scores are small: the best BM25 passage's weight decides
    assert with_sparse["answer"]["score"] > without["answer"]["score"]
    pipe = PhrasePipeline.from_folder(index, precision="fp32")
    assert pipe.sparse.weight == DEFAULT_WEIGHT
    result = pipe.answer(question)
    prior = pipe.sparse.priors([result.query_text])[0]
    best = int(prior.rows[np.argmax(prior.scores(prior.rows))])
    assert result.answer.passage_id == store.at(best).id
    assert PhrasePipeline.from_folder(index, sparse_weight=0).sparse is None
    # an evaluation row's fingerprint depends on the sparse settings and the precision
    prints = {PhraseSystem.load({"index": str(index), **extra}).fingerprint()
              for extra in ({}, {"sparse_weight": 0}, {"sparse_weight": 2.0},
                            {"sparse_passages": 5}, {"precision": "fp32"})}
    assert len(prints) == 5
    bare = root / "bare"
    shutil.copytree(index, bare, ignore=shutil.ignore_patterns(SPARSE_DIR))
    assert PhrasePipeline.from_folder(bare).sparse is None
    with pytest.raises(ConfigError, match="has no BM25 index for sparse_weight 2"):
        PhrasePipeline.from_folder(bare, sparse_weight=2)
    assert main(["answer", "--sparse-weight", "1", question]) == 2
    assert "--sparse-weight goes with --phrase-index" in capsys.readouterr().err
    assert main(["index", "--phrase", "--model", str(root / "model"), "--passages",
                 str(root / "store"), "--out", str(root / "x"), "--k1", "1.2"]) == 2
    assert "with --phrase they go with --sparse" in capsys.readouterr().err


def test_bm25_reads_the_whole_conversation(real):
    """The topic is named in turn 1 only; the phrase model's window (the last 6 utterances)
    has dropped it by turn 6, BM25's `oldest_first` query has not."""
    from convqa.history import build_history_strategy
    from convqa.types import Turn

    root, store, index = real
    elsewhere = " ".join(store.at(row).text for row in range(len(store)) if row != 17).lower()
    words = [w for w in store.at(17).text.split()
             if len(w) > 6 and w.isalpha() and w.lower() not in elsewhere][:4]
    assert len(words) == 4
    history = [Turn(f"tell me about {' '.join(words)}", "sure")] + [
        Turn(f"and then {n}?", "yes") for n in ("one", "two", "three", "four")]
    question = "when did that happen?"
    pipe = PhrasePipeline.from_folder(index, precision="fp32", sparse_weight=100)
    query = pipe.format_query(question, history)
    assert words[0] not in query  # the phrase model's text has lost turn 1
    assert query.sparse_text == build_history_strategy("oldest_first").format(question, history)
    assert words[0] in query.sparse_text
    # at weight 100 the tiny model's phrase scores (~15) cannot outvote BM25's best passage
    assert pipe.answer(question, history).answer.passage_id == store.at(17).id
    phrase_text = PhrasePipeline.from_folder(index, precision="fp32", sparse_weight=100,
                                             sparse_history="phrase")
    assert phrase_text.format_query(question, history).sparse_text is None
    assert phrase_text.answer(question, history).answer.passage_id != store.at(17).id
    # the evaluation's retrieval queries carry BM25's text, and its cache key the strategy
    system = PhraseSystem.load({"index": str(index), "sparse_weight": 100})
    formatted = system.history.format(question, history)
    assert formatted == query and formatted.sparse_text == query.sparse_text
    assert system.history.to_dict()["sparse_history"]["name"] == "oldest_first"
    assert system.retrieve_batch([formatted], 1)[0][0].passage_id == store.at(17).id
    other = PhraseSystem.load({"index": str(index), "sparse_weight": 100,
                               "sparse_history": "phrase"})
    assert other.fingerprint() != system.fingerprint()
    with pytest.raises(ConfigError, match="sparse_history"):
        PhraseSystem.load({"index": str(index), "sparse_history": "newest_only"})
