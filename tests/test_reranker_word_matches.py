"""retrievers/rerank/word_matches.py: a shortlist also keeps the hits left out whose words best
match the question (`rescore_word_matches`), in the reranker, in the gap scores and in the
tool that reports them; on real TopiOCQA turns the words find the answer passage among its
article's siblings far more often than chance."""
from __future__ import annotations

import json

import pytest

from convqa.errors import ConfigError
from convqa.registry import RERANKERS
from convqa.types import Hit, Passage, Turn
from reader_helpers import single_thread  # noqa: F401 (autouse fixture)
from reranker_helpers import (rescore_gaps_args, scored_passages, tiny_cross_encoder,
                              topic_article_turns)
from retrievers.rerank.reranker import CrossEncoderReranker
from retrievers.rerank.shortlist import choose_gap, gap_scores
from retrievers.rerank.word_matches import (match_text, with_word_matches, word_match_scores,
                                            words)


def test_rare_question_words_weigh_most_and_function_words_nothing():
    texts = ["The castle was built in 1410 by the duke.",
             "The castle has a moat and the castle has towers.",
             "The castle museum opened in 1950.",
             "The castle gardens."]
    scores = word_match_scores("When was THE castle built?", texts)
    # "castle" is in every candidate: it weighs little; "built" singles out the first
    assert scores.index(max(scores)) == 0
    assert scores[1] == scores[2] == scores[3] > 0
    assert scores[0] > scores[1] + 0.5
    assert word_match_scores("the of was", texts) == [0.0] * 4  # function words only
    assert words("Who was the Duke of York?") == {"duke", "york"}
    assert word_match_scores("castle", []) == []


def test_the_best_matches_left_out_join_the_shortlist_in_index_order():
    scores = [0.0, 5.0, 1.0, 3.0, 0.0, 3.0]
    assert with_word_matches([0, 1], scores, 2) == [0, 1, 3, 5]  # 1 is in already
    assert with_word_matches([0, 1], scores, 3) == [0, 1, 2, 3, 5]
    assert with_word_matches([0], scores, 0) == [0]
    assert with_word_matches([0], scores, 9) == [0, 1, 2, 3, 5]  # no word matched: not added
    # a follow-up is matched with the question before it, which often names its subject
    history = [Turn("who built the eiffel tower?", "Gustave Eiffel"), Turn("when?", "1889")]
    assert match_text("how tall is it?", history) == "how tall is it? when?"
    assert match_text("how tall is it?") == "how tall is it?"


PASSAGES = [Passage("p0", "ships dock in the harbour every day", "Port"),
            Passage("p1", "the harbour master keeps the records", "Port"),
            Passage("p2", "the old lighthouse guards the bay", "Port"),
            Passage("p3", "a list of the port's streets", "Port"),
            Passage("p4", "the lighthouse keeper lived on the island", "Port"),
            Passage("p5", "trade grew in the nineteenth century", "Port")]
# p0-p2 close to the best, p3-p5 far below it (standardised)
HITS = [Hit(p.id, s, i + 1) for i, (p, s) in
        enumerate(zip(PASSAGES, [20.0, 19.5, 19.0, 8.0, 7.0, 6.0]))]


def test_the_reranker_also_rescores_the_far_hits_whose_words_match():
    model = tiny_cross_encoder(seed=4).eval()
    near = CrossEncoderReranker.from_model(model, top_n=6, precision="fp32",
                                           rescore_within=1.0, rescore_at_least=1)
    matched = CrossEncoderReranker.from_model(model, top_n=6, precision="fp32",
                                              rescore_within=1.0, rescore_at_least=1,
                                              rescore_word_matches=1)
    calls = scored_passages(matched)
    question, history = "who was the keeper?", [Turn("tell me about the lighthouse", "it is old")]
    assert {h.passage_id for h in near.rerank_turn(question, history, HITS, PASSAGES)} == \
        {"p0", "p1", "p2"}
    kept = matched.rerank_turn(question, history, HITS, PASSAGES)
    # p4 ("lighthouse keeper") is far below the retriever's best but matches the question
    # and the one before it best of the three left out
    assert calls == [["p0", "p1", "p2", "p4"]]
    assert {h.passage_id for h in kept} == {"p0", "p1", "p2", "p4"}
    assert matched.fingerprint() != near.fingerprint()
    # without a shortlist every hit is rescored anyway: the option changes nothing
    every = CrossEncoderReranker.from_model(model, top_n=6, precision="fp32")
    also = CrossEncoderReranker.from_model(model, top_n=6, precision="fp32",
                                           rescore_word_matches=3)
    assert also.fingerprint() == every.fingerprint()
    assert also.rerank_turn(question, history, HITS, PASSAGES) == \
        every.rerank_turn(question, history, HITS, PASSAGES)


