"""retrievers/rerank/learned_shortlist.py: a fixed number of pairs a turn, the hits a logistic
model of the retriever's score, the word match and the article's lead passage ranks best
(`rescore_pairs`); its fit, the folder block that records it, the reranker that uses it and
the tool that fits and scores it; on real TopiOCQA turns the fitted model finds the answer
passage among its article's siblings more often than the words alone."""
from __future__ import annotations

import json

import numpy as np
import pytest

from convqa.errors import ConfigError
from convqa.types import Hit, Passage, Turn
from reader_helpers import single_thread  # noqa: F401 (autouse fixture)
from reranker_helpers import (rescore_gaps_args, scored_passages, tiny_cross_encoder,
                              topic_article_turns)
from retrievers.rerank.learned_shortlist import (FEATURES, fit_weights, hit_features, is_lead,
                                                 learned_shortlist, training_rows,
                                                 weights_from_block)
from retrievers.rerank.model import CrossEncoder, write_shortlist
from retrievers.rerank.reranker import CrossEncoderReranker
from retrievers.rerank.word_matches import word_match_scores

WEIGHTS = {"retriever": 1.0, "words": 1.0, "lead": 2.0}


def test_features_are_standardised_scores_and_the_lead_flag():
    features = hit_features([3.0, 2.0, 1.0], [0.0, 0.0, 6.0], ["a#0", "a#12", "b#10"])
    assert features.shape == (3, len(FEATURES))
    assert np.allclose(features[:, 0], [1.2247, 0.0, -1.2247], atol=1e-4)
    assert np.allclose(features[:, 1], [-0.7071, -0.7071, 1.4142], atol=1e-4)
    assert features[:, 2].tolist() == [1.0, 0.0, 0.0]
    assert is_lead("Some#title#0") and not is_lead("p0") and not is_lead("a#10")
    assert hit_features([], [], []).shape == (0, len(FEATURES))
    with pytest.raises(ConfigError, match="one each per hit"):
        hit_features([1.0, 2.0], [0.0], ["a#0", "a#1"])


def test_the_first_hits_stay_and_the_best_scored_others_fill_the_pairs():
    # 0 and 1 kept first; of the others 2 (its words) then 3 (a lead) score best
    features = hit_features([9.0, 8.0, 7.0, 6.0, 5.0], [0.0, 0.0, 2.0, 0.0, 0.0],
                            ["a#4", "a#1", "a#2", "b#0", "a#3"])
    assert learned_shortlist(features, WEIGHTS, 3, 2) == [0, 1, 2]
    assert learned_shortlist(features, WEIGHTS, 4, 2) == [0, 1, 2, 3]
    assert learned_shortlist(features, WEIGHTS, 9, 2) == [0, 1, 2, 3, 4]
    assert learned_shortlist(features, WEIGHTS, 1, 2) == [0, 1]   # at least the first ones
    assert learned_shortlist(features, {**WEIGHTS, "words": 0.0}, 3, 2) == [0, 1, 3]


def test_the_fit_weighs_what_predicts_the_label():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2000, 3))
    x[:, 2] = rng.random(2000) < 0.2
    logit = 2.0 * x[:, 0] + 0.0 * x[:, 1] + 1.5 * x[:, 2] - 2.0
    y = (rng.random(2000) < 1 / (1 + np.exp(-logit))).astype(float)
    weights = fit_weights(x, y)
    assert set(weights) == set(FEATURES)
    assert 1.5 < weights["retriever"] < 2.5 and abs(weights["words"]) < 0.3
    assert 1.0 < weights["lead"] < 2.0
    with pytest.raises(ConfigError, match="same label"):
        fit_weights(x, np.zeros(2000))


def test_training_rows_label_the_hits_the_reranker_puts_in_its_best_5():
    retrieved = [(f"a#{i}", 10.0 - i) for i in range(8)]
    order = ["a#7", "a#0", "a#1", "a#6", "a#2", "a#3", "a#4", "a#5"]
    x, y = training_rows([(retrieved, order, {"a#7"}, [0.0] * 8)], at_least=5)
    assert x.shape == (3, len(FEATURES)) and y.tolist() == [0.0, 1.0, 1.0]  # a#6, a#7 in best 5
    with pytest.raises(ConfigError, match="no hits past"):
        training_rows([(retrieved[:3], order[:3], set(), [0.0] * 3)], at_least=5)


@pytest.mark.parametrize("block, message", [
    ([], "'shortlist_weights' must be a mapping"),
    ({"bm25": 1.0}, r"'shortlist_weights.bm25' must be a mapping"),
    ({"bm25": {"retriever": 1.0, "words": 1.0}}, r"'shortlist_weights.bm25.lead' must be a "),
    ({"bm25": {"retriever": 1.0, "words": "x", "lead": 1.0}}, r"'shortlist_weights.bm25.words' must be a number"),
])
def test_a_bad_block_names_the_file_and_the_entry(block, message):
    with pytest.raises(ConfigError, match=f"m.json: {message}"):
        weights_from_block(block, "m.json")
    assert weights_from_block({"bm25": {**WEIGHTS, "chosen_on": "train"}}, "m.json") == \
        {"bm25": WEIGHTS}


PASSAGES = [Passage("port#3", "ships dock in the harbour every day", "Port"),
            Passage("port#1", "the harbour master keeps the records", "Port"),
            Passage("port#2", "the old tower guards the bay", "Port"),
            Passage("port#0", "Port is a town by the sea", "Port"),
            Passage("port#4", "the lighthouse keeper lived on the island", "Port"),
            Passage("port#5", "trade grew in the nineteenth century", "Port")]
