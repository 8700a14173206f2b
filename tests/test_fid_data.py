"""FiD examples: the loader (good file, every kind of bad line) and the collated tensors."""
from __future__ import annotations

import json

import pytest
import torch

from convqa.errors import ConfigError, DataError
from convqa.types import Passage, Turn
from fid_helpers import make_tokenizer
from readers.fid.data import (IGNORE_INDEX, check_template, collate, encode_answers,
                              load_examples, write_examples)

TEMPLATE = "question: {question} title: {title} context: {text}"


@pytest.fixture(scope="module")
def tokenizer():
    return make_tokenizer()


def test_loads_the_fixture_file(fixtures_dir, tmp_path):
    examples = load_examples(fixtures_dir / "fid" / "examples.jsonl")
    assert [e.id for e in examples] == ["c1_1", "c1_2", "7"]  # int id 7 read as "7"
    first, second, third = examples
    assert first.history == [] and first.answers == ["the closest star system to the Sun"]
    assert [p.id for p in second.passages] == ["A#1", "A#0", "H#0"]
    assert second.history == [Turn("what is alpha centauri?",
                                   "the closest star system to the Sun")]
    assert second.answers == ["4.37 light-years", "4.37 light years"]
    assert third.history == [Turn("tell me something", None)]
    assert third.passages == [Passage("12", "The Beatles were an English rock band formed in "
                                            "Liverpool.", "")]
    # write -> load round trip
    write_examples(tmp_path / "copy.jsonl", examples)
    assert load_examples(tmp_path / "copy.jsonl") == examples


GOOD = {"id": "q1", "question": "who?", "history": [["a?", "b"]], "answers": ["x"],
        "passages": [{"id": "p1", "title": "T", "text": "x y"}]}


def _with(**changes):
    record = json.loads(json.dumps(GOOD))
    for key, value in changes.items():
        if value is _DROP:
            del record[key]
        else:
            record[key] = value
    return record


_DROP = object()

BAD_LINES = [
    (["not an object"], None, "expected a JSON object"),
    (_with(id=_DROP), "id", "missing"),
    (_with(id=True), "id", "expected str/int, got bool"),
    (_with(id=1.5), "id", "expected str/int, got float"),
    (_with(question=_DROP), "question", "missing"),
    (_with(question="  "), "question", "empty question"),
    (_with(question=3), "question", "expected str, got int"),
    (_with(history="a? b"), "history", "expected a list of"),
    (_with(history=[["a?"]]), "history[0]", r"expected a \[question, answer\] pair"),
    (_with(history=[[1, "b"]]), "history[0]", "question must be a string"),
    (_with(history=[["a?", 2]]), "history[0]", "answer must be a string or null"),
    (_with(answers=_DROP), "answers", "missing"),
    (_with(answers="x"), "answers", "expected list, got str"),
    (_with(answers=[]), "answers", "no gold answer"),
    (_with(answers=["x", None]), "answers[1]", "expected a string, got NoneType"),
    (_with(passages=_DROP), "passages", "missing"),
    (_with(passages={"id": "p1"}), "passages", "expected list, got dict"),
    (_with(passages=["text only"]), "passages[0]", "expected an object"),
    (_with(passages=[{"id": "p1", "text": "x"}, {"id": "p2"}]), "passages[1].text", "missing"),
    (_with(passages=[{"text": "x"}]), "passages[0].id", "missing"),
    (_with(passages=[{"id": "p1", "text": 5}]), "passages[0].text", "expected a string"),
    (_with(passages=[{"id": "p1", "text": "x", "title": ["T"]}]), "passages[0].title",
     "expected a string"),
]


@pytest.mark.parametrize("record,field,message", BAD_LINES)
def test_bad_lines_name_file_line_and_field(tmp_path, record, field, message):
    path = tmp_path / "examples.jsonl"
    path.write_text(json.dumps(GOOD) + "\n\n" + json.dumps(record) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=message) as info:
        load_examples(path)
    error = info.value
    assert (error.path, error.line, error.field) == (str(path), 3, field)
    assert str(error).startswith(f"{path}:3")


