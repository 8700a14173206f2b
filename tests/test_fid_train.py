"""The FiD training loop on a tiny random T5: it learns to read passage 3, it resumes exactly,
it evaluates with the answer metrics, it refuses bad settings and pickled checkpoints."""
from __future__ import annotations

import json

import pytest
import torch

from convqa.errors import ConfigError, ConvQAError, DataError
from convqa.types import Passage
from fid_helpers import COLOURS, DISTRACTORS, QUESTION, colour_examples, tiny_reader
from readers.fid.data import FiDExample
from readers.fid.model import FiDReader
from readers.fid.train import FiDTrainConfig, FiDTrainer, evaluate_fid, train_fid
from reader_helpers import single_thread  # noqa: F401 (autouse fixture: one thread)
from training_helpers import Killed, kill_after


def weights(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def settings(**overrides) -> FiDTrainConfig:
    base = dict(batch_size=2, epochs=2, lr=1e-3, progress=False, checkpoint_every=2)
    return FiDTrainConfig(**{**base, **overrides})


def test_learns_answers_found_only_in_passage_3(tmp_path):
    """Same question, same passages 1 and 2 for every example: only passage 3 tells the colour,
    so reproducing all four answers means the decoder reads the third passage's encoding."""
    examples = colour_examples()
    reader = tiny_reader(seed=0)
    before = evaluate_fid(reader, examples)
    assert before["em"] < 50  # untrained: at most one colour can be right by chance
    result = train_fid(reader, examples, tmp_path, settings(
        batch_size=4, epochs=100, lr=1e-2, warmup_ratio=0.0, checkpoint_every=0))
    assert result.steps == 100
    scores = evaluate_fid(reader, examples)
    assert scores["predictions"] == {f"c{i}": c for i, c in enumerate(COLOURS)}
    assert scores["em"] == 100.0 and scores["f1"] == 100.0 and scores["count"] == 4
    # moving the colour passage to slot 1 still works: position is not what was learned
    moved = [FiDExample(e.id, e.question, e.history, e.answers, [e.passages[2], *DISTRACTORS])
             for e in examples]
    assert evaluate_fid(reader, moved)["em"] >= 75.0
    log = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == list(range(1, 101))
    assert log[-1]["loss"] < 0.1 * log[0]["loss"]
    record = json.loads((tmp_path / "training.json").read_text())
    assert record["steps"] == 100 and record["examples"] == 4
    assert record["fingerprint"] == reader.fingerprint()
    assert not (tmp_path / "checkpoint").exists()
    loaded = FiDReader.from_pretrained(tmp_path / "model")
    assert loaded.fingerprint() == reader.fingerprint()
    assert evaluate_fid(loaded, examples)["predictions"] == scores["predictions"]


def test_resume_after_a_kill_gives_the_same_weights(tmp_path):
    """Dropout on, two gold answers drawn per epoch, gradient accumulation: a run killed after
    step 3 (last checkpoint at step 2) and rerun must end bit-identical to an uninterrupted run."""
    examples = colour_examples()
    examples[1].answers = ["blue", "the blue one"]
    config = settings(epochs=3, batch_size=1, grad_accum=2, checkpoint_every=2)  # 6 steps
    reference = tiny_reader(seed=1, dropout=0.1)
    train_fid(reference, examples, tmp_path / "a", config)

    with pytest.raises(Killed):
        train_fid(tiny_reader(seed=1, dropout=0.1), examples, tmp_path / "b", config,
                  on_step=kill_after(3))
    state = json.loads((tmp_path / "b" / "checkpoint" / "state.json").read_text())
    assert state["step"] == 2
    resumed = tiny_reader(seed=99, dropout=0.1)  # other init: the checkpoint overwrites it
    result = train_fid(resumed, examples, tmp_path / "b", config)
    assert result.resumed_from == 2 and result.steps == 6
    expected, got = weights(reference), weights(resumed)
    assert expected.keys() == got.keys()
    assert all(torch.equal(expected[k], got[k]) for k in expected)
    assert any(not torch.equal(got[k], v) for k, v in weights(tiny_reader(seed=1)).items())
    log = [json.loads(line)["step"] for line in (tmp_path / "b" / "log.jsonl").open()]
    assert log == [1, 2, 3, 4, 5, 6]  # step 3 of the killed run was dropped and redone
    # a finished run is returned as is; other settings in the same folder are refused
    again = train_fid(tiny_reader(), examples, tmp_path / "b", config)
    assert again.steps == 6 and again.seconds == result.info["seconds"]
    with pytest.raises(ConfigError, match="different settings"):
        train_fid(tiny_reader(), examples, tmp_path / "b", settings(epochs=3, lr=5e-4))
    with pytest.raises(ConfigError, match="different settings"):  # reader settings count too
        train_fid(tiny_reader(n_passages=2), examples, tmp_path / "b", config)


def test_lora_training_resumes_from_adapter_checkpoints(tmp_path):
    from fid_helpers import save_checkpoint

    base = save_checkpoint(tmp_path / "t5")
    examples = colour_examples()
    config = settings(epochs=2, checkpoint_every=1)

    def lora_reader():
        reader = FiDReader.from_pretrained(base, n_passages=3, passage_max_length=32)
        torch.manual_seed(0)  # the same LoRA init for every run
        return reader.add_lora(r=2, dropout=0.0)

    reference = lora_reader()
    train_fid(reference, examples, tmp_path / "a", config)

    def stop(step: int, loss: float) -> None:
        if step == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_fid(lora_reader(), examples, tmp_path / "b", config, on_step=stop)
    assert (tmp_path / "b" / "checkpoint" / "model" / "adapter_model.safetensors").exists()
    resumed = lora_reader()
    assert train_fid(resumed, examples, tmp_path / "b", config).resumed_from == 2
    assert resumed.fingerprint() == reference.fingerprint()
    assert reference.fingerprint() != lora_reader().fingerprint()  # LoRA weights did train
    assert FiDReader.from_pretrained(tmp_path / "b" / "model").fingerprint() == \
        reference.fingerprint()


def test_checkpoint_files_are_loaded_without_pickled_code(tmp_path):
    examples = colour_examples()

    def stop(step: int, loss: float) -> None:
        if step == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_fid(tiny_reader(), examples, tmp_path, settings(), on_step=stop)
    torch.save({"state": {}, "param_groups": [], "evil": _Evil()},
               tmp_path / "checkpoint" / "optimizer.pt")
    with pytest.raises(DataError, match=r"optimizer.pt: cannot read checkpoint file"):
        train_fid(tiny_reader(), examples, tmp_path, settings())


class _Evil:
    def __reduce__(self):
        return (print, ("unpickled!",))


def test_bf16_autocast_runs(tmp_path):
    result = train_fid(tiny_reader(), colour_examples(), tmp_path, settings(bf16=True,
                                                                            max_steps=2))
    assert result.steps == 2 and 0 < result.last_loss < 20


def test_bad_settings_and_examples(tmp_path):
    for bad, message in [({"batch_size": 0}, "batch_size must be an integer >= 1"),
                         ({"lr": -1.0}, "lr must be a positive number"),
                         ({"warmup_ratio": 1.5}, r"warmup_ratio must be in \[0, 1\)"),
                         ({"max_steps": 0}, "max_steps must be an integer >= 1"),
                         ({"weight_decay": -0.1}, "weight_decay must be >= 0")]:
        with pytest.raises(ConfigError, match=message):
            settings(**bad)
    with pytest.raises(ConfigError, match="4 training examples are too few"):
        train_fid(tiny_reader(), colour_examples(), tmp_path, settings(batch_size=5))
    with pytest.raises(ConvQAError, match="no training examples"):
        train_fid(tiny_reader(), [], tmp_path, settings())
    unanswered = FiDExample("u1", QUESTION, [], [], [DISTRACTORS[0]])
    with pytest.raises(DataError, match="example u1.*no gold answer to train on"):
        FiDTrainer(tiny_reader(), [unanswered], tmp_path, settings())
    with pytest.raises(ConvQAError, match="no examples to evaluate"):
        evaluate_fid(tiny_reader(), [])


def test_evaluation_uses_the_answer_metrics():
    """An untrained model's predictions, scored by hand against SQuAD EM/F1."""
    reader = tiny_reader(seed=7)
    examples = [FiDExample("e1", QUESTION, [], ["red"], [Passage("p", "the box is red")]),
                FiDExample("e2", QUESTION, [], ["x"], [Passage("p", "the box is blue")])]
    predictions = reader.generate([QUESTION, QUESTION], [e.passages for e in examples])
    examples[0].answers = [predictions[0]]              # exact: EM 1, F1 1
    examples[1].answers = [predictions[1] + " zebra"]   # one extra gold token
    scores = evaluate_fid(reader, examples, batch_size=1, convention="squad")
    n = len(predictions[1].split())  # tokens of prediction 2 (all in its gold)
    f1 = 2 * 1.0 * (n / (n + 1)) / (1.0 + n / (n + 1))
    assert scores["predictions"] == {"e1": predictions[0], "e2": predictions[1]}
    assert scores["em"] == pytest.approx(50.0)
    assert scores["f1"] == pytest.approx(100 * (1 + f1) / 2)
