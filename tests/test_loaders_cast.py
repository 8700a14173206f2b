"""TREC CAsT topics (2019 shared files, 2020 fixture), resolved rewrites and TREC qrels."""
from __future__ import annotations

import json

import pytest

from convqa.errors import DataError
from convqa.loaders import load_cast_rewrites, load_cast_topics, load_trec_qrels
from tests.conftest import shared_file

EVAL = "cast/2019_data_evaluation_evaluation_topics_v1.0.json"
RESOLVED = "cast/2019_data_evaluation_evaluation_topics_annotated_resolved_v1.0.tsv"


@pytest.fixture(scope="module")
def eval2019():
    return load_cast_topics(shared_file(EVAL), shared_file(RESOLVED))


@pytest.fixture(scope="module")
def topics2020(fixtures_dir):
    return load_cast_topics(fixtures_dir / "loaders" / "cast2020_manual_topics.json")


def test_2019_evaluation_topics(eval2019):
    assert len(eval2019) == 50 and sum(len(c) for c in eval2019) == 479
    assert [c.id for c in eval2019[:3]] == ["31", "32", "33"]
    throat = eval2019[0]
    assert throat.turn(2).question == "Is it treatable?"
    assert throat.turn(2).rewrite == "Is throat cancer treatable?"
    assert throat.turn(4).question == "What are its symptoms? "  # verbatim, trailing space
    assert throat.turn(4).rewrite == "What are lung cancer's symptoms?"
    assert throat.turn(9).question == "What's the difference in their symptoms?"  # \u0027 decoded
    assert throat.turn(1).meta["title"] == "head and neck cancer"
    assert throat.turn(1).meta["description"].startswith("A person is trying to compare")
    assert all(t.rewrite for c in eval2019 for t in c.turns)  # the TSV covers all 479 turns
    acid = next(c for c in eval2019 if c.id == "44")  # the one topic without a description
    assert acid.turn(1).meta == {"title": "acid reflux"}
    assert acid.turn(3).rewrite == "What is the best OTC for acidic reflux in the morning?"


def test_2019_training_topics_without_rewrites():
    train = load_cast_topics(shared_file("cast/2019_data_training_train_topics_v1.0.json"))
    assert len(train) == 30 and sum(len(c) for c in train) == 269
    assert train[0].id == "1" and train[0].turn(1).question == "What is a physician's assistant?"
    assert all(t.rewrite is None for c in train for t in c.turns)


def test_2019_rewrites_and_qrels():
    rewrites = load_cast_rewrites(shared_file(RESOLVED))  # CRLF line ends
    assert len(rewrites) == 479 and rewrites["31_1"] == "What is throat cancer?"
    qrels = load_trec_qrels(shared_file("cast/2019_data_2019qrels.txt"))
    assert len(qrels) == 173 and sum(len(v) for v in qrels.values()) == 29350
    assert len(qrels["31_1"]) == 106
    assert qrels["31_1"]["CAR_116d829c4c800c2fc70f11692fec5e8c7e975250"] == 0
    assert qrels["31_1"]["CAR_2174ad0aa50712ff24035c23f59a3c2b43267650"] == 3
    train = load_trec_qrels(shared_file("cast/2019_data_training_train_topics_mod.qrel"))
    # 2,399 lines; 4_4 judges MARCO_5089548 and MARCO_4867704 twice, both times 0
    assert len(train) == 120 and sum(len(v) for v in train.values()) == 2397
    assert train["1_1"]["MARCO_955948"] == 2 and train["4_4"]["MARCO_5089548"] == 0


def test_2020_fixture(topics2020):
    assert [c.id for c in topics2020] == ["81", "82"]
    honey = topics2020[0]
    assert honey.turn(2).question == "Why doesn't it spoil?"
    assert honey.turn(2).rewrite == "Why doesn't honey spoil?"
    assert honey.turn(2).meta == {
        "automatic_rewrite": "Why doesn't bees spoil?",
        "canonical_result_id": "CAR_0123456789abcdef0123456789abcdef01234567"}
    iceland = topics2020[1]
    assert [t.question for t in iceland.turns] == ["What is the Ring Road in Iceland?",
                                                   "How much does it cost?"]
    assert iceland.turn(2).meta == {"title": "Iceland trip",
                                    "description": "Planning a first visit to Iceland.",
                                    "query_turn_dependence": [1],
                                    "canonical_result_id": "MARCO_2000002"}