def test_file_level_errors(tmp_path):
    path = tmp_path / "examples.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps(GOOD) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"examples.jsonl:2: field 'id': duplicate example id "
                                        r"'q1' \(first on line 1\)"):
        load_examples(path)
    path.write_text(json.dumps(GOOD) + "\n{oops\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"examples.jsonl:2: malformed JSON"):
        load_examples(path)
    path.write_text("\n", encoding="utf-8")
    with pytest.raises(DataError, match="no examples"):
        load_examples(path)
    with pytest.raises(DataError, match="file not found"):
        load_examples(tmp_path / "missing.jsonl")
    # examples without answers are accepted when asked for (to generate for them)
    path.write_text(json.dumps(_with(answers=_DROP)) + "\n", encoding="utf-8")
    assert load_examples(path, require_answers=False)[0].answers == []


def test_template_check():
    check_template(TEMPLATE)
    check_template("{text} || {question}")  # title is optional
    for bad, message in [("question: {question} {passage}", r"unknown field \{passage\}"),
                         ("title: {title} context: {text}", r"has no \{question\}"),
                         ("question: {question}", r"has no \{text\}"),
                         ("question: {question", "question: {question")]:
        with pytest.raises(ValueError, match=message):
            check_template(bad)


def test_collate_shapes_padding_and_empty_slots(tokenizer):
    a = [Passage("a1", "the box is red", "box"), Passage("a2", "a dog runs far", "animals"),
         Passage("a3", "the sky is wide", "weather"), Passage("a4", "the sea is deep", "x")]
    b = [Passage("b1", "the box is blue", "box")]
    batch = collate(tokenizer, TEMPLATE, ["what colour is the box ?", "which box ?"],
                    [a, b], n_passages=3, max_length=32, answers=["red", "the old one"])
    ids, mask, present = batch["input_ids"], batch["attention_mask"], batch["passage_mask"]
    assert ids.shape[:2] == (2, 3) and mask.shape == ids.shape  # 4th passage of a dropped
    assert present.tolist() == [[True, True, True], [True, False, False]]
    pad, eos = tokenizer.pad_token_id, tokenizer.eos_token_id
    # each slot is the filled-in template, tokenized with the tokenizer's own eos at its end
    first = tokenizer.convert_ids_to_tokens(ids[0, 0][mask[0, 0].bool()].tolist())
    assert first == ["question", ":", "what", "colour", "is", "the", "box", "?", "title", ":",
                     "box", "context", ":", "the", "box", "is", "red", "</s>"]
    assert tokenizer.decode(ids[0, 2][mask[0, 2].bool()]).endswith("the sky is wide </s>")
    # padding uses the tokenizer's pad id; empty slots show the encoder one token only
    assert (ids[mask == 0] == pad).all()
    assert mask[1, 1].sum() == 1 and mask[1, 2].sum() == 1
    # labels: answer tokens, eos, then -100
    labels = batch["labels"].tolist()
    red, the, old, one = tokenizer.convert_tokens_to_ids(["red", "the", "old", "one"])
    assert labels == [[red, eos, IGNORE_INDEX, IGNORE_INDEX], [the, old, one, eos]]


def test_collate_truncates_and_handles_no_passages(tokenizer):
    long_text = " ".join(["the sea is deep"] * 20)
    batch = collate(tokenizer, TEMPLATE, ["which box ?", "which box ?"],
                    [[Passage("p", long_text, "x")], []], n_passages=2, max_length=16)
    assert batch["input_ids"].shape == (2, 1, 16) and "labels" not in batch
    assert batch["input_ids"][0, 0, -1] == tokenizer.eos_token_id  # cut, eos kept
    # a question without passages reads the template with an empty title and text
    assert batch["passage_mask"].tolist() == [[True], [True]]
    assert tokenizer.decode(batch["input_ids"][1, 0], skip_special_tokens=True) == \
        "question : which box ? title : context :"


def test_answers_are_cut_keeping_eos_and_need_an_eos_token(tokenizer):
    labels = encode_answers(tokenizer, ["the box is red box"], max_length=3)
    the, box = tokenizer.convert_tokens_to_ids(["the", "box"])
    assert labels.tolist() == [[the, box, tokenizer.eos_token_id]]
    with pytest.raises(ValueError, match="at least 2"):
        encode_answers(tokenizer, ["x"], max_length=1)

    class NoEos:
        eos_token_id = None

    with pytest.raises(ConfigError, match="no eos token"):
        encode_answers(NoEos(), ["x"], max_length=4)
    with pytest.raises(ValueError, match="2 questions but 1 passage lists"):
        collate(tokenizer, TEMPLATE, ["a", "b"], [[]], 2, 16)
    assert torch.is_tensor(labels)
