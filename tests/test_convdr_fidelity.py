"""Fidelity statistics by hand, the example selection, and the cached teacher targets."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import retrievers.convdr.targets as targets_module
from retrievers.convdr.fidelity import fidelity, select_examples, similarity_stats
from retrievers.convdr.model import ConvDR
from retrievers.convdr.targets import TARGETS_META, teacher_targets
from retrievers.dense.build import load_encoder

from convdr_helpers import examples, make_teacher


def test_similarity_stats_by_hand():
    stats = similarity_stats(np.array([[1.0, 0.0], [0.0, 2.0]]),
                             np.array([[0.6, 0.8], [0.0, 1.0]]))
    # row 0: cos 0.6, squared diffs 0.16 + 0.64 = 0.8; row 1: cos 1, squared diffs 0 + 1 = 1
    assert stats["cosine"] == pytest.approx(0.8)
    assert stats["sq_l2"] == pytest.approx(0.9)
    assert stats["mse"] == pytest.approx((0.16 + 0.64 + 0.0 + 1.0) / 4)
    with pytest.raises(ValueError):
        similarity_stats(np.ones((2, 3)), np.ones((3, 3)))


def test_select_examples_needs_rewrites_and_samples_in_order():
    data = examples()
    data[0].rewrite = None
    chosen = select_examples(data)
    assert [e.id for e in chosen] == [e.id for e in data[1:]]
    sample = select_examples(data, max_examples=3, seed=5)
    positions = [data.index(e) for e in sample]
    assert len(sample) == 3 and positions == sorted(positions)
    assert [e.id for e in select_examples(data, 3, seed=5)] == [e.id for e in sample]


@pytest.fixture(scope="module")
def teacher_dir(tmp_path_factory):
    return make_teacher(tmp_path_factory.mktemp("convdr_fidelity") / "teacher")


def test_fidelity_baselines(teacher_dir):
    model = ConvDR.build(str(teacher_dir), query_max_length=64)
    data = examples()
    result = fidelity(model, data, {"name": "questions_only", "max_tokens": 62})
    assert result["count"] == 8 and result["student"] == result["zero_shot"]
    # turn-1 examples: rewrite == question, so question-only is exact for them
    firsts = [e for e in data if e.turn == 1]
    alone = fidelity(model, firsts, {"name": "questions_only", "max_tokens": 62})
    assert alone["question_only"]["cosine"] == pytest.approx(1.0, abs=1e-6)
    assert set(result["by_source"]) == {"test"} and result["by_source"]["test"]["count"] == 8
    with torch.no_grad():  # a changed student changes only the student's numbers
        for parameter in model.query_encoder.parameters():
            parameter.add_(0.01)
    moved = fidelity(model, data, {"name": "questions_only", "max_tokens": 62})
    assert moved["zero_shot"] == result["zero_shot"] and moved["student"] != result["student"]


def test_teacher_targets_are_cached_per_teacher_and_texts(teacher_dir, tmp_path, monkeypatch):
    teacher = load_encoder(str(teacher_dir))
    texts = ["who built the eiffel tower?", "how long is the danube?"]
    first = teacher_targets(teacher, texts, tmp_path)
    with torch.no_grad():
        direct = teacher.encode_query(teacher.tokenize_queries(texts)).numpy()
    assert np.allclose(first, direct, atol=1e-6)
    calls = []
    real = targets_module.encode_teacher_queries
    monkeypatch.setattr(targets_module, "encode_teacher_queries",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    assert np.array_equal(teacher_targets(teacher, texts, tmp_path), first) and not calls
    teacher_targets(teacher, texts[:1], tmp_path)  # other texts: recomputed
    assert calls == [1]
    teacher_targets(teacher, texts[:1], tmp_path, fingerprint="another-teacher")
    assert calls == [1, 1]
    (tmp_path / TARGETS_META).write_text("{}")  # damaged metadata: recomputed, not trusted
    teacher_targets(teacher, texts[:1], tmp_path, fingerprint="another-teacher")
    assert calls == [1, 1, 1]
