"""QReCC conversations and qrels, and the SCAI-QReCC-21 files."""
from __future__ import annotations

import json

import pytest

from convqa.errors import DataError
from convqa.loaders import (load_qrecc, load_qrecc_qrels, load_scai_ground_truth,
                            load_scai_judged_answers, load_scai_run, load_scai_subset,
                            load_scai_top_passages)
from convqa.types import QueryId
from tests.conftest import shared_file

PHYSICIAN = "What is a physician's assistant?"


@pytest.fixture(scope="module")
def test_qrels():
    return load_qrecc_qrels(shared_file("qrecc/qrecc_test_qrels_binary.json"))


@pytest.fixture(scope="module")
def conv1():
    conversations = load_qrecc(shared_file("qrecc/qrecc_test_conv1_turns1-8.jsonl"))
    assert len(conversations) == 1
    return conversations[0]


@pytest.fixture(scope="module")
def subset():
    shared_file("qrecc/batch1-top1.csv")
    return load_scai_subset(shared_file("qrecc/qa_batch1.csv").parent)


@pytest.fixture(scope="module")
def official(fixtures_dir):
    return load_qrecc(fixtures_dir / "loaders" / "qrecc_train_official.json")


def _rows(fixtures_dir):
    return json.loads((fixtures_dir / "loaders" / "qrecc_train_official.json").read_text())


def _write(tmp_path, obj, name="q.json"):
    path = tmp_path / name
    path.write_text(json.dumps(obj, indent=2))
    return path


# --- real data ---------------------------------------------------------------------------------

def test_real_jsonl_conversation(conv1):
    assert conv1.id == "1" and len(conv1) == 8
    assert conv1.turn(1).question == PHYSICIAN == conv1.turn(1).rewrite
    assert conv1.turn(4).question == "What's the average starting salary in the UK?"
    assert conv1.turn(4).rewrite == \
        "What's the average starting salary for a physician's assistant in the UK?"
    assert conv1.turn(2).meta["source"] == "trec"
    assert conv1.turn(2).meta["answer_url"] == \
        "https://www.geteducated.com/careers/how-to-become-a-physician-assistant"
    assert conv1.turn(1).meta["passages"] == []


def test_real_qrels(test_qrels, conv1):
    assert len(test_qrels) == 8088  # data/README.md: gold passage ids for 8,088 test turns
    assert set(test_qrels["1_2"]) == {
        "http://web.archive.org/web/20200524095112id_/https://www.geteducated.com/careers/"
        "how-to-become-a-physician-assistant/_p0"}
    assert {r for judged in test_qrels.values() for r in judged.values()} == {1}
    # the turns' Passages and the qrels file agree (turns without gold are absent from qrels)
    for qid in conv1.query_ids():
        assert conv1.turn(qid.turn).meta["passages"] == list(test_qrels.get(str(qid), {}))
    train = load_qrecc_qrels(shared_file("qrecc/qrecc_train_qrels_binary.json"))
    assert len(train) == 23820
    assert "1_2" in test_qrels and "1_3" in train  # both splits number conversations from 1


def test_id_prefix_keeps_splits_apart(conv1):
    prefixed = load_qrecc(shared_file("qrecc/qrecc_test_conv1_turns1-8.jsonl"), id_prefix="test/")
    qrels = load_qrecc_qrels(shared_file("qrecc/qrecc_test_qrels_binary.json"), id_prefix="test/")
    assert prefixed[0].id == "test/1"
    assert str(QueryId(prefixed[0].id, 2)) in qrels and "1_2" not in qrels
    assert prefixed[0].turns == conv1.turns


# --- SCAI-QReCC-21 -----------------------------------------------------------------------------

def test_scai_subset_counts(subset):
    assert len(subset.turns) == 95  # data/README.md: 95 test turns ...
    assert len(subset.passages) == 326  # ... and 326 real passages
    assert sum(len(t.passage_ids) for t in subset.turns) == 348  # 104 CSV rows, some repeat
    assert sum(1 for t in subset.turns if t.gold_passage_ids) == 53
    assert all(pid in subset.passages for t in subset.turns for pid in t.passage_ids)


