"""The DPR-IHN loop: stages, provenance, each iteration from the initial model, stage skipping,
resuming after a kill, refusing other settings; and `convqa train` on the command line."""
from __future__ import annotations

import json

import pytest

from convqa.front.cli.main import main
from convqa.errors import ConfigError, ConvQAError
from retrievers.training.ihn import IHNConfig, run_ihn, stage_names
from retrievers.training.mining import MiningConfig
from retrievers.training.trainer import TrainConfig
from training_helpers import make_benchmark, tiny_encoder


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    return make_benchmark(tmp_path_factory.mktemp("bench"))


def ihn_config(bench, iterations=2, **train) -> IHNConfig:
    settings = dict(batch_size=2, max_steps=2, lr=1e-3, hard_negatives=1, progress=False,
                    checkpoint_every=0)
    return IHNConfig(benchmark=str(bench), iterations=iterations, positives="article",
                     train=TrainConfig(**{**settings, **train}),
                     mining=MiningConfig(top_k=5, progress=False))


class Recorder:
    def __init__(self):
        self.events: list[tuple[str, str]] = []
        self.models = []

    def factory(self):
        model = tiny_encoder(seed=0)
        self.models.append(model.fingerprint())
        return model

    def __call__(self, stage: str, event: str) -> None:
        self.events.append((stage, event))

    def ran(self) -> list[str]:
        return [stage for stage, event in self.events if event == "run"]

    def skipped(self) -> list[str]:
        return [stage for stage, event in self.events if event == "skip"]


def test_two_iterations_then_skip_then_extend(bench, tmp_path):
    out = tmp_path / "ihn"
    record = Recorder()
    manifest = run_ihn(ihn_config(bench), out, model_factory=record.factory, on_stage=record)
    assert stage_names(2) == ["examples", "iter1.train", "iter2.mine", "iter2.train"]
    assert record.ran() == stage_names(2) and list(manifest["stages"]) == stage_names(2)
    # every iteration starts from the same initial checkpoint, not from the previous model
    assert len(record.models) == 2 and record.models[0] == record.models[1]
    iter1 = json.loads((out / "iter1" / "training.json").read_text())
    iter2 = json.loads((out / "iter2" / "training.json").read_text())
    assert iter1["method"] == "DPR-IBN" and iter1["config"]["hard_negatives"] == 0
    assert iter1["negatives"] is None
    assert iter2["method"] == "DPR-IHN" and iter2["config"]["hard_negatives"] == 1
    # iteration 2's negatives were mined by iteration 1's model, recorded with provenance
    from retrievers.dense.model import DualEncoder

    iter1_model = DualEncoder.from_pretrained(out / "iter1" / "model")
    mined = json.loads((out / "iter2" / "negatives" / "negatives.meta.json").read_text())
    assert mined["model_fingerprint"] == iter1_model.fingerprint()
    assert iter2["negatives"]["model_fingerprint"] == mined["model_fingerprint"]
    assert mined["k"] == 5 and mined["positives"] == "article" and mined["queries"] == 8
    assert iter2["examples_meta"]["counts"]["examples"] == 8
    assert (out / "examples" / "examples.jsonl").exists()

    # rerun: nothing to do
    again = Recorder()
    run_ihn(ihn_config(bench), out, model_factory=again.factory, on_stage=again)
    assert again.ran() == [] and again.skipped() == stage_names(2)
    # one more iteration: only its stages run, mined by iteration 2's model
    more = Recorder()
    manifest = run_ihn(ihn_config(bench, iterations=3), out, model_factory=more.factory,
                       on_stage=more)
    assert more.ran() == ["iter3.mine", "iter3.train"]
    mined3 = json.loads((out / "iter3" / "negatives" / "negatives.meta.json").read_text())
    assert mined3["model"].endswith("iter2/model")
    # other settings are refused, naming what differs
    with pytest.raises(ConfigError, match=r"other settings \(train differ\)"):
        run_ihn(ihn_config(bench, lr=5e-4), out, model_factory=more.factory)