HITS = [Hit(p.id, s, i + 1) for i, (p, s) in
        enumerate(zip(PASSAGES, [20.0, 19.5, 19.0, 8.0, 7.0, 6.0]))]


def test_the_reranker_rescores_the_pairs_its_folder_weighs_for_the_retriever(tmp_path):
    model = tiny_cross_encoder(seed=4)
    model.shortlist_weights = {"bm25": WEIGHTS}
    model.save_pretrained(tmp_path / "rr")
    loaded = CrossEncoder.from_pretrained(tmp_path / "rr").eval()
    assert loaded.shortlist_weights == {"bm25": WEIGHTS}
    reranker = CrossEncoderReranker.from_model(loaded, top_n=6, precision="fp32",
                                               rescore_pairs=4, rescore_at_least=2
                                               ).for_retriever("bm25")
    calls = scored_passages(reranker)
    question, history = "who was the keeper?", [Turn("tell me about the lighthouse", "old")]
    kept = reranker.rerank_turn(question, history, HITS, PASSAGES)
    # the first two always; of the far hits the lead passage (port#0) and the one whose words
    # match the question and the one before it (port#4 "lighthouse keeper")
    assert calls == [["port#3", "port#1", "port#0", "port#4"]]
    assert {h.passage_id for h in kept} == {"port#3", "port#1", "port#0", "port#4"}
    every = CrossEncoderReranker.from_model(loaded, top_n=6, precision="fp32").for_retriever(
        "bm25")
    assert reranker.fingerprint() != every.fingerprint()
    # another retriever has no weights recorded: a clear error, not a silent rule
    other = CrossEncoderReranker.from_model(loaded, top_n=6, rescore_pairs=4
                                            ).for_retriever("dense:x")
    with pytest.raises(ConfigError, match="rescore_pairs needs the learned shortlist's weights "
                                          "for retriever dense:x .* has them for: bm25"):
        other.rerank_turn(question, history, HITS, PASSAGES)
    # recording weights for another retriever keeps the first one's
    write_shortlist(tmp_path / "rr", "dense:x", {**WEIGHTS, "lead": 0.0}, {"chosen_on": "t"})
    again = CrossEncoder.from_pretrained(tmp_path / "rr")
    assert again.shortlist_weights == {"bm25": WEIGHTS, "dense:x": {**WEIGHTS, "lead": 0.0}}
    meta = json.loads((tmp_path / "rr" / "convqa_reranker.json").read_text())
    assert meta["shortlist_weights"]["dense:x"]["chosen_on"] == "t"


def test_the_tool_fits_writes_and_scores_the_learned_shortlist(tmp_path, capsys):
    from convqa.front.tools.rescore_gaps import main

    bench, args = rescore_gaps_args(tmp_path)
    args[args.index("--top-n") + 1] = "12"   # past the best 5 some hits are, some are not
    folder = tmp_path / "reranker"
    assert main(args + ["--learn", "--write", "--pairs", "2", "3"]) == 0
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["written"] and report["learned_on"] == "these turns"
    scores = report["benchmarks"][0]["scores"]
    assert scores["learned 2"]["pairs"] <= 2 and scores["learned 3"]["pairs"] <= 3
    assert scores["learned 3"]["hits@5"] <= scores["all"]["hits@5"]
    recorded = CrossEncoder.from_pretrained(folder).shortlist_weights
    assert list(recorded) == ["bm25"] and recorded["bm25"] == report["learned_weights"]
    assert "learned shortlist (these turns)" in capsys.readouterr().out
    # without --learn the folder's weights are scored: the same rows
    assert main(args + ["--pairs", "2", "3"]) == 0
    again = json.loads((tmp_path / "r.json").read_text())
    assert again["learned_on"] == "the reranker's folder" and not again["written"]
    assert again["benchmarks"][0]["scores"]["learned 3"] == scores["learned 3"]
    for bad, message in ((["--write"], "--write records the learned shortlist's weights"),
                         (["--pairs", "0"], "--pairs: counts must be >= 1")):
        with pytest.raises(SystemExit):
            main(args + bad)
        assert message in capsys.readouterr().err


@pytest.mark.shared_data
def test_on_real_turns_the_fitted_shortlist_finds_the_answer_passage_among_its_siblings():
    """TopiOCQA train turns whose topic is one of the first articles of the real Wikipedia
    file (10+ passages) and whose answer is in exactly one of its passages, the siblings as the
    candidates (no retriever: its score is the same for all): fitted on the even turns, the
    shortlist of 5 holds the answer passage of the odd turns at least as often as the 5 best
    word matches and twice as often as chance, and weighs both the words and the lead
    passage."""
    turns, chance = [], 0.0
    for siblings, holder, text in topic_article_turns(8000):
        matches = word_match_scores(text, [f"{p.title} {p.text}" for p in siblings])
        features = hit_features([0.0] * len(siblings), matches, [p.id for p in siblings])
        turns.append((features, holder, matches))
        chance += 5 / len(siblings)
    assert len(turns) >= 40
    fit, held = turns[0::2], turns[1::2]
    weights = fit_weights(np.vstack([f for f, _, _ in fit]),
                          np.concatenate([np.arange(len(f)) == h for f, h, _ in fit]
                                         ).astype(float))
    assert weights["words"] > 0 and weights["lead"] > 0
    learned = sum(h in learned_shortlist(f, weights, 5, 0) for f, h, _ in held)
    words = sum(h in sorted(range(len(m)), key=lambda i: (-m[i], i))[:5] for _, h, m in held)
    assert learned >= words and learned / len(held) >= 2 * chance / len(turns)


def test_the_module_example_runs():
    import doctest

    import retrievers.rerank.learned_shortlist as module

    result = doctest.testmod(module)
    assert result.attempted >= 2 and result.failed == 0
