"""Batches built ahead by DataLoader workers (convqa/training/loader.py): with 0 or 1 worker the
reader and the reranker see the same tensors in the same order as when each batch is built in
the training process, a run resumed with a worker ends where an uninterrupted run without one
ends, and `loader_workers` takes `auto` or a count, nothing else."""
from __future__ import annotations

import dataclasses
import json
import os

import pytest
import torch

from conftest import shared_file
from convqa.errors import ConfigError, DataError
from convqa.training.loader import (AUTO, TOKENIZERS_PARALLELISM, BatchStream, DirectStream,
                                    MicroBatches, loader_workers_setting, resolve_workers)
from convqa.training.schedule import plan_steps
from readers.extractive.build_examples import squad_examples
from readers.extractive.train import ReaderTrainConfig, ReaderTrainer, train_reader
from reader_helpers import single_thread  # noqa: F401 (autouse fixture: one thread)
from reader_helpers import tiny_reader
from reranker_helpers import tiny_cross_encoder, toy_examples
from retrievers.rerank.train import RerankTrainConfig, RerankTrainer
from training_helpers import Killed, kill_after


@pytest.fixture(scope="module")
def reader_examples():
    """12 real SQuAD questions, paragraphs under 700 characters, 2 negatives each."""
    built = squad_examples(shared_file("squad/dev-v2.0.json"), negatives=2, max_examples=80,
                           max_heldout=1)
    chosen = [e for e in built if e.split == "train"
              and len(e.positives[0].passage.text) < 700][:12]
    assert len(chosen) == 12
    return chosen


def reader_config(**overrides) -> ReaderTrainConfig:
    base = dict(batch_size=2, passages_per_question=3, epochs=2, grad_accum=2, lr=5e-3,
                warmup_ratio=0.0, progress=False, checkpoint_every=0, length_pool=2)
    return ReaderTrainConfig(**{**base, **overrides})


def micro_batches(trainer, start: int = 0) -> MicroBatches:
    """The run's micro-batches as the loop asks for them, from optimizer step `start`."""
    config = trainer.config
    per_epoch, total = plan_steps(trainer.num_examples(), config, 1)
    return MicroBatches(lambda epoch: trainer.epoch_batches(epoch, config.batch_size),
                        trainer.make_batch, start=start, total=total, per_epoch=per_epoch,
                        grad_accum=config.grad_accum, rank=0, size=config.batch_size)


def drain(stream, count: int) -> list:
    try:
        return [stream.next() for _ in range(count)]
    finally:
        stream.close()


def tensors_of(batch) -> list[torch.Tensor]:
    """Every tensor in a batch dataclass, in field order (dicts by key)."""
    found = []
    for value in (getattr(batch, f.name) for f in dataclasses.fields(batch)):
        if dataclasses.is_dataclass(value):
            found += tensors_of(value)
        elif isinstance(value, dict):
            found += [value[k] for k in sorted(value)]
        elif isinstance(value, torch.Tensor):
            found.append(value)
    return found


def assert_same_batches(one: list, other: list) -> None:
    assert len(one) == len(other)
    for a, b in zip(one, other):
        left, right = tensors_of(a), tensors_of(b)
        assert len(left) == len(right) > 0
        assert all(x.dtype == y.dtype and torch.equal(x, y) for x, y in zip(left, right))


def test_reader_batches_are_the_same_with_and_without_a_worker(reader_examples):
    trainer = ReaderTrainer(tiny_reader(), reader_examples, "unused", reader_config())
    dataset = micro_batches(trainer)
    count = len(dataset)
    assert count == 2 * 3 * 2  # 2 epochs x 3 steps x 2 micro-batches
    direct = drain(DirectStream(micro_batches(trainer)), count)
    assert_same_batches(direct, drain(BatchStream(micro_batches(trainer), 0, "cpu"), count))
    assert_same_batches(direct, drain(BatchStream(micro_batches(trainer), 1, "cpu"), count))
    # the order is the loop's: step s, micro-batch m is global batch s * 2 + m of its epoch
    expected = [trainer.make_batch(batch, epoch) for epoch in (0, 1)
                for batch in trainer.epoch_batches(epoch, 2)[:6]]
    assert_same_batches(direct, expected)
    firsts = {tuple(b.features.tensors["input_ids"][0].tolist()) for b in direct[:6]}
    assert len(firsts) == 6  # an epoch's batches are distinct, not one repeated
    # a run resumed at step 4 starts at the 9th micro-batch of the uninterrupted run
    assert_same_batches(direct[8:], drain(BatchStream(micro_batches(trainer, 4), 1, "cpu"), 4))


def test_reranker_batches_are_the_same_with_and_without_a_worker():
    examples = toy_examples(16, negatives=5)
    config = RerankTrainConfig(batch_size=4, negatives=3, epochs=2, progress=False,
                               checkpoint_every=0, length_pool=2)
    trainer = RerankTrainer(tiny_cross_encoder(), examples, "unused", config)
    count = len(micro_batches(trainer))
    assert count == 8
    direct = drain(DirectStream(micro_batches(trainer)), count)
    assert_same_batches(direct, drain(BatchStream(micro_batches(trainer), 1, "cpu"), count))
    assert_same_batches(direct, drain(BatchStream(micro_batches(trainer), 0, "cpu"), count))


