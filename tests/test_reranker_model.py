"""The cross-encoder model: its pair inputs, pooling, saved folders (full and LoRA) that score
exactly as the model did, and one-line errors for folders that are not rerankers."""
from __future__ import annotations

import json

import pytest
import torch

from convqa.errors import ConfigError, ConvQAError, DataError
from convqa.types import Passage
from reader_helpers import single_thread  # noqa: F401 (autouse fixture)
from reranker_helpers import save_tiny_encoder, tiny_cross_encoder
from retrievers.rerank.model import (CARD_FILE, HEAD_FILE, META_FILE, CrossEncoder,
                                     CrossEncoderConfig)

PASSAGES = [Passage("a#0", "The lighthouse was built in 1890 on the northern cape.",
                    "Cape Lighthouse"),
            Passage("a#1", "Its lamp was replaced " + "and repaired again " * 40,
                    "Cape Lighthouse"),
            Passage("b#0", "A short text.", "")]
QUERY = "when was the lighthouse built? [SEP] tell me about the cape [SEP] it is in the north"


def scores(model, query=QUERY, passages=PASSAGES):
    with torch.no_grad():
        return model(**model.encode_pairs([query] * len(passages), passages)).tolist()


def test_pair_layout_truncates_query_and_title_never_the_question_start():
    model = tiny_cross_encoder(max_query_length=6, max_title_length=2)
    tensors = model.encode_pairs([QUERY, "short?"], PASSAGES[:2])
    tokenizer = model.tokenizer
    first = tokenizer.decode(tensors["input_ids"][0][tensors["attention_mask"][0].bool()])
    # [CLS] query (6 tokens, cut on a word boundary) [SEP] title (2 tokens) [SEP] text [SEP]
    assert first.startswith("[CLS] when was the lighthouse built? [SEP] cape lighthouse [SEP] "
                            "the lighthouse was built in 1890")
    segments = tensors["token_type_ids"][0]
    assert segments[:8].tolist() == [0] * 8 and segments[8] == 1  # title starts segment 2
    # the long passage is cut to max_length; the short pair is padded to it
    assert tensors["input_ids"].shape == (2, model.config.max_length)
    assert int(tensors["attention_mask"][1].sum()) == model.config.max_length
    untitled = model.encode_pairs(["q"], [PASSAGES[2]])["input_ids"][0]
    assert tokenizer.decode(untitled) == "[CLS] q [SEP] a short text. [SEP]"
    with pytest.raises(ValueError, match="2 queries for 1 passages"):
        model.encode_pairs(["a", "b"], PASSAGES[:1])


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_a_pairs_score_does_not_depend_on_the_batch(pooling):
    model = tiny_cross_encoder(pooling=pooling).eval()
    together = scores(model)
    alone = [scores(model, passages=[p])[0] for p in PASSAGES]
    assert together == pytest.approx(alone, abs=1e-5)
    assert len(set(round(s, 6) for s in together)) == 3


def test_mean_and_cls_pooling_differ():
    cls = tiny_cross_encoder(seed=3, pooling="cls").eval()
    mean = tiny_cross_encoder(seed=3, pooling="mean").eval()
    assert scores(cls) != pytest.approx(scores(mean), abs=1e-4)
    assert cls.fingerprint() != mean.fingerprint()  # pooling changes the scores: named


def test_full_folder_round_trip_gives_identical_scores(tmp_path):
    model = tiny_cross_encoder(seed=1, pooling="mean").eval()
    model.save_pretrained(tmp_path / "m")
    names = {p.name for p in (tmp_path / "m").iterdir()}
    assert {META_FILE, HEAD_FILE, CARD_FILE, "model.safetensors", "config.json"} <= names
    assert not any(name.endswith((".bin", ".pt", ".pkl")) for name in names)
    loaded = CrossEncoder.from_pretrained(tmp_path / "m").eval()
    assert loaded.config == model.config
    assert scores(loaded) == scores(model)
    assert loaded.fingerprint() == model.fingerprint()
    meta = json.loads((tmp_path / "m" / META_FILE).read_text())
    assert meta["fingerprint"] == model.fingerprint() and meta["adapter"] is False
    card = (tmp_path / "m" / CARD_FILE).read_text()
    assert card.startswith("# Cross-encoder passage reranker") and model.fingerprint() in card