@pytest.mark.parametrize("spec, message", [
    ({"rescore_word_matches": -1}, "rescore_word_matches must be an integer >= 0"),
    ({"rescore_word_matches": True}, "option 'rescore_word_matches': expected int"),
    ({"rescore_word_matches": 1.5}, "option 'rescore_word_matches': expected int"),
    ({"second_stage": {"model": "m2", "rescore_word_matches": 2}},
     "rescore_within, rescore_word_matches and rescore_pairs belong to the first"),
])
def test_bad_word_match_options_are_config_errors(spec, message):
    with pytest.raises(ConfigError, match=message):
        RERANKERS.build({"name": "cross_encoder", "model": "m", **spec})


def test_gap_scores_count_the_word_matches_pairs_and_what_they_find():
    retrieved = list(zip("abcdef", [9.0, 8.9, 8.8, 5.0, 4.0, 3.0]))
    matches = [0.0, 0.0, 0.0, 0.0, 2.0, 1.0]          # e matches the question best
    turns = [(retrieved, list("eabcdf"), {"e"}, matches),
             (retrieved, list("abcdef"), {"a"}, matches)]
    plain = gap_scores(turns, gaps=(0.5,), at_least=1)
    with_words = gap_scores(turns, gaps=(0.5,), at_least=1, word_matches=1)
    assert plain[0.5] == {"hits@1": 0.5, "hits@5": 0.5, "pairs": 3.0}
    assert with_words[0.5] == {"hits@1": 1.0, "hits@5": 1.0, "pairs": 4.0}
    assert with_words[None] == plain[None]
    settings = {(None, 0): plain[None], (0.5, 0): plain[0.5], (0.5, 1): with_words[0.5]}
    assert choose_gap([settings], baseline=(None, 0)) == (0.5, 1)
    with pytest.raises(ConfigError, match="match score"):
        gap_scores([(retrieved, list("abcdef"), {"a"})], word_matches=1)


def test_the_tool_reports_gaps_with_word_matches(tmp_path, capsys):
    from convqa.front.tools.rescore_gaps import main

    bench, args = rescore_gaps_args(tmp_path)
    args += ["--word-matches", "0", "2"]
    assert main(args) == 0
    report = json.loads((tmp_path / "r.json").read_text())
    scores = report["benchmarks"][0]["scores"]
    assert {"all", "0.5", "0.5+2", "4+2"} <= set(scores)
    for gap in ("0.5", "1", "2"):
        # two more hits at most, and never fewer hits found
        assert scores[gap]["pairs"] <= scores[f"{gap}+2"]["pairs"] <= scores[gap]["pairs"] + 2
        assert scores[f"{gap}+2"]["pairs"] <= scores["all"]["pairs"]
    chosen = (report["chosen"], report["chosen_word_matches"])
    label = "all" if chosen[0] is None else f"{chosen[0]:g}" + (f"+{chosen[1]}" if chosen[1]
                                                                  else "")
    assert scores[label]["pairs"] == min(
        s["pairs"] for s in scores.values()
        if s["hits@1"] >= scores["all"]["hits@1"] and s["hits@5"] >= scores["all"]["hits@5"])
    assert "H@1" in capsys.readouterr().out
    # against a gap: the cheapest setting at least as good as that gap, or the gap itself
    assert main(args + ["--against", "1"]) == 0
    against = json.loads((tmp_path / "r.json").read_text())
    assert against["against"] == 1.0
    picked = against["chosen"], against["chosen_word_matches"]
    picked_label = f"{picked[0]:g}" + (f"+{picked[1]}" if picked[1] else "")
    assert scores[picked_label]["pairs"] <= scores["1"]["pairs"]
    assert scores[picked_label]["hits@5"] >= scores["1"]["hits@5"]
    assert "at least within 1's" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["--benchmark", str(bench), "--retriever", "bm25", "--word-matches", "-1"])
    assert "--word-matches: counts must be >= 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--benchmark", str(bench), "--retriever", "bm25", "--against", "0.7"])
    assert "--against: one of the gaps scored" in capsys.readouterr().err


@pytest.mark.shared_data
def test_on_real_turns_the_words_find_the_answer_passage_among_its_siblings():
    """TopiOCQA train turns whose topic is one of the first articles of the real Wikipedia
    file (10+ passages) and whose answer is in exactly one of its passages: ranked by their
    word match with the question and the one before it, the answer passage is among the
    article's best 5 in most turns, against 5 / passages by chance."""
    found = chance = turns = 0
    for siblings, holder, text in topic_article_turns(3000):
        scores = word_match_scores(text, [f"{p.title} {p.text}" for p in siblings])
        best = sorted(range(len(siblings)), key=lambda i: (-scores[i], i))[:5]
        turns += 1
        found += holder in best
        chance += 5 / len(siblings)
    assert turns >= 20
    assert found / turns >= 0.5 and found / turns >= 5 * chance / turns


def test_the_module_example_runs():
    import doctest

    import retrievers.rerank.word_matches as module

    result = doctest.testmod(module)
    assert result.attempted >= 2 and result.failed == 0
