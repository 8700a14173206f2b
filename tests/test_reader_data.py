"""Reader examples: gold spans, the SQuAD builder (real files), the benchmark builder, the JSONL
format and its errors."""
from __future__ import annotations

import json

import pytest

from conftest import shared_file
from convqa.errors import DataError
from readers.extractive.build_examples import benchmark_examples, squad_examples
from readers.extractive.data import (BuildReport, GoldSpan, ReaderExample, answer_variants,
                                     find_answer_spans, find_spans, load_examples, save_examples)
from training_helpers import make_benchmark


def test_find_spans_whole_words_any_case():
    text = "Art starts in the art room; ART-lovers say: art."
    assert [(s.text, s.start) for s in find_spans(text, "art")] == [
        ("Art", 0), ("art", 18), ("ART", 28), ("art", 44)]  # not inside "starts"
    assert find_spans(text, "art", ignore_case=False) == [GoldSpan("art", 18), GoldSpan("art", 44)]
    assert find_spans(text, "  the art ") == [GoldSpan("the art", 14)]
    assert find_spans("U.S. and U.S.A.", "U.S.") == [GoldSpan("U.S.", 0), GoldSpan("U.S.", 9)]
    assert find_spans(text, "") == [] and find_spans(text, "xyz") == []
    for span in find_spans(text, "art"):
        assert text[span.start:span.end] == span.text


def test_answer_variants_for_free_form_answers():
    assert answer_variants(" The Beatles. ") == ["The Beatles.", "The Beatles", "Beatles"]
    assert answer_variants("Paris") == ["Paris"] and answer_variants("") == []
    text = "They met the Beatles, in Paris. Paris again."
    # exact occurrences first; a variant only when the answer itself does not occur
    assert find_answer_spans(text, ["the Beatles.", "Paris", "Paris"]) == [
        GoldSpan("the Beatles", 9), GoldSpan("Paris", 25), GoldSpan("Paris", 32)]
    assert find_answer_spans(text, ["a meeting"]) == []


@pytest.fixture(scope="module")
def squad_dev():
    report = BuildReport()
    return squad_examples(shared_file("squad/dev-v2.0.json"), negatives=3, report=report), report


def test_squad_split_by_whole_article(squad_dev):
    from convqa.loaders.squad import load_squad

    examples, report = squad_dev
    raw = load_squad(shared_file("squad/dev-v2.0.json"))
    counts = report.to_dict()["squad:dev-v2.0"]
    assert counts["skipped_unanswerable"] == sum(1 for e in raw if e.is_impossible) == 5945
    assert len(examples) == sum(1 for e in raw if not e.is_impossible) == 5928
    titles = {split: {e.positives[0].passage.title for e in examples if e.split == split}
              for split in ("train", "heldout")}
    assert not titles["train"] & titles["heldout"]           # whole articles on one side
    assert len(titles["heldout"]) == round(35 * 0.1) == counts["heldout_articles"]
    assert len(titles["train"]) == 31
    # deterministic: the same sample, split and negatives on a second build
    first, second = (squad_examples(shared_file("squad/dev-v2.0.json"), negatives=2,
                                    max_examples=100, max_heldout=20) for _ in range(2))
    assert len(first) == 120
    assert [(e.id, e.split, [n.id for n in e.negatives]) for e in first] == \
        [(e.id, e.split, [n.id for n in e.negatives]) for e in second]
    assert {e.id for e in first} <= {e.id for e in examples}


def test_squad_gold_spans_and_negatives(squad_dev):
    from convqa.loaders.squad import load_squad

    examples, _ = squad_dev
    raw = {f"dev-v2.0/{e.id}": e for e in load_squad(shared_file("squad/dev-v2.0.json"))}
    extra = 0
    titles = {split: {e.positives[0].passage.title for e in examples if e.split == split}
              for split in ("train", "heldout")}
    for example in examples:
        original = raw[example.id]
        (positive,) = example.positives
        assert positive.passage.text == original.context
        offsets = {(s.start, s.end) for s in positive.spans}
        for answer in original.answers:  # every annotated offset is a gold span
            assert (answer.start, answer.end) in offsets
        for span in positive.spans:
            assert positive.passage.text[span.start:span.end] == span.text
        extra += len(offsets) > len({(a.start, a.end) for a in original.answers})
        assert example.answers == [a.text for a in original.answers]
        assert len(example.negatives) == 3
        for negative in example.negatives:  # other articles of the same split
            assert negative.title != positive.passage.title
            assert negative.title in titles[example.split]
    assert extra > 500  # answers often occur again in their paragraph: all count
    # "Normans" paragraph: "10th" occurs twice, both are gold
    normans = next(e for e in examples if e.question.startswith("What century did the Normans "
                                                                "first gain"))
    assert [s.start for s in normans.positives[0].spans if s.text == "10th"] == [94, 671]


def test_squad_file_with_one_title_splits_by_paragraph():
    report = BuildReport()
    examples = squad_examples(shared_file("squad/squadshifts_reddit_v1.0.json"), negatives=1,
                              max_examples=40, max_heldout=10, report=report)
    counts = report.to_dict()["squad:squadshifts_reddit_v1.0"]
    assert counts["train_examples"] == 40 and counts["heldout_examples"] == 10
    train = {e.positives[0].passage.id for e in examples if e.split == "train"}
    heldout = {e.positives[0].passage.id for e in examples if e.split == "heldout"}
    assert train and heldout and not train & heldout
    assert all(e.negatives[0].id != e.positives[0].passage.id for e in examples)