def test_lora_folder_holds_only_the_adapter_and_merges_to_the_same_scores(tmp_path):
    base = save_tiny_encoder(tmp_path / "base", seed=2)
    model = CrossEncoder.build(CrossEncoderConfig(model=str(base), max_length=96,
                                                  max_query_length=24, max_title_length=6))
    model.add_lora(r=4, alpha=8, dropout=0.0)
    with torch.no_grad():  # move the adapter away from its zero start
        for name, parameter in model.encoder.named_parameters():
            if "lora_B" in name:
                parameter.normal_(std=0.05)
    model.eval()
    model.save_pretrained(tmp_path / "m")
    names = {p.name for p in (tmp_path / "m").iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", HEAD_FILE} <= names
    assert "model.safetensors" not in names
    loaded = CrossEncoder.from_pretrained(tmp_path / "m").eval()
    assert loaded.has_adapters
    assert scores(loaded) == pytest.approx(scores(model), abs=1e-6)
    fingerprint = loaded.fingerprint()
    loaded.merge_adapters()
    assert not loaded.has_adapters and loaded.fingerprint() == fingerprint
    assert scores(loaded) == pytest.approx(scores(model), abs=1e-5)
    with pytest.raises(ConvQAError, match="already has LoRA"):
        model.add_lora()


def test_saving_is_atomic_and_never_replaces_a_foreign_folder(tmp_path):
    model = tiny_cross_encoder()
    model.save_pretrained(tmp_path / "m")
    first = (tmp_path / "m" / META_FILE).read_text()
    tiny_cross_encoder(seed=5).save_pretrained(tmp_path / "m")  # replaces a reranker
    assert (tmp_path / "m" / META_FILE).read_text() != first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]  # no temporary left behind
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("keep")
    with pytest.raises(ConvQAError, match="exists and is not a convqa cross-encoder reranker"):
        model.save_pretrained(tmp_path / "other")
    assert (tmp_path / "other" / "notes.txt").read_text() == "keep"
    with pytest.raises(ConvQAError, match="no LoRA adapters"):
        model.save_pretrained(tmp_path / "x", adapter_only=True)


def test_folders_that_are_not_rerankers_are_one_line_errors(tmp_path):
    with pytest.raises(DataError, match="reranker model folder not found"):
        CrossEncoder.from_pretrained(tmp_path / "missing")
    encoder = save_tiny_encoder(tmp_path / "enc")
    with pytest.raises(ConfigError, match="not a trained reranker"):
        CrossEncoder.from_pretrained(encoder)
    model = tiny_cross_encoder()
    model.save_pretrained(tmp_path / "m")
    meta_path = tmp_path / "m" / META_FILE
    meta = json.loads(meta_path.read_text())
    meta["config"]["pooling"] = "max"
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(DataError, match=r"convqa_reranker.json: field 'config': pooling must "
                                        r"be one of cls, mean, got 'max'"):
        CrossEncoder.from_pretrained(tmp_path / "m")
    meta["config"]["pooling"], meta["version"] = "cls", 7
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(DataError, match="unsupported convqa cross-encoder reranker version 7"):
        CrossEncoder.from_pretrained(tmp_path / "m")
    meta["version"] = 1
    meta_path.write_text(json.dumps(meta))
    from safetensors.torch import save_file

    save_file({"head.weight": torch.zeros(1, 16), "head.bias": torch.zeros(1)},
              str(tmp_path / "m" / HEAD_FILE))
    with pytest.raises(DataError, match=r"head has shape \(1, 16\), expected \(1, 32\)"):
        CrossEncoder.from_pretrained(tmp_path / "m")


def test_config_checks():
    with pytest.raises(ValueError, match="leaves under 16 tokens for the passage"):
        CrossEncoderConfig(max_length=64, max_query_length=40, max_title_length=8)
    with pytest.raises(ValueError, match="encoder_layers must be an int >= 1"):
        CrossEncoderConfig(encoder_layers=0)
