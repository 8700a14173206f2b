"""DualEncoder: pooling, tokenization, save/load (full and LoRA adapter), fingerprint, errors.

Uses tiny random BERTs (hidden 32, 2 layers) with MiniLM's tokenizer, so every path runs in
seconds without pretrained weights.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from convqa.errors import ConvQAError, DataError
from convqa.types import Passage
from retrievers.dense.model import DualEncoder, DualEncoderConfig


def make_tiny_bert(folder: Path, tokenizer, seed: int = 0) -> Path:
    """A random 2-layer, 32-d BERT checkpoint with MiniLM's tokenizer, saved to `folder`."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(seed)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=256)
    BertModel(config, add_pooling_layer=False).save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory, minilm_tokenizer) -> Path:
    return make_tiny_bert(tmp_path_factory.mktemp("tiny") / "bert", minilm_tokenizer)


@pytest.fixture(scope="module")
def other_tiny_dir(tmp_path_factory, minilm_tokenizer) -> Path:
    return make_tiny_bert(tmp_path_factory.mktemp("tiny2") / "bert", minilm_tokenizer, seed=1)


def encode_queries(model: DualEncoder, texts: list[str]) -> torch.Tensor:
    with torch.no_grad():
        return model.encode_query(model.tokenize_queries(texts))


TEXTS = ["who wrote the origin of species", "the eiffel tower is in paris and was finished "
         "in 1889 for the world fair", "photosynthesis"]


def test_mean_pooling_ignores_padding_and_normalises(tiny_dir):
    model = DualEncoder.build(DualEncoderConfig(model=str(tiny_dir))).eval()
    batch = encode_queries(model, TEXTS)
    assert batch.shape == (3, 32)
    assert torch.allclose(batch.norm(dim=-1), torch.ones(3), atol=1e-5)
    for i, text in enumerate(TEXTS):  # alone = no padding; in the batch = padded
        assert torch.allclose(encode_queries(model, [text])[0], batch[i], atol=1e-5)
    # mean pooling by hand: average of the hidden states of the real tokens
    tokens = model.tokenize_queries(TEXTS[:1])
    with torch.no_grad():
        hidden = model.query_encoder(**tokens).last_hidden_state[0]
    assert torch.allclose(torch.nn.functional.normalize(hidden.mean(0), dim=0), batch[0],
                          atol=1e-5)


def test_cls_pooling_without_normalisation(tiny_dir):
    model = DualEncoder.build(DualEncoderConfig(model=str(tiny_dir), pooling="cls",
                                                normalize=False)).eval()
    tokens = model.tokenize_queries(TEXTS)
    with torch.no_grad():
        hidden = model.query_encoder(**tokens).last_hidden_state
        vectors = model.encode_query(tokens)
    assert torch.allclose(vectors, hidden[:, 0], atol=1e-6)
    assert not torch.allclose(vectors.norm(dim=-1), torch.ones(3), atol=1e-2)


def test_encodings_are_differentiable(tiny_dir):
    model = DualEncoder.build(DualEncoderConfig(model=str(tiny_dir)))
    q, p = model(model.tokenize_queries(TEXTS[:2]),
                 model.tokenize_passages([Passage("a", "text one", "T"), Passage("b", "two")]))
    (q @ p.T).diagonal().sum().backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and any(g.abs().sum() > 0 for g in grads)


def test_passage_tokenization_is_title_sep_text_truncated(tiny_dir):
    model = DualEncoder.build(DualEncoderConfig(model=str(tiny_dir), passage_max_length=12))
    batch = model.tokenize_passages([Passage("p1", "Paris is the capital.", "France"),
                                     Passage("p2", "No title here.")])
    decoded = model.passage_tokenizer.batch_decode(batch["input_ids"], skip_special_tokens=False)
    assert decoded[0].startswith("[CLS] france [SEP] paris is the capital. [SEP]")
    assert decoded[1].startswith("[CLS] no title here. [SEP]")
    long = model.tokenize_passages([Passage("p3", "word " * 100, "T")])
    assert long["input_ids"].shape[1] == 12
    assert model.tokenize_queries(["word " * 300])["input_ids"].shape[1] == 130