def test_a_killed_stage_resumes_and_finished_ones_are_skipped(bench, tmp_path):
    out = tmp_path / "ihn"

    class Killed(Exception):
        pass

    def kill_at_second_training(stage: str, event: str) -> None:
        if (stage, event) == ("iter2.train", "run"):
            raise Killed

    first = Recorder()
    with pytest.raises(Killed):
        run_ihn(ihn_config(bench), out, model_factory=first.factory,
                on_stage=lambda s, e: (first(s, e), kill_at_second_training(s, e)))
    assert first.ran() == stage_names(2)
    manifest = json.loads((out / "manifest.json").read_text())
    assert list(manifest["stages"]) == ["examples", "iter1.train", "iter2.mine"]
    second = Recorder()
    run_ihn(ihn_config(bench), out, model_factory=second.factory, on_stage=second)
    assert second.skipped() == ["examples", "iter1.train", "iter2.mine"]
    assert second.ran() == ["iter2.train"]
    # a finished stage whose output was deleted is run again
    import shutil

    shutil.rmtree(out / "iter2")
    third = Recorder()
    run_ihn(ihn_config(bench), out, model_factory=third.factory, on_stage=third)
    assert third.ran() == ["iter2.mine", "iter2.train"]


def test_bad_ihn_settings(bench, tmp_path):
    with pytest.raises(ConfigError, match="need hard_negatives >= 1"):
        ihn_config(bench, hard_negatives=0)
    with pytest.raises(ConfigError, match="iterations must be an integer >= 1"):
        ihn_config(bench, iterations=0)
    with pytest.raises(ConvQAError, match="not a benchmark folder"):
        run_ihn(ihn_config(tmp_path), tmp_path / "out", model_factory=tiny_encoder)
    # answer positives with too large a batch: a one-line error before any training
    with pytest.raises(ConfigError, match="7 training examples are too few"):
        run_ihn(IHNConfig(benchmark=str(bench), iterations=1,
                          train=TrainConfig(batch_size=8, progress=False)),
                tmp_path / "out2", model_factory=tiny_encoder)


# -- the command line -----------------------------------------------------------------------


def test_cli_bad_input_is_one_line(bench, tmp_path, capsys):
    def error(*argv: str) -> str:
        assert main(list(argv)) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1
        return lines[0]

    out = str(tmp_path / "out")
    assert "not a benchmark folder" in error("train", "dpr", "--benchmark", str(tmp_path),
                                             "--out", out)
    assert "mining corpus not found" in error("train", "dpr", "--benchmark", str(bench),
                                              "--out", out, "--mining-corpus",
                                              str(tmp_path / "nope"))
    assert "need hard_negatives >= 1" in error("train", "dpr", "--benchmark", str(bench),
                                               "--out", out, "--hard-negatives", "0")
    assert "unknown history strategy 'newest'" in error(
        "train", "dpr", "--benchmark", str(bench), "--out", out, "--history", "newest",
        "--init-model", str(tmp_path / "no-model"), "--iterations", "1")
    with pytest.raises(SystemExit) as exit_info:  # argparse: usage + one error line
        main(["train", "dpr", "--benchmark", str(bench), "--out", out, "--iterations", "0"])
    assert exit_info.value.code == 2
    assert "expected an integer >= 1, got 0" in capsys.readouterr().err


def test_cli_mining_corpus(bench, tmp_path, capsys):
    assert main(["train", "mining-corpus", "--benchmark", str(bench), "--out",
                 str(tmp_path / "m"), "--sample", "1"]) == 0
    assert "13 passages" in capsys.readouterr().out
    assert main(["train", "mining-corpus", "--benchmark", str(bench), "--out",
                 str(tmp_path / "m"), "--sample", "1"]) == 2
    assert "already exists" in capsys.readouterr().err


def test_cli_runs_the_whole_loop_from_a_saved_initial_model(bench, tmp_path, capsys):
    init = tmp_path / "init"
    tiny_encoder(seed=0).save_pretrained(init)
    out = tmp_path / "out"
    argv = ["train", "dpr", "--benchmark", str(bench), "--out", str(out), "--init-model",
            str(init), "--iterations", "2", "--max-steps", "2", "--batch-size", "2",
            "--mine-top-k", "4", "--positives", "article", "--checkpoint-every", "1",
            "--quiet", "--bf16"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "iter2.mine: running" in printed and "iter2.train: steps 2" in printed
    assert (out / "iter2" / "model" / "convqa_dual_encoder.json").exists()
    assert main(argv) == 0
    assert "iter2.train: already finished, skipped" in capsys.readouterr().out