def test_scai_subset_agrees_with_the_official_turns(subset, conv1):
    by_id = {t.query_id: t for t in subset.turns}
    for key in ("1_1", "1_4"):
        turn = conv1.turn(QueryId.parse(key).turn)
        assert by_id[key].rewrite == turn.rewrite and by_id[key].answer == turn.answer
    # turn 1_4 is on three CSV rows (three systems' top passages): 1 + 1 + 3 ids
    assert len(by_id["1_4"].passage_ids) == 5
    assert by_id["1_4"].passage_ids[0] == "http://irzi.auaa.pw/visa-glassdoor-salary.html_p0"
    assert by_id["1_1"].gold_passage_ids == []
    assert by_id["21_5"].rewrite == "Does weathering change the composition of rocks?"
    assert by_id["21_5"].answer.startswith("Chemical weathering may change the size")
    text = subset.passages["http://www.geologypage.com/2016/05/weathering.html_p3"].text
    assert len(text.split()) > 20


def test_scai_other_files():
    truth = load_scai_ground_truth(shared_file("qrecc/ground-truth-sample.json"))
    assert list(truth) == ["1_1", "2774_1", "2775_1"]
    assert truth["2775_1"].answer == "" and truth["2775_1"].passages == []
    assert truth["2774_1"].rewrite == "What is the difference between pka and pi"
    assert len(truth["2774_1"].passages) == 1
    run = load_scai_run(shared_file("qrecc/gpt3_run.json"))
    assert len(run) == 16451  # every QReCC test turn
    assert run["1_1"].answer.startswith(" A physician's assistant is a person who assists")
    assert run["1_1"].rewrite is None and run["1_1"].passages == {}
    judged = load_scai_judged_answers(shared_file("qrecc/qa_batch1.csv"))
    assert len(judged) == 499
    assert len({j.model for j in judged}) == 20 and len({j.query_id for j in judged}) == 95
    assert judged[0].query_id == "1_1" and judged[0].sas == pytest.approx(0.88)


def test_scai_csv_errors(tmp_path):
    header = "conversation_no,turn_no,question,passage_ids,passages\n"
    path = tmp_path / "top.csv"
    path.write_text(header + "1,1,Q?,\"['a', 'b']\",\"['text a']\"\n")
    with pytest.raises(DataError, match=r"top\.csv:2: field 'passages': 2 passage ids but 1"):
        load_scai_top_passages(path)
    path.write_text(header + "1,1,Q?,\"['a'\",\"['text a']\"\n")
    with pytest.raises(DataError, match=r"top\.csv:2: field 'passage_ids': expected a Python list"):
        load_scai_top_passages(path)
    path.write_text(header + "1,1,Q?,['a'],['text a']\n1,x,Q?,['b'],['text b']\n")
    with pytest.raises(DataError, match=r"top\.csv:3: field 'turn_no': expected a turn number"):
        load_scai_top_passages(path)
    path.write_text(header + "1,1,Q?,['a'],['text a']\n1,2,Q2?,['a'],['other']\n")
    with pytest.raises(DataError, match=r"top\.csv:3: field 'passages': passage 'a' has a "
                                        r"different text"):
        load_scai_top_passages(path)
    path.write_text("conversation_no,turn_no,question\n1,1,Q?\n")
    with pytest.raises(DataError, match=r"top\.csv:1: field 'passage_ids': CSV header lacks"):
        load_scai_top_passages(path)


def test_scai_json_errors(tmp_path):
    rows = [{"Conversation_no": 1, "Turn_no": 1, "Truth_answer": "x", "Truth_passages": [],
             "Truth_rewrite": "q"}]
    rows.append(dict(rows[0]))
    with pytest.raises(DataError, match="turn 1_1 appears twice"):
        load_scai_ground_truth(_write(tmp_path, rows))
    run = [{"Conversation_no": 1, "Turn_no": 1, "Model_passages": {"p": "high"}}]
    with pytest.raises(DataError, match="field 'Model_passages': score of 'p' must be a number"):
        load_scai_run(_write(tmp_path, run))


