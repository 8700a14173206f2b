"""ConvDR model: the student starts as the teacher, the teacher stays frozen, passages are the
teacher's, save/load round trips (full and LoRA), and a changed teacher is refused."""
from __future__ import annotations

import json

import pytest
import torch

from convqa.errors import ConvQAError, DataError
from convqa.types import Passage
from retrievers.convdr.model import META_FILE, ConvDR
from retrievers.dense.model import DualEncoder

from convdr_helpers import make_teacher

TEXTS = ["what is the eiffel tower? [SEP] who built it?", "photosynthesis"]


@pytest.fixture(scope="module")
def teachers(tmp_path_factory):
    root = tmp_path_factory.mktemp("convdr_model")
    return make_teacher(root / "teacher"), make_teacher(root / "other", seed=1), root


def _student(model: ConvDR, texts=TEXTS) -> torch.Tensor:
    with torch.no_grad():
        return model.encode_query(model.tokenize_queries(texts))


def _nudge(module: torch.nn.Module, name_part: str = "", amount: float = 0.01) -> None:
    with torch.no_grad():
        for name, parameter in module.named_parameters():
            if name_part in name and parameter.requires_grad:
                parameter.add_(amount)


def test_student_starts_as_teacher_and_only_student_trains(teachers):
    teacher_dir, _, _ = teachers
    model = ConvDR.build(str(teacher_dir), query_max_length=64).eval()
    teacher = DualEncoder.from_pretrained(teacher_dir).eval()
    with torch.no_grad():
        expected = teacher.encode_query(teacher.tokenize_queries(TEXTS))
    assert torch.allclose(_student(model), expected, atol=1e-6)
    assert model.teacher_fingerprint == teacher.fingerprint()
    assert all(p.requires_grad for p in model.query_encoder.parameters())
    assert not any(p.requires_grad for p in model.teacher.parameters())
    model.train()
    assert model.query_encoder.training and not model.teacher.training
    # the student is a copy: changing it leaves the teacher (and its fingerprint) alone
    _nudge(model.query_encoder)
    assert model.teacher.fingerprint() == teacher.fingerprint()
    assert not torch.allclose(_student(model.eval()), expected, atol=1e-4)


def test_passages_are_the_teachers_and_input_length_is_the_students(teachers):
    teacher_dir, _, _ = teachers
    model = ConvDR.build(str(teacher_dir), query_max_length=8)
    teacher = DualEncoder.from_pretrained(teacher_dir)
    passages = [Passage("a", "the danube flows through vienna", "Danube")]
    with torch.no_grad():
        mine = model.encode_passage(model.tokenize_passages(passages))
        theirs = teacher.encode_passage(teacher.tokenize_passages(passages))
    assert torch.equal(mine, theirs)
    long = " ".join(["word"] * 50)
    assert model.tokenize_queries([long])["input_ids"].shape[1] == 8
    assert model.tokenize_teacher_queries([long])["input_ids"].shape[1] == 50 + 2
    view = model.as_dual_encoder()
    assert view.query_encoder is model.query_encoder
    assert view.passage_encoder is model.teacher.passage_encoder


def test_full_save_load_round_trip(teachers):
    teacher_dir, _, root = teachers
    model = ConvDR.build(str(teacher_dir), query_max_length=64)
    _nudge(model.query_encoder, "encoder.layer.0")
    model.eval().save_pretrained(root / "full")
    meta = json.loads((root / "full" / META_FILE).read_text())
    assert meta["config"] == {"teacher": str(teacher_dir.resolve()), "query_max_length": 64}
    assert meta["teacher_fingerprint"] == model.teacher_fingerprint
    assert meta["adapter"] is False and (root / "full" / "model.safetensors").exists()
    loaded = ConvDR.from_pretrained(root / "full").eval()
    assert loaded.fingerprint() == model.fingerprint() == meta["fingerprint"]
    assert torch.allclose(_student(loaded), _student(model), atol=1e-6)
    model.save_pretrained(root / "full")  # replacing an existing model folder works


def test_lora_student_saves_only_the_adapter(teachers):
    teacher_dir, _, root = teachers
    torch.manual_seed(0)
    model = ConvDR.build(str(teacher_dir), query_max_length=64).add_lora(r=2, alpha=4)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    _nudge(model.query_encoder, "lora_B")
    model.eval().save_pretrained(root / "lora")
    files = sorted(p.name for p in (root / "lora").iterdir())
    assert files == ["adapter_config.json", "adapter_model.safetensors", META_FILE]
    loaded = ConvDR.from_pretrained(root / "lora").eval()
    assert loaded.has_adapters and loaded.fingerprint() == model.fingerprint()
    assert torch.allclose(_student(loaded), _student(model), atol=1e-6)
    merged = loaded.merge_adapters()
    assert not merged.has_adapters and merged.fingerprint() == model.fingerprint()
    assert torch.allclose(_student(merged), _student(model), atol=1e-5)
    model.save_pretrained(root / "lora-full", adapter_only=False)
    assert ConvDR.from_pretrained(root / "lora-full").fingerprint() == model.fingerprint()


def test_loading_with_another_teacher_is_refused(teachers):
    teacher_dir, other_dir, root = teachers
    ConvDR.build(str(teacher_dir), query_max_length=64).save_pretrained(root / "student")
    with pytest.raises(ConvQAError, match="pass the original teacher") as err:
        ConvDR.from_pretrained(root / "student", teacher=str(other_dir))
    assert "\n" not in str(err.value)
    # the same teacher found under another name is fine (weights, not paths, decide)
    assert ConvDR.from_pretrained(root / "student",
                                  teacher=DualEncoder.from_pretrained(teacher_dir)).dim == 32


def test_bad_folders(teachers, tmp_path):
    teacher_dir, _, root = teachers
    with pytest.raises(DataError, match="not a ConvDR model"):
        ConvDR.from_pretrained(tmp_path)
    ConvDR.build(str(teacher_dir), query_max_length=64).save_pretrained(tmp_path / "m")
    meta_path = tmp_path / "m" / META_FILE
    meta = json.loads(meta_path.read_text())
    meta["config"]["pooling"] = "cls"
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(DataError, match="unknown ConvDR student option 'pooling'"):
        ConvDR.from_pretrained(tmp_path / "m")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "x.txt").write_text("not a model")
    with pytest.raises(ConvQAError, match="not a ConvDR model; not replacing"):
        ConvDR.build(str(teacher_dir), query_max_length=64).save_pretrained(tmp_path / "other")
