"""ConvDR training: KD on real CANARD turns brings student(conversation) toward
teacher(rewrite); Rank on a tiny index lowers the ranking loss; multitask masks each term;
a run interrupted after a checkpoint resumes to exactly the same weights."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from convqa.errors import ConfigError, ConvQAError
from convqa.history import build_history_strategy
from retrievers.convdr.data import canard_examples
from retrievers.convdr.fidelity import fidelity
from retrievers.convdr.loss import rank_loss
from retrievers.convdr.mining import (ConvDRMiningConfig, Group, TeacherPassageVectors,
                                      load_groups, mine_groups, open_teacher_index)
from retrievers.convdr.model import ConvDR
from retrievers.convdr.targets import teacher_targets
from retrievers.convdr.train import (ConvDRTrainConfig, TrainingSet, make_batch,
                                     train_convdr)

from conftest import shared_file
from convdr_helpers import examples, make_index, make_teacher
from training_helpers import Killed, kill_after

HISTORY = {"name": "questions_only", "max_tokens": 62}


@pytest.fixture(scope="module")
def teacher_dir(tmp_path_factory):
    return make_teacher(tmp_path_factory.mktemp("convdr_train") / "teacher")


def _formatted(data):
    strategy = build_history_strategy(HISTORY)
    for example in data:
        example.query = strategy.format(example.question, example.history)
    return data


def _kd_set(model, data, folder) -> TrainingSet:
    targets = teacher_targets(model.teacher, [e.rewrite for e in data], folder)
    return TrainingSet([e.query for e in data], targets, np.ones(len(data), dtype=bool))


def test_kd_on_real_canard_turns_moves_student_to_teacher_rewrite(teacher_dir, tmp_path):
    turns = [e for e in canard_examples(shared_file("canard/dev.json"))[:40] if e.turn > 1]
    data = _formatted(turns[:24])
    assert all(e.rewrite != e.question for e in data[:5])  # real rewrites, not copies
    model = ConvDR.build(str(teacher_dir), query_max_length=64)
    before = fidelity(model, data)
    assert before["student"] == before["zero_shot"]  # the student starts as the teacher
    result = train_convdr(model, _kd_set(model, data, tmp_path / "teacher"), tmp_path / "out",
                          ConvDRTrainConfig(batch_size=8, epochs=10, lr=1e-3,
                                            checkpoint_every=0, progress=False))
    assert result.steps == 30
    after = fidelity(model, data)
    assert after["student"]["cosine"] > before["student"]["cosine"] + 0.01
    assert after["student"]["sq_l2"] < 0.6 * before["student"]["sq_l2"]
    assert after["zero_shot"] == before["zero_shot"]  # the teacher did not move
    log = [json.loads(line) for line in (tmp_path / "out" / "log.jsonl").open()]
    assert [r["step"] for r in log] == list(range(1, 31)) and all(r["rank"] == 0 for r in log)
    record = json.loads((tmp_path / "out" / "training.json").read_text())
    assert record["mode"] == "kd" and record["teacher_fingerprint"] == model.teacher_fingerprint
    saved = ConvDR.from_pretrained(tmp_path / "out" / "model")
    assert saved.fingerprint() == model.fingerprint()


@pytest.mark.parametrize("lora", [0, 2])
def test_resume_after_interruption_gives_identical_weights(teacher_dir, tmp_path, lora):
    data = _formatted(examples())
    config = ConvDRTrainConfig(batch_size=2, epochs=2, lr=1e-3, checkpoint_every=3,
                               progress=False)

    def fresh():
        torch.manual_seed(0)
        model = ConvDR.build(str(teacher_dir), query_max_length=64)
        return model.add_lora(r=lora, alpha=2 * lora) if lora else model

    model = fresh()
    training = _kd_set(model, data, tmp_path / "teacher")
    train_convdr(model, training, tmp_path / "straight", config)

    with pytest.raises(Killed):
        train_convdr(fresh(), training, tmp_path / "killed", config, on_step=kill_after(5))
    assert json.loads((tmp_path / "killed" / "checkpoint" / "state.json").read_text())["step"] == 3
    result = train_convdr(fresh(), training, tmp_path / "killed", config)
    assert result.resumed_from == 3 and result.steps == 8
    one = ConvDR.from_pretrained(tmp_path / "straight" / "model").query_encoder.state_dict()
    two = ConvDR.from_pretrained(tmp_path / "killed" / "model").query_encoder.state_dict()
    assert one.keys() == two.keys() and all(torch.equal(one[k], two[k]) for k in one)
    start = fresh().query_encoder.state_dict()
    assert any(not torch.equal(start[k], one[k]) for k in one)  # it did train
    log = [json.loads(line) for line in (tmp_path / "killed" / "log.jsonl").open()]
    assert [r["step"] for r in log] == list(range(1, 9))
    assert not (tmp_path / "killed" / "checkpoint").exists()
    # a finished run is returned as is; other settings in the same folder are refused
    again = train_convdr(fresh(), training, tmp_path / "killed", config)
    assert again.steps == 8 and again.resumed_from == 0
    with pytest.raises(ConfigError, match="different settings"):
        train_convdr(fresh(), training, tmp_path / "killed",
                     ConvDRTrainConfig(batch_size=2, epochs=2, lr=5e-4, progress=False))


@pytest.fixture(scope="module")
def mined(teacher_dir, tmp_path_factory):
    """Rank groups for the helper examples over the tiny index of their passages."""
    root = tmp_path_factory.mktemp("convdr_rank")
    _, index_dir = make_index(root, teacher_dir)
    model = ConvDR.build(str(teacher_dir), query_max_length=64)
    data = _formatted(examples())
    targets = teacher_targets(model.teacher, [e.rewrite for e in data], root / "teacher")
    mine_groups(model.teacher, data, targets, index_dir, root / "mining",
                ConvDRMiningConfig(top_k=6))
    groups, extra = load_groups(root / "mining", data)
    index, _ = open_teacher_index(index_dir, model.teacher_fingerprint)
    return data, targets, groups, TeacherPassageVectors(index_dir, index, extra)


def _full_rank_loss(model, data, groups, vectors) -> float:
    """CE of each student query against its positive and ALL its mined negatives."""
    model.eval()
    losses = []
    with torch.no_grad():
        queries = model.encode_query(model.tokenize_queries([e.query for e in data]))
        for query, group in zip(queries, groups):
            passages = torch.from_numpy(vectors.get(group.positives[:1] + group.negatives))
            losses.append(rank_loss(query[None], passages[None], scale=20.0).item())
    return float(np.mean(losses))


def test_rank_mode_lowers_the_ranking_loss(teacher_dir, tmp_path, mined):
    data, _, groups, vectors = mined
    assert all(g is not None and len(g.negatives) in (5, 6) for g in groups)  # top-6 - pos
    model = ConvDR.build(str(teacher_dir), query_max_length=64)
    before = _full_rank_loss(model, data, groups, vectors)
    training = TrainingSet([e.query for e in data], groups=groups, vectors=vectors)
    train_convdr(model, training, tmp_path / "out",
                 ConvDRTrainConfig(mode="rank", batch_size=4, epochs=8, lr=1e-3, negatives=3,
                                   checkpoint_every=0, progress=False))
    after = _full_rank_loss(model, data, groups, vectors)
    assert after < before - 0.1, (before, after)
    log = [json.loads(line) for line in (tmp_path / "out" / "log.jsonl").open()]
    assert all(r["kd"] == 0 and r["rank"] > 0 for r in log)


def test_multitask_batches_mask_each_term(mined):
    data, targets, groups, vectors = mined
    has = np.array([i % 2 == 0 for i in range(len(data))])  # odd examples: no rewrite
    partial = [g if i % 4 != 0 else None for i, g in enumerate(groups)]  # 0, 4: no group
    training = TrainingSet([e.query for e in data], targets, has, partial, vectors)
    config = ConvDRTrainConfig(mode="multitask", negatives=2, seed=3)
    batch = make_batch(training, [0, 1, 2, 3], config, epoch=0)
    assert batch.kd_mask.tolist() == [True, False, True, False]
    assert batch.rank_mask.tolist() == [False, True, True, True]
    assert batch.passages.shape == (4, 3, vectors.dim)
    assert torch.equal(batch.passages[0], torch.zeros(3, vectors.dim))
    for row in (1, 2, 3):  # positive first, then negatives drawn from the mined list
        group = partial[row]
        assert torch.allclose(batch.passages[row, 0],
                              torch.from_numpy(vectors.get(group.positives[:1])[0]))
        negatives = {tuple(v) for v in vectors.get(group.negatives)}
        assert all(tuple(v.numpy()) in negatives for v in batch.passages[row, 1:])
    again = make_batch(training, [0, 1, 2, 3], config, epoch=0)
    assert torch.equal(again.passages, batch.passages)  # seeded by (seed, epoch, example)


def test_in_batch_candidates_leave_out_false_negatives_and_groupless_rows(mined):
    data, targets, _, vectors = mined
    groups = [Group([0], [5, 6]), Group([1], [0, 7]), None, Group([2, 3], [8, 9])]
    training = TrainingSet([e.query for e in data][:4], groups=groups, vectors=vectors)
    config = ConvDRTrainConfig(mode="rank", negatives=2, in_batch_negatives=True)
    batch = make_batch(training, [0, 1, 2, 3], config, epoch=0)
    allowed = batch.candidates
    assert allowed.shape == (4, 12)
    # row 1 drew negative 0, query 0's positive: masked for query 0 only
    positive0 = torch.from_numpy(vectors.get([0])[0])
    is_positive0 = [torch.equal(batch.passages[1, slot], positive0) for slot in range(3)]
    assert sum(is_positive0) == 1
    for slot in range(3):
        assert bool(allowed[0, 3 + slot]) == (not is_positive0[slot])
        assert bool(allowed[3, 3 + slot])
    assert allowed[1, 3:6].all() and allowed[0, 0:3].all()
    # the row without a group: nobody ranks against it, it sees only its own first slot
    assert not allowed[:, 6:9][[0, 1, 3]].any()
    assert allowed[2].tolist() == [False] * 6 + [True] + [False] * 5
    assert make_batch(training, [0, 1, 2, 3], ConvDRTrainConfig(mode="rank", negatives=2),
                      0).candidates is None
    key = ConvDRTrainConfig(mode="rank").schedule_key()
    assert "in_batch_negatives" not in key
    assert config.schedule_key()["in_batch_negatives"] is True


def test_too_few_mined_negatives_are_repeated(mined):
    data, targets, _, vectors = mined
    groups = [Group([0], [5]) for _ in data]
    training = TrainingSet([e.query for e in data], groups=groups, vectors=vectors)
    batch = make_batch(training, [0, 1], ConvDRTrainConfig(mode="rank", negatives=3), 0)
    assert batch.filled == 4
    expected = torch.from_numpy(vectors.get([0, 5, 5, 5]))
    assert torch.equal(batch.passages[0], expected)


def test_training_sets_are_checked(mined):
    data, targets, groups, vectors = mined
    queries = [e.query for e in data]
    with pytest.raises(ConfigError, match="needs the teacher's targets"):
        TrainingSet(queries).check(ConvDRTrainConfig(mode="kd"))
    with pytest.raises(ConfigError, match="needs mined groups"):
        TrainingSet(queries, targets, np.ones(len(data), bool)).check(
            ConvDRTrainConfig(mode="multitask"))
    with pytest.raises(ConvQAError, match="no example has"):
        TrainingSet(queries, targets, np.zeros(len(data), bool)).check(ConvDRTrainConfig())
    with pytest.raises(ConfigError, match="mode must be"):
        ConvDRTrainConfig(mode="distil")
