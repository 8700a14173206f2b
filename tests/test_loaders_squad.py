"""SQuAD-format files: the shared real files, offset checking and repair, bad input."""
from __future__ import annotations

import json
import warnings

import pytest

from convqa.errors import DataError
from convqa.loaders import DataWarning, SquadAnswer, load_squad, read_squad
from tests.conftest import shared_file


@pytest.fixture(scope="module")
def dev_v2():
    return read_squad(shared_file("squad/dev-v2.0.json"))


@pytest.mark.parametrize("name, questions, answers", [
    ("squadshifts_new_wiki_v1.0.json", 7938, 22794),
    ("squadshifts_amazon_reviews_v1.0.json", 9885, 27318),
    ("squadshifts_reddit_v1.0.json", 9803, 27692),
    ("covidqa_200423.json", 1380, 1380),
])
def test_real_files_load_strictly(name, questions, answers):
    data = read_squad(shared_file(f"squad/{name}"))  # strict: any offset mismatch would raise
    assert len(data.examples) == questions  # question counts: data/README.md
    assert data.report.answers == answers and data.report.mismatched == 0
    assert not any(e.is_impossible for e in data.examples)
    assert all(e.context[a.start:a.end] == a.text for e in data.examples for a in e.answers)


def test_real_v2_dev(dev_v2):
    examples = dev_v2.examples
    assert len(examples) == 11873
    assert sum(1 for e in examples if not e.is_impossible) == 5928  # data/README.md
    assert all(e.answers for e in examples if not e.is_impossible)
    assert all(not e.answers for e in examples if e.is_impossible)
    assert dev_v2.report.answers == 20302 and dev_v2.report.mismatched == 0
    first = examples[0]
    assert (first.id, first.title) == ("56ddde6b9a695914005b9628", "Normans")
    assert first.question == "In what country is Normandy located?"
    assert first.answers[0] == SquadAnswer("France", 159)


def test_covid_ids_are_strings():
    examples = load_squad(shared_file("squad/covidqa_200423.json"))
    assert all(isinstance(e.id, str) for e in examples) and examples[0].title == ""


def test_v2_fixture(fixtures_dir):
    examples = load_squad(fixtures_dir / "loaders" / "squad_v2_small.json")
    assert [e.id for e in examples] == ["h1", "h2", "42"]
    h1, h2, seine = examples
    assert h1.title == "Honey" and h1.answers == [SquadAnswer("the nectar of flowers", 27),
                                                  SquadAnswer("nectar", 31)]
    assert h1.answers[0].end == 48 and h1.context[27:48] == "the nectar of flowers"
    assert h2.is_impossible and h2.answers == [] and h2.plausible_answers == [
        SquadAnswer("bees", 17)]
    assert seine.title == "" and seine.answers == [SquadAnswer("777 km", 44)]


def test_strict_mode_names_the_question(fixtures_dir):
    path = fixtures_dir / "loaders" / "squad_bad_offsets.json"
    with pytest.raises(DataError) as err:
        load_squad(path)
    assert str(err.value) == (
        f"{path}: field 'data[0].paragraphs[0].qas[1].answers[0]': question id shifted: answer "
        f"'Seine' does not match the context at offset 29 ('. The'); use strict=False to "
        f"repair offsets")


def test_lenient_mode_repairs_and_counts(fixtures_dir):
    path = fixtures_dir / "loaders" / "squad_bad_offsets.json"
    data = read_squad(path, strict=False)
    report = data.report
    assert (report.questions, report.answers, report.mismatched) == (4, 5, 3)
    assert (report.repaired, report.dropped_answers, report.dropped_questions) == (1, 2, 1)
    by_id = {e.id: e for e in data.examples}
    assert list(by_id) == ["ok", "shifted", "absent"]  # "gone" lost its only answer
    # "Seine" occurs at 4 and 35; the given offset 29 is nearer 35
    assert by_id["shifted"].answers == [SquadAnswer("Seine", 35)]
    assert by_id["absent"].answers == [SquadAnswer("Loire", 61)]
    with pytest.warns(DataWarning, match=r"3 answer offset\(s\) .* 1 repaired, 2 answer\(s\) and "
                                         r"1 question\(s\) dropped"):
        assert len(load_squad(path, strict=False)) == 3


def test_no_warning_when_offsets_match(fixtures_dir):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_squad(fixtures_dir / "loaders" / "squad_v2_small.json", strict=False)


def _fixture(fixtures_dir):
    return json.loads((fixtures_dir / "loaders" / "squad_v2_small.json").read_text())


@pytest.mark.parametrize("edit, expected", [
    (lambda d: d["data"][0]["paragraphs"][0]["qas"][0]["answers"][1].update(answer_start="31"),
     "field 'data[0].paragraphs[0].qas[0].answers[1].answer_start': expected integer, got string"),
    (lambda d: d["data"][0]["paragraphs"][0]["qas"][1].pop("question"),
     "field 'data[0].paragraphs[0].qas[1].question': missing"),
    (lambda d: d["data"][1]["paragraphs"][0].update(context=None),
     "field 'data[1].paragraphs[0].context': expected string, got null"),
    (lambda d: d["data"][1]["paragraphs"][0]["qas"][0].update(id=None),
     "field 'data[1].paragraphs[0].qas[0].id': expected string or integer, got null"),
    (lambda d: d["data"][0]["paragraphs"][0]["qas"][1].update(id="h1"),
     "field 'data[0].paragraphs[0].qas[1].id': question id h1 appears twice"),
    (lambda d: d["data"][0]["paragraphs"][0]["qas"][0].update(is_impossible="no"),
     "field 'data[0].paragraphs[0].qas[0].is_impossible': expected boolean, got string"),
    (lambda d: d.pop("data"), "field 'data': missing"),
])
def test_bad_fields(tmp_path, fixtures_dir, edit, expected):
    data = _fixture(fixtures_dir)
    edit(data)
    path = tmp_path / "s.json"
    path.write_text(json.dumps(data))
    with pytest.raises(DataError) as err:
        load_squad(path)
    assert str(err.value).startswith(f"{path}: {expected}")


def test_malformed_and_non_utf8(tmp_path, fixtures_dir):
    text = (fixtures_dir / "loaders" / "squad_v2_small.json").read_text()
    path = tmp_path / "s.json"
    path.write_text(text.replace('"title": "Honey",', '"title": "Honey"'))
    with pytest.raises(DataError, match=r"s\.json:6: malformed JSON"):
        load_squad(path)
    path.write_bytes(text.encode().replace(b"little water", b"little w\xe2ter"))
    with pytest.raises(DataError, match=r"s\.json:8: not valid UTF-8"):
        load_squad(path)
    path.write_text("[]")
    with pytest.raises(DataError, match="expected a JSON object at the top level, got list"):
        load_squad(path)
