"""The model base shared by every convqa model: LoRA targets read from the architecture,
inputs an encoder does not take left out, device names, first-use precision."""
from __future__ import annotations

import pytest
import torch

from convqa.errors import ConfigError
from convqa.model_base import lora_targets, resolve_device, takes_input
from convqa.precision import PrecisionChoice, PrecisionOnFirstUse


def _bert():
    from transformers import BertConfig, BertModel

    return BertModel(BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2,
                                num_attention_heads=2, intermediate_size=64),
                     add_pooling_layer=False)


def _mpnet(vocab_size: int = 50):
    from transformers import MPNetConfig, MPNetModel

    return MPNetModel(MPNetConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2,
                                  num_attention_heads=2, intermediate_size=64),
                      add_pooling_layer=False)


def test_lora_targets_are_the_architectures_linear_layers():
    assert lora_targets(_bert()) == ["dense", "key", "query", "value"]
    assert lora_targets(_mpnet()) == ["dense", "k", "o", "q", "v"]
    with pytest.raises(ConfigError, match="no linear layers"):
        lora_targets(torch.nn.Embedding(3, 2))


def test_lora_targets_adapt_every_linear_layer_of_mpnet():
    from peft import LoraConfig, get_peft_model

    tower = _mpnet()
    linear = sum(isinstance(m, torch.nn.Linear) for m in tower.modules())
    adapted = get_peft_model(tower, LoraConfig(r=2, target_modules=lora_targets(tower)))
    assert sum(hasattr(m, "lora_A") for m in adapted.modules()) == linear


def test_token_type_ids_reach_only_encoders_that_take_them():
    from peft import LoraConfig, get_peft_model

    assert takes_input(_bert(), "token_type_ids")
    assert not takes_input(_mpnet(), "token_type_ids")
    assert takes_input(_mpnet(), "attention_mask")
    wrapped = get_peft_model(_mpnet(), LoraConfig(r=2, target_modules=["q"]))
    assert not takes_input(wrapped, "token_type_ids")


def test_device_names():
    assert resolve_device("cpu", "x") == torch.device("cpu")
    assert resolve_device("auto", "x").type in ("cpu", "cuda")
    with pytest.raises(ConfigError, match="dense: bad device 'gpu0'"):
        resolve_device("gpu0", "dense")


def test_auto_precision_is_measured_once_and_a_forced_one_never():
    calls = []

    def choose():
        calls.append(1)
        return PrecisionChoice("bf16", "test", {"fp32": 2.0, "bf16": 1.0})

    auto = PrecisionOnFirstUse("auto")
    assert auto.value is None and auto.choice is None
    assert auto.resolve(choose) == "bf16" and auto.resolve(choose) == "bf16"
    assert len(calls) == 1 and auto.choice.seconds == {"fp32": 2.0, "bf16": 1.0}
    forced = PrecisionOnFirstUse("float32")
    assert forced.resolve(choose) == "fp32" and len(calls) == 1 and forced.choice is None
    with pytest.raises(ConfigError, match="reader precision: unknown precision 'fp8'"):
        PrecisionOnFirstUse("fp8", "reader precision")


def test_a_dual_encoder_over_mpnet_trains_saves_and_loads_its_lora(tmp_path):
    """MPNet takes no token_type_ids (MiniLM's tokenizer makes them) and names its attention
    layers q/k/v/o: the dual encoder encodes, adapts and round-trips all the same."""
    from convqa.models import load_tokenizer
    from convqa.types import Passage
    from retrievers.dense.model import DualEncoder, DualEncoderConfig

    torch.manual_seed(0)
    base = tmp_path / "mpnet"
    _mpnet(load_tokenizer().vocab_size).save_pretrained(str(base))
    load_tokenizer().save_pretrained(str(base))
    model = DualEncoder.build(DualEncoderConfig(model=str(base))).add_lora(r=2, alpha=4)
    adapted = {name.rsplit(".", 1)[-1] for name, module in model.query_encoder.named_modules()
               if hasattr(module, "lora_A")}
    assert adapted == {"q", "k", "v", "o", "dense"}
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(std=0.1)
    batch = model.tokenize_queries(["who wrote it?", "where is the tower?"])
    assert "token_type_ids" in batch
    passages = [Passage("p", "The tower stands in Paris.", "Eiffel")]
    model.eval()
    seen = []
    hook = model.query_encoder.register_forward_pre_hook(
        lambda module, args, kwargs: seen.append(sorted(kwargs)), with_kwargs=True)
    with torch.no_grad():
        queries = model.encode_query(batch)
        vectors = model.encode_passage(model.tokenize_passages(passages))
    hook.remove()
    assert seen == [["attention_mask", "input_ids"]] * 2  # shared tower: queries, passages
    model.save_pretrained(tmp_path / "adapter")
    assert (tmp_path / "adapter" / "adapter_model.safetensors").exists()
    loaded = DualEncoder.from_pretrained(tmp_path / "adapter").eval()
    assert loaded.fingerprint() == model.fingerprint()
    with torch.no_grad():
        assert torch.allclose(loaded.encode_query(batch), queries, atol=1e-6)
        assert torch.allclose(loaded.encode_passage(loaded.tokenize_passages(passages)),
                              vectors, atol=1e-6)


def test_for_inference_merges_moves_and_evaluates_keeping_the_fingerprint():
    from reader_helpers import tiny_reader

    reader = tiny_reader().add_lora(r=2, alpha=4)
    with torch.no_grad():
        for name, parameter in reader.named_parameters():
            if "lora_B" in name:
                parameter.normal_(std=0.1)
    before = reader.fingerprint()
    reader.train()
    assert reader.for_inference("cpu", "reader 'extractive'") is reader
    assert not reader.has_adapters and not reader.training
    assert reader.fingerprint() == before and reader.device == torch.device("cpu")
    with pytest.raises(ConfigError, match="reader 'extractive': bad device 'gpu'"):
        reader.for_inference("gpu", "reader 'extractive'")
