"""`convqa train reader` and `convqa train reader-eval` end to end on a tiny model and real
SQuAD data: data, training, evaluation, resume, and one-line errors."""
from __future__ import annotations

import json

from conftest import shared_file
from convqa.front.cli.main import main
from readers.extractive.model import ExtractiveReader
from reader_helpers import save_tiny_encoder, single_thread  # noqa: F401 (autouse fixture)


def arguments(out, encoder, *extra):
    return ["train", "reader", "--squad", str(shared_file("squad/dev-v2.0.json")),
            "--out", str(out), "--init-model", str(encoder), "--max-steps", "2",
            "--batch-size", "2", "--passages-per-question", "2", "--negatives", "1",
            "--max-examples", "8", "--max-heldout", "4", "--eval-examples", "3",
            "--max-length", "128", "--history-max-tokens", "32", "--checkpoint-every", "1",
            "--quiet", *extra]


def test_train_resume_and_evaluate(tmp_path, capsys):
    encoder = save_tiny_encoder(tmp_path / "enc")
    out = tmp_path / "run"
    assert main(arguments(out, encoder)) == 0
    printed = capsys.readouterr().out
    assert "data: 8 training and 4 held-out examples" in printed
    assert "training: 2 steps" in printed and "squad:dev-v2.0: gold passage EM" in printed
    assert len((out / "data" / "train.jsonl").read_text().splitlines()) == 8
    record = json.loads((out / "training.json").read_text())
    assert record["steps"] == 2 and record["init_model"] == str(encoder)
    reader = ExtractiveReader.from_pretrained(out / "model")
    evaluation = json.loads((out / "eval.json").read_text())
    assert evaluation["model_fingerprint"] == reader.fingerprint()
    scores = evaluation["sources"]["squad:dev-v2.0"]
    assert scores["gold_passage"]["count"] == 3 and "passage_accuracy" in scores["with_negatives"]
    # the same command again: everything is reused
    assert main(arguments(out, encoder)) == 0
    printed = capsys.readouterr().out
    assert "data: reusing" in printed and "evaluation: already done" in printed
    assert ExtractiveReader.from_pretrained(out / "model").fingerprint() == reader.fingerprint()
    # other settings in the same folder: one line, exit status 2
    assert main(arguments(out, encoder, "--lr", "1e-3")) == 2
    assert "different settings or data" in capsys.readouterr().err
    assert main(arguments(out, encoder, "--negatives", "2")) == 2
    assert "examples built from other inputs or settings" in capsys.readouterr().err
    # reader-eval on the held-out file
    report = tmp_path / "scores.json"
    assert main(["train", "reader-eval", "--model", str(out / "model"), "--examples",
                 str(out / "data" / "heldout.jsonl"), "--with-negatives", "--quiet",
                 "--out", str(report)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["count"] == 4 and 0.0 <= summary["em"] <= 100.0
    assert len(json.loads(report.read_text())["predictions"]) == 4


def test_bad_inputs_are_one_line_errors(tmp_path, capsys):
    encoder = save_tiny_encoder(tmp_path / "enc")
    assert main(["train", "reader", "--out", str(tmp_path / "none"), "--init-model",
                 str(encoder), "--quiet"]) == 2
    assert "no training data" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "q", "question": "who?", "history": [], "negatives": []}\n')
    assert main(["train", "reader", "--out", str(tmp_path / "x"), "--examples", str(bad),
                 "--init-model", str(encoder), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:1: field 'positives': missing" in err and len(err.strip().splitlines()) == 1
    assert main(["train", "reader-eval", "--model", str(tmp_path / "nope"), "--examples",
                 str(bad)]) == 2
    assert "field 'positives': missing" in capsys.readouterr().err