def test_benchmark_examples(tmp_path):
    bench = make_benchmark(tmp_path / "bench")
    report = BuildReport()
    examples = benchmark_examples(bench, negatives=2, report=report)
    by_id = {e.id: e for e in examples}
    # answer-evaluable turns: 7 train (c1_1..c3_3 minus c2_1, c2_3) and 2 dev; each answer
    # occurs verbatim (up to case) in its answer passage, so none is skipped
    assert sorted(by_id) == sorted(f"bench/{q}" for q in [
        "c1_1", "c1_2", "c1_3", "c2_2", "c3_1", "c3_2", "c3_3", "c4_1", "c4_2"])
    assert [by_id[f"bench/{q}"].split for q in ("c1_1", "c4_1")] == ["train", "heldout"]
    turn = by_id["bench/c1_2"]
    assert turn.history == [("what is alpha centauri?", "the closest star system to the Sun")]
    (positive,) = turn.positives
    assert positive.passage.id == "A#1" and [s.text for s in positive.spans] == ["4.37 light-years"]
    fugue = by_id["bench/c3_3"]  # answer "a contrapuntal composition technique" in F#0 only
    assert [p.passage.id for p in fugue.positives] == ["F#0"]
    for example in examples:
        gold_article = example.positives[0].passage.id.split("#")[0]
        assert len(example.negatives) <= 2
        assert all(n.id.split("#")[0] != gold_article for n in example.negatives)
        for p in example.positives:
            for span in p.spans:
                assert p.passage.text[span.start:span.end] == span.text
    assert report.to_dict()["topiocqa-wiki:bench"]["train_examples"] == 7


def _example_line(**changes):
    record = {"id": "q1", "question": "who?", "history": [["hi", None]],
              "positives": [{"id": "p1", "title": "T", "text": "Ada Lovelace wrote it.",
                             "answers": [{"text": "Ada Lovelace", "start": 0}]}],
              "negatives": [{"id": "n1", "text": "Something else."}]}
    record.update(changes)
    return json.dumps(record)


def test_jsonl_round_trip(tmp_path, squad_dev):
    examples = squad_dev[0][:5]
    examples[0].history = [("earlier?", "yes"), ("and?", None)]
    path = tmp_path / "ex.jsonl"
    assert save_examples(path, examples) == 5
    loaded = load_examples(path)
    assert [e.to_dict() for e in loaded] == [e.to_dict() for e in examples]
    assert loaded[0].history_turns()[1].answer is None
    single = tmp_path / "one.jsonl"
    single.write_text(_example_line() + "\n")
    (example,) = load_examples(single)
    assert example.golds() == ["Ada Lovelace"] and example.split == "train"


@pytest.mark.parametrize("changes, field, message", [
    ({"question": None}, "question", "expected str, got NoneType"),
    ({"history": [["only a question"]]}, "history[0]", "expected [question, answer or null]"),
    ({"positives": []}, "positives", "needs at least one positive"),
    ({"positives": [{"id": "p", "text": "abc", "answers": []}]}, "positives[0].answers",
     "at least one answer span"),
    ({"positives": [{"id": "p", "text": "abc"}]}, "positives[0].answers", "missing"),
    ({"positives": [{"id": "p", "text": "abc", "answers": [{"text": "b", "start": 0}]}]},
     "positives[0].answers[0].start", "answer 'b' is not at offset 0"),
    ({"positives": [{"id": "p", "text": "abc", "answers": [{"text": "b", "start": "1"}]}]},
     "positives[0].answers[0].start", "expected int, got str"),
    ({"negatives": [{"id": "n"}]}, "negatives[0].text", "missing"),
    ({"split": "dev"}, "split", "expected one of train, heldout"),
    ({"answers": "Ada"}, "answers", "expected list, got str"),
])
def test_bad_examples_name_file_line_and_field(tmp_path, changes, field, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(_example_line(id="ok") + "\n\n" + _example_line(**changes) + "\n")
    with pytest.raises(DataError) as error:
        load_examples(path)
    assert str(error.value).startswith(f"{path}:3: field '{field}': ")
    assert message in str(error.value)


def test_missing_field_duplicate_id_and_broken_json(tmp_path):
    path = tmp_path / "bad.jsonl"
    record = json.loads(_example_line())
    del record["negatives"]
    path.write_text(json.dumps(record) + "\n")
    with pytest.raises(DataError, match=r"bad.jsonl:1: field 'negatives': missing"):
        load_examples(path)
    path.write_text(_example_line() + "\n" + _example_line() + "\n")
    with pytest.raises(DataError, match=r"bad.jsonl:2: field 'id': duplicate example id 'q1'"):
        load_examples(path)
    path.write_text(_example_line() + "\n{broken\n")
    with pytest.raises(DataError, match=r"bad.jsonl:2: malformed JSON"):
        load_examples(path)
    assert isinstance(ReaderExample.from_dict(json.loads(_example_line())), ReaderExample)
