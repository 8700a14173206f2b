"""The TopiOCQA x Wikipedia benchmark: labelling rules, file format, split, rebuilds, CLI.

The fixtures under tests/fixtures/benchmark/ were written by hand, and every expected label below
was worked out by hand from them (max_words=10, see the passage texts in FULL_PASSAGES).
"""
from __future__ import annotations

import argparse
import gzip
import json
import shutil
from pathlib import Path

import pytest

from convqa.benchmark import load_labelled_turns, qrels, split_by_conversation
from convqa.benchmark.labelled_turns import (LabelledTurn, dev_conversation_ids,
                                             evaluable_answers, occurs, question_types)
from convqa.benchmark.topiocqa_wiki import (build_benchmark, full_wiki_source, topic_articles,
                                            vital_source)
from convqa.benchmark.vital import read_vital_articles, vital_article_id, vital_passages
from convqa.corpus import PassageStore
from convqa.errors import ConfigError, DataError
from convqa.types import Passage

from conftest import shared_file

FULL_PASSAGES = {
    "10#0": "Force is an interaction that changes motion. History.",
    "10#1": "Galileo Galilei studied it first. The unit is the newton.",
    "20#0": "The Bill of Rights lists rights of citizens.",
    "20#1": "The rights were ratified in 1791.",
    "30#0": "Isaac Newton was an English mathematician.",
    "30#1": "He was born in 1643.",
    "40#0": "Apples grow on trees.",
}

# qid -> (question type, gold article, gold passage count, answer passages) for the full fixture.
# None as article: not retrieval-evaluable; [] as answer passages: not answer-evaluable.
FULL_EXPECTED = {
    "1_1": ("first", None, 0, []),                 # UNANSWERABLE, empty topic
    "1_2": ("no-switch", "10", 2, ["10#0"]),       # only an empty topic before it
    "1_3": ("no-switch", "10", 2, ["10#1"]),       # topic "force": case-insensitive
    "1_4": ("no-switch", "10", 2, []),             # answer "Yes."
    "1_5": ("switch", "30", 2, ["30#0"]),
    "1_6": ("no-switch", None, 0, []),             # empty topic
    "1_7": ("no-switch", "30", 2, []),             # "english math" is not whole tokens
    "1_8": ("switch", "20", 2, ["20#1"]),          # topic "Bill of rights", answer "In 1791."
    "2_1": ("first", "20", 2, ["20#0"]),
    "2_2": ("switch", None, 0, []),                # Magna Carta is not in the corpus
    "2_3": ("no-switch", None, 0, []),
    "2_4": ("switch", "20", 2, ["20#0", "20#1"]),  # "Rights" occurs in both passages
    "2_5": ("no-switch", "20", 2, []),             # answer "no."
    "3_1": ("first", "40", 1, []),                 # "fruit" is not in the passage
    "3_2": ("no-switch", "40", 1, ["40#0"]),       # topic "APPLE"
    "3_3": ("no-switch", None, 0, []),
    "3_4": ("switch", "30", 2, ["30#0"]),          # differs from the last known topic (Apple)
    "3_5": ("switch", "40", 1, ["40#0"]),
}

# The vital fixture has Force, Isaac Newton (two passages at 10 words) and "Apple pie" (not Apple).
VITAL_EVALUABLE = {"1_2": ["Force#0"], "1_3": [], "1_4": [], "1_5": ["Isaac_Newton#0"],
                   "1_7": [], "3_4": ["Isaac_Newton#0"]}


@pytest.fixture(scope="module")
def fx(fixtures_dir) -> Path:
    return fixtures_dir / "benchmark"


