"""BM25: ranking on a hand-made corpus, scores worked out by hand, streaming build equal to bm25s's
own path, save/load, presets, backends, query cleanup, history strategies as the query."""
from __future__ import annotations

import doctest
import importlib.util
import json
import math

import pytest

import retrievers.bm25 as bm25_module
from convqa.errors import ConfigError, ConvQAError, DataError
from convqa.history import build_history_strategy
from convqa.registry import RETRIEVERS
from convqa.types import Passage, Turn
from retrievers.base import ConversationalRetriever
from retrievers.bm25 import AUTO_NUMBA_BATCH, PRESETS, BM25Config, BM25Retriever

# No titles, so the indexed text is exactly the text. Tokens (lowercase, 2+ characters,
# Lucene's English stopwords removed): a = [apple, banana], b = [banana, cherry, cherry],
# c = [durian]; 3 documents, average length 2.
HAND = [Passage("a", "apple banana"), Passage("b", "banana cherry cherry"), Passage("c", "durian")]


# Tests use the numpy backend: with numba installed, "auto" would compile it (seconds) first.
NUMPY = BM25Config(backend="numpy")


def lucene_bm25(tf: int, df: int, dl: int, n: int = 3, avgdl: float = 2.0,
                k1: float = 0.9, b: float = 0.4) -> float:
    """Lucene's BM25 (Kamphuis et al. 2020), written out from the formula."""
    idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
    return idf * tf / (tf + k1 * (1 - b + b * dl / avgdl))


@pytest.fixture(scope="module")
def hand() -> BM25Retriever:
    return BM25Retriever.build(HAND, NUMPY)


def test_scores_match_the_formula_worked_by_hand(hand):
    hits = hand.retrieve("cherry", k=3)
    assert [h.passage_id for h in hits] == ["b"]  # the only document with the term
    # tf=2, df=1, dl=3: idf = ln(1 + 2.5/1.5) = 0.98083, tf part = 2 / (2 + 0.9 * 1.2) = 0.64935
    assert hits[0].score == pytest.approx(0.636903, abs=1e-5)
    assert hits[0].score == pytest.approx(lucene_bm25(tf=2, df=1, dl=3), rel=1e-5)
    # "banana" is in a (dl=2) and b (dl=3): the shorter document wins, ranks are 1 and 2.
    hits = hand.retrieve("banana", k=10)
    assert [(h.passage_id, h.rank) for h in hits] == [("a", 1), ("b", 2)]
    assert hits[0].score == pytest.approx(lucene_bm25(1, 2, 2), rel=1e-5)
    assert hits[1].score == pytest.approx(lucene_bm25(1, 2, 3), rel=1e-5)
    # Two terms add up; case and punctuation do not matter.
    both = hand.retrieve("APPLE, banana!", k=1)[0]
    assert both.passage_id == "a"
    assert both.score == pytest.approx(lucene_bm25(1, 1, 2) + lucene_bm25(1, 2, 2), rel=1e-5)


def test_queries_without_a_usable_term_get_no_hits(hand):
    assert hand.retrieve("the of and is", k=5) == []      # stopwords only
    assert hand.retrieve("zebra", k=5) == []              # absent from the corpus
    assert hand.retrieve("", k=5) == []
    assert hand.retrieve("a I", k=5) == []               # one-letter tokens are not tokens
    # A batch mixes them freely, answers stay aligned with the queries.
    batch = hand.retrieve_batch(["zebra", "durian", "the"], k=5)
    assert [[h.passage_id for h in hits] for hits in batch] == [[], ["c"], []]
    with pytest.raises(ConfigError):
        hand.retrieve("durian", k=0)


def test_title_is_indexed():
    r = BM25Retriever.build([Passage("x", "Some text.", "Zanzibar"), Passage("y", "Other text.")],
                            NUMPY)
    assert [h.passage_id for h in r.retrieve("zanzibar", 5)] == ["x"]


def test_streaming_build_equals_bm25s_reference(tmp_path):
    """Our streamed token ids and lean CSC assembly give bm25s's own scores exactly."""
    import bm25s
    import numpy as np

    passages = [Passage(f"p{i}", text) for i, text in enumerate([
        "Paris is the capital and largest city of France.",
        "Berlin is the capital of Germany; Berlin has museums.",
        "The Seine flows through Paris, Paris, Paris.",
        "Germany borders France.", "Capital letters and city lights.", "Nothing here."])]
    ours = BM25Retriever.build(iter(passages), NUMPY)  # a generator: read once
    reference = bm25s.BM25(k1=0.9, b=0.4)
    reference.index(bm25s.tokenize([p.text for p in passages], stopwords="en",
                                   show_progress=False), show_progress=False)
    for query in (["paris"], ["capital", "city"], ["germany", "berlin", "france"]):
        assert np.allclose(ours.model.get_scores(query), reference.get_scores(query),
                           rtol=0, atol=1e-6)


def test_empty_corpus_is_an_error():
    with pytest.raises(ConvQAError, match="empty corpus"):
        BM25Retriever.build([])


