"""The reader model: heads, save/load round trips (full and LoRA adapter), Hugging Face QA
checkpoints, fingerprints, and refusals of what it cannot load."""
from __future__ import annotations

import json

import pytest
import torch

from convqa.errors import ConfigError, ConvQAError, DataError
from convqa.types import Passage
from readers.extractive.inputs import build_features
from readers.extractive.model import (HEADS_FILE, META_FILE, ExtractiveReader,
                                      ExtractiveReaderConfig)
from reader_helpers import (reader_config, save_tiny_encoder, save_tiny_qa_checkpoint,
                            tiny_reader)
from reader_helpers import single_thread  # noqa: F401 (autouse fixture: one thread)

PASSAGES = [Passage("a", "Alpha Centauri is the closest star system to the Sun.", "Alpha"),
            Passage("b", "The Danube is 2850 kilometres long. " * 16, "Danube")]


def logits(reader: ExtractiveReader, query: str = "how long is the danube?"):
    features = build_features(reader.tokenizer, [query] * len(PASSAGES), PASSAGES, reader.config)
    reader.eval()
    with torch.no_grad():
        return reader(**reader.model_inputs(features.tensors)), features


def same(a, b) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b) if x is not None) and \
        (a.selection is None) == (b.selection is None)


def test_forward_shapes_and_windows():
    reader = tiny_reader()
    out, features = logits(reader)
    windows, length = features.context.shape
    assert windows > len(PASSAGES)  # the long passage needs several windows of 128 tokens
    assert out.start.shape == out.end.shape == (windows, length)
    assert out.selection.shape == (windows,)
    assert out.start.dtype == torch.float32


def test_build_from_an_encoder_checkpoint(tmp_path):
    encoder = save_tiny_encoder(tmp_path / "enc")
    reader = ExtractiveReader.build(reader_config(model=str(encoder)))
    assert reader.has_selection_head and reader.span_head.out_features == 2
    assert getattr(reader.encoder, "pooler", None) is None  # unused, so dropped
    assert all(p.requires_grad for p in reader.parameters())
    # a bare encoder is no reader: loading it for inference is refused
    with pytest.raises(ConfigError, match="an encoder without reader heads"):
        ExtractiveReader.from_pretrained(encoder)


def test_full_save_load_round_trip(tmp_path):
    reader = tiny_reader(seed=3)
    reader.save_pretrained(tmp_path / "r")
    files = sorted(p.name for p in (tmp_path / "r").iterdir())
    assert META_FILE in files and HEADS_FILE in files and "model.safetensors" in files
    assert not any(name.endswith((".bin", ".pt", ".pkl")) for name in files)
    meta = json.loads((tmp_path / "r" / META_FILE).read_text())
    assert meta["adapter"] is False and meta["selection_head"] is True
    loaded = ExtractiveReader.from_pretrained(tmp_path / "r")
    assert loaded.fingerprint() == reader.fingerprint() == meta["fingerprint"]
    assert loaded.config == reader.config
    assert same(logits(loaded)[0], logits(reader)[0])
    # a different reader differs in fingerprint; saving again replaces the folder atomically
    other = tiny_reader(seed=4)
    assert other.fingerprint() != reader.fingerprint()
    other.save_pretrained(tmp_path / "r")
    assert ExtractiveReader.from_pretrained(tmp_path / "r").fingerprint() == other.fingerprint()
    assert [p.name for p in tmp_path.iterdir()] == ["r"]  # no temporary folders left


