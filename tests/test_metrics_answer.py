"""EM/F1 golden tests; every expected value is worked out by hand in the comment beside it."""
from __future__ import annotations

import csv
import json

import pytest

from convqa.errors import DataError
from convqa.metrics import (
    UNANSWERABLE,
    exact_match,
    f1,
    leave_one_out,
    max_over_golds,
    normalize_answer,
    score_answer,
    score_answers,
    squad_golds,
)
from convqa.types import QueryId
from conftest import shared_file


@pytest.mark.parametrize("text, expected", [
    ("The Beatles!", "beatles"),                 # lower, "!" removed, "the" dropped
    ("  Hello,   World  ", "hello world"),       # "," removed, runs of spaces collapsed
    ("U.S. Army", "us army"),                    # periods deleted, not turned into spaces
    ("the-end", "theend"),                       # punctuation goes first: "theend" is no article
    ("An apple a day", "apple day"),             # a/an/the as whole words only
    ("Theatre and another", "theatre and another"),  # "the"/"an" inside words stay
    ("A", ""),                                   # nothing left
    ("a\tcat\nsat", "cat sat"),                  # tabs/newlines are whitespace too
    ("\u201cThe\u201d caf\u00e9 \u2014 na\u00efve", "\u201c \u201d caf\u00e9 \u2014 na\u00efve"),
    # ^ curly quotes and the em dash are not ASCII punctuation, so they stay; "the" between
    #   them is still a whole word (\b is Unicode-aware) and goes.
    ("\u00c9COLE", "\u00e9cole"),                # Unicode lowercasing
    ("UNANSWERABLE", "unanswerable"),            # TopiOCQA's marker is an ordinary word
])
def test_normalize_answer(text, expected):
    assert normalize_answer(text) == expected


def test_exact_match_after_normalization():
    assert exact_match("the Eiffel Tower.", "Eiffel tower") == 1.0
    assert exact_match("Eiffel", "Eiffel Tower") == 0.0


def test_f1_partial_overlap():
    # pred [cat, sat, on, mat] (4), gold [cat, on, mat] (3): common 3
    # P = 3/4, R = 3/3, F1 = 2 * 0.75 * 1 / 1.75 = 6/7
    assert f1("the cat sat on the mat", "a cat on a mat") == pytest.approx(6 / 7)


def test_f1_counts_repeated_tokens_once_per_gold_occurrence():
    # pred [paris x3], gold [paris]: common = min(3, 1) = 1; P = 1/3, R = 1
    # F1 = 2 * (1/3) * 1 / (4/3) = 1/2
    assert f1("Paris Paris Paris", "Paris") == pytest.approx(0.5)


def test_f1_no_overlap_is_zero():
    assert f1("London", "Paris") == 0.0


def test_empty_prediction_and_empty_gold():
    assert (exact_match("", "Paris"), f1("", "Paris")) == (0.0, 0.0)
    assert (exact_match("Paris", ""), f1("Paris", "")) == (0.0, 0.0)
    # SQuAD v2: both empty -> 1; "the" normalizes to empty as well
    assert (exact_match("", ""), f1("", "")) == (1.0, 1.0)
    assert (exact_match("the", ""), f1("the", "")) == (1.0, 1.0)


GOLDS_3 = ["Barack Obama", "Obama", "President Barack Obama"]


def test_leave_one_out_three_golds():
    # F1 of "Obama" against each gold:
    #   "barack obama": common 1, P = 1, R = 1/2 -> 2 * 0.5 / 1.5 = 2/3
    #   "obama": 1
    #   "president barack obama": P = 1, R = 1/3 -> 2 * (1/3) / (4/3) = 1/2
    # leave out gold 0 -> max(1, 1/2) = 1; gold 1 -> max(2/3, 1/2) = 2/3; gold 2 -> max(2/3, 1) = 1
    # F1 = (1 + 2/3 + 1) / 3 = 8/9
    assert leave_one_out(f1, "Obama", GOLDS_3) == pytest.approx(8 / 9)
    # EM per gold 0, 1, 0 -> leave-one-out maxima 1, 0, 1 -> EM = 2/3
    assert leave_one_out(exact_match, "Obama", GOLDS_3) == pytest.approx(2 / 3)
    # SQuAD convention: plain max over golds -> 1 and 1
    assert max_over_golds(f1, "Obama", GOLDS_3) == 1.0
    assert score_answer("Obama", GOLDS_3, "squad") == {"em": 1.0, "f1": 1.0}


