"""DPR bi-encoder files: fixture in the DPR/TopiOCQA layout, round trip, atomic save, bad input."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from convqa.errors import DataError
from convqa.loaders import DprContext, DprExample, load_dpr_biencoder, save_dpr_biencoder


@pytest.fixture(scope="module")
def path(fixtures_dir) -> Path:
    return fixtures_dir / "loaders" / "dpr_biencoder.json"


def test_fixture(path):
    first, second = load_dpr_biencoder(path)
    assert first.question.startswith("who designed the eiffel tower [SEP]")
    assert first.answers == ["1889"]
    assert first.extra == {"dataset": "topiocqa_train_all_history", "conv_id": 7, "turn_id": 2}
    assert first.positive_ctxs == [DprContext(
        text="It was completed in 1889 for the World's Fair.", title="Eiffel Tower [SEP] History",
        id="1002", score=1000.0, extra={"title_score": 1})]
    assert first.negative_ctxs[0].id == "2002" and first.negative_ctxs[0].score == 0.0
    hard = first.hard_negative_ctxs
    assert (hard[0].id, hard[0].score) == ("3003", 12.5)  # "id": 3003, "score": "12.5"
    assert (hard[1].id, hard[1].score, hard[1].extra) == ("wiki:4004", None, {})
    assert second.negative_ctxs == [] and second.hard_negative_ctxs == []
    assert second.answers == ["the Seine", "Seine"] and second.extra == {}


def test_round_trip_and_gzip(tmp_path, path):
    examples = load_dpr_biencoder(path)
    out = tmp_path / "sub" / "out.json"
    save_dpr_biencoder(out, examples)
    assert load_dpr_biencoder(out) == examples
    saved = json.loads(out.read_text())
    assert saved[0]["hard_negative_ctxs"][0] == {"title": "Gustave Eiffel", "text":
                                                 "Gustave Eiffel was a French civil engineer.",
                                                 "passage_id": "3003", "score": 12.5,
                                                 "title_score": 0}
    assert saved[0]["conv_id"] == 7 and "negative_ctxs" in saved[1]
    assert [p.name for p in out.parent.iterdir()] == ["out.json"]  # no temporary file left
    gz = tmp_path / "out.json.gz"
    gz.write_bytes(gzip.compress(out.read_bytes()))
    assert load_dpr_biencoder(gz) == examples


def test_failed_save_keeps_the_old_file(tmp_path, path):
    out = tmp_path / "out.json"
    save_dpr_biencoder(out, load_dpr_biencoder(path))
    before = out.read_bytes()
    broken = DprExample("q", ["a"], [DprContext("t", extra={"bad": object()})])
    with pytest.raises(TypeError):
        save_dpr_biencoder(out, [broken])
    assert out.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def _records(path):
    return json.loads(path.read_text())


@pytest.mark.parametrize("edit, expected", [
    (lambda r: r[1].pop("positive_ctxs"), "field 'positive_ctxs': missing (element [1])"),
    (lambda r: r[1].update(answers="Seine"), "field 'answers': expected list, got string"),
    (lambda r: r[1].update(answers=["Seine", 1]), "field 'answers[1]': expected string, got"),
    (lambda r: r[0]["negative_ctxs"].append("just text"),
     "field 'negative_ctxs[1]': expected a passage object, got string"),
    (lambda r: r[0]["positive_ctxs"][0].pop("text"),
     "field 'text': missing (element [0], positive_ctxs[0])"),
    (lambda r: r[0]["hard_negative_ctxs"][0].update(score="high"),
     "field 'score': expected a number, got 'high' (element [0], hard_negative_ctxs[0])"),
    (lambda r: r[0]["positive_ctxs"][0].update(passage_id=["1002"]),
     "field 'passage_id': expected string or integer, got list"),
    (lambda r: r[1].update(question=None), "field 'question': expected string, got null"),
])
def test_bad_records(tmp_path, path, edit, expected):
    records = _records(path)
    edit(records)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(records, indent=2))
    with pytest.raises(DataError) as err:
        load_dpr_biencoder(bad)
    assert str(err.value).startswith(f"{bad}:") and expected in str(err.value)
    assert err.value.line is not None


def test_malformed_and_non_utf8(tmp_path, path):
    bad = tmp_path / "bad.json"
    text = path.read_text()
    bad.write_text(text.replace('"answers": ["1889"],', '"answers": ["1889"]'))
    with pytest.raises(DataError, match=r"bad\.json:8: malformed JSON"):
        load_dpr_biencoder(bad)
    bad.write_bytes(text.encode().replace(b"Paris is located", b"Par\xefs is located"))
    with pytest.raises(DataError, match=r"bad\.json:12: not valid UTF-8"):
        load_dpr_biencoder(bad)
