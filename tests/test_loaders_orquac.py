"""OR-QuAC TSVs (shared dev and train, small invented files) and the two JSONL samples."""
from __future__ import annotations

import pytest

from convqa.errors import DataError
from convqa.loaders import (load_canard, load_convir_quadruples, load_orconvqa_sample,
                            load_orquac, parse_orquac_qid)
from tests.conftest import shared_file

ZAPPA = "C_2d211835213b45588ad5ca868ce7fabd_0"


@pytest.fixture(scope="module")
def orquac_dir():
    return shared_file("orquac/orquac_dev.question.tsv").parent


@pytest.fixture(scope="module")
def dev(orquac_dir):
    return load_orquac(orquac_dir, "dev")


@pytest.fixture(scope="module")
def train(orquac_dir):
    shared_file("orquac/orquac_train.rewrite.tsv")
    return load_orquac(orquac_dir, "train")


# --- real data ---------------------------------------------------------------------------------

def test_real_counts(dev, train):
    assert (len(dev), sum(len(c) for c in dev)) == (490, 3430)
    assert (len(train), sum(len(c) for c in train)) == (4383, 31526)  # data/README.md: 31,526
    assert not {c.id for c in dev} & {c.id for c in train}


def test_real_dev_spot_check(dev):
    zappa = dev[0]
    assert zappa.id == ZAPPA and len(zappa) == 8
    assert zappa.turn(1).meta == {"qid": f"{ZAPPA}_q#0", "answerable": True}
    assert zappa.turn(2).rewrite == "When did Zappa and the Mothers of Invention disband?"
    assert zappa.turn(2).answer == "In late 1969, Zappa broke up the band."
    # the last turn's answer is only in answer.tsv (CANARD has no answer for it)
    assert zappa.turn(8).answer.startswith("multi-instrumentalist Shuggie Otis on bass")
    assert sum(1 for c in dev for t in c.turns if not t.meta["answerable"]) == 602
    assert all(t.answer == "I don't know." for c in dev for t in c.turns
               if not t.meta["answerable"])


def test_real_train_has_questions_and_rewrites_only(train):
    first = train[0]
    assert first.turn(1).question == "what team did unitas play for"
    assert first.turn(1).rewrite == "what team did Johnny Unitas play for?"
    assert first.turn(3).question == "who did they play in the playoffs"
    assert [t.question for t in first.history(3)] == ["what team did unitas play for",
                                                      "how many games did the colts win"]
    assert all(t.answer is None and set(t.meta) == {"qid"} for c in train for t in c.turns)


def test_real_dev_equals_canard_dev(dev):
    canard = {c.id: c for c in load_canard(shared_file("canard/dev.json"))}
    assert set(canard) == {c.id for c in dev}
    for conv in dev:
        other = canard[conv.id]
        assert len(other) == len(conv)
        for mine, theirs in zip(conv.turns, other.turns):
            assert (mine.question, mine.rewrite, mine.meta["qid"]) == \
                (theirs.question, theirs.rewrite, theirs.meta["qid"])
            if theirs.answer is not None:
                assert mine.answer == theirs.answer


def test_real_samples():
    samples = load_orconvqa_sample(shared_file("orquac/orconvqa_sample.jsonl"))
    assert len(samples) == 100 and {s.label for s in samples} == {1}
    fourth = samples[3]
    assert fourth.question == "Were they ever successful in doing this?"
    assert fourth.rewrite == ("Was the World Malayalee Council ever successful in making a data "
                              "bank of the diaspora?")
    assert [q for q, _ in fourth.history] == ["Where is Malayali located?",
                                              "What other languages are spoken there?",
                                              "What else is this place known for?"]
    assert fourth.history[1][1].startswith("33,015,420 spoke the standard dialects")
    assert samples[0].history == []
    quads = load_convir_quadruples(
        shared_file("orquac/canard_convir_sample_quadruples_top3.jsonl"))
    assert len(quads) == 1000
    assert quads[1].context == []
    assert quads[4].context == [
        "Can you tell me what led to the rumored affair with Susan Busch?",
        "What happened after she had the car accident?",
        'Was she talking about Harry Caray when she said "friend"?']
    assert quads[4].utterance == "Did they spend a lot of time together on different occasions?"


# --- small invented files ----------------------------------------------------------------------

D = "C_abc_0"
QUESTIONS = [(f"{D}_q#0", "Where was she born?"), (f"{D}_q#1", "Who taught her?"),
             (f"{D}_q#2", "Did she publish?")]
REWRITES = ["Where was Ada Lovelace born?", "Who taught Ada Lovelace?",
            "Did Ada Lovelace publish?"]
ANSWERS = ["London", "", "Notes on the Analytical Engine"]


def _write_split(directory, split="dev", questions=QUESTIONS, rewrites=REWRITES,
                 answers=ANSWERS, history=True):
    def tsv(kind, values):
        lines = "".join(f"{qid}\t{v}\n" for (qid, _), v in zip(questions, values))
        (directory / f"orquac_{split}.{kind}.tsv").write_text(lines)

    tsv("question", [q for _, q in questions])
    if rewrites is not None:
        tsv("rewrite", rewrites)
    if answers is not None:
        tsv("answer", [f"{r} {a}" for r, a in zip(rewrites, answers)])
    if history:
        past, lines = [], []
        for (_, q), a in zip(questions, answers):
            lines.append("|".join(past) + f"[Q] {q}")
            past += [q, a or "I don't know."]
        tsv("history", lines)


