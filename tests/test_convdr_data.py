"""ConvDR examples: the builders on the real CANARD / OR-QuAC / CAsT files, the JSONL format
and its errors, and the deterministic held-out split by conversation."""
from __future__ import annotations

import json

import pytest

from convqa.errors import ConfigError, DataError
from convqa.types import Turn
from retrievers.convdr.data import (ConvDRExample, PassageRef, build_examples, canard_examples,
                                    cast_examples, heldout_conversation_ids,
                                    load_examples_jsonl, orquac_examples, parse_data_spec,
                                    save_examples_jsonl, split_heldout)

from conftest import shared_file
from convdr_helpers import examples, write_examples_jsonl


def test_canard_examples_have_history_with_answers():
    path = shared_file("canard/dev.json")
    built = canard_examples(path)
    assert len(built) == 3430 and len({e.conversation_id for e in built}) == 490
    assert all(e.has_rewrite and e.source == "canard" for e in built)
    by_id = {e.id: e for e in built}
    # the file's second question (read by hand from canard/dev.json)
    second = by_id["C_2d211835213b45588ad5ca868ce7fabd_0_2"]
    assert second.question == "When did they disband?"
    assert second.rewrite == "When did Zappa and the Mothers of Invention disband?"
    assert [(t.question, t.answer) for t in second.history] == [
        ("What group disbanded?", "Zappa and the Mothers of Invention")]
    assert by_id["C_2d211835213b45588ad5ca868ce7fabd_0_1"].history == []


def test_orquac_train_history_is_earlier_questions_without_answers():
    folder = shared_file("orquac/orquac_train.question.tsv").parent
    built = orquac_examples(folder)
    assert len(built) == 31526 and all(e.has_rewrite for e in built)
    third = {e.id: e for e in built}["C_2ba58216460d43aa986fc0e897537239_0_3"]  # qid ..._q#2
    assert third.question == "who did they play in the playoffs"
    assert third.rewrite == "who did the Colts play in the playoffs?"
    assert [(t.question, t.answer) for t in third.history] == [
        ("what team did unitas play for", None), ("how many games did the colts win", None)]


def test_cast_examples_take_manual_rewrites_and_qrels_positives():
    folder = shared_file("cast/2019_data_2019qrels.txt").parent
    built = cast_examples(folder)
    assert len(built) == 479 and len({e.conversation_id for e in built}) == 50
    by_id = {e.id: e for e in built}
    assert by_id["31_2"].question == "Is it treatable?"
    assert by_id["31_2"].rewrite == "Is throat cancer treatable?"
    ids = {p.id for p in by_id["31_1"].positives}
    # 2019qrels.txt: "31_1 Q0 CAR_1463f... 1" is relevant, "31_1 Q0 CAR_116d8... 0" is not
    assert "CAR_1463f964653c5c9f614a0a88d26b175e4a8120f1" in ids
    assert "CAR_116d829c4c800c2fc70f11692fec5e8c7e975250" not in ids
    assert len(ids) == 89  # awk '$1=="31_1" && $4>=1' 2019_data_2019qrels.txt | wc -l
    strict = {e.id: e for e in cast_examples(folder, min_relevance=4)}
    assert len(strict["31_1"].positives) < 89


def test_same_turns_from_two_sources_are_kept_once():
    canard = shared_file("canard/dev.json")
    orquac = shared_file("orquac/orquac_dev.question.tsv").parent
    built = build_examples([("canard", str(canard)), ("orquac-dev", str(orquac))])
    assert len(built.examples) == 3430
    assert built.counts["orquac-dev"] == {"read": 3430, "kept": 0, "duplicates": 3430}


def test_heldout_split_is_by_conversation_deterministic_and_honours_forced():
    data = examples()
    train, held = split_heldout(data, 0.25, seed=0)
    assert len({e.conversation_id for e in held}) == 1  # round(4 * 0.25)
    assert not {e.conversation_id for e in train} & {e.conversation_id for e in held}
    assert [e.id for e in split_heldout(data, 0.25, seed=0)[1]] == [e.id for e in held]
    # the choice is a function of the ids: the input order does not matter
    assert heldout_conversation_ids(["e1", "d1", "f1", "b1"], 0.5, 3) == \
        heldout_conversation_ids(["b1", "f1", "d1", "e1"], 0.5, 3)
    train, held = split_heldout(data, 0.0, seed=0, heldout_conversations={"b1"})
    assert {e.conversation_id for e in held} == {"b1"} and len(train) == 6
    with pytest.raises(ConfigError):
        split_heldout(data, 1.0)