def test_leave_one_out_single_gold_is_that_gold():
    # "the cat" -> [cat]; "a cat sat" -> [cat, sat]: P = 1, R = 1/2, F1 = 2/3
    assert leave_one_out(f1, "the cat", ["a cat sat"]) == pytest.approx(2 / 3)


def test_unanswerable_is_scored_literally():
    assert score_answer(UNANSWERABLE, [UNANSWERABLE], "topiocqa") == {"em": 1.0, "f1": 1.0}
    assert score_answer("unanswerable.", [UNANSWERABLE], "topiocqa") == {"em": 1.0, "f1": 1.0}
    # abstaining with "" earns nothing on TopiOCQA: [] vs [unanswerable] -> 0
    assert score_answer("", [UNANSWERABLE], "topiocqa") == {"em": 0.0, "f1": 0.0}


def test_squad_drops_golds_that_normalize_to_nothing():
    # SQuAD v2: ["the", "Paris"] -> ["Paris"]; so "" scores 0
    assert squad_golds(["the", "Paris"]) == ["Paris"]
    assert score_answer("", ["the", "Paris"], "squad") == {"em": 0.0, "f1": 0.0}
    # TopiOCQA keeps "the": leave out "the" -> vs Paris 0; leave out Paris -> vs "the" 1 -> 1/2
    assert score_answer("", ["the", "Paris"], "topiocqa") == {"em": 0.5, "f1": 0.5}
    # only empty golds -> the no-answer gold [""]
    assert squad_golds(["", "a"]) == [""]
    assert score_answer("", ["", "a"], "squad") == {"em": 1.0, "f1": 1.0}
    assert score_answer("x", [], "squad") == {"em": 0.0, "f1": 0.0}


def test_score_answers_percentages_missing_and_extra():
    predictions = {"1_1": "Obama", "1_2": "the cat", "9_9": "ignored"}
    golds = {"1_1": GOLDS_3, "1_2": ["a cat sat"], "1_3": ["Paris"]}
    result = score_answers(predictions, golds, convention="topiocqa")
    # per query (EM, F1): 1_1 (2/3, 8/9) as above; 1_2 (0, 2/3); 1_3 missing -> (0, 0)
    # EM = 100 * (2/3) / 3 = 22.22...; F1 = 100 * (8/9 + 2/3) / 3 = 100 * 14/27 = 51.85...
    assert result["em"] == pytest.approx(200 / 9)
    assert result["f1"] == pytest.approx(1400 / 27)
    assert (result["count"], result["missing"], result["extra"]) == (3, 1, 1)
    assert result["per_query"]["1_3"] == {"em": 0.0, "f1": 0.0}
    assert result["per_query"]["1_2"]["f1"] == pytest.approx(2 / 3)


def test_score_answers_accepts_query_id_keys():
    result = score_answers({QueryId("7", 2): "Paris"}, {"7_2": ["Paris"]})
    assert (result["em"], result["count"], result["missing"]) == (100.0, 1, 0)


@pytest.mark.parametrize("predictions, golds, field", [
    ({"1_1": "x"}, {"1_1": "Paris"}, "1_1"),          # bare string would split into letters
    ({"1_1": "x"}, {"1_1": ["Paris", 3]}, "1_1"),
    ({"1_1": None}, {"1_1": ["Paris"]}, "1_1"),
])
def test_bad_answer_input_names_the_query(predictions, golds, field):
    with pytest.raises(DataError) as err:
        score_answers(predictions, golds)
    assert f"field '{field}'" in str(err.value)