def test_small_split(tmp_path):
    _write_split(tmp_path)
    conv, = load_orquac(tmp_path)
    assert conv.id == D
    assert [t.answer for t in conv.turns] == ["London", "I don't know.",
                                              "Notes on the Analytical Engine"]
    assert [t.meta["answerable"] for t in conv.turns] == [True, False, True]
    assert conv.turn(2).rewrite == "Who taught Ada Lovelace?"


def test_rows_out_of_order_and_split_without_answers(tmp_path):
    _write_split(tmp_path, "train", QUESTIONS[::-1], REWRITES[::-1], None, history=False)
    conv, = load_orquac(tmp_path, "train")
    assert [t.question for t in conv.turns] == [q for _, q in QUESTIONS]
    assert [t.answer for t in conv.turns] == [None, None, None]


def test_history_mismatch(tmp_path):
    _write_split(tmp_path)
    path = tmp_path / "orquac_dev.history.tsv"
    lines = path.read_text().splitlines()
    lines[2] = lines[2].replace("London", "Paris")
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"orquac_dev\.history\.tsv:3: field 'history': differs"):
        load_orquac(tmp_path)
    with pytest.warns(UserWarning, match="orquac_dev.history.tsv: 1 turn"):
        conv, = load_orquac(tmp_path, context="warn")
    assert conv.turn(1).answer == "London"


def test_bad_lines(tmp_path):
    _write_split(tmp_path)
    answer = tmp_path / "orquac_dev.answer.tsv"
    answer.write_text(answer.read_text().replace("Who taught Ada Lovelace? ", "Who taught her? "))
    with pytest.raises(DataError, match=r"answer\.tsv:2: field 'answer': an answer line must "
                                        r"start with the question's rewrite"):
        load_orquac(tmp_path)

    _write_split(tmp_path)
    history = tmp_path / "orquac_dev.history.tsv"
    history.write_text(history.read_text().replace("[Q] Did she publish?", "[Q] Did she?"))
    with pytest.raises(DataError, match=r"history\.tsv:3: field 'history': a history line must "
                                        r"end with"):
        load_orquac(tmp_path)

    _write_split(tmp_path)
    question = tmp_path / "orquac_dev.question.tsv"
    question.write_text(question.read_text().replace("\tWho taught her?", " Who taught her?"))
    with pytest.raises(DataError, match=r"question\.tsv:2: expected 2 tab-separated columns"):
        load_orquac(tmp_path)

    question.write_text(question.read_text().replace(f"{D}_q#1 ", f"{D}_1\t"))
    with pytest.raises(DataError, match=r"question\.tsv:2: field 'qid': not an OR-QuAC question"):
        load_orquac(tmp_path)


def test_files_that_disagree(tmp_path):
    _write_split(tmp_path)
    rewrite = tmp_path / "orquac_dev.rewrite.tsv"
    rewrite.write_text(rewrite.read_text() + f"{D}_q#1\tagain\n")
    with pytest.raises(DataError, match=r"rewrite\.tsv:4: qid C_abc_0_q#1 appears twice"):
        load_orquac(tmp_path)
    rewrite.write_text(rewrite.read_text().replace(f"{D}_q#1\tagain\n", "C_x_0_q#0\tnew\n"))
    with pytest.raises(DataError, match=r"rewrite\.tsv:4: field 'qid': qid C_x_0_q#0 is not in "
                                        r"orquac_dev\.question\.tsv"):
        load_orquac(tmp_path)
    rewrite.write_text("".join(rewrite.read_text().splitlines(keepends=True)[:2]))
    with pytest.raises(DataError, match=r"rewrite\.tsv: has no line for qid C_abc_0_q#2"):
        load_orquac(tmp_path)
    rewrite.unlink()
    with pytest.raises(DataError, match="an answer file needs the rewrite file"):
        load_orquac(tmp_path)
    with pytest.raises(DataError, match=r"orquac_test\.question\.tsv: file not found"):
        load_orquac(tmp_path, "test")


def test_gap_and_non_utf8(tmp_path):
    _write_split(tmp_path, questions=QUESTIONS[::2], rewrites=REWRITES[::2], answers=ANSWERS[::2],
                 history=False)
    with pytest.raises(DataError, match=r"conversation C_abc_0: turn numbers must run 1\.\.2 "
                                        r"without gaps, found 1, 3"):
        load_orquac(tmp_path)
    _write_split(tmp_path)
    (tmp_path / "orquac_dev.rewrite.tsv").write_bytes(
        f"{D}_q#0\tok\n{D}_q#1\tWho taught Ada Lovel\xe2ce?\n".encode("latin-1"))
    with pytest.raises(DataError, match=r"rewrite\.tsv:2: not valid UTF-8"):
        load_orquac(tmp_path)


def test_parse_qid():
    assert parse_orquac_qid("C_2d21_0_q#7") == ("C_2d21_0", 8)
    with pytest.raises(ValueError):
        parse_orquac_qid("C_2d21_0_7")


def test_sample_errors(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text('{"history": "", "question": "q", "rewrite": "r", "passage": "p", "label": 1}\n'
                    '{"history": "Q: a A: b", "question": "q", "rewrite": "r", "passage": "p", '
                    '"label": 1}\n')
    with pytest.raises(DataError, match=r"s\.jsonl:2: field 'history': expected '\[Q\]: "):
        load_orconvqa_sample(path)
    path.write_text('{"utterance": "u", "context": "", "pos_passage": "p"}\n')
    with pytest.raises(DataError, match=r"s\.jsonl:1: field 'neg_passage': missing"):
        load_convir_quadruples(path)
