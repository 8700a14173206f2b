"""`convqa train reader --weak-positives`: a benchmark's train turns whose free-form answer occurs
in no passage word for word train the reader on the span of their weakly labelled passage that
reads most like the answer (best SQuAD F1), when that span is close enough."""
from __future__ import annotations

import gzip
import json

import pytest

from conftest import shared_file
from convqa.benchmark.weak_positives import WeakPositiveRule
from convqa.corpus.passages import article_passages
from convqa.metrics.answer import score_answer
from readers.extractive.build_examples import benchmark_examples
from readers.extractive.data import BuildReport, load_examples, save_examples
from readers.extractive.weak_spans import best_f1_span
from training_helpers import TURNS, WEAK_TURNS, make_benchmark

RULE = WeakPositiveRule(min_coverage=0.7, min_lead=0.2, max_negative_coverage=0.5)


def test_the_best_span_maximises_squad_f1_within_its_length():
    text = "The Beatles were an English rock band. Their members were Lennon, McCartney and Starr."
    span = best_f1_span(text, "Lennon and McCartney were members")
    assert span.text == "members were Lennon, McCartney and" and span.f1 == 1.0  # each word
    assert text[span.start:span.start + len(span.text)] == span.text
    f1 = span.f1
    assert f1 == pytest.approx(score_answer(span.text, ["Lennon and McCartney were members"],
                                            "squad")["f1"])
    # every other span of at most five words scores no better
    words = text.split()
    for i in range(len(words)):
        for j in range(i + 1, min(i + 6, len(words)) + 1):
            other = " ".join(words[i:j])
            assert score_answer(other, ["Lennon and McCartney were members"],
                                "squad")["f1"] <= f1 + 1e-9
    assert best_f1_span(text, "Harrison") is None             # no word of the answer occurs
    assert best_f1_span(text, "the") is None                  # nothing left once normalized
    # "formed in 1960" is one word longer than the answer ("in" is no article)
    assert best_f1_span("a band, formed in 1960.", "formed 1960", extra_words=0).text \
        == "formed"
    assert best_f1_span("a band, formed in 1960.", "formed 1960", extra_words=1).text \
        == "formed in 1960"


def test_weak_turns_join_with_their_best_span(tmp_path):
    bench = make_benchmark(tmp_path / "tiny", TURNS + WEAK_TURNS)
    exact = {e.id: e for e in benchmark_examples(bench, negatives=1)}
    report = BuildReport()
    examples = {e.id: e for e in benchmark_examples(bench, negatives=1, weak=RULE,
                                                    report=report)}
    assert sorted(set(examples) - set(exact)) == ["tiny/c5_1"]
    weak = examples["tiny/c5_1"]
    assert weak.source == "topiocqa-wiki:tiny:weak" and weak.split == "train"
    [positive] = weak.positives
    assert positive.passage.id == "B#1"
    # 5 of the answer's 7 words (lennon and mccartney were members of band) in 6: F1 10/13
    assert [s.text for s in positive.spans] == ["members were Lennon, McCartney, Harrison and"]
    assert weak.golds() == ["Lennon and McCartney were members of the band"]
    assert [n.id.split("#")[0] for n in weak.negatives] != ["B"]  # other articles only
    assert all(examples[k].to_dict() == e.to_dict() for k, e in exact.items())
    assert report.to_dict()["topiocqa-wiki:tiny:weak"]["train_examples"] == 1
    save_examples(tmp_path / "ex.jsonl", examples.values())  # the loader checks the span
    assert {e.id for e in load_examples(tmp_path / "ex.jsonl")} == set(examples)


def test_a_poor_span_leaves_the_turn_out(tmp_path):
    """With a rule loose enough to name D#0 for "The Danube is a river of Europe", the best span
    ("The Danube flows through central and eastern Europe": F1 0.4) is too unlike the answer."""
    bench = make_benchmark(tmp_path / "tiny", TURNS + WEAK_TURNS)
    loose = WeakPositiveRule(min_coverage=0.6, min_lead=0.2, max_negative_coverage=0.2)
    report = BuildReport()
    examples = {e.id for e in benchmark_examples(bench, negatives=1, weak=loose,
                                                 report=report)}
    assert "tiny/c5_1" in examples and "tiny/c5_2" not in examples
    assert report.to_dict()["topiocqa-wiki:tiny:weak"]["train_skipped_poor_span"] == 1


@pytest.mark.shared_data
def test_a_real_paraphrased_answer_finds_its_words():
    """TopiOCQA's "how does one define force?" is answered with a paraphrase of the "Force"
    article's first passage; its best span is that passage's definition."""
    with gzip.open(shared_file("topiocqa/topiocqa_train.json.gz"), "rt", encoding="utf-8") as f:
        turn = next(t for t in json.load(f) if t["Conversation_no"] == 1 and t["Turn_no"] == 2)
    with gzip.open(shared_file("wikipedia/topiocqa_wiki_articles.jsonl.gz"), "rt",
                   encoding="utf-8") as f:
        article = json.loads(next(line for line in f if '"title": "Force"' in line))
    [first] = [p for p in article_passages(article["id"], article["title"], article["text"])
               if p.id == "10902#0"]
    span = best_f1_span(first.text, turn["Answer"])
    assert span.text == "is any interaction which tends to change the motion of an object"
    assert span.f1 >= 0.5


def test_the_flag_builds_the_weak_turns_into_the_run(tmp_path):
    from convqa.front.cli.main import main

    bench = make_benchmark(tmp_path / "tiny", TURNS + WEAK_TURNS)
    out = tmp_path / "run"
    assert main(["train", "reader", "--benchmark", str(bench), "--weak-positives", "0.7",
                 "--negatives", "1", "--data-only", "--out", str(out), "--quiet"]) == 0
    data = json.loads((out / "data" / "data.json").read_text())
    assert data["params"]["weak_positives"] == 0.7
    assert data["counts"]["topiocqa-wiki:tiny:weak"]["train_examples"] == 1
    train = {e.id: e for e in load_examples(out / "data" / "train.jsonl")}
    assert train["tiny/c5_1"].source == "topiocqa-wiki:tiny:weak"
    # the same folder with another coverage is refused rather than mixed
    assert main(["train", "reader", "--benchmark", str(bench), "--weak-positives", "0.6",
                 "--negatives", "1", "--data-only", "--out", str(out), "--quiet"]) == 2
