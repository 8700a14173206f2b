"""Distilling a reranker from a teacher reranker (retrievers/rerank/distill.py, train.py): the
teacher's scores of every candidate, the drawn candidates' scores in a batch, the listwise
distillation loss, a student that learns the ranking from a teacher's scores alone, and the
`convqa train reranker-teacher` / `--teacher-scores` commands on real SQuAD examples."""
from __future__ import annotations

import json
import math

import pytest
import torch

from conftest import shared_file
from convqa.errors import ConfigError, ConvQAError, DataError
from convqa.training.schedule import example_rng
from reader_helpers import single_thread  # noqa: F401 (autouse fixture)
from reranker_helpers import tiny_cross_encoder, toy_examples
from retrievers.rerank.distill import (TeacherScores, build_teacher_scores,
                                       load_teacher_scores, teacher_scores)
from retrievers.rerank.reranker import CrossEncoderReranker
from retrievers.rerank.train import (RerankTrainConfig, choose_negatives, evaluate_ranking,
                                     listwise_distillation_loss, make_rerank_batch,
                                     train_reranker)


def config(**overrides):
    base = dict(batch_size=4, negatives=3, lr=3e-3, warmup_ratio=0.0, epochs=6,
                progress=False, checkpoint_every=0, weight_decay=0.0)
    return RerankTrainConfig(**{**base, **overrides})


def reranker(model):
    return CrossEncoderReranker.from_model(model, precision="fp32")


def test_teacher_scores_are_the_teachers_logits_by_kind():
    example = toy_examples(1, negatives=5)[0]
    teacher = reranker(tiny_cross_encoder(seed=2))
    scores = teacher_scores(teacher, example)
    query = teacher.query_text(example.question, example.history_turns())
    assert scores.positives == pytest.approx(teacher.score(query, example.positives), abs=1e-5)
    assert scores.mined_negatives == pytest.approx(
        teacher.score(query, example.mined_negatives), abs=1e-5)
    assert len(scores.article_negatives) == len(example.article_negatives)


def test_batches_carry_the_teachers_scores_of_the_candidates_drawn():
    examples = toy_examples(3, negatives=4)
    examples[2].article_negatives, examples[2].mined_negatives = [], examples[2].mined_negatives[:1]
    teacher = {e.id: TeacherScores(e.id, (10.0 + i,),
                                   tuple(float(n) for n in range(len(e.article_negatives))),
                                   tuple(-1.0 - n for n in range(len(e.mined_negatives))))
               for i, e in enumerate(examples)}
    model = tiny_cross_encoder()
    plain = make_rerank_batch(examples, [0, 1, 2], lambda i: examples[i].question, model, 3, 0, 2)
    batch = make_rerank_batch(examples, [0, 1, 2], lambda i: examples[i].question, model, 3, 0,
                              2, teacher)
    assert torch.equal(plain.tensors["input_ids"], batch.tensors["input_ids"])
    assert batch.teacher[:, 0].tolist() == [10.0, 11.0, 12.0]  # the positives
    assert batch.teacher[2, 1].item() == -1.0 and batch.teacher[2, 2:].isinf().all()
    for row in range(2):
        rng = example_rng(0, 2, row)
        rng.integers(len(examples[row].positives))  # the positive's draw comes first
        numbers = choose_negatives(examples[row], 3, rng)
        assert batch.teacher[row, 1:].tolist() == [teacher[examples[row].id].score(k, i)
                                                   for k, i in numbers]


def test_listwise_distillation_loss():
    teacher = torch.tensor([[2.0, 0.0, -1.0, float("-inf")]])
    same = listwise_distillation_loss(teacher.clone(), teacher)
    probs = torch.softmax(teacher, -1)[0, :3]
    assert float(same) == pytest.approx(float(-(probs * probs.log()).sum()), abs=1e-5)
    worse = listwise_distillation_loss(torch.tensor([[-1.0, 0.0, 2.0, 5.0]]), teacher)
    assert float(worse) > float(same)
    logits = torch.zeros(1, 4, requires_grad=True)
    listwise_distillation_loss(logits, teacher, temperature=2.0).backward()
    assert logits.grad[0, 0] < 0 < logits.grad[0, 2] and logits.grad[0, 3] == 0
    flat = listwise_distillation_loss(torch.zeros(1, 4), torch.zeros(1, 4), temperature=3.0)
    assert float(flat) == pytest.approx(9 * math.log(4))


