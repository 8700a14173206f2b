"""`convqa train reranker-examples` and `convqa train reranker` end to end on a tiny encoder:
one examples file from a benchmark and a real SQuAD file, training from it, held-out ranking,
the model card, reuse on a rerun, and one-line errors."""
from __future__ import annotations

import json

import pytest

from conftest import shared_file
from convqa.front.cli.main import main
from reader_helpers import save_tiny_encoder, single_thread  # noqa: F401 (autouse fixture)
from retrievers.rerank.data import load_examples
from retrievers.rerank.model import CrossEncoder
from training_helpers import make_benchmark


def training(out, encoder, *extra):
    return ["train", "reranker", "--out", str(out), "--init-model", str(encoder),
            "--max-steps", "2", "--batch-size", "2", "--negatives", "2", "--lora", "4",
            "--max-length", "96", "--max-query-length", "24", "--eval-examples", "4",
            "--checkpoint-every", "1", "--precision", "fp32", "--quiet", *extra]


def test_examples_file_then_training_from_it(tmp_path, capsys):
    bench = make_benchmark(tmp_path / "tiny")
    examples = tmp_path / "reranker.jsonl.xz"
    assert main(["train", "reranker-examples", "--out", str(examples), "--benchmark", str(bench),
                 "--squad", str(shared_file("squad/dev-v2.0.json")), "--max-examples", "6",
                 "--max-heldout", "3", "--article-negatives", "2", "--mined-negatives", "2"]) == 0
    report = json.loads(capsys.readouterr().out.splitlines()[-1])["sources"]
    assert report["squad:dev-v2.0"]["train_examples"] == 6
    assert report["topiocqa-wiki:tiny"]["train_examples"] == 6  # a seeded 6 of its 7
    loaded = load_examples(examples)
    assert len(loaded) == 6 + 3 + 6 + 2

    encoder = save_tiny_encoder(tmp_path / "enc")
    out = tmp_path / "run"
    assert main(training(out, encoder, "--examples", str(examples))) == 0
    summary = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert summary["steps"] == 2 and summary["heldout"]["count"] == 3 + 2
    assert set(summary["heldout"]["sources"]) == {"squad:dev-v2.0", "topiocqa-wiki:tiny"}
    assert not (out / "data").exists()  # the prepared file is read where it is
    model = CrossEncoder.from_pretrained(out / "model")
    assert model.has_adapters and model.config.history["name"] == "current_first"
    evaluation = json.loads((out / "eval.json").read_text())
    assert evaluation["model_fingerprint"] == model.fingerprint()
    card = (out / "model" / "README.md").read_text()
    assert "| topiocqa-wiki:tiny | 2 |" in card and "LoRA rank 4" in card
    assert "squad:dev-v2.0: trained on 6 questions" in card
    # the same command again returns the finished run
    assert main(training(out, encoder, "--examples", str(examples))) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["steps"] == 2
    assert CrossEncoder.from_pretrained(out / "model").fingerprint() == model.fingerprint()
    assert main(training(out, encoder, "--examples", str(examples), "--negatives", "3")) == 2
    assert "different settings or data" in capsys.readouterr().err

    # training further: a LoRA folder takes all-weights training, a full folder new LoRA
    assert main(training(tmp_path / "more", out / "model", "--examples", str(examples))) == 2
    assert "give --lora 0 to train all its weights" in capsys.readouterr().err
    assert main(training(tmp_path / "full", out / "model", "--examples", str(examples),
                         "--lora", "0", "--no-eval")) == 0
    full = CrossEncoder.from_pretrained(tmp_path / "full" / "model")
    assert not full.has_adapters and full.config.history == model.config.history
    assert main(training(tmp_path / "again", tmp_path / "full" / "model", "--examples",
                         str(examples), "--no-eval")) == 0
    again = CrossEncoder.from_pretrained(tmp_path / "again" / "model")
    assert again.has_adapters and again.config.model == str((tmp_path / "full" / "model"))
    capsys.readouterr()


def test_examples_built_into_the_run_folder_are_reused_not_mixed(tmp_path, capsys):
    bench = make_benchmark(tmp_path / "tiny")
    encoder = save_tiny_encoder(tmp_path / "enc")
    out = tmp_path / "run"
    assert main(training(out, encoder, "--benchmark", str(bench), "--no-eval")) == 0
    printed = capsys.readouterr().out
    assert "training on 7 questions (2 held out)" in printed
    assert (out / "data" / "examples.jsonl.xz").exists()
    assert main(training(out, encoder, "--benchmark", str(bench), "--no-eval")) == 0
    assert "examples: reusing" in capsys.readouterr().out
    assert main(training(out, encoder, "--benchmark", str(bench), "--article-negatives", "1",
                         "--no-eval")) == 2
    assert "examples built from other inputs or settings" in capsys.readouterr().err


@pytest.mark.parametrize("extra, message", [
    ([], "no training data: give --squad, --benchmark or --examples"),
    (["--benchmark", "B", "--mined-run", "B"], "--mined-run 'B': expected DIR=RUN"),
    (["--benchmark", "B", "--mined-run", "C=run.jsonl"], "C is not one of the --benchmark"),
    (["--examples", "x.jsonl", "--squad", "s.json"], "give prepared examples or sources"),
    (["--examples", "missing.jsonl"], "missing.jsonl: file not found"),
    (["--benchmark", "nowhere"], "nowhere: not a benchmark folder"),
])
def test_bad_inputs_are_one_line_errors(tmp_path, capsys, monkeypatch, extra, message):
    monkeypatch.chdir(tmp_path)
    assert main(training(tmp_path / "out", "all-MiniLM-L6-v2", *extra)) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
