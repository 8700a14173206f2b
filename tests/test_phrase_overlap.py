"""The question-overlap penalty (phrase_index/overlap.py): the overlap of real phrases with a
real TopiOCQA question, the re-ranking at the scores the shipped model gave them, and the shipped
model answering real SQuAD dev questions from their paragraphs, with the penalty (the answer)
and without it (the question's own subject)."""
from __future__ import annotations

import pytest

from conftest import shared_file
from convqa.front.cli.main import main
from convqa.corpus import PassageStore
from convqa.errors import ConfigError
from convqa.front.paths import phrase_spec
from convqa.types import Answer
from phrase_index.overlap import DEFAULT_WEIGHT, check_weight, content_words, question_overlap, \
    rerank

LAKOTA = "who was the lakota leader who was arrested by the us army"
HELENS = "mount st helens is on what type of plate boundary"


def test_overlap_is_the_share_of_the_phrase_words_the_question_holds():
    assert content_words("Sitting Bull was a Hunkpapa Lakota leader") == \
        ["sitting", "bull", "hunkpapa", "lakota", "leader"]
    assert question_overlap("Hunkpapa Lakota leader", LAKOTA) == pytest.approx(2 / 3)
    assert question_overlap("Sitting Bull was a Hunkpapa Lakota leader", LAKOTA) == \
        pytest.approx(2 / 5)
    assert question_overlap("Sitting Bull", LAKOTA) == 0.0
    assert question_overlap("Mount St. Helens", HELENS) == 1.0
    assert question_overlap("who was", LAKOTA) == 0.0  # no content word: nothing to repeat


def test_rerank_takes_the_penalty_off_the_scores():
    # the shipped model's scores for these phrases of Mount_St._Helens#0 (vital corpus index)
    found = [Answer("Mount St. Helens", 68.35, "Mount_St._Helens#0"),
             Answer("Mount St. Helens is an active stratovolcano", 67.22, "Mount_St._Helens#0"),
             Answer("Cascade Volcanic Arc", 66.80, "Mount_St._Helens#0")]
    ranked = rerank(found, HELENS, DEFAULT_WEIGHT)
    assert [a.text for a in ranked] == ["Cascade Volcanic Arc",
                                        "Mount St. Helens is an active stratovolcano",
                                        "Mount St. Helens"]
    assert ranked[0].score == 66.80 and ranked[2].score == pytest.approx(68.35 - 4.0)
    assert ranked[1].score == pytest.approx(67.22 - 4.0 * 3 / 5)
    # a gap wider than the weight keeps the order; weight 0 or no question changes nothing
    assert rerank(found, HELENS, 1.0)[0].text == "Mount St. Helens"
    assert rerank(found, HELENS, 0.0) == found
    assert rerank(found, "", DEFAULT_WEIGHT) == found
    assert found[0].score == 68.35  # the input is not modified


def test_bad_weights_are_refused_in_one_line(capsys):
    assert check_weight(None) == DEFAULT_WEIGHT and check_weight(0) == 0.0
    for bad in (-1, "4", True, float("nan")):
        with pytest.raises(ConfigError, match="overlap weight must be a number >= 0"):
            check_weight(bad)
    with pytest.raises(ConfigError, match="phrase_index: overlap weight must be a number"):
        phrase_spec({"index": "x", "overlap_weight": -2})
    assert phrase_spec({"index": "x", "overlap_weight": 0})["overlap_weight"] == 0
    assert main(["answer", "--overlap-weight", "1", "who?"]) == 2
    assert "--overlap-weight goes with --phrase-index" in capsys.readouterr().err


# SQuAD 2.0 dev questions whose best phrase, for the shipped model reading the gold paragraph,
# is the question's own subject, about 1 point of phrase score above the answer
FLIPS = {"5725d34aec44d21400f3d63d": ("BankAmericard", "Visa Inc"),
         "5725cf3238643c19005acd61": ("Terra preta", "black earth")}


def test_the_shipped_model_answers_instead_of_naming_the_subject(tmp_path):
    from convqa.front.evaluation.phrase import PhraseSystem
    from convqa.loaders.squad import read_squad
    from convqa.types import Passage
    from phrase_index.answerer import PhrasePipeline
    from phrase_index.index import build_phrase_index
    from phrase_index.model import PhraseModel

    data = read_squad(shared_file("squad/dev-v2.0.json"))
    found = {e.id: e for e in data.examples if e.id in FLIPS}
    assert set(found) == set(FLIPS)
    passages = [Passage(f"p{n}", e.context, e.title) for n, e in enumerate(found.values())]
    store = PassageStore.build(passages, tmp_path / "passages", progress=False)
    build_phrase_index(PhraseModel.load("convqa-phrase"), store, tmp_path / "index",
                       start_threshold=None, end_threshold=None, progress=False)
    plain = PhrasePipeline.from_folder(tmp_path / "index", overlap_weight=0, precision="fp32")
    shipped = PhrasePipeline.from_folder(tmp_path / "index", precision="fp32")
    assert shipped.overlap_weight == DEFAULT_WEIGHT
    for (qid, example), passage in zip(found.items(), passages):
        subject, answer = FLIPS[qid]
        question = example.question
        assert plain.answer(question).answer.text == subject
        result = shipped.answer(question)
        assert result.answer.text == answer and result.answer.passage_id == passage.id
        assert passage.text[result.answer.start:result.answer.end] == answer
        assert result.answer.score < plain.answer(question).answer.score
    # an evaluation row's fingerprint depends on the weight
    prints = {PhraseSystem.load({"index": str(tmp_path / "index"), **extra}).fingerprint()
              for extra in ({}, {"overlap_weight": 0}, {"overlap_weight": 2.5})}
    assert len(prints) == 3


def test_gold_reading_leaves_out_the_open_domain_test_turns(tmp_path, capsys):
    """convqa/front/tools/phrase_overlap_gold.py --exclude-dev-of: the held-out turns that are another
    benchmark's answer-evaluable dev turns (the open-domain test) are not read."""
    import json

    from phrase_model_helpers import tiny_phrase_model
    from importlib import import_module
    from training_helpers import TURNS, make_benchmark

    script = import_module("convqa.front.tools.phrase_overlap_gold")
    bench = make_benchmark(tmp_path / "bench")
    # the other corpus holds c4's first turn only (its second has no answer passage there)
    other = make_benchmark(tmp_path / "other",
                           [t[:5] + ((t[5] if t[:2] == ("c4", 1) else []),) + t[6:]
                            for t in TURNS])
    assert script.dev_turns(str(other)) == {"c4_1"}
    tiny_phrase_model().save(tmp_path / "model")
    out = tmp_path / "gold.json"
    common = ["--model", str(tmp_path / "model"), "--benchmark", str(bench), "--weights", "0", "4"]
    assert script.main(common + ["--json", str(out)]) == 0
    assert json.loads(out.read_text())["bench"]["count"] == 2
    assert script.main(common + ["--exclude-dev-of", str(other), "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["bench"]["count"] == 1 and report["excluded_dev_of"] == [str(other)]
    assert set(report["bench"]["f1"]) == {"0.0", "4.0"}
    assert script.main(common + ["--exclude-dev-of", str(bench)]) == 0
    assert "bench: no held-out questions" in capsys.readouterr().out