def test_bad_keys_and_convention():
    with pytest.raises(DataError, match="query ids must be strings"):
        score_answers({("1", 1): "x"}, {"1_1": ["x"]})
    with pytest.raises(DataError, match="given twice"):
        score_answers({"1_1": "x", QueryId("1", 1): "y"}, {"1_1": ["x"]})
    with pytest.raises(DataError, match="unknown answer convention"):
        score_answers({}, {}, convention="coqa")


def test_real_scai_qrecc_rows():
    """SCAI-QReCC-21 qa_batch1.csv: gold `gt` and a submitted `predicted` answer per row."""
    rows = list(csv.DictReader(shared_file("qrecc/qa_batch1.csv").open(encoding="utf-8")))
    # row 0 (1_1): gt has 21 tokens; the prediction normalizes to 26 tokens
    #   [physician assistant is person who has successfully completed accredited education
    #    program for physician assistant is licensed by state and is practicing within scope of
    #    that license]
    #   shared: physician, who, for, licensed, and -> 5 ("assistant" != "assistants")
    #   F1 = 2 * 5 / (26 + 21) = 10/47
    assert rows[0]["id"] == "1_1"
    assert f1(rows[0]["predicted"], rows[0]["gt"]) == pytest.approx(10 / 47)
    # row 2: "A physician's assistant is a medical assistant." -> [physicians assistant is medical
    #   assistant] (5); shared with gt: medical -> F1 = 2 * 1 / (5 + 21) = 1/13
    assert f1(rows[2]["predicted"], rows[2]["gt"]) == pytest.approx(1 / 13)
    # rows 366, 371, 373 (24_4): gt [cigarettes contain nicotine which is highly addictive] (7)
    #   366 [cigarettes are highly addictive] (4): shared 3 -> 6/11
    #   371 [cigarettes are addictive because they contain large amounts of nicotine] (10):
    #       shared cigarettes, addictive, contain, nicotine -> 8/17
    #   373 [... because they contain nicotine which is found in secondhand smoke] (13):
    #       shared cigarettes, addictive, contain, nicotine, which, is -> 12/20
    expected = {366: 6 / 11, 371: 8 / 17, 373: 12 / 20}
    for index, value in expected.items():
        assert rows[index]["id"] == "24_4"
        assert f1(rows[index]["predicted"], rows[index]["gt"]) == pytest.approx(value)
        assert exact_match(rows[index]["predicted"], rows[index]["gt"]) == 0.0


def test_real_scai_ground_truth_sample_with_gpt3_run():
    """SCAI's ground-truth sample (3 turns, one without an answer) against its GPT-3 run."""
    truth = json.loads(shared_file("qrecc/ground-truth-sample.json").read_text(encoding="utf-8"))
    run = json.loads(shared_file("qrecc/gpt3_run.json").read_text(encoding="utf-8"))
    key = lambda t: str(QueryId(str(t["Conversation_no"]), t["Turn_no"]))  # noqa: E731
    golds = {key(t): [t["Truth_answer"]] for t in truth}
    predictions = {key(t): t["Model_answer"] for t in run}
    result = score_answers(predictions, golds, convention="squad")
    # 1_1: "A physician's assistant is a person who assists a physician in the performance of
    #   his or her duties." -> 14 tokens; shared with the 21-token gt: who, physician -> 4/35
    # 2774_1: "Unknown" vs the pKa answer -> 0; 2775_1: gold "" and a non-empty answer -> 0
    assert result["per_query"]["1_1"]["f1"] == pytest.approx(4 / 35)
    assert result["per_query"]["2774_1"] == {"em": 0.0, "f1": 0.0}
    assert result["per_query"]["2775_1"] == {"em": 0.0, "f1": 0.0}
    assert result["f1"] == pytest.approx(100 * (4 / 35) / 3)
    assert result["extra"] == len(predictions) - 3
