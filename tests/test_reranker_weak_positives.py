"""Weak answer passages: the passage of the topic article that holds most of a free-form answer's
content words, well ahead of its siblings, becomes the positive of a train turn the exact rule
leaves without one; the exact turns, the held-out ones and the undecidable ones are untouched."""
from __future__ import annotations

import gzip
import json
from collections import Counter

import pytest

from conftest import shared_file
from convqa.corpus.passages import article_passages
from convqa.errors import ConfigError
from retrievers.rerank.build_examples import ExampleSources, benchmark_examples, build_examples
from convqa.benchmark.weak_positives import (WeakPositiveRule, content_words, coverage,
                                              weak_label)
from training_helpers import TURNS, WEAK_TURNS, make_benchmark

RULE = WeakPositiveRule(min_coverage=0.7, min_lead=0.2, max_negative_coverage=0.5)



@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    return make_benchmark(tmp_path_factory.mktemp("weak") / "tiny", TURNS + WEAK_TURNS)


def test_coverage_counts_content_words_with_repeats():
    assert content_words("The Danube is a river of Europe.") == ["danube", "river", "europe"]
    words = content_words("Lennon and McCartney were its members, a famous band")
    assert words == ["lennon", "mccartney", "members", "famous", "band"]
    assert coverage(words, Counter({"lennon": 1, "mccartney": 1, "members": 2})) == 3 / 5
    assert coverage(["band", "band"], Counter({"band": 1})) == 1 / 2
    assert coverage([], Counter({"a": 1})) == 0.0


def test_the_rule_needs_enough_coverage_a_clear_lead_and_two_words():
    texts = {"X#0": "Paris is the capital of France.", "X#1": "France borders Spain."}
    assert weak_label("It is Paris, the capital", texts, RULE).passage == "X#0"
    assert weak_label("France", texts, RULE) is None          # one content word
    assert weak_label("capital of Spain and France", texts, RULE) is None  # 2/3 each
    assert weak_label("Paris capital", {}, RULE) is None
    with pytest.raises(ConfigError, match="min_coverage must be in"):
        WeakPositiveRule(min_coverage=1.5)
    with pytest.raises(ConfigError, match="max_negative_coverage must not exceed"):
        WeakPositiveRule(min_coverage=0.4, max_negative_coverage=0.5)


def test_weak_turns_join_as_their_own_source_with_clean_negatives(bench):
    exact = {e.id: e for e in benchmark_examples(bench, 4, 4)}
    examples = {e.id: e for e in benchmark_examples(bench, 4, 4, weak=RULE)}
    added = {k: e for k, e in examples.items() if k not in exact}
    assert sorted(added) == ["tiny/c5_1"]
    weak = added["tiny/c5_1"]
    assert [p.id for p in weak.positives] == ["B#1"] and weak.split == "train"
    assert weak.source == "topiocqa-wiki:tiny:weak"
    assert [p.id for p in weak.article_negatives] == ["B#0"]
    assert weak.history == []
    # every exact example is as it was
    assert all(examples[k].to_dict() == e.to_dict() for k, e in exact.items())


def test_a_sibling_covering_much_of_the_answer_is_no_negative(bench):
    strict = WeakPositiveRule(min_coverage=0.6, min_lead=0.2, max_negative_coverage=0.2)
    examples = {e.id: e for e in benchmark_examples(bench, 4, 4, weak=strict)}
    assert examples["tiny/c5_1"].article_negatives == []  # B#0 covers 1/4 of the answer
    loose = {e.id: e for e in benchmark_examples(bench, 4, 4, weak=RULE)}
    assert [p.id for p in loose["tiny/c5_1"].article_negatives] == ["B#0"]


def test_example_sources_pass_the_rule_on(bench):
    examples, counts = build_examples(ExampleSources(benchmarks=[str(bench)],
                                                     article_negatives=2, mined_negatives=2,
                                                     weak_positives=RULE))
    assert counts["topiocqa-wiki:tiny:weak"]["train_examples"] == 1
    assert sum(e.source.endswith(":weak") for e in examples) == 1


@pytest.mark.shared_data
def test_real_turns_find_the_passage_they_paraphrase():
    """TopiOCQA's first conversation asks "how does one define force?" and answers with a
    paraphrase ("It is any interaction that, when unopposed, ...") that occurs in no passage
    word for word; the rule finds the passage of "Force" it paraphrases."""
    with gzip.open(shared_file("topiocqa/topiocqa_train.json.gz"), "rt", encoding="utf-8") as f:
        turns = json.load(f)
    turn = next(t for t in turns if t["Conversation_no"] == 1 and t["Turn_no"] == 2)
    assert turn["Topic"] == "Force"
    path = shared_file("wikipedia/topiocqa_wiki_articles.jsonl.gz")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        line = next(line for line in f if '"title": "Force"' in line)
    article = json.loads(line)
    texts = {p.id: p.text for p in article_passages(article["id"], article["title"],
                                                     article["text"])}
    answer = turn["Answer"]
    assert not any(answer.lower().rstrip(".") in t.lower() for t in texts.values())
    chosen = weak_label(answer, texts, RULE).passage
    assert chosen == "10902#0" and "force is any interaction which tends to change the motion" \
        in texts[chosen]
