"""The training loop on a tiny random BERT: it learns, it resumes exactly, it refuses bad input."""
from __future__ import annotations

import json

import pytest
import torch

from convqa.corpus import PassageStore
from convqa.errors import ConfigError, DataError
from retrievers.training.data import PassageLookup, build_examples
from convqa.training.schedule import linear_schedule, plan_steps
from retrievers.training.trainer import TrainConfig, Trainer, train_dual_encoder
from training_helpers import Killed, kill_after, make_benchmark, tiny_encoder


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    bench = make_benchmark(tmp_path_factory.mktemp("bench"))
    examples = build_examples(bench, positives="article")  # 8 examples
    lookup = PassageLookup([PassageStore.open(bench / "passages")])
    negatives = {e.qid: ["G#0", "H#0", "I#0", "J#0", "A#1"] for e in examples.examples}
    return examples, lookup, negatives


def weights(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def config(**overrides) -> TrainConfig:
    base = dict(batch_size=2, epochs=2, lr=1e-3, hard_negatives=1, progress=False,
                checkpoint_every=2)
    return TrainConfig(**{**base, **overrides})


def test_schedule_and_plan():
    factor = linear_schedule(warmup=2, total=6)
    assert [round(factor(s), 4) for s in range(7)] == [0.3333, 0.6667, 1.0, 0.75, 0.5, 0.25, 0.0]
    assert plan_steps(8, config(), processes=1) == (4, 8)
    assert plan_steps(8, config(grad_accum=2), processes=1) == (2, 4)
    assert plan_steps(9, config(max_steps=3), processes=2) == (2, 3)
    with pytest.raises(ConfigError, match="8 training examples are too few"):
        plan_steps(8, config(batch_size=5), processes=2)


def test_training_lowers_the_loss_and_writes_model_and_log(setup, tmp_path):
    examples, lookup, negatives = setup
    model = tiny_encoder(dropout=0.0)
    before = weights(model)
    result = train_dual_encoder(model, examples, lookup, tmp_path,
                                config(epochs=6, warmup_ratio=0.0, lr=3e-3, checkpoint_every=0),
                                negatives)
    assert result.steps == 24 and (tmp_path / "model" / "convqa_dual_encoder.json").exists()
    log = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == list(range(1, 25))
    first, last = log[:4], log[-4:]
    assert sum(r["loss"] for r in last) < 0.5 * sum(r["loss"] for r in first)
    assert any(not torch.equal(before[k], v) for k, v in weights(model).items())
    record = json.loads((tmp_path / "training.json").read_text())
    assert record["steps"] == 24 and record["scale"] == 20.0 and record["examples"] == 8
    assert not (tmp_path / "checkpoint").exists()  # removed after a finished run
    # the saved model is the trained one
    loaded = type(model).from_pretrained(tmp_path / "model")
    assert loaded.fingerprint() == model.fingerprint()


def test_resume_after_a_kill_gives_the_same_weights(setup, tmp_path):
    """Dropout on, hard negatives, gradient accumulation: a run killed after step 3 (last
    checkpoint at step 2) and rerun must end bit-identical to an uninterrupted run."""
    examples, lookup, negatives = setup
    settings = config(epochs=3, grad_accum=2, checkpoint_every=2)  # 2 steps/epoch, 6 steps
    reference = tiny_encoder(seed=1)
    train_dual_encoder(reference, examples, lookup, tmp_path / "a", settings, negatives)

    with pytest.raises(Killed):
        train_dual_encoder(tiny_encoder(seed=1), examples, lookup, tmp_path / "b", settings,
                           negatives, on_step=kill_after(3))
    state = json.loads((tmp_path / "b" / "checkpoint" / "state.json").read_text())
    assert state["step"] == 2
    resumed_model = tiny_encoder(seed=99)  # different init: the checkpoint must overwrite it
    result = train_dual_encoder(resumed_model, examples, lookup, tmp_path / "b", settings,
                                negatives)
    assert result.resumed_from == 2 and result.steps == 6
    expected = weights(reference)
    got = weights(resumed_model)
    assert expected.keys() == got.keys()
    assert all(torch.equal(expected[k], got[k]) for k in expected)
    log = [json.loads(line)["step"] for line in (tmp_path / "b" / "log.jsonl").open()]
    assert log == [1, 2, 3, 4, 5, 6]  # step 3 of the killed run was dropped and redone
    # a finished run is returned as is; other settings in the same folder are refused
    again = train_dual_encoder(tiny_encoder(), examples, lookup, tmp_path / "b", settings,
                               negatives)
    assert again.steps == 6 and again.seconds == result.info["seconds"]
    with pytest.raises(ConfigError, match="different settings"):
        train_dual_encoder(tiny_encoder(), examples, lookup, tmp_path / "b",
                           config(epochs=3, lr=5e-4), negatives)


def test_checkpoint_files_are_loaded_without_pickled_code(setup, tmp_path):
    examples, lookup, negatives = setup

    def stop(step: int, loss: float) -> None:
        if step == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_dual_encoder(tiny_encoder(), examples, lookup, tmp_path, config(), negatives,
                           on_step=stop)
    # a checkpoint file holding an arbitrary Python object is refused, not unpickled
    torch.save({"state": {}, "param_groups": [], "evil": _Evil()},
               tmp_path / "checkpoint" / "optimizer.pt")
    with pytest.raises(DataError, match=r"optimizer.pt: cannot read checkpoint file"):
        train_dual_encoder(tiny_encoder(), examples, lookup, tmp_path, config(), negatives)


class _Evil:
    def __reduce__(self):
        return (print, ("unpickled!",))


def test_bf16_autocast_runs(setup, tmp_path):
    examples, lookup, negatives = setup
    result = train_dual_encoder(tiny_encoder(), examples, lookup, tmp_path,
                                config(bf16=True, max_steps=2), negatives)
    assert result.steps == 2 and result.last_loss == pytest.approx(result.last_loss)
    assert 0 < result.last_loss < 10


def test_bad_settings(setup, tmp_path):
    examples, lookup, _ = setup
    with pytest.raises(ConfigError, match="needs mined negatives"):
        Trainer(tiny_encoder(), examples, lookup, tmp_path, config(), None)
    for bad, message in [({"batch_size": 0}, "batch_size must be an integer >= 1"),
                         ({"lr": -1.0}, "lr must be a positive number"),
                         ({"warmup_ratio": 1.5}, r"warmup_ratio must be in \[0, 1\)"),
                         ({"max_steps": 0}, "max_steps must be an integer >= 1"),
                         ({"positive_choice": "best"}, "positive_choice must be one of")]:
        with pytest.raises(ConfigError, match=message):
            config(**bad)
