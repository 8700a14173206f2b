"""`convqa train fid` through `add_fid_parser` (wired into a parser shaped like `convqa train`),
and the 2-process CPU path of the FiD training loop (gloo, started by torchrun)."""
from __future__ import annotations

import argparse
import json

import pytest
import torch

from convqa.errors import ConfigError, DataError
from fid_helpers import colour_examples, save_checkpoint, tiny_reader
from convqa.front.cli.train_fid import add_fid_parser
from readers.fid.data import write_examples
from readers.fid.model import FiDReader
from readers.fid.train import FiDTrainConfig, train_fid
from training_helpers import two_process_ranks


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="convqa")
    commands = top.add_subparsers(dest="command")
    train = commands.add_parser("train")
    jobs = train.add_subparsers(dest="train_command", metavar="MODEL")
    add_fid_parser(jobs)
    return top


def run(*argv: str) -> int:
    args = parser().parse_args(["train", "fid", *argv])
    return args.func(args)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fid-cli")
    write_examples(folder / "train.jsonl", colour_examples())
    return folder / "train.jsonl", save_checkpoint(folder / "t5")


def test_trains_evaluates_and_resumes(files, tmp_path, capsys):
    examples, base = files
    out = tmp_path / "run"
    common = ["--examples", str(examples), "--model", str(base), "--out", str(out),
              "--passages", "3", "--passage-max-length", "32", "--batch-size", "2",
              "--lr", "1e-3", "--checkpoint-every", "2", "--cpu", "--quiet"]
    torch.set_num_threads(1)
    # 4 examples / batch 2 = 2 steps per epoch; 2 epochs capped at 3 steps
    assert run(*common, "--epochs", "2", "--max-steps", "3",
               "--eval-examples", str(examples)) == 0
    printed = capsys.readouterr().out
    assert f"FiD reader in {out}: 3 steps" in printed and "EM " in printed
    record = json.loads((out / "training.json").read_text())
    assert record["steps"] == 3 and record["init_model"] == str(base)
    assert record["config"]["lr"] == 1e-3
    model = FiDReader.from_pretrained(out / "model")
    assert model.config.n_passages == 3 and model.config.passage_max_length == 32
    assert model.config.model == str(base)
    scores = json.loads((out / "eval.json").read_text())
    assert scores["count"] == 4 and set(scores["predictions"]) == {"c0", "c1", "c2", "c3"}
    assert scores["fingerprint"] == model.fingerprint()
    # the same command again: the finished run is reported, not retrained
    assert run(*common, "--epochs", "2", "--max-steps", "3") == 0
    assert "3 steps" in capsys.readouterr().out
    assert json.loads((out / "training.json").read_text())["seconds"] == record["seconds"]


def test_lora_and_gradient_checkpointing_flags(files, tmp_path, capsys):
    examples, base = files
    out = tmp_path / "lora"
    assert run("--examples", str(examples), "--model", str(base), "--out", str(out),
               "--passages", "2", "--passage-max-length", "32", "--max-steps", "2", "--lora",
               "2", "--gradient-checkpointing", "--history", "question_only", "--lr", "1e-3",
               "--quiet", "--cpu") == 0
    files_out = {p.name for p in (out / "model").iterdir()}
    assert "adapter_model.safetensors" in files_out and "model.safetensors" not in files_out
    model = FiDReader.from_pretrained(out / "model")
    assert model.has_adapters and model.config.history == {"name": "question_only"}
    # the adapters trained through the checkpointed layers (fresh LoRA = the base function)
    untrained = FiDReader.from_pretrained(base, n_passages=2, passage_max_length=32,
                                          history="question_only")
    assert model.fingerprint() != untrained.fingerprint()
    # an adapter folder as --model: its (frozen when loaded) adapters train on
    frozen = FiDReader.from_pretrained(out / "model")
    with pytest.raises(ConfigError, match="no trainable parameters"):
        train_fid(frozen, colour_examples(), tmp_path / "frozen", FiDTrainConfig(progress=False))
    assert run("--examples", str(examples), "--model", str(out / "model"), "--out",
               str(tmp_path / "more"), "--max-steps", "1", "--lr", "1e-3", "--quiet",
               "--cpu") == 0
    more = FiDReader.from_pretrained(tmp_path / "more" / "model")
    assert more.has_adapters and more.config == model.config
    assert more.fingerprint() not in (model.fingerprint(), untrained.fingerprint())
    assert model.merge_adapters().state_dict().keys() == untrained.state_dict().keys()


def test_bad_input_is_one_clear_error(files, tmp_path, capsys):
    examples, base = files
    bad = tmp_path / "bad.jsonl"
    bad.write_text(examples.read_text().splitlines()[0] + "\n" + '{"id": "x", "question": '
                   '"q", "answers": ["a"]}\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"bad.jsonl:2: field 'passages': missing"):
        run("--examples", str(bad), "--model", str(base), "--out", str(tmp_path / "o"))
    for flags in (["--passages", "0"], ["--lr", "0"], ["--passage-max-length", "4"]):
        with pytest.raises(SystemExit):
            run("--examples", str(examples), "--out", str(tmp_path / "o"), *flags)
        assert "error: argument" in capsys.readouterr().err


SCRIPT = r'''
import hashlib, json, sys
from pathlib import Path
from fid_helpers import colour_examples, tiny_reader
from readers.fid.train import FiDTrainConfig, FiDTrainer
from convqa.training.loop import make_accelerator

out = Path(sys.argv[1])
acc = make_accelerator(cpu=True)
config = FiDTrainConfig(batch_size=1, epochs=2, lr=1e-3, warmup_ratio=0.0, progress=False,
                        checkpoint_every=2)
trainer = FiDTrainer(tiny_reader(seed=0), colour_examples(), out, config, acc)
result = trainer.train()
digest = hashlib.sha256()
for name, tensor in sorted(trainer.model.state_dict().items()):
    digest.update(name.encode() + tensor.detach().float().numpy().tobytes())
(out / f"rank{acc.process_index}.json").write_text(json.dumps({
    "processes": acc.num_processes, "steps": result.steps, "weights": digest.hexdigest()}))
'''


@pytest.mark.slow  # two fresh interpreters importing torch and transformers: ~15-30 s
def test_two_processes_match_one_process_with_the_doubled_batch(tmp_path):
    out = tmp_path / "out"
    ranks = two_process_ranks(SCRIPT, tmp_path, out, out)
    assert [r["processes"] for r in ranks] == [2, 2]
    assert [r["steps"] for r in ranks] == [4, 4]  # 4 examples / (1 x 2 processes) x 2 epochs
    assert ranks[0]["weights"] == ranks[1]["weights"]  # DDP kept the replicas identical
    assert json.loads((out / "training.json").read_text())["processes"] == 2

    # Every answer is one token + eos, so the mean of the two processes' token-mean losses is
    # the token-mean loss of the doubled batch: one process ends with the same weights.
    torch.set_num_threads(1)
    single = tiny_reader(seed=0)
    train_fid(single, colour_examples(), tmp_path / "single", FiDTrainConfig(
        batch_size=2, epochs=2, lr=1e-3, warmup_ratio=0.0, progress=False, checkpoint_every=0))
    two = FiDReader.from_pretrained(out / "model").state_dict()
    one = single.state_dict()
    assert one.keys() == two.keys()
    worst = max((one[k].float() - two[k].float()).abs().max().item() for k in one)
    assert worst < 1e-4, worst
    start = tiny_reader(seed=0).state_dict()
    assert max((start[k].float() - one[k].float()).abs().max().item() for k in one) > 1e-4