@pytest.fixture(scope="module")
def full_build(fx, tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "full"
    return build_benchmark(fx / "topiocqa_tiny.json", full_wiki_source(fx / "articles.jsonl"),
                           out, max_words=10, dev_fraction=0.34, seed=0)


@pytest.fixture(scope="module")
def vital_build(fx, tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "vital"
    return build_benchmark(fx / "topiocqa_tiny.json", vital_source(fx / "vital_summaries.json"),
                           out, max_words=10, dev_fraction=0.34, seed=0)


# --- rules ---------------------------------------------------------------------------------------

def test_question_types_rules():
    assert question_types(["A", "A", "B", "b", "A"]) == [
        "first", "no-switch", "switch", "no-switch", "switch"]
    assert question_types(["Bill of Rights", "bill of rights", "BILL OF RIGHTS"]) == [
        "first", "no-switch", "no-switch"]
    # Empty topics (unanswerable turns) keep the last known topic.
    assert question_types(["", "A", "", "A", "", "B"]) == [
        "first", "no-switch", "no-switch", "no-switch", "no-switch", "switch"]
    assert question_types(["", "", "A"]) == ["first", "no-switch", "no-switch"]
    assert question_types(["A"]) == ["first"]
    assert question_types([]) == []


def test_answer_exclusions_and_token_boundaries():
    assert evaluable_answers(["UNANSWERABLE", "Yes.", "no", "NO!", "unanswerable", "The",
                              "Paris", "paris."]) == ["paris"]
    assert evaluable_answers(["Yes, he did."]) == ["yes he did"]  # only bare yes/no are dropped
    assert occurs("english mathematician", "isaac newton was english mathematician")
    assert not occurs("english math", "isaac newton was english mathematician")
    assert not occurs("newton was", "isaac newtonwas")
    assert occurs("isaac", "isaac newton")
    assert not occurs("", "isaac newton")


def test_topic_articles_first_title_wins_and_numbering_is_checked():
    passages = [Passage("a#0", "Some text.", "Foo"), Passage("b#0", "Other.", "FOO"),
                Passage("a#1", "More text.", "Foo"), Passage("c#0", "Unrelated.", "Bar")]
    found = topic_articles(passages, {"foo"})
    assert list(found) == ["foo"]
    assert found["foo"].article_id == "a" and found["foo"].passage_ids == ["a#0", "a#1"]
    assert found["foo"].normalized_texts == ["some text", "more text"]
    with pytest.raises(DataError) as exc:
        topic_articles([Passage("a#1", "x", "Foo")], {"foo"}, "store")
    assert "not numbered" in _one_line(exc)


# --- the hand-made fixtures ----------------------------------------------------------------------

def test_full_fixture_passages(full_build):
    with PassageStore.open(full_build.out_dir / "passages") as store:
        assert {p.id: p.text for p in store} == FULL_PASSAGES
        assert store.get("20#1").title == "Bill of Rights"
    counts = full_build.meta["counts"]
    assert (counts["articles"], counts["passages"], counts["conversations"]) == (4, 7, 3)


def test_full_fixture_labels(full_build):
    data = load_labelled_turns(full_build.out_dir)
    got = {t.qid: (t.question_type, t.gold_article_id, t.gold_passage_count, t.answer_passage_ids)
           for t in data.turns}
    assert got == FULL_EXPECTED
    for t in data.turns:
        assert t.retrieval_evaluable == (FULL_EXPECTED[t.qid][1] is not None)
        assert t.answer_evaluable == bool(FULL_EXPECTED[t.qid][3])
    counts = full_build.meta["counts"]
    assert counts["by_type"] == {
        "first": {"turns": 3, "retrieval_evaluable": 2, "answer_evaluable": 1},
        "no-switch": {"turns": 9, "retrieval_evaluable": 6, "answer_evaluable": 3},
        "switch": {"turns": 6, "retrieval_evaluable": 5, "answer_evaluable": 5}}
    assert counts["all"] == {"turns": 18, "retrieval_evaluable": 13, "answer_evaluable": 9}
    assert counts["gold_articles"] == 4


def test_vital_fixture_labels(vital_build):
    data = load_labelled_turns(vital_build.out_dir / "turns.jsonl")
    evaluable = {t.qid: t.answer_passage_ids for t in data.turns if t.retrieval_evaluable}
    assert evaluable == VITAL_EVALUABLE
    gold = {t.qid: (t.gold_article_id, t.gold_passage_count) for t in data.turns
            if t.retrieval_evaluable}
    assert gold["1_2"] == ("Force", 1) and gold["3_4"] == ("Isaac_Newton", 2)
    with PassageStore.open(vital_build.out_dir / "passages") as store:
        assert sorted(store.ids()) == ["Apple_pie#0", "Force#0", "Isaac_Newton#0",
                                       "Isaac_Newton#1"]


def test_vital_reader(fx):
    articles = list(read_vital_articles(fx / "vital_summaries.json"))
    assert [a.id for a in articles] == ["Force", "Isaac_Newton", "Apple_pie"]
    assert articles[1].title == "Isaac Newton"
    assert vital_article_id("2001: A Space Odyssey") == "2001:_A_Space_Odyssey"
    passages = list(vital_passages(max_words=10, path=fx / "vital_summaries.json"))
    assert [p.text for p in passages if p.id.startswith("Isaac")] == [
        "Isaac Newton was an English mathematician.", "He was born in 1643."]


# --- file format ---------------------------------------------------------------------------------

def test_jsonl_round_trip_and_qrels(full_build):
    data = load_labelled_turns(full_build.out_dir)
    lines = (full_build.out_dir / "turns.jsonl").read_text(encoding="utf-8").splitlines()
    assert [LabelledTurn.from_dict(json.loads(line)).to_dict() for line in lines] == [
        json.loads(line) for line in lines]
    assert [t.qid for t in data.turns] == list(FULL_EXPECTED)
    assert json.loads(lines[7])["qid"] == "1_8"
    turn = data.turns[7]
    assert turn.answers == ["In 1791."] and turn.topic == "Bill of rights"
    history = data.conversations["1"].history(turn.turn)
    assert [h.question for h in history[:2]] == ["define unit of force", "what is force?"]
    assert history[1].answer == "An interaction that changes motion."
    assert history[1].meta["topic"] == "Force"
    assert turn.gold_passage_ids() == ["20#0", "20#1"]

    article = qrels(data.turns, "article")
    assert set(article) == {q for q, e in FULL_EXPECTED.items() if e[1]}
    assert article["3_2"] == {"40#0": 1} and article["1_2"] == {"10#0": 1, "10#1": 1}
    answer = qrels(data.turns, "answer")
    assert answer == {q: {p: 1 for p in e[3]} for q, e in FULL_EXPECTED.items() if e[3]}
    with pytest.raises(ConfigError):
        qrels(data.turns, "passage")
    assert data.meta["corpus"] == "full"


# --- split ---------------------------------------------------------------------------------------

def _turns(conversations: int, per: int = 3) -> list[LabelledTurn]:
    return [LabelledTurn(str(c), n, "q", ["a"], "", "", False, "first" if n == 1 else "no-switch",
                         False, False, None, 0) for c in range(conversations)
            for n in range(1, per + 1)]


def test_split_is_deterministic_and_by_conversation():
    turns = _turns(200)
    train, dev = split_by_conversation(turns, 0.1, seed=3)
    dev_convs = {t.conversation_id for t in dev}
    assert len(dev_convs) == 20 and len(dev) == 60 and len(train) == 540
    assert not dev_convs & {t.conversation_id for t in train}
    again = split_by_conversation(list(reversed(turns)), 0.1, seed=3)[1]
    assert {t.conversation_id for t in again} == dev_convs  # independent of order
    other = {t.conversation_id for t in split_by_conversation(turns, 0.1, seed=4)[1]}
    assert other != dev_convs and len(other) == 20
    assert split_by_conversation(turns, 0.0)[1] == []
    assert len(dev_conversation_ids(["a", "b"], 0.01)) == 1  # a positive fraction gives >= 1
    assert len(dev_conversation_ids(["a", "b"], 0.99)) == 1  # and leaves >= 1 for training
    for bad in (-0.1, 1.0, 1.5):
        with pytest.raises(ConfigError):
            split_by_conversation(turns, bad)


def test_written_split_matches_function(full_build):
    data = load_labelled_turns(full_build.out_dir)
    train, dev = split_by_conversation(data.turns, 0.34, seed=0)
    assert [t.qid for t in dev] == [t.qid for t in data.turns if t.split == "dev"]
    assert len({t.conversation_id for t in dev}) == 1  # round(3 * 0.34) = 1 conversation
    assert full_build.meta["counts"]["by_split"]["dev"]["conversations"] == 1


# --- rebuilding ----------------------------------------------------------------------------------

def test_rebuild_is_idempotent(fx, tmp_path):
    out = tmp_path / "full"
    source = full_wiki_source(fx / "articles.jsonl")
    topiocqa = fx / "topiocqa_tiny.json"
    first = build_benchmark(topiocqa, source, out, max_words=10)
    assert not first.skipped
    store_meta = (out / "passages" / "meta.json").stat().st_mtime_ns
    assert build_benchmark(topiocqa, source, out, max_words=10).skipped
    # New split parameters: turns relabelled, store reused.
    changed = build_benchmark(topiocqa, source, out, max_words=10, dev_fraction=0.5, seed=1)
    assert not changed.skipped and changed.meta["params"]["dev_fraction"] == 0.5
    assert (out / "passages" / "meta.json").stat().st_mtime_ns == store_meta
    # A damaged output is rebuilt; --force rebuilds the store too.
    (out / "turns.jsonl").write_text("", encoding="utf-8")
    assert not build_benchmark(topiocqa, source, out, max_words=10, dev_fraction=0.5,
                               seed=1).skipped
    assert len(load_labelled_turns(out).turns) == 18
    assert not build_benchmark(topiocqa, source, out, max_words=10, force=True).skipped
    assert (out / "passages" / "meta.json").stat().st_mtime_ns != store_meta
    # Different max_words: new store.
    assert build_benchmark(topiocqa, source, out, max_words=100).meta["counts"]["passages"] == 4


# --- bad inputs ----------------------------------------------------------------------------------

def _one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


def test_bad_build_inputs(fx, tmp_path):
    source = full_wiki_source(fx / "articles.jsonl")
    with pytest.raises(DataError) as exc:
        build_benchmark(tmp_path / "missing.json", source, tmp_path / "o")
    assert "missing.json: file not found" in _one_line(exc)
    with pytest.raises(DataError) as exc:
        build_benchmark(fx / "topiocqa_tiny.json", full_wiki_source(tmp_path / "none.jsonl"),
                        tmp_path / "o")
    assert "none.jsonl" in _one_line(exc)
    bad_articles = tmp_path / "articles.jsonl"
    bad_articles.write_text('{"id": "1", "title": "A", "text": "x."}\n{"id": "2", "title": "B"}\n',
                            encoding="utf-8")
    with pytest.raises(DataError) as exc:
        build_benchmark(fx / "topiocqa_tiny.json", full_wiki_source(bad_articles), tmp_path / "o")
    assert "articles.jsonl:2: field 'text'" in _one_line(exc)
    for kwargs in ({"max_words": 0}, {"dev_fraction": 1.0}):
        with pytest.raises(ConfigError):
            build_benchmark(fx / "topiocqa_tiny.json", source, tmp_path / "o", **kwargs)
    (tmp_path / "file").write_text("x", encoding="utf-8")
    with pytest.raises(DataError) as exc:
        build_benchmark(fx / "topiocqa_tiny.json", source, tmp_path / "file")
    assert "not a folder" in _one_line(exc)


@pytest.mark.parametrize("content, expected", [
    ('["Force"]', "expected a JSON object"),
    ('{"Force": "text"}', "field '['Force']'"),
    ('{"Force": {"title": "Force", "extract": 3}}', "field '['Force'].extract'"),
    ('{"Force": {"title": "", "extract": "x"}}', "field '['Force'].title'"),
    ('{"A b": {"title": "A b", "extract": "x"}, "A_b": {"title": "A_b", "extract": "y"}}',
     "also made from"),
    ('{"Force": ', "malformed JSON"),
])
def test_bad_vital_summaries(tmp_path, content, expected):
    path = tmp_path / "summaries.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DataError) as exc:
        list(read_vital_articles(path))
    assert expected in _one_line(exc) and "summaries.json" in str(exc.value)


@pytest.mark.parametrize("edit, expected", [
    (lambda r: r.pop("question"), ":3: field 'question': missing"),
    (lambda r: r.update(turn="3"), ":3: field 'turn': expected int"),
    (lambda r: r.update(question_type="topic-shift"), ":3: field 'question_type'"),
    (lambda r: r.update(split="test"), ":3: field 'split'"),
    (lambda r: r.update(conversation_id="99", qid="99_3"), ":3: field 'conversation_id'"),
    (lambda r: r.update(turn=40, qid="1_40"), ":3: field 'turn': conversation '1' has only"),
    (lambda r: r.update(qid="1_4"), ":3: field 'qid'"),
    (lambda r: r.update(answer_passage_ids=[]), ":3: field 'answer_passage_ids'"),
    (lambda r: r.update(gold_article_id=None), ":3: field 'gold_article_id'"),
    (lambda r: r.update(turn=2, qid="1_2"), ":3: field 'qid': duplicate query '1_2'"),
])
def test_bad_turns_file(full_build, tmp_path, edit, expected):
    folder = tmp_path / "copy"
    folder.mkdir()
    shutil.copy(full_build.out_dir / "conversations.jsonl", folder)
    lines = (full_build.out_dir / "turns.jsonl").read_text(encoding="utf-8").splitlines()
    record = json.loads(lines[2])  # 1_3: retrieval- and answer-evaluable
    edit(record)
    lines[2] = json.dumps(record)
    (folder / "turns.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(DataError) as exc:
        load_labelled_turns(folder)
    assert expected in _one_line(exc) and "turns.jsonl" in str(exc.value)


def test_missing_conversations_file(full_build, tmp_path):
    shutil.copy(full_build.out_dir / "turns.jsonl", tmp_path)
    with pytest.raises(DataError) as exc:
        load_labelled_turns(tmp_path / "turns.jsonl")
    assert "conversations.jsonl missing" in _one_line(exc)
    (tmp_path / "conversations.jsonl").write_text('{"id": "1", "turns": []}\n{"id": "1"}\n',
                                                  encoding="utf-8")
    with pytest.raises(DataError) as exc:
        load_labelled_turns(tmp_path)
    assert "conversations.jsonl:1: field 'turns'" in _one_line(exc)


# --- CLI -----------------------------------------------------------------------------------------

def _cli(argv: list[str]) -> int:
    from convqa.front.cli import data

    parser = argparse.ArgumentParser(prog="convqa")
    data.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return args.func(args)


def test_cli_builds_and_prints_table(fx, tmp_path, capsys):
    argv = ["data", "topiocqa-wiki", "--topiocqa", str(fx / "topiocqa_tiny.json"),
            "--articles", str(fx / "articles.jsonl"), "--summaries",
            str(fx / "vital_summaries.json"), "--out", str(tmp_path), "--max-words", "10",
            "--quiet"]
    assert _cli(argv) == 0
    out = capsys.readouterr().out
    assert "full: " in out and "4 articles, 7 passages; 3 conversations, 18 turns" in out
    assert "switch" in out and "dev split" in out
    row = next(line for line in out.splitlines() if line.strip().startswith("no-switch"))
    assert row.split() == ["no-switch", "9", "6", "3"]
    assert (tmp_path / "vital" / "turns.jsonl").is_file()
    assert _cli(argv + ["--corpus", "vital"]) == 0
    assert "up to date, reused" in capsys.readouterr().out


def test_cli_errors(tmp_path):
    with pytest.raises(DataError) as exc:
        _cli(["data", "topiocqa-wiki", "--data-dir", str(tmp_path), "--out", str(tmp_path / "o")])
    assert "topiocqa_train.json.gz: file not found (set --data-dir or --topiocqa)" in _one_line(exc)
    with pytest.raises(SystemExit):
        _cli(["data", "topiocqa-wiki", "--corpus", "nope"])


# --- real data -----------------------------------------------------------------------------------

@pytest.mark.shared_data
def test_real_topiocqa_on_vital(tmp_path):
    """The vital benchmark from the real TopiOCQA file and the installed vital summaries."""
    topiocqa = shared_file("topiocqa/topiocqa_train.json.gz")
    try:
        source = vital_source()
    except DataError as exc:
        pytest.skip(str(exc))
    result = build_benchmark(topiocqa, source, tmp_path / "vital")
    data = load_labelled_turns(result.out_dir)
    by_qid = {t.qid: t for t in data.turns}

    # Counted independently from the raw files.
    raw = json.loads(gzip.open(topiocqa, "rt", encoding="utf-8").read())
    titles = {a.title.casefold() for a in read_vital_articles()}
    assert len(data.turns) == len(raw) and len(data.conversations) == 3159
    assert sum(t.retrieval_evaluable for t in data.turns) == sum(
        1 for r in raw if r["Topic"] and r["Topic"].casefold() in titles)
    assert sum(t.question_type == "first" for t in data.turns) == 3159

    # Conversation 1 read by hand: topics "", Force, Force, Galileo Galilei, Galileo Galilei, "",
    # Galileo Galilei, Force, Net force, Force.
    assert [by_qid[f"1_{n}"].question_type for n in range(1, 11)] == [
        "first", "no-switch", "no-switch", "switch", "no-switch", "no-switch", "no-switch",
        "switch", "switch", "switch"]
    assert by_qid["1_4"].gold_article_id == "Galileo_Galilei"
    assert not by_qid["1_9"].retrieval_evaluable  # "Net force" is not a vital article
    # "Pisa (then part of the Duchy of Florence), Italy.": the summary has no "Italy" after it.
    assert by_qid["1_4"].retrieval_evaluable and not by_qid["1_4"].answer_evaluable
    # Answers checked against the summaries by hand.
    assert by_qid["26_2"].answers == ["Harper Lee"]
    assert by_qid["26_2"].answer_passage_ids == ["To_Kill_a_Mockingbird#0"]
    with PassageStore.open(result.out_dir / "passages") as store:
        assert "Harper Lee" in store.get("To_Kill_a_Mockingbird#0").text
        assert len(store) == result.meta["counts"]["passages"]

    split = result.meta["counts"]["by_split"]
    assert split["dev"]["conversations"] == 316 and split["train"]["conversations"] == 2843
    assert not {t.conversation_id for t in data.turns if t.split == "dev"} & {
        t.conversation_id for t in data.turns if t.split == "train"}