def test_save_load_round_trip(hand, tmp_path):
    hand.save(tmp_path / "idx")
    loaded = BM25Retriever.load(tmp_path / "idx")
    assert loaded.passage_ids == ["a", "b", "c"]
    assert loaded.config.params() == (0.9, 0.4)
    for query in ("banana", "apple cherry", "durian banana"):
        assert loaded.retrieve(query, 3) == hand.retrieve(query, 3)
    assert loaded.fingerprint() == hand.fingerprint()  # set on save
    # Saving again over it is allowed (atomic replace); the fingerprint is a content hash.
    hand.save(tmp_path / "idx")
    assert BM25Retriever.load(tmp_path / "idx").fingerprint() == loaded.fingerprint()
    other = BM25Retriever.build(HAND[:2], NUMPY)
    other.save(tmp_path / "other")
    assert other.fingerprint() != loaded.fingerprint()
    # Through the registry, as configs name it.
    built = RETRIEVERS.build({"name": "bm25", "index": str(tmp_path / "idx"), "backend": "numpy"})
    assert built.retrieve("cherry", 1) == hand.retrieve("cherry", 1)


def test_presets_and_overrides(tmp_path):
    assert BM25Config().params() == (0.9, 0.4)
    assert BM25Config(preset="topiocqa").params() == (0.9, 0.4)
    assert BM25Config(preset="qrecc").params() == (0.82, 0.68)
    assert BM25Config(preset="qrecc", k1=1.2).params() == (1.2, 0.68)
    assert set(PRESETS) == {"default", "topiocqa", "qrecc"}
    with pytest.raises(ConfigError, match="unknown preset 'bm42'"):
        BM25Config(preset="bm42").params()
    r = BM25Retriever.build(HAND, BM25Config(preset="qrecc", backend="numpy"))
    assert (r.model.k1, r.model.b) == (0.82, 0.68)
    assert r.retrieve("cherry", 1)[0].score == pytest.approx(
        lucene_bm25(2, 1, 3, k1=0.82, b=0.68), rel=1e-5)
    r.save(tmp_path / "q")
    with pytest.raises(ConfigError, match=r"built with k1,b=\(0.82, 0.68\)"):
        BM25Retriever.load(tmp_path / "q", BM25Config(preset="default", backend="numpy"))
    assert BM25Retriever.load(tmp_path / "q", BM25Config(preset="qrecc", backend="numpy")
                              ).model.k1 == 0.82
    # Without preset or k1/b, a loaded index keeps the parameters it was built with.
    plain = RETRIEVERS.build({"name": "bm25", "index": str(tmp_path / "q"), "backend": "numpy"})
    assert plain.config.params() == (0.82, 0.68)
    assert plain.retrieve("cherry", 1) == r.retrieve("cherry", 1)


def test_all_scores_are_the_retrieved_scores_for_every_passage(hand):
    """`all_scores` (the phrase index's sparse side) scores every passage as `retrieve` does,
    0 where a passage lacks every query word, None for a query without a known word."""
    banana, nothing, separated = hand.all_scores(["banana", "the zebra", "cherry [SEP]"])
    assert banana.tolist() == pytest.approx([lucene_bm25(1, 2, 2), lucene_bm25(1, 2, 3), 0.0],
                                            rel=1e-5)
    assert nothing is None
    assert separated.tolist() == pytest.approx([0.0, lucene_bm25(2, 1, 3), 0.0], rel=1e-5)


def test_separators_are_stripped_from_queries():
    """History strategies join utterances with " [SEP] "; left in, it is the word "sep"."""
    corpus = HAND + [Passage("d", "Sep 2001 events")]
    r = BM25Retriever.build(corpus, NUMPY)
    assert [h.passage_id for h in r.retrieve("durian [SEP] durian [SEP]", 5)] == ["c"]
    raw = BM25Retriever.build(corpus, BM25Config(strip="", backend="numpy"))
    assert {h.passage_id for h in raw.retrieve("durian [SEP] durian [SEP]", 5)} == {"c", "d"}
    with pytest.raises(ConfigError, match="not a valid regular expression"):
        RETRIEVERS.make_config("bm25", {"strip": "[unclosed"})


def test_backends():
    assert BM25Config(backend="numpy").initial_backend() == "numpy"
    assert BM25Config().initial_backend() == "numpy"  # "auto" starts on numpy
    with pytest.raises(ConfigError, match="unknown backend"):
        BM25Config(backend="gpu").initial_backend()
    if importlib.util.find_spec("numba") is None:
        with pytest.raises(ConfigError, match="needs the numba package"):
            BM25Config(backend="numba").initial_backend()
        # "auto" stays on numpy for large batches too when numba is absent.
        r = BM25Retriever.build(HAND)
        r.retrieve_batch(["banana"] * AUTO_NUMBA_BATCH, 2)
        assert r.model.backend == "numpy"


