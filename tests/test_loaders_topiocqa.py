"""TopiOCQA loader: the shared first release, a later-release fixture, and bad input."""
from __future__ import annotations

import gzip
import json
import warnings

import pytest

from convqa.errors import DataError
from convqa.loaders import DataWarning, load_topiocqa, topiocqa_answers
from tests.conftest import shared_file


@pytest.fixture(scope="module")
def train():
    return load_topiocqa(shared_file("topiocqa/topiocqa_train.json.gz"))


@pytest.fixture(scope="module")
def later(fixtures_dir):
    return load_topiocqa(fixtures_dir / "loaders" / "topiocqa_later_release.json")


def _rows(fixtures_dir):
    return json.loads((fixtures_dir / "loaders" / "topiocqa_later_release.json").read_text())


def _write(tmp_path, rows, name="t.json", pretty=True):
    path = tmp_path / name
    path.write_text(json.dumps(rows, indent=2 if pretty else None))
    return path


# --- real data ---------------------------------------------------------------------------------

def test_real_counts_match_readme(train):
    assert len(train) == 3159  # data/README.md
    assert sum(len(c) for c in train) == 40993
    assert all(isinstance(c.id, str) for c in train)
    assert [c.id for c in train[:5]] == ["1", "2", "3", "5", "6"]  # file order, 4 is not shared
    assert min(len(c) for c in train) == 5 and max(len(c) for c in train) == 25


def test_real_spot_checks(train):
    by_id = {c.id: c for c in train}
    first = by_id["1"]
    assert first.turn(1).answer == "UNANSWERABLE" and first.turn(1).meta["is_nq"] is True
    assert first.turn(2).question == "how does one define force?"
    assert first.turn(2).meta == {"topic": "Force", "topic_section": "Introduction",
                                  "is_nq": False}
    conv = by_id["10"]
    assert len(conv) == 12
    assert conv.turn(6).answer == "1789"
    assert conv.turn(6).meta["topic"] == "French Revolution"
    assert conv.turn(7).meta["topic"] == "" and conv.turn(7).answer == "UNANSWERABLE"
    assert conv.turn(10).answer == "She murdered Jean-Paul Marat."
    assert conv.turn(10).meta["topic_section"] == "Political influence"
    assert [t.question for t in conv.history(3)] == [
        "what was the rhine campaign of 1796 about?", "which armies were involved in this?"]
    assert by_id["3509"].turn(10).question == \
        "when was the constitution called to reform the amendment ?"


def test_real_first_release_has_no_later_fields(train):
    assert all(set(t.meta) == {"topic", "topic_section", "is_nq"} for c in train for t in c.turns)
    assert topiocqa_answers(train[0].turn(2)) == [train[0].turn(2).answer]


# --- later release fixture ---------------------------------------------------------------------

def test_later_release_fields_and_order(later):
    assert [c.id for c in later] == ["7", "3"]
    conv = later[0]
    # the file lists turn 3 before turn 2: order follows Turn_no
    assert [t.question for t in conv.turns] == [
        "who designed the eiffel tower?", "when was it finished?",
        "what river flows past the city?"]
    meta = conv.turn(1).meta
    assert meta["rationale"].startswith("It is named after the engineer Gustave Eiffel")
    assert meta["gold_passage"]["id"] == "wiki:1001"
    assert meta["gold_passage"]["title"] == "Eiffel Tower [SEP] Introduction"
    assert conv.turn(3).meta["gold_passage"]["id"] == "2002"  # a numeric id becomes a string
    assert conv.turn(1).meta["additional_answers"] == ["Gustave Eiffel",
                                                       "the company of Gustave Eiffel"]
    assert conv.turn(3).meta["additional_answers"] == ["Seine", "Seine River"]
    assert conv.turn(2).meta["additional_answers"] == []


def test_all_gold_answers(later):
    assert topiocqa_answers(later[0].turn(1)) == [
        "Gustave Eiffel's engineering company", "Gustave Eiffel", "the company of Gustave Eiffel"]
    assert topiocqa_answers(later[0].turn(3)) == ["the Seine", "Seine", "Seine River"]
    assert topiocqa_answers(later[1].turn(1)) == ["UNANSWERABLE", "UNANSWERABLE"]


def test_gzip_and_jsonl_give_the_same_conversations(tmp_path, fixtures_dir, later):
    rows = _rows(fixtures_dir)
    gz = tmp_path / "t.json.gz"
    gz.write_bytes(gzip.compress(json.dumps(rows).encode()))
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert load_topiocqa(gz) == later
    assert load_topiocqa(jsonl) == later


# --- Context is checked, never trusted --------------------------------------------------------

def _bad_context(fixtures_dir):
    rows = _rows(fixtures_dir)
    rows[1]["Context"][3] = "1890"  # turn 3 claims turn 2 was answered "1890"
    return rows


def test_context_mismatch_is_an_error_naming_line_and_field(tmp_path, fixtures_dir):
    path = _write(tmp_path, _bad_context(fixtures_dir))
    with pytest.raises(DataError) as err:
        load_topiocqa(path)
    message = str(err.value)
    assert message.startswith(f"{path}:32: field 'Context'")  # element [1] starts on line 32
    assert "conversation 7 turn 3" in message and "'1890'" in message and "'1889'" in message


