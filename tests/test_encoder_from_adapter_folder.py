"""A model folder saved as a LoRA adapter only (as the shipped reader is) serves as the encoder
another model starts from (convqa/towers.py `load_encoder`): its base with the adapter merged,
read with its base's tokenizer; the shipped reranker is built on the shipped reader that way."""
from __future__ import annotations

import json

import pytest
import torch

from convqa.towers import adapter_only_base, load_encoder, load_encoder_tokenizer
from reader_helpers import one_thread, save_tiny_encoder  # noqa: F401 (one_thread: autouse)


def _adapter_folder(tmp_path):
    from peft import LoraConfig, get_peft_model
    from transformers import BertModel

    base = save_tiny_encoder(tmp_path / "base", seed=1)
    torch.manual_seed(2)
    model = get_peft_model(BertModel.from_pretrained(str(base), add_pooling_layer=False),
                           LoraConfig(r=4, lora_alpha=8, target_modules=["query", "value"],
                                      init_lora_weights=False))
    folder = tmp_path / "adapter"
    model.save_pretrained(str(folder))
    merged = model.merge_and_unload().state_dict()
    return base, folder, merged


def test_an_adapter_folder_loads_as_its_merged_encoder(tmp_path):
    base, folder, merged = _adapter_folder(tmp_path)
    assert adapter_only_base(folder) == str(base)
    assert adapter_only_base(base) is None  # full weights: an ordinary checkpoint
    encoder = load_encoder(str(folder))
    state = encoder.state_dict()
    assert set(state) == set(merged)
    assert max((state[k] - merged[k]).abs().max().item() for k in merged) < 1e-6
    plain = load_encoder(str(base)).state_dict()
    assert (state["encoder.layer.0.attention.self.query.weight"]
            - plain["encoder.layer.0.attention.self.query.weight"]).abs().max() > 1e-4
    tokenizer = load_encoder_tokenizer(str(folder))
    assert tokenizer("hello world")["input_ids"] == \
        load_encoder_tokenizer(str(base))("hello world")["input_ids"]


def test_an_adapter_folder_without_a_base_is_a_one_line_error(tmp_path):
    from convqa.errors import DataError

    _, folder, _ = _adapter_folder(tmp_path)
    config = json.loads((folder / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = ""
    (folder / "adapter_config.json").write_text(json.dumps(config))
    with pytest.raises(DataError, match="base_model_name_or_path"):
        load_encoder(str(folder))


def test_the_shipped_reranker_ranks_the_answer_passage_first():
    from convqa.types import Passage
    from retrievers.rerank import CrossEncoder

    model = CrossEncoder.from_pretrained("convqa-reranker")
    assert model.config.model == "convqa-reader"
    # calibrated per retriever: DPR-IHN's ranking weighs more than BM25's
    weights = model.retriever_weights
    assert weights["dense:convqa-dpr-ihn"] > weights["bm25"] > 0
    passages = [Passage("m#0", "Melbourne is the capital of the Australian state of Victoria.",
                        "Melbourne"),
                Passage("k#0", "2001: A Space Odyssey is a 1968 film produced and directed by "
                               "Stanley Kubrick.", "2001: A Space Odyssey")]
    model.eval()
    with torch.no_grad():
        tensors = model.encode_pairs(["Who directed 2001: A Space Odyssey?"] * 2, passages)
        logits = model(**model.model_inputs(tensors)).flatten()
    assert logits[1] > logits[0] + 2.0
