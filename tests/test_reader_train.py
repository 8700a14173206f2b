"""Reader training on a tiny random BERT and real SQuAD examples: batches, learning until the
answers come out, exact resume after a kill, LoRA and bf16 runs, refusals."""
from __future__ import annotations

import json

import pytest
import torch

from convqa.errors import ConfigError
from convqa.types import Passage
from readers.extractive.data import GoldSpan, ReaderExample, ReaderPassage
from readers.extractive.heldout import evaluate_reader
from readers.extractive.inputs import token_span_to_chars
from readers.extractive.model import ExtractiveReader
from readers.extractive.train import (ReaderTrainConfig, ReaderTrainer, make_reader_batch,
                                      train_reader)
from reader_helpers import squad_train_examples, tiny_reader
from reader_helpers import single_thread  # noqa: F401 (autouse fixture: one thread)
from training_helpers import Killed, kill_after


@pytest.fixture(scope="module")
def examples():
    """8 real SQuAD questions with one gold span each, paragraphs under 700 characters."""
    return squad_train_examples(8)


def config(**overrides) -> ReaderTrainConfig:
    base = dict(batch_size=4, passages_per_question=2, epochs=2, lr=5e-3, warmup_ratio=0.0,
                progress=False, checkpoint_every=0)
    return ReaderTrainConfig(**{**base, **overrides})