def test_shared_save_and_load_round_trip(tiny_dir, tmp_path):
    model = DualEncoder.build(DualEncoderConfig(model=str(tiny_dir), pooling="cls"))
    model.save_pretrained(tmp_path / "saved")
    files = {p.name for p in (tmp_path / "saved").iterdir()}
    assert {"convqa_dual_encoder.json", "model.safetensors", "config.json"} <= files
    assert not any(name.endswith((".bin", ".pt", ".pth")) for name in files)
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())  # no temp folder left
    loaded = DualEncoder.from_pretrained(tmp_path / "saved")
    assert loaded.config.pooling == "cls" and loaded.shared
    assert loaded.fingerprint() == model.fingerprint()
    assert torch.equal(encode_queries(loaded, TEXTS), encode_queries(model.eval(), TEXTS))
    # saving again over our own folder replaces it
    loaded.save_pretrained(tmp_path / "saved")
    assert DualEncoder.from_pretrained(tmp_path / "saved").fingerprint() == model.fingerprint()


def test_separate_towers_round_trip(tiny_dir, other_tiny_dir, tmp_path):
    config = DualEncoderConfig(model=str(tiny_dir), passage_model=str(other_tiny_dir))
    model = DualEncoder.build(config).eval()
    assert not model.shared and model.passage_encoder is not model.query_encoder
    passages = [Passage("a", "who wrote the origin of species")]
    with torch.no_grad():  # the two towers really differ
        p = model.encode_passage(model.tokenize_passages(passages))
    assert not torch.allclose(p, encode_queries(model, [passages[0].text]), atol=1e-3)
    model.save_pretrained(tmp_path / "two")
    assert (tmp_path / "two" / "passage_encoder" / "model.safetensors").exists()
    loaded = DualEncoder.from_pretrained(tmp_path / "two")
    assert not loaded.shared and loaded.fingerprint() == model.fingerprint()
    with torch.no_grad():
        assert torch.equal(loaded.encode_passage(loaded.tokenize_passages(passages)), p)


def test_fingerprint_follows_weights_and_settings_not_paths(tiny_dir, other_tiny_dir, tmp_path):
    base = DualEncoder.build(DualEncoderConfig(model=str(tiny_dir)))
    fingerprint = base.fingerprint()
    assert fingerprint == DualEncoder.from_pretrained(tiny_dir).fingerprint()
    shutil.copytree(tiny_dir, tmp_path / "elsewhere")
    assert DualEncoder.from_pretrained(tmp_path / "elsewhere").fingerprint() == fingerprint
    assert DualEncoder.build(DualEncoderConfig(model=str(tiny_dir), query_max_length=64)
                             ).fingerprint() == fingerprint
    assert DualEncoder.build(DualEncoderConfig(model=str(tiny_dir), pooling="cls")
                             ).fingerprint() != fingerprint
    assert DualEncoder.build(DualEncoderConfig(model=str(other_tiny_dir))
                             ).fingerprint() != fingerprint
    with torch.no_grad():
        next(base.parameters())[0, 0] += 1e-3
    assert base.fingerprint() != fingerprint