@pytest.mark.slow
def test_numba_backend_gives_the_numpy_ranking(tmp_path):
    """Compiling numba's scorer takes seconds, hence slow; skipped where numba is absent."""
    pytest.importorskip("numba")
    queries = ["banana", "cherry apple"]
    numpy_hits = BM25Retriever.build(HAND, NUMPY).retrieve_batch(queries, 3)
    fast = BM25Retriever.build(HAND, BM25Config(backend="numba"))
    assert fast.model.backend == "numba"
    for ours, theirs in zip(fast.retrieve_batch(queries, 3), numpy_hits):
        assert [h.passage_id for h in ours] == [h.passage_id for h in theirs]
        assert [h.score for h in ours] == pytest.approx([h.score for h in theirs], rel=1e-6)
    fast.save(tmp_path / "n")
    assert BM25Retriever.load(tmp_path / "n", BM25Config(backend="numba")).model.backend == "numba"
    # "auto": numpy for a few queries, numba from the first large batch on.
    auto = BM25Retriever.build(HAND)
    auto.retrieve_batch(queries, 3)
    assert auto.model.backend == "numpy"
    many = auto.retrieve_batch(queries * AUTO_NUMBA_BATCH, 3)
    assert auto.model.backend == "numba"
    assert many[:2] == fast.retrieve_batch(queries, 3)


def test_bad_index_folders_are_one_line_errors(hand, tmp_path):
    with pytest.raises(DataError, match="BM25 index not found") as exc:
        BM25Retriever.load(tmp_path / "nowhere")
    assert "\n" not in str(exc.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="not a convqa BM25 index"):
        BM25Retriever.load(tmp_path / "empty")
    hand.save(tmp_path / "idx")
    meta = tmp_path / "idx" / "convqa_bm25.json"
    good = meta.read_text(encoding="utf-8")
    meta.write_text(good[:20], encoding="utf-8")
    with pytest.raises(DataError, match="damaged BM25 metadata"):
        BM25Retriever.load(tmp_path / "idx")
    data = json.loads(good)
    data["passage_ids"] = ["a", "b"]
    meta.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(DataError, match="3 documents but 2 passage ids"):
        BM25Retriever.load(tmp_path / "idx")
    with pytest.raises(ConfigError, match="option 'index'"):
        RETRIEVERS.build("bm25")
    (tmp_path / "notidx").mkdir()
    (tmp_path / "notidx" / "keep.txt").write_text("x", encoding="utf-8")
    with pytest.raises(ConvQAError, match="not a BM25 index; not replacing"):
        hand.save(tmp_path / "notidx")


def test_history_strategy_is_the_query(hand, minilm_tokenizer):
    """The shortcut inputs are one setting: the same index, different query texts."""
    history = [Turn("tell me about apple", "it goes with banana"), Turn("and then?", "durian")]
    question = "what about cherry?"
    expected = {
        "question_only": "what about cherry?",
        "last_answer": "durian",
        "history_only": "tell me about apple [SEP] it goes with banana [SEP] and then? [SEP] "
                        "durian",
        "full": "tell me about apple [SEP] it goes with banana [SEP] and then? [SEP] durian "
                "[SEP] what about cherry?",
        "current_first": "what about cherry? [SEP] durian [SEP] and then? [SEP] it goes with "
                         "banana [SEP] tell me about apple",
    }
    top = {"question_only": "b", "last_answer": "c", "history_only": "a"}
    for name, text in expected.items():
        strategy = build_history_strategy(name)
        strategy._tokenizer = minilm_tokenizer
        conversational = ConversationalRetriever(hand, strategy)
        assert conversational.query_text(question, history) == text
        hits = conversational.retrieve(question, history, k=3)
        if name in top:
            assert hits[0].passage_id == top[name]
        else:  # every term of the corpus is in the query: every document is a hit
            assert {h.passage_id for h in hits} == {"a", "b", "c"}
    # Turn 1 has no previous answer: an empty query, no hits.
    last = ConversationalRetriever(hand, build_history_strategy("last_answer"))
    assert last.query_text("what about cherry?", []) == ""
    assert last.retrieve("what about cherry?", [], k=3) == []


def test_module_doctest():
    result = doctest.testmod(bm25_module)
    assert result.attempted >= 1 and result.failed == 0


def test_for_store_loads_a_saved_index_that_belongs_and_builds_one_otherwise(tmp_path):
    from convqa.corpus import PassageStore

    store = PassageStore.build(HAND, tmp_path / "passages", progress=False)
    built = BM25Retriever.for_store(store, tmp_path / "no-index-here")
    assert built.retrieve("cherry", 1)[0].passage_id == "b"
    BM25Retriever.build_from_store(store).save(tmp_path / "bm25")
    loaded = BM25Retriever.for_store(store, tmp_path / "bm25")
    assert loaded.fingerprint() == BM25Retriever.load(tmp_path / "bm25").fingerprint()
    assert loaded.retrieve("apple", 3) == built.retrieve("apple", 3)
    other = PassageStore.build(HAND[:2], tmp_path / "other", progress=False)
    with pytest.raises(ConvQAError, match="index has 3 passages but the store"):
        BM25Retriever.for_store(other, tmp_path / "bm25")
