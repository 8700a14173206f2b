"""CANARD: dialogs rebuilt from the per-question History, on the shared dev file and small files."""
from __future__ import annotations

import json

import pytest

from convqa.errors import DataError
from convqa.loaders import load_canard, load_canard_multiple_refs
from tests.conftest import shared_file

ZAPPA = "C_2d211835213b45588ad5ca868ce7fabd_0"


@pytest.fixture(scope="module")
def dev():
    return load_canard(shared_file("canard/dev.json"))


def _dialog():
    """Three questions of one invented dialog in CANARD's format."""
    head = ["Ada Lovelace", "Early life"]
    qa = ["Where was she born?", "London", "Who was her father?", "I don't know."]
    rows = []
    for n, (question, rewrite) in enumerate([
            ("Where was she born?", "Where was Ada Lovelace born?"),
            ("Who was her father?", "Who was Ada Lovelace's father?"),
            ("Did she go to school?", "Did Ada Lovelace go to school?")], start=1):
        rows.append({"History": head + qa[: 2 * (n - 1)], "QuAC_dialog_id": "C_ada_1",
                     "Question": question, "Question_no": n, "Rewrite": rewrite})
    return rows


def _write(tmp_path, rows):
    path = tmp_path / "canard.json"
    path.write_text(json.dumps(rows, indent=1))
    return path


def test_real_dev_counts(dev):
    assert len(dev) == 490
    assert sum(len(c) for c in dev) == 3430  # data/README.md
    assert sum(1 for c in dev for t in c.turns if t.meta.get("answerable") is False) == 443
    assert all(c.turns[-1].answer is None and "answerable" not in c.turns[-1].meta for c in dev)


def test_real_dev_spot_check(dev):
    zappa = dev[0]
    assert zappa.id == ZAPPA and len(zappa) == 8
    assert {(t.meta["title"], t.meta["section"]) for t in zappa.turns} == \
        {("Frank Zappa", "Disbandment")}
    assert zappa.turn(1).answer == "Zappa and the Mothers of Invention"
    assert zappa.turn(2).question == "When did they disband?"
    assert zappa.turn(2).rewrite == "When did Zappa and the Mothers of Invention disband?"
    assert zappa.turn(2).answer == "In late 1969, Zappa broke up the band."
    assert zappa.turn(8).question == "Did they play with anybody famous?"
    assert zappa.turn(8).meta["qid"] == f"{ZAPPA}_q#7"


def test_multiple_refs():
    pairs = load_canard_multiple_refs(shared_file("canard/multiple_refs.json"))
    assert len(pairs) == 100
    assert pairs[0].first == "Did Augustus Pugin design things other than buildings ?"
    assert pairs[0].second == "Did Augustus Pugin design anything other than buildings ?"


def test_small_dialog(tmp_path):
    rows = _dialog()
    conv, = load_canard(_write(tmp_path, list(reversed(rows))))  # order comes from Question_no
    assert conv.id == "C_ada_1"
    assert [t.question for t in conv.turns] == [r["Question"] for r in rows]
    assert [t.answer for t in conv.turns] == ["London", "I don't know.", None]
    assert [t.meta.get("answerable") for t in conv.turns] == [True, False, None]
    assert conv.turn(3).meta == {"qid": "C_ada_1_q#2", "title": "Ada Lovelace",
                                 "section": "Early life"}


def test_history_disagreeing_with_the_last_question(tmp_path):
    rows = _dialog()
    rows[1]["History"][3] = "Paris"  # question 2 says question 1 was answered "Paris"
    path = _write(tmp_path, rows)
    with pytest.raises(DataError) as err:
        load_canard(path)
    assert str(err.value).startswith(f"{path}:")
    assert err.value.field == "History" and err.value.line is not None
    assert "dialog C_ada_1 question 2" in str(err.value) and "'Paris'" in str(err.value)
    with pytest.warns(UserWarning, match="1 turn"):
        conv, = load_canard(path, context="warn")
    assert conv.turn(1).answer == "London"


def test_title_mismatch_and_short_history(tmp_path):
    rows = _dialog()
    rows[0]["History"][0] = "Charles Babbage"
    with pytest.raises(DataError, match="field 'History': title and section"):
        load_canard(_write(tmp_path, rows))
    rows = _dialog()
    rows[2]["History"] = rows[2]["History"][:4]
    with pytest.raises(DataError, match="field 'History': expected title, section and 4 "):
        load_canard(_write(tmp_path, rows))
    rows = _dialog()
    rows[0]["History"] = ["Ada Lovelace"]
    with pytest.raises(DataError, match="field 'History': expected at least the article title"):
        load_canard(_write(tmp_path, rows))


@pytest.mark.parametrize("field, value, expected", [
    ("Question_no", "1", "field 'Question_no': expected integer, got string"),
    ("Rewrite", None, "field 'Rewrite': expected string, got null"),
    ("History", "Ada", "field 'History': expected list, got string"),
])
def test_bad_fields(tmp_path, field, value, expected):
    rows = _dialog()
    rows[1][field] = value
    path = _write(tmp_path, rows)
    with pytest.raises(DataError, match=expected) as err:
        load_canard(path)
    assert err.value.path == str(path) and err.value.line is not None


def test_missing_question_number_and_gap(tmp_path):
    rows = _dialog()
    del rows[0]["Question_no"]
    with pytest.raises(DataError, match=r"canard\.json:2: field 'Question_no': missing"):
        load_canard(_write(tmp_path, rows))
    rows = _dialog()[::2]
    with pytest.raises(DataError, match="turn numbers must run 1..2 without gaps, found 1, 3"):
        load_canard(_write(tmp_path, rows))


def test_multiple_refs_errors(tmp_path):
    path = tmp_path / "refs.json"
    path.write_text('[["a", "b"], ["c"]]')
    with pytest.raises(DataError, match=r"refs\.json: field '\[1\]': expected a pair"):
        load_canard_multiple_refs(path)