def test_lora_adapter_save_load_merge(tiny_dir, tmp_path):
    model = DualEncoder.build(DualEncoderConfig(model=str(tiny_dir))).add_lora(r=4, alpha=8)
    base_fingerprint = DualEncoder.build(DualEncoderConfig(model=str(tiny_dir))).fingerprint()
    # fresh LoRA (B = 0) computes exactly the base function
    assert model.fingerprint() == base_fingerprint
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    torch.manual_seed(3)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    model.eval()
    trained = model.fingerprint()
    assert trained != base_fingerprint
    expected = encode_queries(model, TEXTS)

    model.save_adapter(tmp_path / "adapter")
    files = {p.name for p in (tmp_path / "adapter").iterdir()}
    assert files == {"adapter_config.json", "adapter_model.safetensors",
                     "convqa_dual_encoder.json"}
    assert json.loads((tmp_path / "adapter" / "adapter_config.json").read_text()
                      )["base_model_name_or_path"] == str(tiny_dir)
    loaded = DualEncoder.from_pretrained(tmp_path / "adapter")
    assert loaded.has_adapters and loaded.fingerprint() == trained
    assert torch.allclose(encode_queries(loaded, TEXTS), expected, atol=1e-6)
    loaded.merge_adapters()
    assert not loaded.has_adapters and loaded.fingerprint() == trained
    assert torch.allclose(encode_queries(loaded, TEXTS), expected, atol=1e-5)

    # full save of an adapter model: merged weights, model left unmerged
    model.save_pretrained(tmp_path / "full", adapter_only=False)
    assert (tmp_path / "full" / "model.safetensors").exists() and model.has_adapters
    assert DualEncoder.from_pretrained(tmp_path / "full").fingerprint() == trained

    # a plain peft adapter folder (no convqa json) loads over its named base
    (tmp_path / "adapter" / "convqa_dual_encoder.json").unlink()
    plain = DualEncoder.from_pretrained(tmp_path / "adapter")
    assert plain.fingerprint() == trained


def test_separate_towers_with_lora(tiny_dir, other_tiny_dir, tmp_path):
    config = DualEncoderConfig(model=str(tiny_dir), passage_model=str(other_tiny_dir))
    model = DualEncoder.build(config).add_lora(r=2)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.fill_(0.01)
    model.save_adapter(tmp_path / "a")
    assert (tmp_path / "a" / "passage_encoder" / "adapter_model.safetensors").exists()
    assert DualEncoder.from_pretrained(tmp_path / "a").fingerprint() == model.fingerprint()


def test_bad_inputs_are_clear_errors(tiny_dir, tmp_path):
    with pytest.raises(ValueError, match="pooling"):
        DualEncoderConfig(pooling="max")
    with pytest.raises(ValueError, match="passage_max_length"):
        DualEncoderConfig(passage_max_length=0)
    with pytest.raises(ConvQAError, match="cannot load encoder"):
        DualEncoder.build(DualEncoderConfig(model=str(tmp_path / "missing")))
    # weights only as a pickle (.bin): refused, safetensors only
    torch_only = tmp_path / "binonly"
    shutil.copytree(tiny_dir, torch_only)
    from safetensors.torch import load_file
    torch.save(load_file(str(torch_only / "model.safetensors")), torch_only / "pytorch_model.bin")
    (torch_only / "model.safetensors").unlink()
    with pytest.raises(ConvQAError, match="safetensors"):
        DualEncoder.from_pretrained(torch_only)
    # our json, damaged
    model = DualEncoder.build(DualEncoderConfig(model=str(tiny_dir)))
    model.save_pretrained(tmp_path / "m")
    meta = tmp_path / "m" / "convqa_dual_encoder.json"
    data = json.loads(meta.read_text())
    meta.write_text(json.dumps({**data, "config": {**data["config"], "poolin": "cls"}}))
    with pytest.raises(DataError, match="unknown dual encoder option 'poolin'"):
        DualEncoder.from_pretrained(tmp_path / "m")
    meta.write_text(json.dumps({**data, "format": "something"}))
    with pytest.raises(DataError, match="not a convqa dual encoder"):
        DualEncoder.from_pretrained(tmp_path / "m")
    # never overwrite a folder that is not ours
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "notes.txt").write_text("keep me")
    with pytest.raises(ConvQAError, match="not a convqa dual encoder"):
        model.save_pretrained(tmp_path / "foreign")
    assert (tmp_path / "foreign" / "notes.txt").read_text() == "keep me"
    with pytest.raises(ConvQAError, match="no LoRA adapters"):
        model.save_adapter(tmp_path / "nolora")
