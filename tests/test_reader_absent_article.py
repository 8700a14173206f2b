"""Unanswerable copies of answerable train turns without their topic article
(readers/extractive/absent_article.py): a seeded share of the train turns, never a passage of the
gold article or one holding a gold answer among the copy's negatives, none for held-out turns or
SQuAD questions; `convqa train reader --unanswerable --absent-article SHARE` records them in the
run's data, built before the gold article's own passages join the negatives."""
from __future__ import annotations

import json

import pytest

from convqa.errors import ConfigError
from convqa.types import Passage
from readers.extractive.absent_article import (SUFFIX, absent_article_example,
                                               add_absent_article_examples)
from readers.extractive.build_examples import benchmark_examples
from readers.extractive.data import BuildReport, GoldSpan, ReaderExample, ReaderPassage
from training_helpers import make_benchmark


def _answerable_train(examples):
    return [e for e in examples if e.split == "train" and not e.unanswerable]


def test_every_copy_is_unanswerable_without_the_gold_article(tmp_path):
    folder = make_benchmark(tmp_path / "bench")
    examples = benchmark_examples(folder, negatives=3, unanswerable=True)
    originals = {e.id: e for e in _answerable_train(examples)}
    heldout = [e.id for e in examples if e.split == "heldout"]
    report = BuildReport()
    made = add_absent_article_examples(examples, 1.0, seed=0, report=report)
    copies = [e for e in examples if e.id.endswith(SUFFIX)]
    counts = report.to_dict()["topiocqa-wiki:bench"]
    assert made == len(copies) == counts["train_absent_article"] > 0
    assert made + counts.get("absent_article_without_negatives", 0) == len(originals)
    for copy in copies:
        source = originals[copy.id[:-len(SUFFIX)]]
        gold = {p.passage.id.split("#")[0] for p in source.positives}
        assert copy.unanswerable and copy.positives == [] and copy.split == "train"
        assert copy.question == source.question and copy.history == source.history
        assert copy.negatives and all(p.id.split("#")[0] not in gold for p in copy.negatives)
        # the retriever's order is kept: the copy reads the turn's best other passages
        kept = [p.id for p in source.negatives if p.id in {n.id for n in copy.negatives}]
        assert [p.id for p in copy.negatives] == kept
    assert not any(h + SUFFIX in {e.id for e in examples} for h in heldout)


def test_the_share_is_seeded_and_zero_adds_nothing(tmp_path):
    folder = make_benchmark(tmp_path / "bench")

    def picked(share, seed, report=None):
        examples = benchmark_examples(folder, negatives=3, unanswerable=True)
        add_absent_article_examples(examples, share, seed=seed, report=report)
        return [e.id for e in examples if e.id.endswith(SUFFIX)]

    eligible = len(_answerable_train(benchmark_examples(folder, negatives=3)))
    assert picked(0.0, 0) == []
    report = BuildReport()
    half = picked(0.5, 0, report)
    empty = report.to_dict()["topiocqa-wiki:bench"].get("absent_article_without_negatives", 0)
    assert len(half) + empty == round(0.5 * eligible) and half == picked(0.5, 0)
    assert {tuple(picked(0.5, seed)) for seed in range(6)} != {tuple(half)}
    for bad in (-0.1, 1.5, "half", True):
        with pytest.raises(ConfigError, match="absent-article share"):
            add_absent_article_examples([], bad)


def test_the_filter_drops_the_article_by_title_and_passages_holding_the_answer():
    text = "Canberra is the capital city of Australia."
    positive = ReaderPassage(Passage("Canberra#0", text, "Canberra"),
                             [GoldSpan("Canberra", 0)])
    negatives = [Passage("vital-7", "Canberra lies on the Molonglo River.", "canberra"),
                 Passage("Sydney#0", "Sydney is the capital of New South Wales.", "Sydney"),
                 Passage("Facts#3", "Australia's capital, Canberra, was planned.", "Facts"),
                 Passage("Melbourne#0", "Melbourne is the capital of Victoria.", "Melbourne")]
    turn = ReaderExample("bench/c1_1", "what is the capital of australia?", [], [positive],
                         negatives, ["Canberra"], "train", "topiocqa-wiki:bench")
    copy = absent_article_example(turn)
    assert [p.id for p in copy.negatives] == ["Sydney#0", "Melbourne#0"]
    turn.negatives = negatives[:1] + negatives[2:3]
    assert absent_article_example(turn) is None   # nothing left to read it against


def test_squad_examples_get_no_copy():
    squad = ReaderExample("dev-v2.0/q1", "who?", [], [ReaderPassage(
        Passage("dev-v2.0#0", "Ada wrote it.", "Ada"), [GoldSpan("Ada", 0)])],
        [Passage("dev-v2.0#5", "Bach wrote fugues.", "Bach")], ["Ada"], "train",
        "squad:dev-v2.0")
    examples = [squad]
    assert add_absent_article_examples(examples, 1.0) == 0 and examples == [squad]


def test_train_reader_cli_records_the_copies(tmp_path, capsys):
    from convqa.front.cli.main import main
    from test_dense_model import make_tiny_bert
    from test_reader_dense_negatives import _tokenizer

    folder = make_benchmark(tmp_path / "bench")
    encoder = str(make_tiny_bert(tmp_path / "enc", _tokenizer()))
    capsys.readouterr()
    common = ["train", "reader", "--benchmark", str(folder), "--init-model", encoder,
              "--negatives", "2", "--article-negatives", "1", "--max-steps", "1",
              "--batch-size", "2", "--max-length", "128", "--no-eval", "--quiet"]
    assert main(common + ["--out", str(tmp_path / "alone"), "--absent-article", "0.5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "give --unanswerable with --absent-article" in err[-1] and len(err) == 1
    out = tmp_path / "run"
    with pytest.raises(SystemExit):   # a share below 1
        main(common + ["--out", str(out), "--unanswerable", "--absent-article", "1"])
    assert "--absent-article: expected a fraction" in capsys.readouterr().err
    assert main(common + ["--out", str(out), "--unanswerable", "--absent-article", "0.9"]) == 0
    meta = json.loads((out / "data" / "data.json").read_text())
    assert meta["params"]["absent_article"] == 0.9
    made = meta["counts"]["topiocqa-wiki:bench"]["train_absent_article"]
    assert made > 0
    rows = [json.loads(line) for line in (out / "data" / "train.jsonl").read_text().splitlines()]
    copies = [r for r in rows if r["id"].endswith(SUFFIX)]
    assert len(copies) == made
    with_article = 0
    for row in copies:   # the gold article's own passages (--article-negatives) never join
        original = next(r for r in rows if r["id"] == row["id"][:-len(SUFFIX)])
        article = original["positives"][0]["id"].split("#")[0] + "#"
        assert row["unanswerable"] and all(not n["id"].startswith(article)
                                           for n in row["negatives"])
        with_article += original["negatives"][0]["id"].startswith(article)
    assert with_article > 0   # while the turns they copy read one
