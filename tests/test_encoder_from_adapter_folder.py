"""A model folder saved as a LoRA adapter only (as the shipped reader is) serves as the encoder
another model starts from (convqa/towers.py `load_encoder`): its base with the adapter merged,
read with its base's tokenizer. An adapter computed over such a folder records what that
folder held, and refuses to load over it once it has been retrained (`check_base`)."""
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


def test_a_model_started_from_an_adapter_folder_trains_every_weight(tmp_path):
    """A reranker built over an adapter folder without LoRA of its own (`convqa train
    reranker --init-model convqa-reader-large --lora 0`) moves its encoder, not just its head."""
    from retrievers.rerank.model import CrossEncoder, CrossEncoderConfig

    _, folder, _ = _adapter_folder(tmp_path)
    assert all(p.requires_grad for p in load_encoder(str(folder)).parameters())
    model = CrossEncoder.build(CrossEncoderConfig(model=str(folder), max_length=32,
                                                  max_query_length=8, max_title_length=4))
    before = {k: v.clone() for k, v in model.encoder.state_dict().items()}
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    tokens = torch.randint(5, 90, (2, 12))
    model.encoder(input_ids=tokens).last_hidden_state.pow(2).mean().backward()
    optimizer.step()
    after = model.encoder.state_dict()
    assert max((after[k] - before[k]).abs().max().item() for k in before) > 1e-4


def test_an_adapter_folder_without_a_base_is_a_one_line_error(tmp_path):
    from convqa.errors import DataError

    _, folder, _ = _adapter_folder(tmp_path)
    config = json.loads((folder / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = ""
    (folder / "adapter_config.json").write_text(json.dumps(config))
    with pytest.raises(DataError, match="base_model_name_or_path"):
        load_encoder(str(folder))


def _nested_reranker(tmp_path, folder):
    """A tiny reranker trained (here: moved at random) as a LoRA adapter over `folder`."""
    from retrievers.rerank.model import CrossEncoder, CrossEncoderConfig

    model = CrossEncoder.build(CrossEncoderConfig(model=str(folder), max_length=64,
                                                  max_query_length=16, max_title_length=6))
    model.add_lora(r=4, alpha=8, dropout=0.0)
    torch.manual_seed(3)
    with torch.no_grad():
        for name, parameter in model.encoder.named_parameters():
            if "lora_B" in name:
                parameter.normal_(std=0.05)
    model.save_pretrained(tmp_path / "reranker")
    return model, tmp_path / "reranker"


def test_an_adapter_over_a_retrained_base_folder_refuses_to_load(tmp_path):
    from convqa.errors import DataError
    from convqa.towers import BASE_RECORD, base_digest
    from retrievers.rerank.model import CrossEncoder

    base, folder, _ = _adapter_folder(tmp_path)
    model, reranker = _nested_reranker(tmp_path, folder)
    record = json.loads((reranker / BASE_RECORD).read_text())
    assert record == {"base": str(folder), "digest": base_digest(str(folder))}
    assert CrossEncoder.from_pretrained(reranker).fingerprint() == model.fingerprint()

    # the base folder is retrained in place: its adapter holds other weights now
    from safetensors.torch import load_file, save_file
    weights = load_file(str(folder / "adapter_model.safetensors"))
    save_file({k: v * 1.5 for k, v in weights.items()}, str(folder / "adapter_model.safetensors"))
    assert base_digest(str(folder)) != record["digest"]
    with pytest.raises(DataError, match=f"{BASE_RECORD}.*computed over .*now has"):
        CrossEncoder.from_pretrained(reranker)


def test_an_adapter_over_a_plain_checkpoint_records_no_base(tmp_path):
    from convqa.towers import BASE_RECORD, base_digest

    base, _, _ = _adapter_folder(tmp_path)
    _, reranker = _nested_reranker(tmp_path, base)
    assert base_digest(str(base)) is None
    # an installable model is named, not resolved: a GPU machine exports over a copy of it
    assert base_digest("all-mpnet-base-v2") is None
    assert not (reranker / BASE_RECORD).exists()


def test_the_shipped_models_load_as_the_weights_they_were_measured_with():
    """Each shipped folder's recorded fingerprint is that of the model it loads as: a folder
    over another shipped model's weights that changed since (or a stale export) fails here."""
    from convqa.models import SHIPPED_MODELS, shipped_model_path
    from phrase_index.model import PhraseModel
    from readers.extractive.model import ExtractiveReader
    from retrievers.convdr.model import ConvDR
    from retrievers.dense.model import DualEncoder
    from retrievers.rerank.model import CrossEncoder

    from convqa.model_packages import installed_path, package_named

    classes = {cls.META_FILE: cls for cls in
               (ExtractiveReader, CrossEncoder, ConvDR, DualEncoder, PhraseModel)}
    checked, absent = set(), set()
    for alias in SHIPPED_MODELS:
        for meta, cls in classes.items():
            path = shipped_model_path(alias) / meta
            if path.exists():
                record = json.loads(path.read_text())
                base = package_named(record.get("config", {}).get("model"))
                if base is not None and installed_path(base) is None:
                    absent.add(alias)  # a large model's base: `convqa models install`
                    continue
                assert cls.from_pretrained(alias).fingerprint() == record["fingerprint"], alias
                checked.add(alias)
    assert checked | absent == set(SHIPPED_MODELS)
    assert {"convqa-reader", "convqa-reranker", "convqa-dpr-ihn"} <= checked


def test_the_shipped_reranker_ranks_the_answer_passage_first():
    from convqa.types import Passage
    from retrievers.rerank import CrossEncoder

    model = CrossEncoder.from_pretrained("convqa-reranker")
    # over the packaged encoder itself, so retraining the shipped reader cannot move it
    assert model.config.model == "all-MiniLM-L6-v2"
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


def test_the_large_reader_without_its_base_says_how_to_install_it(tmp_path, monkeypatch, capsys):
    """convqa-reader-large is an adapter over all-mpnet-base-v2, which a plain install lacks:
    loading it, or answering with it, is one line naming the install command."""
    from convqa.errors import ConvQAError
    from convqa.front.cli.main import main
    from readers.extractive.model import ExtractiveReader

    monkeypatch.setenv("CONVQA_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(ConvQAError, match="convqa models install all-mpnet-base-v2"):
        ExtractiveReader.from_pretrained("convqa-reader-large")
    assert main(["answer", "Who directed 2001: A Space Odyssey?", "--retriever", "bm25",
                 "--set", "reader.model=convqa-reader-large"]) == 2
    err = capsys.readouterr().err  # (after the progress of building the passage store)
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("convqa answer: error:") and "install all-mpnet-base-v2" in last