# --- official format fixture -------------------------------------------------------------------

def test_official_format(official):
    assert [c.id for c in official] == ["1", "2"]
    mountain = official[0]
    assert [t.rewrite for t in mountain.turns] == [
        "What is the tallest mountain in Africa?", "Which country is Mount Kilimanjaro in?",
        "How long does it take to climb Mount Kilimanjaro?"]
    assert mountain.turn(3).answer == "" and mountain.turn(3).meta["answer_url"] == ""
    assert mountain.turn(2).meta == {"source": "nq", "answer_url":
                                     "https://en.wikipedia.org/wiki/Mount_Kilimanjaro",
                                     "passages": []}
    assert len(official[1].turn(1).meta["passages"]) == 2
    assert official[1].turn(1).meta["source"] == "quac"


def test_official_without_passages_field(tmp_path, fixtures_dir, official):
    rows = _rows(fixtures_dir)
    for row in rows:
        del row["Passages"]
    loaded = load_qrecc(_write(tmp_path, rows))
    assert all("passages" not in t.meta for c in loaded for t in c.turns)
    assert [t.question for t in loaded[0].turns] == [t.question for t in official[0].turns]


def test_context_mismatch(tmp_path, fixtures_dir):
    rows = _rows(fixtures_dir)
    rows[3]["Context"] = rows[3]["Context"][:2]
    path = _write(tmp_path, rows)
    with pytest.raises(DataError, match=r"q\.json:\d+: field 'Context': differs .*\(2 entries, "
                                        r"expected 4\)") as err:
        load_qrecc(path)
    assert "conversation 1 turn 3" in str(err.value)
    with pytest.warns(UserWarning):
        assert len(load_qrecc(path, context="warn")) == 2


@pytest.mark.parametrize("field, value, expected", [
    ("Question", None, "field 'Question': expected string, got null"),
    ("Passages", "p1", "field 'Passages': expected list, got string"),
    ("Passages", ["p1", 2], "field 'Passages[1]': expected string, got integer"),
    ("Turn_no", 1.0, "field 'Turn_no': expected integer, got number"),
    ("Rewrite", 5, "field 'Rewrite': expected string, got integer"),
])
def test_bad_fields(tmp_path, fixtures_dir, field, value, expected):
    rows = _rows(fixtures_dir)
    rows[2][field] = value
    path = _write(tmp_path, rows)
    with pytest.raises(DataError) as err:
        load_qrecc(path)
    assert str(err.value).startswith(f"{path}:29: {expected}")  # element [2] starts on line 29


def test_missing_question(tmp_path, fixtures_dir):
    rows = _rows(fixtures_dir)
    del rows[0]["Question"]
    with pytest.raises(DataError, match=r"q\.json:2: field 'Question': missing"):
        load_qrecc(_write(tmp_path, rows))


def test_qrels_errors(tmp_path):
    cases = [({"1-2": {"p": 1}}, "field '1-2': key is not a query id"),
             ({"1_2": ["p"]}, "field '1_2': expected an object of passage ids, got list"),
             ({"1_2": {"p": "1"}}, "relevance of passage 'p' must be an integer, got string"),
             ({"1_2": {"p": True}}, "relevance of passage 'p' must be an integer, got boolean"),
             ([["1_2", "p"]], "expected a JSON object at the top level, got list")]
    for obj, expected in cases:
        path = _write(tmp_path, obj, "qrels.json")
        with pytest.raises(DataError, match="qrels.json") as err:
            load_qrecc_qrels(path)
        assert expected in str(err.value)


def test_non_utf8_jsonl(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_bytes(b'{"Conversation_no": 1, "Turn_no": 1, "Question": "ok"}\n'
                     b'{"Conversation_no": 1, "Turn_no": 2, "Question": "caf\xe9"}\n')
    with pytest.raises(DataError, match=r"q\.jsonl:2: not valid UTF-8"):
        load_qrecc(path)