def test_jsonl_round_trip(tmp_path):
    data = examples()
    data[0].query = "formatted"
    data[1].positives = [PassageRef(None, "some text", "A title")]
    save_examples_jsonl(tmp_path / "x.jsonl", data)
    loaded = load_examples_jsonl(tmp_path / "x.jsonl")
    assert [e.to_dict() for e in loaded] == [e.to_dict() for e in data]
    assert loaded[1].history == [Turn("what is the eiffel tower?", "a tower in Paris")]


def _good() -> dict:
    return ConvDRExample("c_2", "jsonl", "c", 2, "and then?", [Turn("first?", None)],
                         "and then what?", [PassageRef("p1")]).to_dict()


@pytest.mark.parametrize("change, field", [
    (lambda r: r.pop("id"), "id"),
    (lambda r: r.update(turn=True), "turn"),
    (lambda r: r.update(turn=0), "turn"),
    (lambda r: r.update(question="  "), "question"),
    (lambda r: r.update(history="q1"), "history"),
    (lambda r: r.update(history=["q1"]), "history[0]"),
    (lambda r: r.update(history=[{"question": "q", "answer": 3}]), "history[0].answer"),
    (lambda r: r.update(rewrite=5), "rewrite"),
    (lambda r: r.update(positives={"id": "p"}), "positives"),
    (lambda r: r.update(positives=[{"title": "only a title"}]), "positives[0]"),
    (lambda r: r.update(positives=[{"id": 7}]), "positives[0].id"),
])
def test_bad_jsonl_names_file_line_and_field(tmp_path, change, field):
    bad = _good()
    change(bad)
    path = write_examples_jsonl(tmp_path / "bad.jsonl", [_good() | {"id": "ok"}, bad])
    with pytest.raises(DataError) as err:
        load_examples_jsonl(path)
    assert err.value.path == str(path) and err.value.line == 2 and err.value.field == field
    assert str(err.value).startswith(f"{path}:2: field '{field}'")


def test_duplicate_ids_and_malformed_lines(tmp_path):
    path = write_examples_jsonl(tmp_path / "dup.jsonl", [_good(), _good()])
    with pytest.raises(DataError, match="appears twice") as err:
        load_examples_jsonl(path)
    assert err.value.line == 2
    path.write_text(json.dumps(_good()) + "\n{not json\n", encoding="utf-8")
    with pytest.raises(DataError, match="malformed JSON") as err:
        load_examples_jsonl(path)
    assert err.value.line == 2


def test_data_specs():
    assert parse_data_spec("canard=/x/dev.json") == ("canard", "/x/dev.json")
    for bad in ("canard", "quac=/x", "orquac="):
        with pytest.raises(ConfigError):
            parse_data_spec(bad)
    with pytest.raises(DataError, match="not found"):
        build_examples([("canard", "/no/such/file.json")])


def test_benchmark_examples_are_train_turns_with_answer_passages(tmp_path):
    """The tiny benchmark (training_helpers): 7 train turns have answer passages; the dev turns
    and the train turns without one are not read."""
    from retrievers.convdr.data import benchmark_examples

    from training_helpers import make_benchmark

    built = benchmark_examples(make_benchmark(tmp_path / "bench"))
    assert [e.id for e in built] == ["c1_1", "c1_2", "c1_3", "c2_2", "c3_1", "c3_2", "c3_3"]
    by_id = {e.id: e for e in built}
    assert [p.id for p in by_id["c3_3"].positives] == ["F#0", "F#1"]
    assert [(t.question, t.answer) for t in by_id["c1_2"].history] == [
        ("what is alpha centauri?", "the closest star system to the Sun")]
    assert not any(e.has_rewrite for e in built) and {e.source for e in built} == {"benchmark"}
    again = build_examples([("benchmark", str(tmp_path / "bench"))])
    assert [e.id for e in again.examples] == [e.id for e in built]


def test_a_benchmark_built_from_topiocqa_gives_its_answer_passages(fixtures_dir, tmp_path):
    from convqa.benchmark.labelled_turns import load_labelled_turns
    from convqa.benchmark.topiocqa_wiki import build_benchmark, full_wiki_source
    from retrievers.convdr.data import benchmark_examples

    fx = fixtures_dir / "benchmark"
    built = build_benchmark(fx / "topiocqa_tiny.json", full_wiki_source(fx / "articles.jsonl"),
                            tmp_path / "full", max_words=10, dev_fraction=0.34, seed=0)
    turns = {t.qid: t for t in load_labelled_turns(built.out_dir).turns}
    examples = benchmark_examples(built.out_dir)
    assert examples and all(turns[e.id].split == "train" for e in examples)
    assert all([p.id for p in e.positives] == turns[e.id].answer_passage_ids for e in examples)
    wanted = {q for q, t in turns.items() if t.split == "train" and t.answer_passage_ids}
    assert {e.id for e in examples} == wanted
