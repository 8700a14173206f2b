"""The `convdr` retriever: the student's queries over the teacher's index, which is read and
never written; another encoder's index is refused with one line."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch

from convqa.errors import ConfigError, ConvQAError
from convqa.registry import RETRIEVERS
from retrievers.convdr.model import ConvDR
from retrievers.convdr.retriever import ConvDRRetriever
from retrievers.dense.encode import VectorShards

from convdr_helpers import PASSAGES, make_index, make_teacher


def _snapshot(folder):
    """{file: (sha256, mtime)} of every file under `folder`."""
    return {str(p.relative_to(folder)): (hashlib.sha256(p.read_bytes()).hexdigest(),
                                         p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("convdr_retriever")
    teacher = make_teacher(root / "teacher")
    store, index_dir = make_index(root, teacher)
    model = ConvDR.build(str(teacher), query_max_length=64)
    with torch.no_grad():  # a trained-looking student: not the teacher any more
        for name, parameter in model.query_encoder.named_parameters():
            if "encoder.layer.1.output.dense.weight" in name:
                parameter.add_(0.05 * torch.randn_like(parameter))
    model.save_pretrained(root / "student")
    return root, teacher, store, index_dir, model


def test_student_searches_the_teachers_index_unchanged(setup):
    root, _, store, index_dir, model = setup
    before = _snapshot(index_dir)
    import retrievers.convdr.retriever  # noqa: F401  (registers "convdr")

    retriever = RETRIEVERS.build({"name": "convdr", "model": str(root / "student"),
                                  "index": str(index_dir), "precision": "fp32"})
    assert isinstance(retriever, ConvDRRetriever)
    queries = ["who built it? [SEP] the eiffel tower", "danube capitals"]
    hits = retriever.retrieve_batch(queries, k=12)
    # by hand: student query vectors . the teacher's stored passage vectors
    vectors = VectorShards.open(index_dir / "vectors").load()
    with torch.no_grad():
        student = model.eval().encode_query(model.tokenize_queries(queries)).numpy()
    for query_vector, ranking in zip(student, hits):
        scores = vectors @ query_vector
        order = [store.id_at(int(i)) for i in np.argsort(-scores, kind="stable")]
        assert [h.passage_id for h in ranking] == order
        assert [h.rank for h in ranking] == list(range(1, 13))
        assert ranking[0].score == pytest.approx(float(scores.max()), abs=1e-5)
    assert _snapshot(index_dir) == before  # not a byte, not a timestamp changed
    fingerprint = retriever.fingerprint()
    assert fingerprint.startswith("convdr:") and model.fingerprint() in fingerprint


def test_untrained_student_finds_a_passage_from_its_own_text(setup):
    root, teacher, _, index_dir, _ = setup
    ConvDR.build(str(teacher), query_max_length=64).save_pretrained(root / "zero-shot")
    retriever = RETRIEVERS.build({"name": "convdr", "model": str(root / "zero-shot"),
                                  "index": str(index_dir), "precision": "fp32"})
    for pid, text in PASSAGES[:4]:
        assert retriever.retrieve(text, k=1)[0].passage_id == pid


def test_index_of_another_encoder_is_refused_in_one_line(setup):
    root, _, _, _, model = setup
    _, other_index = make_index(root, make_teacher(root / "other", seed=1), "other-index")
    with pytest.raises(ConvQAError, match="was not built by the student's teacher") as err:
        RETRIEVERS.build({"name": "convdr", "model": str(root / "student"),
                          "index": str(other_index)})
    assert "\n" not in str(err.value) and model.teacher_fingerprint in str(err.value)


def test_missing_options(setup):
    root, _, _, index_dir, _ = setup
    with pytest.raises(ConfigError, match="'model'"):
        RETRIEVERS.build({"name": "convdr", "index": str(index_dir)})
    with pytest.raises(ConfigError, match="'index'"):
        RETRIEVERS.build({"name": "convdr", "model": str(root / "student")})
    with pytest.raises(ConfigError, match="bad device"):
        RETRIEVERS.build({"name": "convdr", "model": str(root / "student"),
                          "index": str(index_dir), "device": "quantum"})


def test_a_pipeline_config_uses_it_like_any_retriever(setup):
    """`convqa answer --config`: retriever convdr + the questions-only history."""
    from convqa.pipeline import Pipeline
    from convqa.types import Turn

    root, _, store, index_dir, _ = setup
    pipe = Pipeline.from_config({
        "passages": str(store.path),
        "retriever": {"name": "convdr", "model": str(root / "student"), "index": str(index_dir),
                      "precision": "fp32"},
        "history": {"name": "questions_only", "max_tokens": 62}, "top_k": 3})
    result = pipe.answer("who built it?", [Turn("what is the eiffel tower?", "a tower")])
    assert result.query_text == "what is the eiffel tower? [SEP] who built it?"
    assert len(result.passages) == 3 and result.answer is None
    direct = pipe.retriever.retrieve(result.query_text, 3)
    assert [h.passage_id for h in result.hits] == [h.passage_id for h in direct]