def test_context_mismatch_warn_and_ignore(tmp_path, fixtures_dir, later):
    path = _write(tmp_path, _bad_context(fixtures_dir))
    with pytest.warns(DataWarning, match="1 turn"):
        conversations = load_topiocqa(path, context="warn")
    assert conversations == later  # history still comes from the earlier turns
    assert conversations[0].history(3)[1].answer == "1889"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_topiocqa(path, context="ignore") == later
    with pytest.raises(ValueError, match="context must be one of"):
        load_topiocqa(path, context="trust")


# --- bad input ---------------------------------------------------------------------------------

def test_missing_field_names_file_line_and_field(tmp_path, fixtures_dir):
    rows = _rows(fixtures_dir)
    del rows[2]["Answer"]
    path = _write(tmp_path, rows)
    with pytest.raises(DataError, match=r"t\.json:\d+: field 'Answer': missing") as err:
        load_topiocqa(path)
    assert err.value.line == 57 and err.value.field == "Answer"  # element [2] starts on line 57
    assert "conversation 7 turn 2" in str(err.value)


def test_single_line_file_names_the_element(tmp_path, fixtures_dir):
    rows = _rows(fixtures_dir)
    rows[3]["is_nq"] = "yes"
    path = _write(tmp_path, rows, pretty=False)
    with pytest.raises(DataError) as err:
        load_topiocqa(path)
    assert str(err.value).startswith(f"{path}:1: field 'is_nq': expected boolean, got string")
    assert "element [3]" in str(err.value)


@pytest.mark.parametrize("field, value, expected", [
    ("Turn_no", "2", "expected integer, got string"),
    ("Turn_no", True, "expected integer, got boolean"),
    ("Conversation_no", None, "expected string or integer, got null"),
    ("Context", ["q", 3], "expected string, got integer"),
    ("Gold_passage", "p1", "expected object, got string"),
    ("Additional_answers", [7], "expected string or object with 'Answer', got integer"),
])
def test_wrong_types(tmp_path, fixtures_dir, field, value, expected):
    rows = _rows(fixtures_dir)
    rows[0][field] = value
    with pytest.raises(DataError, match=field) as err:
        load_topiocqa(_write(tmp_path, rows))
    assert expected in str(err.value) and err.value.line == 2


def test_malformed_json_names_the_line(tmp_path, fixtures_dir):
    text = json.dumps(_rows(fixtures_dir), indent=2).splitlines()
    text[5] = text[5].rstrip(",")  # drop the comma after "Question" of element [0]
    path = tmp_path / "t.json"
    path.write_text("\n".join(text))
    with pytest.raises(DataError, match=r"t\.json:7: malformed JSON"):
        load_topiocqa(path)


def test_malformed_jsonl_line(tmp_path, fixtures_dir):
    rows = _rows(fixtures_dir)
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(rows[0]) + "\n" + json.dumps(rows[1])[:-1] + "\n")
    with pytest.raises(DataError, match=r"t\.jsonl:2: malformed JSON"):
        load_topiocqa(path)


def test_non_utf8_names_the_line(tmp_path, fixtures_dir):
    data = json.dumps(_rows(fixtures_dir), indent=2).encode().replace(b"Tanzania", b"T\xe4nzania")
    data = data.replace(b"the Seine", b"the S\xe9ine")
    path = tmp_path / "t.json"
    path.write_bytes(data)
    line = data[: data.index(b"S\xe9ine")].count(b"\n") + 1
    with pytest.raises(DataError, match=rf"t\.json:{line}: not valid UTF-8"):
        load_topiocqa(path)


def test_gap_in_turn_numbers(tmp_path, fixtures_dir):
    rows = [r for r in _rows(fixtures_dir) if not (r["Conversation_no"] == 7 and r["Turn_no"] == 2)]
    rows[1]["Context"] = rows[1]["Context"][:2]
    with pytest.raises(DataError, match=r"conversation 7: turn numbers must run 1\.\.2 without "
                                        r"gaps, found 1, 3"):
        load_topiocqa(_write(tmp_path, rows))


def test_repeated_turn(tmp_path, fixtures_dir):
    rows = _rows(fixtures_dir)
    rows.append(dict(rows[0]))
    with pytest.raises(DataError, match="conversation 7 has turn 1 twice"):
        load_topiocqa(_write(tmp_path, rows))


def test_not_a_list(tmp_path):
    path = tmp_path / "t.json"
    path.write_text('\n{"Conversation_no": 1}')
    with pytest.raises(DataError, match=r"t\.json:2: field 'Turn_no': missing"):  # as JSON Lines
        load_topiocqa(path)
    path.write_text('\n\n "a list?"')
    with pytest.raises(DataError, match=r"t\.json:3: expected a JSON object, got string"):
        load_topiocqa(path)
    path.write_text("[1, 2]")
    with pytest.raises(DataError, match=r"expected a JSON object, got integer \(element \[0\]\)"):
        load_topiocqa(path)
