"""`convqa train convdr` and `convqa train convdr-fidelity` end to end on a tiny teacher:
examples, targets, mining, training, fidelity, resume, and one-line errors."""
from __future__ import annotations

import json

import pytest

from convqa.front.cli.main import main

from conftest import shared_file
from convdr_helpers import make_index, make_teacher, write_examples_jsonl


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("convdr_cli")
    teacher = make_teacher(root / "teacher")
    _, index_dir = make_index(root, teacher)
    return root, teacher, index_dir, write_examples_jsonl(root / "examples.jsonl")


def arguments(out, teacher, data, *extra):
    return ["train", "convdr", "--out", str(out), "--teacher", str(teacher), "--data",
            f"jsonl={data}", "--history-max-tokens", "62", "--batch-size", "2",
            "--max-steps", "3", "--heldout-fraction", "0.25", "--checkpoint-every", "2",
            "--lr", "1e-3", "--quiet", *extra]


def test_kd_run_resume_and_fidelity(setup, tmp_path, capsys):
    root, teacher, _, data = setup
    out = tmp_path / "kd"
    assert main(arguments(out, teacher, data)) == 0
    printed = capsys.readouterr().out
    assert "examples: 6 train, 2 held out" in printed and "training: 3 steps" in printed
    assert "fidelity on 2 held-out turns" in printed
    record = json.loads((out / "training.json").read_text())
    assert record["mode"] == "kd" and record["steps"] == 3 and record["with_kd_target"] == 6
    heldout = [json.loads(line) for line in (out / "examples" / "heldout.jsonl").open()]
    assert len({r["conversation_id"] for r in heldout}) == 1
    assert heldout[1]["query"].endswith("[SEP] " + heldout[1]["question"])
    fidelity = json.loads((out / "fidelity.json").read_text())
    assert fidelity["count"] == 2 and set(fidelity) >= {"student", "zero_shot",
                                                         "question_only"}
    stamp = (out / "training.json").stat().st_mtime_ns
    assert main(arguments(out, teacher, data)) == 0  # finished: nothing is redone
    assert "examples: already built" in capsys.readouterr().out
    assert (out / "training.json").stat().st_mtime_ns == stamp
    assert main(arguments(out, teacher, data, "--seed", "1")) == 2
    error = capsys.readouterr().err
    assert "other settings" in error and error.count("\n") == 1

    assert main(["train", "convdr-fidelity", "--model", str(out / "model"), "--examples",
                 str(out / "examples" / "heldout.jsonl"), "--out",
                 str(tmp_path / "f.json")]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["student"] == fidelity["student"]
    assert again["zero_shot"] == fidelity["zero_shot"]


def test_multitask_with_teacher_index_and_lora(setup, tmp_path, capsys):
    root, teacher, index_dir, data = setup
    out = tmp_path / "mt"
    assert main(arguments(out, teacher, data, "--mode", "multitask", "--index",
                          str(index_dir), "--mine-top-k", "5", "--negatives", "2",
                          "--lora", "2", "--fidelity-examples", "0")) == 0
    printed = capsys.readouterr().out
    assert "mining:" in printed and not (out / "fidelity.json").exists()
    record = json.loads((out / "training.json").read_text())
    assert record["with_rank_group"] == 6 and record["mining"]["k"] == 5
    assert sorted(p.name for p in (out / "model").iterdir()) == [
        "adapter_config.json", "adapter_model.safetensors", "convqa_convdr.json"]
    log = [json.loads(line) for line in (out / "log.jsonl").open()]
    assert all(r["kd"] > 0 and r["rank"] > 0 for r in log)


def test_one_line_errors(setup, tmp_path, capsys):
    root, teacher, _, data = setup
    cases = [
        (arguments(tmp_path / "a", teacher, data, "--mode", "rank"), "needs the teacher's dense"),
        (["train", "convdr", "--out", str(tmp_path / "b"), "--data", "quac=x"],
         "unknown data source"),
        (["train", "convdr", "--out", str(tmp_path / "c")], "needs training data"),
        (arguments(tmp_path / "d", teacher, tmp_path / "missing.jsonl"), "not found"),
        (arguments(tmp_path / "e", teacher, data, "--exclude-benchmark", str(tmp_path)),
         "not an OR-QuAC benchmark folder"),
    ]
    for argv, message in cases:
        assert main(argv) == 2, argv
        error = capsys.readouterr().err
        assert message in error and error.count("\n") == 1, error


def test_benchmark_dialogs_are_held_out(setup, tmp_path, capsys):
    """`--exclude-benchmark`: every dialog of the OR-QuAC benchmark leaves training."""
    from retrievers.convdr.orquac_bench import benchmark_conversations, build_orquac_benchmark

    root, teacher, _, data = setup
    bench = tmp_path / "bench"
    build_orquac_benchmark(shared_file("orquac/orconvqa_sample.jsonl").parent, bench)
    dialogs = sorted(benchmark_conversations(bench))
    rows = [json.loads(line) for line in data.open()]
    rows[0]["conversation_id"] = rows[1]["conversation_id"] = dialogs[0]
    mixed = write_examples_jsonl(tmp_path / "mixed.jsonl", rows)
    out = tmp_path / "x"
    assert main(arguments(out, teacher, mixed, "--heldout-fraction", "0",
                          "--exclude-benchmark", str(bench), "--fidelity-examples", "0")) == 0
    meta = json.loads((out / "examples" / "meta.json").read_text())
    assert meta["counts"]["excluded_by_benchmarks"] == 2
    train = [json.loads(line) for line in (out / "examples" / "train.jsonl").open()]
    assert len(train) == 6 and dialogs[0] not in {r["conversation_id"] for r in train}


def test_anchor_gives_examples_without_rewrite_the_teachers_own_embedding(setup, tmp_path,
                                                                           capsys):
    """Multitask on turns with positives but no rewrite: without --anchor they train Rank
    only; with it each also has a KD target, the teacher's embedding of its own input."""
    import numpy as np

    from retrievers.convdr.data import load_examples_jsonl
    from retrievers.convdr.model import ConvDR
    from retrievers.convdr.run import ConvDRRunConfig, anchor_targets
    from retrievers.convdr.targets import encode_teacher_queries
    from retrievers.convdr.train import ConvDRTrainConfig

    root, teacher, index_dir, data = setup
    rows = [json.loads(line) for line in data.open()]
    for row in rows[::2]:
        row["rewrite"] = None
    bare = write_examples_jsonl(tmp_path / "bare.jsonl", rows)
    common = ("--mode", "multitask", "--index", str(index_dir), "--mine-top-k", "5",
              "--negatives", "2", "--fidelity-examples", "0", "--in-batch-negatives")
    assert main(arguments(tmp_path / "plain", teacher, bare, *common)) == 0
    plain = json.loads((tmp_path / "plain" / "training.json").read_text())
    assert main(arguments(tmp_path / "anchored", teacher, bare, *common, "--anchor")) == 0
    assert "anchors: 6 KD targets" in capsys.readouterr().out
    anchored = json.loads((tmp_path / "anchored" / "training.json").read_text())
    assert plain["with_kd_target"] < anchored["with_kd_target"] == 6
    assert main(arguments(tmp_path / "r", teacher, bare, "--mode", "rank", "--index",
                          str(index_dir), "--anchor")) == 2
    assert "anchor is a KD target" in capsys.readouterr().err

    examples = load_examples_jsonl(tmp_path / "anchored" / "examples" / "train.jsonl")
    model = ConvDR.build(str(teacher))
    has = np.array([e.has_rewrite for e in examples])
    targets = np.where(has[:, None], 1.0, 0.0).astype(np.float32) * np.ones((1, model.dim))
    config = ConvDRRunConfig(data=[("jsonl", str(bare))], teacher=str(teacher), anchor=True,
                             train=ConvDRTrainConfig(mode="kd"))
    new_targets, new_has = anchor_targets(model, examples, targets, has, config)
    assert new_has.all() and np.array_equal(new_targets[has], targets[has])
    own, _ = encode_teacher_queries(model.zero_shot_encoder(),
                                    [e.query for e, h in zip(examples, has) if not h])
    assert np.allclose(new_targets[~has], own, atol=1e-6)