def weights(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_batch_layout_and_gold_positions(examples):
    reader = tiny_reader(max_length=128)
    long_text = "Filler sentence number one. " * 30 + "The answer is Zanzibar."
    long = ReaderExample("long", "where?", [], [ReaderPassage(
        Passage("L", long_text, "Long"), [GoldSpan("Zanzibar", long_text.index("Zanzibar"))])])
    items = list(examples[:2]) + [long]  # `long` has no negatives: padded and masked
    batch = make_reader_batch(items, [0, 1, 2], lambda i: items[i].question, reader, 3, 0, 0)
    length = batch.features.length
    assert batch.gold_starts.shape == (3, 3, length) and batch.passage_mask.shape == (3, 3)
    assert batch.passage_mask.tolist() == [[True, True, True], [True, True, True],
                                           [True, False, False]]
    assert (batch.padded, batch.no_span) == (2, 0)
    assert not batch.gold_starts[:, 1:].any()  # gold only in the positive (slot 0)
    for q, example in enumerate(items):
        w = q * 3
        first = int(batch.gold_starts[q, 0].nonzero()[0])
        last = int(batch.gold_ends[q, 0].nonzero()[0])
        start, end = token_span_to_chars(batch.features, w, first, last)
        assert example.positives[0].passage.text[start:end] == example.positives[0].spans[0].text
    # the answer of the long passage is in a later window: that window was chosen
    assert int(batch.features.offsets[6][batch.features.context[6]][0, 0]) > 0
    # a long negative is read in a seeded random window (not always its first)
    hard = ReaderExample("hard", "where?", [], items[0].positives,
                         [Passage("N", long_text, "Long")])
    starts = set()
    for epoch in range(6):
        batch = make_reader_batch([hard], [0], lambda i: "where?", reader, 2, 0, epoch)
        starts.add(int(batch.features.offsets[1][batch.features.context[1]][0, 0]))
    assert len(starts) > 1 and 0 in starts


def test_training_extracts_the_answers(examples, tmp_path):
    reader = tiny_reader(seed=0, max_length=128)
    before = evaluate_reader(reader, examples)
    result = train_reader(reader, examples, tmp_path, config(epochs=40))
    assert result.steps == 80
    log = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == list(range(1, 81))
    assert sum(r["loss"] for r in log[-4:]) < 0.05 * sum(r["loss"] for r in log[:4])
    after = evaluate_reader(reader, examples)
    assert before["em"] < 50 and after["em"] == 100.0
    for example in examples:
        assert after["predictions"][example.id] == example.answers[0]
    mixed = evaluate_reader(reader, examples, with_negatives=True)
    assert mixed["passage_accuracy"] >= 75.0
    # the saved model is the trained one and remembers its history strategy
    loaded = ExtractiveReader.from_pretrained(tmp_path / "model")
    assert loaded.fingerprint() == reader.fingerprint()
    assert loaded.config.history["name"] == "current_first"
    record = json.loads((tmp_path / "training.json").read_text())
    assert record["steps"] == 80 and record["examples"] == 8
    assert not (tmp_path / "checkpoint").exists()


def test_resume_after_a_kill_gives_the_same_weights(examples, tmp_path):
    """Dropout on, gradient accumulation: killed after step 3 (checkpoint at step 2), rerun,
    the weights are bit-identical to an uninterrupted run's."""
    settings = config(epochs=3, batch_size=2, grad_accum=2, checkpoint_every=2)  # 6 steps
    reference = tiny_reader(seed=1, dropout=0.1)
    train_reader(reference, examples, tmp_path / "a", settings)

    with pytest.raises(Killed):
        train_reader(tiny_reader(seed=1, dropout=0.1), examples, tmp_path / "b", settings,
                     on_step=kill_after(3))
    state = json.loads((tmp_path / "b" / "checkpoint" / "state.json").read_text())
    assert state["step"] == 2
    resumed = tiny_reader(seed=7, dropout=0.1)  # another init: the checkpoint overwrites it
    result = train_reader(resumed, examples, tmp_path / "b", settings)
    assert result.resumed_from == 2 and result.steps == 6
    expected, got = weights(reference), weights(resumed)
    assert expected.keys() == got.keys()
    assert all(torch.equal(expected[k], got[k]) for k in expected)
    steps = [json.loads(line)["step"] for line in (tmp_path / "b" / "log.jsonl").open()]
    assert steps == [1, 2, 3, 4, 5, 6]
    # finished runs are returned as they are; other settings or data are refused
    again = train_reader(tiny_reader(), examples, tmp_path / "b", settings)
    assert again.steps == 6 and again.seconds == result.info["seconds"]
    with pytest.raises(ConfigError, match="different settings or data"):
        train_reader(tiny_reader(), examples, tmp_path / "b", config(epochs=3, lr=1e-3))
    with pytest.raises(ConfigError, match="different settings or data"):
        train_reader(tiny_reader(), examples[:6], tmp_path / "b", settings)


def test_start_step_continues_a_lost_runs_order_and_schedule(examples, tmp_path):
    """A run's checkpoint is gone but the weights it had at step 2 survive (a promoted reader):
    `start_step=2` from those weights sees the same batches with the same learning rates as the
    uninterrupted run, so its first step has the same loss to the last digit (the optimizer
    state is new, so later steps may differ)."""
    from readers.extractive.model import ExtractiveReader

    settings = dict(epochs=3, batch_size=2, checkpoint_every=2)  # 12 steps
    train_reader(tiny_reader(seed=1), examples, tmp_path / "a", config(**settings))
    with pytest.raises(Killed):
        train_reader(tiny_reader(seed=1), examples, tmp_path / "b", config(**settings),
                     on_step=kill_after(2))
    at_two = ExtractiveReader.from_pretrained(tmp_path / "b" / "checkpoint" / "model")
    result = train_reader(at_two, examples, tmp_path / "c",
                          config(**settings, start_step=2, eval_every=100),
                          heldout=examples[:2])
    assert result.resumed_from == 2 and result.steps == 12

    def log(run):
        return [json.loads(line) for line in (tmp_path / run / "log.jsonl").open()]

    curve = [r["step"] for r in log("c") if "heldout" in r]
    assert curve == [2, 12]  # the curve starts at the step continued from
    uninterrupted, continued = log("a")[2:], [r for r in log("c") if "loss" in r]
    assert [r["step"] for r in continued] == list(range(3, 13))
    assert [r["lr"] for r in continued] == [r["lr"] for r in uninterrupted]
    assert continued[0]["loss"] == uninterrupted[0]["loss"]
    # a checkpoint of the continued run resumes it; a start past the end is refused
    with pytest.raises(ConfigError, match="start_step 12 is not before the last step"):
        train_reader(tiny_reader(), examples, tmp_path / "d", config(**settings,
                                                                      start_step=12))


def test_auto_precision_probe_changes_nothing_and_resume_may_switch(examples, tmp_path,
                                                                    monkeypatch):
    """`auto` times the first batch in fp32 and bf16 (timings injected): picking fp32, the
    weights equal a forced-fp32 run's bit for bit (the probe neither updates nor consumes the
    dropout RNG); picking bf16 is recorded. A checkpoint written in fp32 resumes in bf16."""
    from convqa import precision as P

    settings = config(epochs=1, batch_size=2, checkpoint_every=2, max_steps=4)
    forced = tiny_reader(seed=1, dropout=0.1)
    train_reader(forced, examples, tmp_path / "fp32", settings)
    monkeypatch.setattr(P, "time_run", lambda name, run: ({"fp32": 1.0, "bf16": 6.0}[name],
                                                          run()))
    auto = tiny_reader(seed=1, dropout=0.1)
    result = train_reader(auto, examples, tmp_path / "auto", config(
        epochs=1, batch_size=2, checkpoint_every=2, max_steps=4, precision="auto"))
    assert result.info["precision"]["precision"] == "fp32"
    assert set(result.info["precision"]["probe_seconds"]) == {"fp32", "bf16"}
    expected, got = weights(forced), weights(auto)
    assert all(torch.equal(expected[k], got[k]) for k in expected)

    monkeypatch.setattr(P, "time_run", lambda name, run: ({"fp32": 1.0, "bf16": 0.5}[name],
                                                          run()))
    with pytest.raises(Killed):
        train_reader(tiny_reader(seed=1), examples, tmp_path / "switch", settings,
                     on_step=kill_after(3))
    resumed = train_reader(tiny_reader(seed=1), examples, tmp_path / "switch", config(
        epochs=1, batch_size=2, checkpoint_every=2, max_steps=4, precision="auto"))
    assert resumed.resumed_from == 2 and resumed.steps == 4
    assert resumed.info["precision"]["precision"] == "bf16"
    with pytest.raises(ConfigError, match="int8 is for inference only"):
        config(precision="int8")


def test_a_resumed_run_on_the_same_machine_reuses_its_precision_choice(examples, tmp_path,
                                                                        monkeypatch):
    """`auto`'s probe outcome is kept in the run folder: a resume on the same machine takes
    it without probing (a slow candidate's probe costs minutes), a resume on another machine
    (CPU, torch or thread count) probes again."""
    from convqa import precision as P

    probes = []

    def timings(table):
        def timer(name, run):
            probes.append(name)
            return table[name], run()
        return timer

    auto = config(epochs=1, batch_size=2, checkpoint_every=1, max_steps=4, precision="auto")
    monkeypatch.setattr(P, "time_run", timings({"fp32": 1.0, "bf16": 6.0}))
    with pytest.raises(Killed):
        train_reader(tiny_reader(seed=1), examples, tmp_path / "run", auto,
                     on_step=kill_after(2))
    assert probes == ["fp32", "bf16"]
    kept = json.loads((tmp_path / "run" / P.TRAINING_CHOICES).read_text())
    assert [entry["precision"] for entry in kept.values()] == ["fp32"]

    monkeypatch.setattr(P, "time_run", timings({"fp32": 1.0, "bf16": 0.5}))
    with pytest.raises(Killed):
        train_reader(tiny_reader(seed=1), examples, tmp_path / "run", auto,
                     on_step=kill_after(3))
    assert probes == ["fp32", "bf16"]  # same machine: no probe, the kept choice

    monkeypatch.setattr(P, "machine_key", lambda: "another CPU|torch x|2 threads")
    resumed = train_reader(tiny_reader(seed=1), examples, tmp_path / "run", auto)
    assert resumed.resumed_from == 3 and resumed.steps == 4
    assert probes == ["fp32", "bf16", "fp32", "bf16"]
    assert resumed.info["precision"]["precision"] == "bf16"


def test_lora_and_bf16_runs(examples, tmp_path):
    from reader_helpers import save_tiny_encoder
    from reader_helpers import reader_config

    encoder = save_tiny_encoder(tmp_path / "enc")
    reader = ExtractiveReader.build(reader_config(model=str(encoder))).add_lora(r=4, alpha=8)
    heads_before = reader.span_head.weight.detach().clone()
    frozen = {n: p.detach().clone() for n, p in reader.named_parameters() if not p.requires_grad}
    result = train_reader(reader, examples, tmp_path / "out", config(max_steps=2, bf16=True))
    assert result.steps == 2 and 0 < result.last_loss < 50
    assert not torch.equal(reader.span_head.weight, heads_before)   # heads trained
    assert all(torch.equal(p, frozen[n]) for n, p in reader.named_parameters() if n in frozen)
    files = {p.name for p in (tmp_path / "out" / "model").iterdir()}
    assert "adapter_model.safetensors" in files and "model.safetensors" not in files
    loaded = ExtractiveReader.from_pretrained(tmp_path / "out" / "model")
    assert loaded.fingerprint() == reader.fingerprint()


def test_bad_settings(examples, tmp_path):
    for bad, message in [({"batch_size": 0}, "batch_size must be an integer >= 1"),
                         ({"passages_per_question": 0}, "passages_per_question must be"),
                         ({"lr": 0.0}, "lr must be a positive number"),
                         ({"warmup_ratio": 1.0}, r"warmup_ratio must be in \[0, 1\)"),
                         ({"max_steps": 0}, "max_steps must be an integer >= 1")]:
        with pytest.raises(ConfigError, match=message):
            config(**bad)
    with pytest.raises(ConfigError, match="8 training examples are too few"):
        train_reader(tiny_reader(), examples, tmp_path, config(batch_size=9))
    with pytest.raises(ConfigError, match="unknown history strategy 'newest'"):
        ReaderTrainer(tiny_reader(), examples, tmp_path, config(history="newest"))