def test_a_student_learns_the_ranking_from_a_teachers_scores_alone(tmp_path):
    """Weight 1 (no positive's loss): a student of a trained teacher puts the positives
    first; a student of an untrained one does not."""
    train, heldout = toy_examples(16), toy_examples(8, split="heldout", offset=5)
    teacher = tiny_cross_encoder(seed=0)
    train_reranker(teacher, train, tmp_path / "teacher", config())
    assert evaluate_ranking(teacher, heldout)["hits@1"] == 100.0
    hits = {}
    for name, model in (("trained", teacher), ("random", tiny_cross_encoder(seed=7))):
        path = build_teacher_scores(reranker(model), train, tmp_path / f"{name}.jsonl",
                                    progress=False)
        student = tiny_cross_encoder(seed=3)
        train_reranker(student, train, tmp_path / f"student-{name}",
                       config(distill_weight=1.0, distill_temperature=1.0),
                       teacher=load_teacher_scores(path, train))
        hits[name] = evaluate_ranking(student, heldout)["hits@1"]
        log = [json.loads(line) for line in
               (tmp_path / f"student-{name}" / "log.jsonl").read_text().splitlines()]
        assert {"hard_loss", "distill_loss"} <= set(log[0])
    assert hits["trained"] >= 87.5 and hits["random"] <= 50.0


def test_scores_resume_and_refuse_other_examples(tmp_path):
    train = toy_examples(5)
    teacher = reranker(tiny_cross_encoder(seed=4))
    whole = build_teacher_scores(teacher, train, tmp_path / "whole.jsonl", progress=False)
    lines = whole.read_text().splitlines()
    part = tmp_path / "resumed.jsonl.part-0-of-1"
    part.write_text(lines[0] + "\n" + lines[1][:15])  # killed while writing the second line
    (tmp_path / "resumed.jsonl.part-0-of-1.json").write_text(
        (tmp_path / "whole.jsonl.json").read_text())
    with pytest.raises(DataError, match="unfinished"):
        load_teacher_scores(tmp_path / "resumed.jsonl", train)
    resumed = build_teacher_scores(teacher, train, tmp_path / "resumed.jsonl", progress=False)
    assert resumed.read_text() == whole.read_text()
    loaded = load_teacher_scores(resumed, train)
    assert loaded.key.startswith(teacher.fingerprint()) and len(loaded.examples) == 5
    with pytest.raises(DataError, match="no teacher scores for example 'heldout/0'"):
        load_teacher_scores(resumed, train + toy_examples(1, split="heldout"))
    fewer = toy_examples(5, negatives=3)
    with pytest.raises(DataError, match="teacher scores of article_negatives"):
        load_teacher_scores(resumed, fewer)
    plain = RerankTrainConfig().schedule_key()
    assert "distill_weight" not in plain
    assert RerankTrainConfig(distill_weight=0.3).schedule_key()["distill_weight"] == 0.3
    with pytest.raises(ConfigError, match="distill_weight"):
        RerankTrainConfig(distill_weight=2.0)
    with pytest.raises(ConvQAError, match="needs both"):
        train_reranker(tiny_cross_encoder(), train, tmp_path / "x", config(distill_weight=0.5))
    with pytest.raises(ConvQAError, match="a teacher's scores given with distill weight 0"):
        train_reranker(tiny_cross_encoder(), train, tmp_path / "y", config(), teacher=loaded)


def test_reranker_teacher_command_on_real_squad_examples(tmp_path, capsys):
    from convqa.front.cli.main import main
    from reader_helpers import save_tiny_encoder

    examples = tmp_path / "reranker.jsonl.xz"
    assert main(["train", "reranker-examples", "--out", str(examples), "--squad",
                 str(shared_file("squad/dev-v2.0.json")), "--max-examples", "6",
                 "--max-heldout", "2", "--article-negatives", "2", "--mined-negatives", "2"]) == 0
    encoder = save_tiny_encoder(tmp_path / "enc")
    base = ["train", "reranker", "--examples", str(examples), "--init-model", str(encoder),
            "--max-steps", "2", "--batch-size", "2", "--negatives", "2", "--lora", "0",
            "--max-length", "96", "--max-query-length", "24", "--no-eval", "--precision",
            "fp32", "--quiet"]
    assert main(base + ["--out", str(tmp_path / "teacher")]) == 0
    capsys.readouterr()
    scores = tmp_path / "scores.jsonl"
    assert main(["train", "reranker-teacher", "--teacher", str(tmp_path / "teacher" / "model"),
                 "--examples", str(examples), "--out", str(scores), "--precision", "fp32",
                 "--quiet"]) == 0
    assert f"{scores}: the teacher's scores of 6 training examples" in capsys.readouterr().out
    assert len(scores.read_text().splitlines()) == 6
    out = tmp_path / "student"
    assert main(base + ["--out", str(out), "--teacher-scores", str(scores)]) == 0
    record = json.loads((out / "training.json").read_text())
    assert record["config"]["distill_weight"] == 0.5
    assert all("distill_loss" in json.loads(line)
               for line in (out / "log.jsonl").read_text().splitlines())
    capsys.readouterr()
    assert main(["train", "reranker-teacher", "--teacher", str(tmp_path), "--examples",
                 str(examples), "--out", str(scores), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a reranker folder" in err[0]
