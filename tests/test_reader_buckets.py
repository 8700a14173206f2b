"""Cheap reader training windows and the held-out curve: length-bucketed batches (seeded, the
same after a resume), batches padded to their longest window, held-out scores every N steps
in log.jsonl, and an exact resume after a kill with the curve intact. Real SQuAD and TopiOCQA
text, a tiny random BERT."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from conftest import shared_file
from convqa.training.schedule import bucketed_batches, global_batches
from readers.extractive.build_examples import squad_examples
from readers.extractive.heldout import (heldout_sample, read_answers, score_answers,
                                        scores_by_source)
from readers.extractive.model import ExtractiveReader
from readers.extractive.train import ReaderTrainConfig, ReaderTrainer, train_reader
from reader_helpers import tiny_reader
from reader_helpers import single_thread  # noqa: F401 (autouse fixture: one thread)
from training_helpers import Killed, kill_after


@pytest.fixture(scope="module")
def built():
    """Real SQuAD v2.0 questions: 40 training ones, held-out ones of other articles."""
    examples = squad_examples(shared_file("squad/dev-v2.0.json"), negatives=2,
                              max_examples=40, max_heldout=12, seed=0)
    train = [e for e in examples if e.split == "train"]
    heldout = [e for e in examples if e.split == "heldout"]
    assert len(train) == 40 and len(heldout) == 12
    return train, heldout


def test_bucketed_batches_cover_the_epoch_and_group_similar_lengths():
    rng = np.random.default_rng(0)
    lengths = rng.integers(50, 1500, size=203).tolist()
    batches = bucketed_batches(lengths, 8, seed=3, epoch=1, pool=5)
    plain = global_batches(203, 8, seed=3, epoch=1)
    # the same examples as the unbucketed epoch (its ragged tail dropped), each once
    assert len(batches) == len(plain) == 25
    assert sorted(np.concatenate(batches).tolist()) == sorted(np.concatenate(plain).tolist())
    # seeded: the same again, another epoch differs
    again = bucketed_batches(lengths, 8, seed=3, epoch=1, pool=5)
    assert all((a == b).all() for a, b in zip(batches, again))
    other = bucketed_batches(lengths, 8, seed=3, epoch=2, pool=5)
    assert any((a != b).any() for a, b in zip(batches, other))

    def spread(groups):
        values = np.asarray(lengths)
        return float(np.mean([values[g].max() - values[g].min() for g in groups]))

    assert spread(batches) < 0.5 * spread(plain)


def test_batches_are_padded_to_their_longest_window(built):
    train, _ = built
    # a mix of real paragraphs: the longer ones fill 128-token windows, the short ones do not
    short = [e for e in squad_examples(shared_file("squad/dev-v2.0.json"), negatives=0,
                                       max_examples=600, max_heldout=1)
             if e.split == "train" and len(e.positives[0].passage.text) < 350][:8]
    assert len(short) == 8
    for example in short:
        example.negatives = [o.positives[0].passage for o in short if o is not example][:2]
    train = list(train[:8]) + short
    reader = tiny_reader(max_length=128)
    config = ReaderTrainConfig(batch_size=4, passages_per_question=3, progress=False,
                               checkpoint_every=0, length_pool=4)
    trainer = ReaderTrainer(reader, train, "unused", config)
    lengths = []
    for indices in trainer.epoch_batches(0, 4):
        batch = trainer.make_batch(indices, 0)
        used = batch.features.tensors["attention_mask"].sum(1)
        assert batch.features.length == int(used.max())  # no column of padding only
        assert batch.features.tensors["input_ids"].shape[0] == 12  # 4 questions x 3 windows
        lengths.append(batch.features.length)
    assert min(lengths) < 128  # short batches are not padded up to the window size


def test_heldout_sample_is_fixed_and_per_source(built):
    _, heldout = built
    first = heldout_sample(heldout, 5, seed=0)
    assert [e.id for e in first] == [e.id for e in heldout_sample(list(reversed(heldout)), 5)]
    assert len(first) == 5 and {e.source for e in first} == {"squad:dev-v2.0"}
    assert [e.id for e in heldout_sample(heldout, 8)][:5] == [e.id for e in first]
    scores = scores_by_source(tiny_reader(max_length=128), first)
    assert set(scores["sources"]) == {"squad:dev-v2.0"}
    assert scores["count"] == 5 and 0.0 <= scores["f1"] <= 100.0



def test_heldout_scores_from_shares_equal_one_reader(built):
    """What several training processes do (each reads every N-th question, the main one scores
    the gathered answers) gives exactly the single-process scores."""
    _, heldout = built
    sample = heldout_sample(heldout, 9, seed=0)
    reader = tiny_reader(max_length=128)
    whole = scores_by_source(reader, sample)
    shares = [read_answers(reader, sample[rank::2]) for rank in (0, 1)]
    assert set(shares[0]).isdisjoint(shares[1])
    merged = score_answers(sample, {**shares[0], **shares[1]})
    assert "seconds" not in merged
    assert merged == {k: v for k, v in whole.items() if k != "seconds"}
    with pytest.raises(ValueError, match="no answer for 4 held-out questions"):
        score_answers(sample, shares[0])

def _log(folder):
    return [json.loads(line) for line in (folder / "log.jsonl").read_text().splitlines()]


def test_curve_in_the_log_and_exact_resume_after_a_kill(built, tmp_path):
    train, heldout = built
    config = ReaderTrainConfig(batch_size=4, passages_per_question=3, epochs=1, max_steps=6,
                               lr=5e-3, warmup_ratio=0.0, progress=False, checkpoint_every=2,
                               eval_every=2, eval_per_source=6)
    whole = train_reader(tiny_reader(max_length=128), train, tmp_path / "whole", config,
                         heldout=heldout)
    log = _log(tmp_path / "whole")
    curve = [r for r in log if "heldout" in r]
    assert [r["step"] for r in curve] == [0, 2, 4, 6]
    assert all(r["heldout"]["count"] == 6 for r in curve)
    assert len({r["heldout"]["sample"] for r in curve}) == 1
    assert [r["step"] for r in log if "loss" in r] == [1, 2, 3, 4, 5, 6]

    with pytest.raises(Killed):
        train_reader(tiny_reader(max_length=128), train, tmp_path / "killed", config,
                     on_step=kill_after(5), heldout=heldout)
    resumed = train_reader(tiny_reader(max_length=128), train, tmp_path / "killed", config,
                           heldout=heldout)
    assert resumed.resumed_from == 4
    left = ExtractiveReader.from_pretrained(whole.model_dir).state_dict()
    right = ExtractiveReader.from_pretrained(resumed.model_dir).state_dict()
    assert left.keys() == right.keys()
    assert all(torch.equal(left[k], right[k]) for k in left)
    again = [r for r in _log(tmp_path / "killed") if "heldout" in r]
    assert [r["step"] for r in again] == [0, 2, 4, 6]  # step 4 kept once, 6 redone
    assert [r["heldout"]["f1"] for r in again] == [r["heldout"]["f1"] for r in curve]


def test_evaluation_settings_do_not_block_a_resume():
    a = ReaderTrainConfig(eval_every=100, eval_per_source=50)
    b = ReaderTrainConfig(eval_every=0, eval_per_source=10)
    assert a.schedule_key() == b.schedule_key()
    assert ReaderTrainConfig(length_pool=0).schedule_key() != a.schedule_key()


def test_chunked_forward_matches_one_pass(built):
    """Windows read a few at a time, each chunk cut to its longest, give the logits and the
    gradients of one padded pass."""
    from readers.extractive.train import chunked_logits

    train, _ = built
    reader = tiny_reader(max_length=128)
    trainer = ReaderTrainer(reader, train, "unused", ReaderTrainConfig(
        batch_size=6, passages_per_question=3, progress=False, checkpoint_every=0,
        length_pool=0))
    batch = trainer.make_batch(list(range(6)), 0)
    inputs = batch.features.tensors
    lengths = inputs["attention_mask"].sum(1)
    assert int(lengths.min()) < int(lengths.max())  # a real mix of window lengths
    results = []
    for chunk in (0, 4):
        reader.zero_grad()
        logits = chunked_logits(reader, inputs, chunk)
        mask = batch.features.context
        loss = (logits.start[mask].sum() + logits.end[mask].pow(2).sum()
                + logits.selection.sum())
        loss.backward()
        results.append((logits, {k: p.grad.clone() for k, p in reader.named_parameters()}))
    (one, one_grads), (chunked, chunked_grads) = results
    mask = batch.features.context
    assert torch.allclose(one.start[mask], chunked.start[mask], atol=1e-5)
    assert torch.allclose(one.end[mask], chunked.end[mask], atol=1e-5)
    assert torch.allclose(one.selection, chunked.selection, atol=1e-5)
    assert all(torch.allclose(one_grads[k], chunked_grads[k], atol=1e-4) for k in one_grads)
