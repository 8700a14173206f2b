"""Breakdown by question type: group averages worked out by hand, TopiOCQA topic switches on a
real conversation, and the similarity rule for QReCC with a stand-in similarity."""
from __future__ import annotations

import gzip
import json

import pytest

from conftest import shared_file
from convqa.errors import DataError
from convqa.metrics import (
    FIRST,
    NO_SWITCH,
    SWITCH,
    UNKNOWN,
    group_means,
    similarity_switch_types,
    topic_switch_types,
)

PER_QUERY = {
    "1_1": {"mrr": 1.0, "hits@5": 1.0},
    "1_2": {"mrr": 0.5, "hits@5": 1.0},
    "1_3": {"mrr": 0.0, "hits@5": 0.0},
    "1_4": {"mrr": 0.25, "hits@5": 1.0},
    "2_1": {"mrr": 0.5, "hits@5": 1.0},
    "2_2": {"mrr": 0.2, "hits@5": 1.0},   # no type given -> "unknown"
}
TYPES = {"1_1": FIRST, "1_2": NO_SWITCH, "1_3": SWITCH, "1_4": SWITCH, "2_1": FIRST,
         "9_9": SWITCH}                   # 9_9 has no metrics -> ignored


def test_group_means_by_hand():
    table = group_means(PER_QUERY, TYPES)
    assert list(table) == [FIRST, NO_SWITCH, SWITCH, UNKNOWN, "all"]
    # first: 1_1, 2_1 -> mrr (1 + 0.5) / 2 = 0.75, hits 1
    assert table[FIRST] == pytest.approx({"count": 2, "mrr": 0.75, "hits@5": 1.0})
    assert table[NO_SWITCH] == pytest.approx({"count": 1, "mrr": 0.5, "hits@5": 1.0})
    # switch: 1_3, 1_4 -> mrr (0 + 0.25) / 2 = 0.125, hits (0 + 1) / 2 = 0.5
    assert table[SWITCH] == pytest.approx({"count": 2, "mrr": 0.125, "hits@5": 0.5})
    assert table[UNKNOWN] == pytest.approx({"count": 1, "mrr": 0.2, "hits@5": 1.0})
    # all six: mrr (1 + .5 + 0 + .25 + .5 + .2) / 6 = 2.45 / 6; hits 5/6
    assert table["all"] == pytest.approx({"count": 6, "mrr": 2.45 / 6, "hits@5": 5 / 6})


def test_group_means_of_plain_numbers_and_other_groups():
    table = group_means({"a_1": 1.0, "a_2": 0.0, "b_1": 0.5}, {"a_1": "x", "a_2": "x", "b_1": "w"})
    assert list(table) == ["w", "x", "all"]
    assert table["x"] == {"count": 2, "value": 0.5}
    assert table["all"] == pytest.approx({"count": 3, "value": 0.5})


def test_group_means_bad_input():
    with pytest.raises(DataError, match="field '1_1': per-query value must be a number"):
        group_means({"1_1": "high"}, {})
    with pytest.raises(DataError, match="different metrics"):
        group_means({"1_1": {"mrr": 1.0}, "1_2": {"f1": 1.0}}, {})


def test_topic_switch_types_on_real_topiocqa_conversation():
    path = shared_file("topiocqa/topiocqa_train.json.gz")
    data = json.load(gzip.open(path, "rt", encoding="utf-8"))
    turns = sorted((t for t in data if t["Conversation_no"] == 1), key=lambda t: t["Turn_no"])
    topics = [t["Topic"] for t in turns]
    assert topics == ["", "Force", "Force", "Galileo Galilei", "Galileo Galilei", "",
                      "Galileo Galilei", "Force", "Net force", "Force"]
    # 1 first; 2 no earlier topic -> unknown; 3 Force=Force; 4 Force->Galileo; 5 same;
    # 6 empty (unanswerable) -> unknown; 7 Galileo vs last known Galileo (turn 5) -> no-switch;
    # 8 -> Force switch; 9 -> Net force switch; 10 -> Force switch
    assert topic_switch_types("1", topics) == {
        "1_1": FIRST, "1_2": UNKNOWN, "1_3": NO_SWITCH, "1_4": SWITCH, "1_5": NO_SWITCH,
        "1_6": UNKNOWN, "1_7": NO_SWITCH, "1_8": SWITCH, "1_9": SWITCH, "1_10": SWITCH}
    # strict t-1 comparison: turn 7 follows an empty topic -> unknown
    assert topic_switch_types("1", topics, skip_empty=False)["1_7"] == UNKNOWN


def test_topic_comparison_ignores_case_and_spaces():
    assert topic_switch_types("c", ["Force", " force ", "FORCE", "Net force"]) == {
        "c_1": FIRST, "c_2": NO_SWITCH, "c_3": NO_SWITCH, "c_4": SWITCH}


def _jaccard(a: str, b: str) -> float:
    x, y = set(a.split()), set(b.split())
    return len(x & y) / len(x | y)


def test_similarity_switch_types_with_a_stand_in_similarity():
    calls: list[tuple[str, str]] = []

    def similarity(previous: str, current: str) -> float:
        calls.append((previous, current))
        return _jaccard(previous, current)

    gold = [["the cat sat"], ["the cat ran"], ["stocks fell sharply"], [], ["stocks rose"],
            ["dogs bark", "stocks fell"]]
    types = similarity_switch_types("7", gold, similarity, threshold=0.3)
    # 2: J({the,cat,sat}, {the,cat,ran}) = 2/4 = 0.5 >= 0.3 -> no-switch
    # 3: J = 0 -> switch; 4: no gold -> unknown; 5: previous turn has none -> unknown
    # 6: max(J({stocks,rose},{dogs,bark}) = 0, J({stocks,rose},{stocks,fell}) = 1/3) >= 0.3
    assert types == {"7_1": FIRST, "7_2": NO_SWITCH, "7_3": SWITCH, "7_4": UNKNOWN,
                     "7_5": UNKNOWN, "7_6": NO_SWITCH}
    assert calls[0] == ("the cat sat", "the cat ran")  # (previous, current)
    # 1/3 < 0.34 -> the last turn becomes a switch
    assert similarity_switch_types("7", gold, _jaccard, threshold=0.34)["7_6"] == SWITCH


def test_similarity_switch_types_rejects_a_bare_string():
    with pytest.raises(DataError, match="field '7_2': gold passages of a turn must be a list"):
        similarity_switch_types("7", [["a"], "a b"], _jaccard, threshold=0.5)