def test_a_resumed_run_with_a_worker_ends_as_an_uninterrupted_run_without(reader_examples,
                                                                           tmp_path):
    """Dropout on, gradient accumulation, length buckets: a run without workers against one
    killed after step 3 (checkpoint at step 2) and resumed, both parts with a worker."""
    reference = tiny_reader(seed=1, dropout=0.1)
    train_reader(reference, reader_examples, tmp_path / "a",
                 reader_config(loader_workers=0, checkpoint_every=2))
    before = os.environ.get(TOKENIZERS_PARALLELISM)
    with pytest.raises(Killed):
        train_reader(tiny_reader(seed=1, dropout=0.1), reader_examples, tmp_path / "b",
                     reader_config(loader_workers=1, checkpoint_every=2),
                     on_step=kill_after(3))
    assert os.environ.get(TOKENIZERS_PARALLELISM) == before  # given back, even after a kill
    resumed = tiny_reader(seed=7, dropout=0.1)
    result = train_reader(resumed, reader_examples, tmp_path / "b",
                          reader_config(loader_workers=1, checkpoint_every=2))
    assert result.resumed_from == 2 and result.steps == 6
    expected, got = reference.state_dict(), resumed.state_dict()
    assert expected.keys() == got.keys()
    assert all(torch.equal(expected[k], got[k]) for k in expected)
    log = [json.loads(line) for line in (tmp_path / "b" / "log.jsonl").open()]
    assert [r["step"] for r in log] == [1, 2, 3, 4, 5, 6]
    assert all(0 <= r["batch_seconds"] <= r["seconds"] for r in log)
    record = json.loads((tmp_path / "b" / "training.json").read_text())
    assert record["config"]["loader_workers"] == 1
    assert "loader_workers" not in record["config"]["schedule"]  # any count resumes


def test_an_input_error_in_a_worker_is_one_clear_line():
    """A batch whose input is bad stops the run with the input error itself (file, line and
    field intact), not a worker's traceback; the batches before it arrive."""
    def build(indices, epoch):
        if 5 in indices:
            raise DataError("passage text is empty", "train.jsonl", 6, "negatives[0].text")
        return {"indices": torch.as_tensor(indices)}

    dataset = MicroBatches(lambda epoch: [[0, 1], [2, 3], [4, 5]], build, start=0, total=3,
                           per_epoch=3, grad_accum=1, rank=0, size=2)
    stream = BatchStream(dataset, 1, "cpu")
    try:
        assert stream.next()["indices"].tolist() == [0, 1]
        assert stream.next()["indices"].tolist() == [2, 3]
        with pytest.raises(DataError) as caught:
            stream.next()
    finally:
        stream.close()
    assert str(caught.value) == \
        "train.jsonl:6: field 'negatives[0].text': passage text is empty"


@pytest.mark.parametrize("value, expected", [("auto", AUTO), ("AUTO", AUTO), (0, 0), ("3", 3),
                                             (2, 2)])
def test_loader_workers_takes_auto_or_a_count(value, expected):
    assert loader_workers_setting(value) == expected
    assert ReaderTrainConfig(loader_workers=value).loader_workers == expected
    assert RerankTrainConfig(loader_workers=value).loader_workers == expected


@pytest.mark.parametrize("value", ["many", "-1", -1, 1.5, True, None, ""])
def test_loader_workers_refuses_anything_else(value):
    with pytest.raises(ConfigError, match="loader_workers must be 'auto' or an integer >= 0"):
        ReaderTrainConfig(loader_workers=value)
    with pytest.raises(ConfigError, match="loader_workers must be 'auto' or an integer >= 0"):
        RerankTrainConfig(loader_workers=value)


def test_auto_means_no_worker_on_a_cpu_and_a_few_with_a_gpu(monkeypatch):
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.setattr("convqa.training.loader.available_cpus", lambda: 16)
    assert resolve_workers(AUTO, "cpu") == 0
    assert resolve_workers(AUTO, torch.device("cuda", 0)) == 4
    assert resolve_workers(3, "cpu") == 3
    monkeypatch.setattr("convqa.training.loader.available_cpus", lambda: 2)
    assert resolve_workers(AUTO, "cuda") == 1
    monkeypatch.setattr("convqa.training.loader.available_cpus", lambda: 16)
    assert resolve_workers(AUTO, "cuda", local_processes=4) == 3  # 4 GPUs: 12 of 16 CPUs
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    assert resolve_workers(AUTO, "cuda") == 1


@pytest.mark.parametrize("job", ["reader", "reranker"])
def test_a_bad_loader_workers_flag_is_one_line(tmp_path, job, capsys):
    from convqa.front.cli.main import main

    with pytest.raises(SystemExit) as exited:
        main(["train", job, "--out", str(tmp_path / "out"), "--loader-workers", "lots"])
    assert exited.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(errors) == 1 and "--loader-workers" in errors[0] and "'lots'" in errors[0]
    with pytest.raises(SystemExit):
        main(["train", job, "--help"])
    assert "--loader-workers" in capsys.readouterr().out
