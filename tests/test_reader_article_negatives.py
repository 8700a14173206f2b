"""Negatives from a turn's own gold article (readers/extractive/article_negatives.py): the other
passages of the article that hold no gold answer come first, the example keeps its number of
negatives, single-passage articles and SQuAD examples are untouched; `convqa train reader
--article-negatives` records them in the run's data. The tiny benchmark (2 passages per article
for A-F) and the hand-made TopiOCQA fixture built like the full corpus."""
from __future__ import annotations

import json

import pytest

from convqa.benchmark.labelled_turns import article_id_of
from convqa.errors import ConfigError
from readers.extractive.article_negatives import add_article_negatives
from readers.extractive.build_examples import benchmark_examples
from training_helpers import TURNS, make_benchmark


def by_id(examples):
    return {e.id.split("/", 1)[1]: e for e in examples}


def test_other_answer_free_passages_of_the_gold_article_come_first(tmp_path):
    folder = make_benchmark(tmp_path / "bench")
    examples = benchmark_examples(folder, negatives=3)
    before = {e.id: [p.id for p in e.negatives] for e in examples}
    counts = add_article_negatives(examples, folder, count=1)
    turns = by_id(examples)
    assert turns["c1_1"].negatives[0].id == "A#1"   # answer in A#0
    assert turns["c1_2"].negatives[0].id == "A#0"   # answer in A#1
    assert turns["c3_1"].negatives[0].id == "D#0"
    # c3_3 lists F#0 and F#1, but its answer is a span of F#0 only: F#1 is answer-free
    assert turns["c3_3"].negatives[0].id == "F#1"
    assert [p.id for p in turns["c4_2"].negatives] == before[turns["c4_2"].id]  # J: 1 passage
    for example in examples:  # as many negatives as before (at least the article's)
        assert len(example.negatives) == max(len(before[example.id]), 1)
        assert len({p.id for p in example.negatives}) == len(example.negatives)
        positives = {p.passage.id for p in example.positives}
        assert not positives & {p.id for p in example.negatives}
    assert counts == {"examples": 8, "article_negatives": 8}  # 7 train turns + c4_1
    with pytest.raises(ConfigError, match="article negatives must be an integer >= 0"):
        add_article_negatives(examples, folder, count=-1)


def test_a_passage_holding_the_answer_is_never_a_negative(tmp_path):
    """'the Sun' is in both passages of Alpha Centauri; only A#0 is listed as the answer
    passage, yet A#1 must not become a negative."""
    turns = [t for t in TURNS if t[0] != "c1"] + [
        ("c1", 1, "what is it close to?", "the Sun", "A", ["A#0"], "train", "first")]
    folder = make_benchmark(tmp_path / "bench", turns)
    examples = benchmark_examples(folder, negatives=2)
    before = {e.id: [p.id for p in e.negatives] for e in examples}
    add_article_negatives(examples, folder, count=2)
    example = by_id(examples)["c1_1"]
    assert "A#1" not in {p.id for p in example.negatives}
    assert [p.id for p in example.negatives] == before[example.id]


def test_train_reader_cli_records_article_negatives(tmp_path):
    from convqa.front.cli.main import main
    from test_dense_model import make_tiny_bert

    from convqa.models import load_tokenizer

    folder = make_benchmark(tmp_path / "bench")
    out = tmp_path / "run"
    code = main(["train", "reader", "--out", str(out), "--benchmark", str(folder),
                 "--init-model", str(make_tiny_bert(tmp_path / "enc", load_tokenizer())),
                 "--article-negatives", "1", "--negatives", "2", "--max-steps", "1",
                 "--batch-size", "2", "--max-length", "128", "--no-eval", "--quiet"])
    assert code == 0
    meta = json.loads((out / "data" / "data.json").read_text())
    assert meta["params"]["article_negatives"] == 1
    counts = meta["counts"][next(iter(meta["counts"]))]
    assert counts["train_article_negatives"] == 7


def test_benchmark_fixture_built_like_the_full_corpus(fixtures_dir, tmp_path):
    """The hand-made TopiOCQA fixture built into a benchmark as `convqa data topiocqa-wiki`
    builds the full corpus (10-word passages): turn 1_2 (answer in 10#0) gets 10#1; turn 2_4
    (the answer in both passages of article 20) gets none."""
    from convqa.benchmark.topiocqa_wiki import build_benchmark, full_wiki_source

    fx = fixtures_dir / "benchmark"
    built = build_benchmark(fx / "topiocqa_tiny.json", full_wiki_source(fx / "articles.jsonl"),
                            tmp_path / "full", max_words=10, dev_fraction=0.34, seed=0)
    examples = benchmark_examples(built.out_dir, negatives=3)
    add_article_negatives(examples, built.out_dir, count=2)
    turns = {e.id.rsplit("/", 1)[1]: e for e in examples}
    assert turns["1_2"].negatives[0].id == "10#1"
    assert turns["1_3"].negatives[0].id == "10#0"
    assert all(article_id_of(p.id) != "20" for p in turns["2_4"].negatives)
