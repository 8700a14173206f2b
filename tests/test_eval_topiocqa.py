"""Evaluation on official TopiOCQA files (both releases) with a passage collection.

Fixtures (tests/fixtures/eval): the same two conversations in the later release's layout
(`Rationale`, `Gold_passage`, `Additional_answers` as objects or strings) and the first
release's (none of them), and a DPR-style TSV collection `id, text, title` whose titles are
TopiOCQA's "Article [SEP] Section". Gold ids in the later file are "wiki:1" (the store says
"1"), "2" (as in the store), "wiki:3", "" (the unanswerable turn 1_4), "wiki:6" and "wiki:99"
(in no store). Question types: 1_1 first, 1_2 no-switch, 1_3 switch (Eiffel Tower -> Paris),
1_4 no-switch (empty topic), 2_1 first, 2_2 no-switch.

The scripted retriever (history question_only, so the query is the question) ranks:
    1_1 ["3", "1"]   gold 1 at rank 2; article Eiffel Tower {1, 2} at rank 2
    1_2 ["2"]        gold 2 at rank 1; article rank 1
    1_3 ["5", "4", "3"]  gold 3 at rank 3; article Paris {3, 4} at rank 2
    1_4 ["4"]        no gold, no topic: not scored
    2_1 ["6"]        gold 6 at rank 1; article Gustave Eiffel {6} rank 1
    2_2 ["1", "6"]   gold wiki:99 not in the store: not scored at passage level; article rank 2
Every expected number below is worked out from this table by hand.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import shared_file
from convqa.corpus import PassageStore, read_passages
from convqa.errors import ConfigError, DataError
from convqa.front.evaluation.topiocqa import (evaluate_topiocqa_answers,
                                              evaluate_topiocqa_retrieval, load_official_turns,
                                              resolve_passage_id)
from convqa.types import Answer, Hit
from retrievers.base import Retriever

RANKINGS = {
    "who designed the eiffel tower?": ["3", "1"],
    "when was it finished?": ["2"],
    "what river flows through the city?": ["5", "4", "3"],
    "what is the tallest building there?": ["4"],
    "who was gustave eiffel?": ["6"],
    "where was he born?": ["1", "6"],
}
GOLD = {  # question -> (main answer, gold passage id as the store spells it)
    "who designed the eiffel tower?": ("Gustave Eiffel's company", "1"),
    "when was it finished?": ("1889", "2"),
    "what river flows through the city?": ("the Seine", "3"),
    "who was gustave eiffel?": ("a French civil engineer", "6"),
}


class Scripted(Retriever):
    def __init__(self):
        self.asked: list[str] = []

    def retrieve_batch(self, queries, k=10):
        self.asked.extend(queries)
        return [[Hit(pid, 1.0 / rank, rank) for rank, pid in
                 enumerate(RANKINGS.get(q, [])[:k], start=1)] for q in queries]

    def fingerprint(self) -> str:
        return "scripted-topiocqa-v1"


class Oracle:
    """The main answer when the gold passage is among those given, else "nothing"."""

    def __init__(self):
        self.calls = 0

    def read(self, question, history, passages):
        self.calls += 1
        answer, gold = GOLD.get(question, (None, None))
        if gold is not None and any(p.id == gold for p in passages):
            return Answer(answer, 1.0, gold)
        return Answer("nothing", 0.0, passages[0].id if passages else None)

    def fingerprint(self) -> str:
        return "oracle-topiocqa-v1"


@pytest.fixture(scope="module")
def eval_fx(fixtures_dir) -> Path:
    return fixtures_dir / "eval"


@pytest.fixture(scope="module")
def store(eval_fx, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("collection") / "passages"
    PassageStore.build(read_passages(eval_fx / "topiocqa_collection.tsv"), path,
                       progress=False).close()
    return path


def test_official_turns_of_both_releases(eval_fx):
    later, conversations = load_official_turns(eval_fx / "topiocqa_dev_later_release.json")
    first, _ = load_official_turns(eval_fx / "topiocqa_dev_first_release.json")
    assert [t.qid for t in later] == ["1_1", "1_2", "1_3", "1_4", "2_1", "2_2"]
    assert [t.question_type for t in later] == ["first", "no-switch", "switch", "no-switch",
                                               "first", "no-switch"]
    assert [t.question_type for t in first] == [t.question_type for t in later]
    assert [t.gold_passage_id for t in later] == ["wiki:1", "2", "wiki:3", None, "wiki:6",
                                                 "wiki:99"]
    assert all(t.gold_passage_id is None for t in first)
    # main answer first, then Additional_answers (objects or strings)
    assert later[0].answers == ["Gustave Eiffel's company", "Gustave Eiffel"]
    assert later[1].answers == ["1889", "1889"] and first[0].answers == ["Gustave Eiffel's company"]
    assert conversations["1"].history(3)[1].answer == "1889"


def test_gold_ids_with_or_without_the_wiki_prefix(store):
    with PassageStore.open(store) as opened:
        assert resolve_passage_id("wiki:1", opened) == "1"
        assert resolve_passage_id("2", opened) == "2"
        assert resolve_passage_id("wiki:99", opened) is None


def test_later_release_passage_level_by_hand(eval_fx, store, tmp_path):
    scripted = Scripted()
    result = evaluate_topiocqa_retrieval(eval_fx / "topiocqa_dev_later_release.json", store,
                                         scripted, "question_only", cache_dir=tmp_path,
                                         progress=False)
    assert sorted(scripted.asked) == sorted(RANKINGS)  # every turn is a query
    assert list(result["levels"]) == ["passage"]
    assert result["gold"] == {"turns_with_gold": 5, "not_in_store": 1}
    groups = result["levels"]["passage"]["groups"]
    assert groups["all"] == pytest.approx({"count": 4, "hits@1": 0.5, "hits@5": 1.0,
                                           "hits@20": 1.0, "hits@100": 1.0,
                                           "mrr": (1 / 2 + 1 + 1 / 3 + 1) / 4})
    assert groups["first"]["mrr"] == pytest.approx(0.75) and groups["first"]["count"] == 2
    assert groups["no-switch"] == pytest.approx({"count": 1, "hits@1": 1, "hits@5": 1,
                                                 "hits@20": 1, "hits@100": 1, "mrr": 1})
    assert groups["switch"]["hits@1"] == 0 and groups["switch"]["mrr"] == pytest.approx(1 / 3)
    again = Scripted()
    cached = evaluate_topiocqa_retrieval(eval_fx / "topiocqa_dev_later_release.json", store,
                                         again, "question_only", cache_dir=tmp_path,
                                         progress=False)
    assert cached["cached"] and again.asked == [] and cached["levels"] == result["levels"]


def test_article_level_for_both_releases(eval_fx, store, tmp_path):
    expected = {"count": 5, "hits@1": 2 / 5, "hits@5": 1.0, "hits@20": 1.0, "hits@100": 1.0,
                "mrr": (1 / 2 + 1 + 1 / 2 + 1 + 1 / 2) / 5}
    first = evaluate_topiocqa_retrieval(eval_fx / "topiocqa_dev_first_release.json", store,
                                        Scripted(), "question_only", cache_dir=tmp_path,
                                        progress=False)
    assert list(first["levels"]) == ["article"]  # the first release has no gold passages
    assert first["levels"]["article"]["groups"]["all"] == pytest.approx(expected)
    assert first["levels"]["article"]["groups"]["no-switch"]["mrr"] == pytest.approx(0.75)
    later = evaluate_topiocqa_retrieval(eval_fx / "topiocqa_dev_later_release.json", store,
                                        Scripted(), "question_only",
                                        levels=("passage", "article"), cache_dir=tmp_path,
                                        progress=False)
    assert later["levels"]["article"]["groups"]["all"] == pytest.approx(expected)
    assert later["levels"]["passage"]["groups"]["all"]["count"] == 4


def test_end_to_end_by_hand(eval_fx, store, tmp_path):
    """k=1: 1_2 and 2_1 are read from their gold passage: EM 2/6. k=5: also 1_1 (leave-one-out
    against "Gustave Eiffel's company" and "Gustave Eiffel": EM (0 + 1) / 2 = 0.5, F1
    (0.4 + 1) / 2 = 0.7, where 0.4 = F1 of {gustave, eiffels, company} vs {gustave, eiffel})
    and 1_3: EM 3.5/6, F1 3.7/6. Unanswerable 1_4 and 2_2 (gold not in the store) score 0."""
    oracle = Oracle()
    result = evaluate_topiocqa_answers(eval_fx / "topiocqa_dev_later_release.json", store,
                                       Scripted(), oracle, "question_only", top_ks=(1, 5),
                                       cache_dir=tmp_path, progress=False)
    assert result["turns"] == 6 and oracle.calls == 12
    at1, at5 = result["by_k"]["1"]["groups"], result["by_k"]["5"]["groups"]
    assert at1["all"]["em"] == pytest.approx(100 * 2 / 6)
    assert at5["all"]["em"] == pytest.approx(100 * 3.5 / 6)
    assert at5["all"]["f1"] == pytest.approx(100 * 3.7 / 6)
    assert at5["first"]["em"] == pytest.approx(75.0) and at5["switch"]["em"] == 100.0
    assert at5["no-switch"]["em"] == pytest.approx(100 / 3)


def test_bad_inputs(eval_fx, store, tmp_path):
    with pytest.raises(DataError, match="level 'passage' needs gold passages"):
        evaluate_topiocqa_retrieval(eval_fx / "topiocqa_dev_first_release.json", store,
                                    Scripted(), levels=("passage",), cache_dir=tmp_path,
                                    progress=False)
    with pytest.raises(ConfigError, match="unknown level"):
        evaluate_topiocqa_retrieval(eval_fx / "topiocqa_dev_first_release.json", store,
                                    Scripted(), levels=("answer",), cache_dir=tmp_path,
                                    progress=False)
    other = tmp_path / "other"
    PassageStore.build([], other, progress=False).close()
    with pytest.raises(DataError, match="none of the 5 gold passage ids is in the passage store"):
        evaluate_topiocqa_retrieval(eval_fx / "topiocqa_dev_later_release.json", other,
                                    Scripted(), cache_dir=tmp_path, progress=False)
    records = json.loads((eval_fx / "topiocqa_dev_later_release.json").read_text())
    del records[2]["Question"]
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(records, indent=1), encoding="utf-8")
    with pytest.raises(DataError) as exc:
        evaluate_topiocqa_retrieval(broken, store, Scripted(), cache_dir=tmp_path,
                                    progress=False)
    message = str(exc.value)
    assert message.startswith(f"{broken}:") and "'Question'" in message and "\n" not in message


def test_real_first_release_turns(shared_data):
    """The shared TopiOCQA train file (first release): every turn loads, none has a gold
    passage, and the question types are those of docs/benchmark_format.md (3,159 first,
    26,863 no-switch, 10,971 switch of 40,993 turns)."""
    turns, conversations = load_official_turns(shared_file("topiocqa/topiocqa_train.json.gz"))
    assert len(turns) == 40993 and len(conversations) == 3159
    assert not any(t.gold_passage_id for t in turns)
    counts = {kind: sum(t.question_type == kind for t in turns)
              for kind in ("first", "no-switch", "switch")}
    assert counts == {"first": 3159, "no-switch": 26863, "switch": 10971}