def test_lora_adapter_round_trip(tmp_path):
    encoder = save_tiny_encoder(tmp_path / "enc")
    reader = ExtractiveReader.build(reader_config(model=str(encoder)))
    base_print = reader.fingerprint()
    reader.add_lora(r=4, alpha=8, dropout=0.0)
    trainable = {n for n, p in reader.named_parameters() if p.requires_grad}
    assert any("lora_" in n for n in trainable)
    assert {"span_head.weight", "selection_head.weight"} <= trainable  # heads fully trained
    assert not any("encoder" in n and "lora_" not in n for n in trainable)
    with torch.no_grad():  # LoRA B starts at zero: make the adapter matter
        for name, parameter in reader.named_parameters():
            if "lora_B" in name:
                parameter.normal_(std=0.5)
            if "span_head" in name:
                parameter.add_(0.25)
    assert reader.fingerprint() != base_print
    reader.save_pretrained(tmp_path / "adapter")
    files = {p.name for p in (tmp_path / "adapter").iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", HEADS_FILE, META_FILE} <= files
    assert "model.safetensors" not in files  # only the adapter and the heads
    loaded = ExtractiveReader.from_pretrained(tmp_path / "adapter")
    assert loaded.has_adapters and loaded.fingerprint() == reader.fingerprint()
    expected = logits(reader)[0]
    assert all(torch.allclose(x, y, atol=1e-6) for x, y in zip(logits(loaded)[0], expected))
    # merged for inference: same answers, same fingerprint; full weights saved on request
    loaded.merge_adapters()
    assert not loaded.has_adapters and loaded.fingerprint() == reader.fingerprint()
    assert all(torch.allclose(x, y, atol=1e-5) for x, y in zip(logits(loaded)[0], expected))
    reader.save_pretrained(tmp_path / "full", adapter_only=False)
    assert "model.safetensors" in {p.name for p in (tmp_path / "full").iterdir()}
    full = ExtractiveReader.from_pretrained(tmp_path / "full")
    assert not full.has_adapters and full.fingerprint() == reader.fingerprint()
    assert reader.has_adapters  # saving merged weights left the reader itself unmerged
    with pytest.raises(ConvQAError, match="already has LoRA"):
        reader.add_lora()
    with pytest.raises(ConvQAError, match="no LoRA adapters"):
        full.save_pretrained(tmp_path / "x", adapter_only=True)


def test_huggingface_qa_checkpoint_maps_qa_outputs(tmp_path):
    hf = save_tiny_qa_checkpoint(tmp_path / "qa")
    with pytest.warns(UserWarning, match="without a passage-selection head"):
        reader = ExtractiveReader.from_pretrained(tmp_path / "qa",
                                                  config=reader_config(model=str(tmp_path / "qa")))
    assert reader.selection_head is None and not reader.has_selection_head
    out, features = logits(reader)
    with torch.no_grad():
        reference = hf(**{k: v for k, v in features.tensors.items()})
    assert torch.allclose(out.start, reference.start_logits, atol=1e-6)
    assert torch.allclose(out.end, reference.end_logits, atol=1e-6)
    assert out.selection is None
    # saved and reloaded it stays selection-free; as a training start it gains a fresh head
    reader.save_pretrained(tmp_path / "saved")
    again = ExtractiveReader.from_pretrained(tmp_path / "saved")
    assert again.selection_head is None and again.fingerprint() == reader.fingerprint()
    built = ExtractiveReader.build(reader_config(model=str(tmp_path / "qa")))
    assert built.has_selection_head
    assert torch.equal(built.span_head.weight, hf.qa_outputs.weight)


def test_refusals(tmp_path):
    with pytest.raises(DataError, match="reader model not found"):
        ExtractiveReader.from_pretrained(tmp_path / "missing")
    reader = tiny_reader()
    reader.save_pretrained(tmp_path / "r")
    meta_path = tmp_path / "r" / META_FILE
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({**meta, "format": "something-else"}))
    with pytest.raises(DataError, match="not a convqa extractive reader"):
        ExtractiveReader.from_pretrained(tmp_path / "r")
    meta_path.write_text(json.dumps({**meta, "config": {**meta["config"], "colour": "red"}}))
    with pytest.raises(DataError, match="unknown reader option 'colour'"):
        ExtractiveReader.from_pretrained(tmp_path / "r")
    meta_path.write_text(json.dumps(meta))
    from safetensors.torch import save_file

    save_file({"span.weight": torch.zeros(2, 16), "span.bias": torch.zeros(2)},
              str(tmp_path / "r" / HEADS_FILE))
    with pytest.raises(DataError, match=r"span head has shape \(2, 16\), expected \(2, 32\)"):
        ExtractiveReader.from_pretrained(tmp_path / "r")
    (tmp_path / "r" / HEADS_FILE).unlink()
    with pytest.raises(DataError, match="reader heads missing"):
        ExtractiveReader.from_pretrained(tmp_path / "r")
    # a peft adapter without our metadata has no heads
    (tmp_path / "peft").mkdir()
    (tmp_path / "peft" / "adapter_config.json").write_text("{}")
    with pytest.raises(DataError, match="reader heads are missing"):
        ExtractiveReader.from_pretrained(tmp_path / "peft")
    # never overwrite a folder that is not a reader
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(ConvQAError, match="not a convqa extractive reader; not replacing it"):
        reader.save_pretrained(tmp_path / "other")
    with pytest.raises(ValueError, match="max_answer_length must be an int >= 1"):
        ExtractiveReaderConfig(max_answer_length=0)


def test_fewer_encoder_layers(tmp_path):
    encoder = save_tiny_encoder(tmp_path / "enc")
    reader = ExtractiveReader.build(reader_config(model=str(encoder), encoder_layers=1))
    assert len(reader.encoder.encoder.layer) == 1 and reader.encoder.config.num_hidden_layers == 1
    reader.save_pretrained(tmp_path / "full")
    full = ExtractiveReader.from_pretrained(tmp_path / "full")
    assert len(full.encoder.encoder.layer) == 1 and full.fingerprint() == reader.fingerprint()
    reader.add_lora(r=2, alpha=4, dropout=0.0)
    reader.save_pretrained(tmp_path / "adapter")  # over the 2-layer base: cut again on load
    adapter = ExtractiveReader.from_pretrained(tmp_path / "adapter")
    assert adapter.fingerprint() == reader.fingerprint()
    assert same(logits(adapter)[0], logits(reader)[0])
    with pytest.raises(ValueError, match="encoder_layers must be an int >= 1"):
        reader_config(encoder_layers=0)
