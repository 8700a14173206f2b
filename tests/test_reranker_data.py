"""Reranker examples: from the tiny benchmark (answer passages against same-article and mined
negatives, by BM25 or a run file), from a real SQuAD-format file (the gold paragraph against its
article's other paragraphs), the one-file export, and one-line errors for bad records."""
from __future__ import annotations

import json
import re

import pytest

from conftest import shared_file
from convqa.errors import ConfigError, DataError
from convqa.runs import write_run
from convqa.types import Hit
from retrievers.rerank.build_examples import (ExampleSources, benchmark_examples, export_examples,
                                              squad_examples)
from retrievers.rerank.data import RerankExample, load_examples, save_examples
from training_helpers import make_benchmark


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    return make_benchmark(tmp_path_factory.mktemp("bench") / "tiny")


def by_id(examples):
    return {e.id.split("/", 1)[1]: e for e in examples}


def ids(passages):
    return [p.id for p in passages]


def test_benchmark_turns_answer_passages_against_their_article_and_others(bench):
    examples = by_id(benchmark_examples(bench, article_negatives=4, mined_negatives=4))
    # the 7 answer-evaluable train turns and the 2 dev turns (held out)
    assert sorted(examples) == ["c1_1", "c1_2", "c1_3", "c2_2", "c3_1", "c3_2", "c3_3", "c4_1",
                                "c4_2"]
    assert {k for k, e in examples.items() if e.split == "heldout"} == {"c4_1", "c4_2"}
    turn = examples["c1_2"]  # "how far away is it?" -> A#1
    assert ids(turn.positives) == ["A#1"] and ids(turn.article_negatives) == ["A#0"]
    assert turn.history == [("what is alpha centauri?", "the closest star system to the Sun")]
    assert examples["c3_3"].article_negatives == []  # both passages of Fugue hold the answer
    assert ids(examples["c3_3"].positives) == ["F#0", "F#1"]
    for e in examples.values():
        gold = {p.id.split("#")[0] for p in e.positives}
        assert all(p.id.split("#")[0] in gold for p in e.article_negatives)
        assert all(p.id.split("#")[0] not in gold for p in e.mined_negatives)
        assert not set(ids(e.positives)) & set(ids(e.negatives))
        assert e.source == "topiocqa-wiki:tiny"
    # BM25 mines other articles' passages for the conversation (the Danube turn before it)
    assert ids(examples["c3_2"].mined_negatives)[:2] == ["D#1", "D#0"]


def test_mined_negatives_from_a_run_file_drop_passages_holding_an_answer(bench, tmp_path):
    run = tmp_path / "run.jsonl"
    write_run(run, {"c1_3": [Hit("B#0", 9.0, 1), Hit("J#0", 8.0, 2), Hit("C#1", 7.0, 3),
                             Hit("B#1", 6.0, 4)],
                    "c4_1": [Hit("A#1", 5.0, 1), Hit("E#0", 4.0, 2)],
                    "c3_3": [Hit("A#0", 3.0, 1), Hit("C#0", 2.0, 2)]})
    examples = by_id(benchmark_examples(bench, 4, 4, run=run))
    turn = examples["c1_3"]  # the positive B#0 is skipped; B#1 is its article's
    assert ids(turn.mined_negatives) == ["J#0", "C#1"] and ids(turn.article_negatives) == ["B#1"]
    assert ids(examples["c4_1"].mined_negatives) == ["E#0"]
    # "which star is closest?" -> "Alpha Centauri": A#0 names it, so A#0 is never a negative
    # of a turn it answers; for "what is a fugue?" A#0 holds no answer and stays
    assert ids(examples["c3_3"].mined_negatives) == ["A#0", "C#0"]
    assert examples["c2_2"].mined_negatives == []  # not in the run: no mined negatives
    # the counts cap each kind
    capped = by_id(benchmark_examples(bench, 0, 1, run=run))
    assert ids(capped["c1_3"].mined_negatives) == ["J#0"] and capped["c1_3"].article_negatives == []


def test_a_run_of_another_collection_is_a_one_line_error(bench, tmp_path):
    run = tmp_path / "other.jsonl"
    write_run(run, {"c1_1": [Hit("Z#9", 1.0, 1)]})
    with pytest.raises(DataError, match=r"other.jsonl: passage 'Z#9' is not in the "
                                        r"benchmark's passages"):
        benchmark_examples(bench, 2, 2, run=run)


