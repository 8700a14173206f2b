"""The extractive reader on an MPNet encoder (all-mpnet-base-v2's architecture, tiny and
random): no token type ids, `<s> A </s></s> B </s>` windows, LoRA on its q/k/v/o and dense
layers; `convqa train reader --model` trains, saves, reloads and scores it on real SQuAD."""
from __future__ import annotations

import json

import torch

from conftest import shared_file
from convqa.front.cli.main import main
from convqa.towers import load_encoder, lora_targets
from readers.extractive.model import ExtractiveReader, ExtractiveReaderConfig
from reader_helpers import bert_config, save_tiny_mpnet, single_thread  # noqa: F401 (autouse)


def test_lora_targets_follow_the_architecture(tmp_path):
    from transformers import BertModel

    assert lora_targets(BertModel(bert_config(), add_pooling_layer=False)) == [
        "dense", "key", "query", "value"]
    mpnet = load_encoder(str(save_tiny_mpnet(tmp_path / "mpnet")))
    assert lora_targets(mpnet) == ["dense", "k", "o", "q", "v"]


def test_mpnet_reader_reads_and_adapts(tmp_path):
    from readers.extractive.inputs import build_features
    from convqa.types import Passage

    folder = save_tiny_mpnet(tmp_path / "mpnet")
    reader = ExtractiveReader.build(ExtractiveReaderConfig(
        model=str(folder), max_length=64, doc_stride=16, max_query_length=16,
        max_title_length=8))
    passage = Passage(id="p", title="Kubrick", text="Stanley Kubrick directed 2001: A Space "
                      "Odyssey, released in 1968. " * 4)
    features = build_features(reader.tokenizer, ["who directed it?"], [passage], reader.config)
    assert "token_type_ids" not in features.tensors and len(features) > 1   # several windows
    first = features.tensors["input_ids"][0].tolist()
    assert first[0] == reader.tokenizer.cls_token_id
    assert reader.tokenizer.convert_ids_to_tokens(first).count("</s>") >= 3
    logits = reader(**reader.model_inputs(features.tensors))
    assert logits.start.shape == features.context.shape and logits.selection.shape == (
        len(features),)
    reader.add_lora(r=4, alpha=8)
    adapted = {name.split(".lora_A.")[0].rsplit(".", 1)[-1]
               for name, _ in reader.encoder.named_parameters()
               if ".lora_A." in name}
    assert adapted == {"q", "k", "v", "o", "dense"}


def test_train_mpnet_reader_with_lora(tmp_path, capsys):
    encoder = save_tiny_mpnet(tmp_path / "mpnet")
    out = tmp_path / "run"
    arguments = ["train", "reader", "--squad", str(shared_file("squad/dev-v2.0.json")),
                 "--out", str(out), "--model", str(encoder), "--lora", "4", "--max-steps", "2",
                 "--batch-size", "2", "--passages-per-question", "2", "--negatives", "1",
                 "--max-examples", "6", "--max-heldout", "3", "--eval-examples", "3",
                 "--max-length", "128", "--history-max-tokens", "24", "--lr", "1e-2",
                 "--checkpoint-every", "1", "--quiet"]
    assert main(arguments) == 0
    printed = capsys.readouterr().out
    assert "training: 2 steps" in printed and "squad:dev-v2.0: gold passage EM" in printed
    record = json.loads((out / "training.json").read_text())
    assert record["init_model"] == str(encoder) and record["lora_r"] == 4
    adapter = json.loads((out / "model" / "adapter_config.json").read_text())
    assert sorted(adapter["target_modules"]) == ["dense", "k", "o", "q", "v"]
    trained = ExtractiveReader.from_pretrained(out / "model")
    assert type(trained.encoder.base_model.model).__name__ == "MPNetModel"
    lora_b = [p for name, p in trained.encoder.named_parameters() if ".lora_B." in name]
    assert lora_b and any(float(p.abs().max()) > 0 for p in lora_b)   # LoRA B starts at 0
    evaluation = json.loads((out / "eval.json").read_text())
    assert evaluation["model_fingerprint"] == trained.fingerprint()
    # rerun: the finished run is reused, the same model
    assert main(arguments) == 0
    assert "evaluation: already done" in capsys.readouterr().out
    merged = ExtractiveReader.from_pretrained(out / "model").merge_adapters()
    assert merged.fingerprint() == trained.fingerprint()
    with torch.no_grad():
        assert all(torch.isfinite(p).all() for p in merged.parameters())