def test_rewrites_file_wins_over_json(tmp_path, fixtures_dir):
    path = tmp_path / "rw.tsv"
    path.write_text("81_2\tWhy does honey never spoil?\r\n")
    topics = load_cast_topics(fixtures_dir / "loaders" / "cast2020_manual_topics.json", path)
    assert topics[0].turn(2).rewrite == "Why does honey never spoil?"
    assert topics[0].turn(1).rewrite == "How do bees make honey?"
    path.write_text("81_2\tok\n99_1\tnot a turn of these topics\n")
    with pytest.raises(DataError, match=r"rw\.tsv: 1 rewrite\(s\) for turns that are not in the "
                                        r"topics file, e.g. 99_1"):
        load_cast_topics(fixtures_dir / "loaders" / "cast2020_manual_topics.json", path)


def test_2020_qrels_fixture(fixtures_dir):
    qrels = load_trec_qrels(fixtures_dir / "loaders" / "cast2020_qrels.txt")
    assert qrels == {"81_1": {"MARCO_1000001": 2, "MARCO_1000002": 0},
                     "81_2": {"CAR_0123456789abcdef0123456789abcdef01234567": 3,
                              "MARCO_1000004": -1},
                     "82_1": {"MARCO_2000001": 1}}


def test_qrels_errors(tmp_path):
    path = tmp_path / "qrels.txt"
    for text, expected in [
            ("1_1 0 D1 1\n1_1 0 D2\n", r"qrels\.txt:2: expected 4 columns"),
            ("1_1 0 D1 high\n", r"qrels\.txt:1: field 'relevance': relevance must be an integer"),
            ("1_1 0 D1 1\n1_1 Q0 D1 2\n", r"qrels\.txt:2: doc D1 of query 1_1 judged twice")]:
        path.write_text(text)
        with pytest.raises(DataError, match=expected):
            load_trec_qrels(path)
    path.write_bytes(b"1_1 0 D1 1\n1_1 0 D\xff 1\n")
    with pytest.raises(DataError, match=r"qrels\.txt:2: not valid UTF-8"):
        load_trec_qrels(path)


def _topics(fixtures_dir):
    return json.loads((fixtures_dir / "loaders" / "cast2020_manual_topics.json").read_text())


def test_topic_errors(tmp_path, fixtures_dir):
    path = tmp_path / "topics.json"
    cases = []
    topics = _topics(fixtures_dir)
    del topics[1]["turn"][0]["raw_utterance"]
    cases.append((topics, "field 'raw_utterance': missing (element [1], topic 82, turn [0])"))
    topics = _topics(fixtures_dir)
    topics[0]["turn"][2]["number"] = 4
    cases.append((topics, "conversation 81: turn numbers must run 1..3 without gaps, "
                          "found 1, 2, 4"))
    cases.append((topics, "(element [0], topic 81, turn [2])"))
    topics = _topics(fixtures_dir)
    topics[1]["turn"][0]["query_turn_dependence"] = ["1"]
    cases.append((topics, "field 'query_turn_dependence': expected a list of turn numbers"))
    topics = _topics(fixtures_dir)
    topics[1]["title"] = ["Iceland"]
    cases.append((topics, "field 'title': expected string, got list (element [1], topic 82)"))
    topics = _topics(fixtures_dir)
    topics.append(topics[0])
    cases.append((topics, "topic 81 appears twice (first at line 2, element [0])"))
    for topics, expected in cases:
        path.write_text(json.dumps(topics, indent=2))
        with pytest.raises(DataError) as err:
            load_cast_topics(path)
        assert str(err.value).startswith(f"{path}:") and expected in str(err.value)
        assert err.value.line is not None


def test_rewrite_file_errors(tmp_path):
    path = tmp_path / "rw.tsv"
    path.write_text("31_1\tWhat is throat cancer?\n31-2\tIs it?\n")
    with pytest.raises(DataError, match=r"rw\.tsv:2: field 'qid': not a query key"):
        load_cast_rewrites(path)
    path.write_text("31_1\tWhat is throat cancer?\n31_1\tagain\n")
    with pytest.raises(DataError, match=r"rw\.tsv:2: 31_1 appears twice"):
        load_cast_rewrites(path)