def test_squad_gold_paragraph_against_its_articles_other_paragraphs():
    path = shared_file("squad/dev-v2.0.json")
    examples = squad_examples(path, article_negatives=3, mined_negatives=2, max_examples=40,
                              max_heldout=10)
    raw = json.loads(path.read_text(encoding="utf-8"))["data"]
    titles = {}
    answers = {}
    for article in raw:
        for paragraph in article["paragraphs"]:
            titles.setdefault(paragraph["context"], set()).add(article["title"])
            for qa in paragraph["qas"]:
                answers[qa["id"]] = [a["text"] for a in qa["answers"]]
    assert [e.split for e in examples].count("train") == 40
    assert [e.split for e in examples].count("heldout") == 10
    train_titles = {e.positives[0].title for e in examples if e.split == "train"}
    heldout_titles = {e.positives[0].title for e in examples if e.split == "heldout"}
    assert not train_titles & heldout_titles  # whole articles held out
    for e in examples:
        positive = e.positives[0]
        golds = answers[e.id.split("/", 1)[1]]
        assert positive.title in titles[positive.text]  # the question's own paragraph
        assert any(g in positive.text for g in golds)
        assert len(e.article_negatives) == 3 and len(e.mined_negatives) == 2
        for negative in e.article_negatives:  # same article, another paragraph
            assert negative.title == positive.title and negative.text != positive.text
        assert all(n.title != positive.title for n in e.mined_negatives)
        for negative in e.negatives:  # no answer as a word of its own
            assert not any(re.search(rf"(?<!\w){re.escape(g)}(?!\w)", negative.text, re.I)
                           for g in golds)
        assert e.history == [] and e.source == "squad:dev-v2.0"


def test_export_writes_one_compressed_file_that_reads_back(bench, tmp_path):
    out = tmp_path / "examples.jsonl.xz"
    report = export_examples(ExampleSources(benchmarks=[str(bench)], article_negatives=2,
                                            mined_negatives=2), out)
    assert report["topiocqa-wiki:tiny"]["train_examples"] == 7
    loaded = load_examples(out)
    assert [e.to_dict() for e in loaded] == \
        [e.to_dict() for e in benchmark_examples(bench, 2, 2)]
    with pytest.raises(ConfigError, match="a run file is given for /x, which is not among"):
        ExampleSources(benchmarks=[str(bench)], runs={"/x": "r.jsonl"})
    with pytest.raises(ConfigError, match="no examples"):
        export_examples(ExampleSources(), tmp_path / "none.jsonl")


GOOD = {"id": "q1", "question": "where?", "history": [["before?", None]],
        "positives": [{"id": "a#0", "title": "A", "text": "here"}],
        "article_negatives": [{"id": "a#1", "text": "there"}], "mined_negatives": [],
        "split": "train"}


@pytest.mark.parametrize("change, message", [
    ({"positives": []}, "field 'positives': needs at least one positive passage"),
    ({"question": " "}, "field 'question': empty"),
    ({"split": "dev"}, "field 'split': expected one of train, heldout, got 'dev'"),
    ({"history": [["only one"]]}, r"field 'history\[0\]': expected \[question, answer or null\]"),
    ({"article_negatives": [{"id": "a#0", "text": "x"}]},
     r"field 'article_negatives\[0\].id': passage 'a#0' is also a positive"),
    ({"mined_negatives": [{"id": "b#0"}]}, r"field 'mined_negatives\[0\].text': missing"),
])
def test_bad_records_name_file_line_and_field(tmp_path, change, message):
    path = tmp_path / "examples.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps({**GOOD, "id": "q2", **change}) + "\n")
    with pytest.raises(DataError, match=rf"examples.jsonl:2: {message}"):
        load_examples(path)


def test_duplicate_ids_and_empty_files(tmp_path):
    path = tmp_path / "examples.jsonl"
    save_examples(path, [RerankExample.from_dict(GOOD)] * 2)
    with pytest.raises(DataError, match=r"examples.jsonl:2: field 'id': duplicate example id "
                                        r"'q1' \(first on line 1\)"):
        load_examples(path)
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(DataError, match="empty.jsonl: no examples"):
        load_examples(tmp_path / "empty.jsonl")

