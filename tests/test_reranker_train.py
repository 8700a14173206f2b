"""Reranker training: the batch and the listwise loss, a tiny model that learns to put the
identifiable positive first (on held-out questions too), a resumed run that ends where an
uninterrupted one ends, and the held-out MRR / Hits@1."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from convqa.errors import ConfigError
from convqa.types import Hit
from reader_helpers import single_thread  # noqa: F401 (autouse fixture)
from reranker_helpers import tiny_cross_encoder, toy_examples
from retrievers.rerank.model import CrossEncoder
from retrievers.rerank.reranker import CrossEncoderReranker
from retrievers.rerank.train import (RerankTrainConfig, choose_negatives, evaluate_ranking,
                                     listwise_loss, make_rerank_batch, summarize_ranks,
                                     train_reranker)
from training_helpers import Killed, kill_after


def config(**overrides):
    base = dict(batch_size=4, negatives=3, lr=3e-3, warmup_ratio=0.0, epochs=6,
                progress=False, checkpoint_every=0, weight_decay=0.0)
    return RerankTrainConfig(**{**base, **overrides})


def weights(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_negatives_take_both_kinds_in_turn():
    example = toy_examples(1, negatives=6)[0]  # 3 same-article, 3 mined
    rng = np.random.default_rng(0)
    chosen = [getattr(example, kind)[i] for kind, i in choose_negatives(example, 4, rng)]
    kinds = ["article" if p in example.article_negatives else "mined" for p in chosen]
    assert kinds == ["article", "mined", "article", "mined"]
    assert len({p.id for p in chosen}) == 4
    assert len(choose_negatives(example, 10, rng)) == 6  # all there are, none repeated


def test_batch_layout_masks_missing_negatives():
    examples = toy_examples(2, negatives=3)
    examples[1].article_negatives, examples[1].mined_negatives = [], examples[1].mined_negatives[:1]
    model = tiny_cross_encoder()
    batch = make_rerank_batch(examples, [0, 1], lambda i: examples[i].question, model, 3,
                              seed=0, epoch=0)
    # question 0: positive + 3 negatives in slots 0-3; question 1: positive + 1 in slots 4-5
    assert batch.slots.tolist() == [0, 1, 2, 3, 4, 5] and batch.padded == 2
    assert batch.tensors["input_ids"].shape[0] == 6
    first = model.tokenizer.decode(batch.tensors["input_ids"][0])
    assert "the violin is described here" in first  # slot 0 holds the positive
    again = make_rerank_batch(examples, [0, 1], lambda i: examples[i].question, model, 3, 0, 0)
    assert torch.equal(again.tensors["input_ids"], batch.tensors["input_ids"])  # seeded
    other = make_rerank_batch(examples, [0, 1], lambda i: examples[i].question, model, 3, 0, 1)
    assert not torch.equal(other.tensors["input_ids"], batch.tensors["input_ids"])


def test_listwise_loss():
    even = torch.zeros(2, 4)
    assert float(listwise_loss(even)) == pytest.approx(math.log(4))
    masked = torch.tensor([[0.0, 0.0, float("-inf"), float("-inf")]])
    assert float(listwise_loss(masked)) == pytest.approx(math.log(2))
    sure = torch.tensor([[20.0, 0.0, 0.0]])
    assert float(listwise_loss(sure)) < 1e-7


def test_held_out_ranks_count_ties_against_the_positive():
    examples = toy_examples(3, negatives=4, split="heldout")
    flat = tiny_cross_encoder()
    with torch.no_grad():
        flat.head.weight.zero_()  # every candidate scores the same
    scores = evaluate_ranking(flat, examples)
    assert scores["mrr"] == pytest.approx(0.2) and scores["hits@1"] == 0.0
    assert scores["candidates"] == 5.0 and scores["sources"]["toy"]["count"] == 3
    summary = summarize_ranks([("a", 1, 4), ("a", 2, 4), ("b", 4, 8)])
    assert summary["mrr"] == pytest.approx((1 + 0.5 + 0.25) / 3, abs=1e-4)
    assert summary["hits@1"] == pytest.approx(100 / 3, abs=0.01)
    assert summary["sources"]["b"] == {"count": 1, "mrr": 0.25, "hits@1": 0.0, "candidates": 8.0}


def test_training_puts_the_positive_first(tmp_path):
    train, heldout = toy_examples(16), toy_examples(8, split="heldout", offset=5)
    model = tiny_cross_encoder(seed=0)
    before = evaluate_ranking(model, heldout)
    losses = []
    result = train_reranker(model, train, tmp_path / "run", config(eval_every=12,
                                                                   eval_examples=8),
                            on_step=lambda step, loss: losses.append(loss), heldout=heldout)
    assert result.steps == 24 == len(losses)
    assert np.mean(losses[-4:]) < 0.5 * np.mean(losses[:4])
    after = evaluate_ranking(model, heldout)
    assert after["hits@1"] == 100.0 and after["mrr"] == 1.0 and before["hits@1"] < 50.0
    # the curve: step 0, 12 and 24 in log.jsonl, the last equal to the final model's
    lines = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    curve = [(line["step"], line["heldout"]) for line in lines if "heldout" in line]
    assert [step for step, _ in curve] == [0, 12, 24]
    assert curve[0][1]["mrr"] == before["mrr"] and curve[-1][1] == after
    # reranking: a retriever that put the positive last is corrected
    example = heldout[0]
    candidates = example.negatives + example.positives
    hits = [Hit(p.id, 10.0 - i, i + 1) for i, p in enumerate(candidates)]
    reranker = CrossEncoderReranker.from_model(CrossEncoder.from_pretrained(result.model_dir),
                                               precision="fp32")
    reranked = reranker.rerank_turn(example.question, example.history_turns(), hits, candidates)
    assert reranked[0].passage_id == example.positives[0].id
    assert reranked[0].retriever_rank == len(candidates)
    record = json.loads((tmp_path / "run" / "training.json").read_text())
    assert record["model_fingerprint"] == reranker.model.fingerprint()
    assert record["config"]["history"]["name"] == "current_first"  # the reader's format


def test_resume_after_a_kill_gives_the_same_weights(tmp_path):
    train = toy_examples(12)
    settings = config(epochs=2, checkpoint_every=2, length_pool=2, pair_chunk=5)
    whole = tiny_cross_encoder(seed=1, dropout=0.1)
    train_reranker(whole, train, tmp_path / "whole", settings)
    killed = tiny_cross_encoder(seed=1, dropout=0.1)
    with pytest.raises(Killed):
        train_reranker(killed, train, tmp_path / "killed", settings, on_step=kill_after(3))
    assert json.loads((tmp_path / "killed" / "checkpoint" / "state.json").read_text())["step"] == 2
    resumed = tiny_cross_encoder(seed=7, dropout=0.1)  # other start: the checkpoint's weights win
    result = train_reranker(resumed, train, tmp_path / "killed", settings)
    assert result.resumed_from == 2 and result.steps == 6
    a, b = weights(whole), weights(resumed)
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    assert not (tmp_path / "killed" / "checkpoint").exists()
    # a rerun of a finished run returns it; other settings are refused
    assert train_reranker(resumed, train, tmp_path / "killed", settings).steps == 6
    with pytest.raises(ConfigError, match="different settings or data"):
        train_reranker(resumed, train, tmp_path / "killed", config(epochs=2, negatives=2))


def test_lora_and_bf16_training_runs(tmp_path):
    train = toy_examples(8)
    model = tiny_cross_encoder(seed=2).add_lora(r=4, alpha=8)
    result = train_reranker(model, train, tmp_path / "run", config(epochs=1, bf16=True))
    assert result.steps == 2 and math.isfinite(result.last_loss)
    saved = {p.name for p in result.model_dir.iterdir()}
    assert "adapter_model.safetensors" in saved and "model.safetensors" not in saved
    record = json.loads((tmp_path / "run" / "training.json").read_text())
    assert record["lora"] is True and record["precision"]["precision"] == "bf16"


@pytest.mark.parametrize("settings, message", [
    (dict(negatives=0), "negatives must be an integer >= 1"),
    (dict(precision="int8"), "int8 is for inference only"),
    (dict(lr=0), "lr must be a positive number"),
    (dict(pair_chunk=-1), "pair_chunk must be an integer >= 0"),
])
def test_bad_settings(settings, message):
    with pytest.raises(ConfigError, match=message):
        RerankTrainConfig(**settings)


def test_too_few_examples_for_a_step(tmp_path):
    with pytest.raises(ConfigError, match="3 training examples are too few"):
        train_reranker(tiny_cross_encoder(), toy_examples(3), tmp_path / "r", config())


def test_training_further_from_a_shipped_alias_starts_from_its_weights(tmp_path, monkeypatch):
    """`--init-model convqa-reranker` continues the shipped reranker (its encoder and its head),
    not a fresh head on its encoder."""
    import dataclasses

    import convqa.models
    from retrievers.rerank.run import RerankRunConfig, initial_model

    shipped = tiny_cross_encoder(seed=7)
    torch.nn.init.normal_(shipped.head.weight, std=1.0)
    shipped.encoder.save_pretrained(tmp_path / "base")  # the adapter's base, by path
    shipped.tokenizer.save_pretrained(tmp_path / "base")
    shipped.config = dataclasses.replace(shipped.config, model=str(tmp_path / "base"))
    shipped.add_lora(r=2)  # shipped rerankers are LoRA adapters
    with torch.no_grad():
        for name, parameter in shipped.named_parameters():
            if "lora_B" in name:
                parameter.normal_(std=0.5)
    shipped.save_pretrained(tmp_path / "assets" / "tiny-reranker")
    shipped = CrossEncoder.from_pretrained(tmp_path / "assets" / "tiny-reranker")
    monkeypatch.setattr(convqa.models, "ASSETS_DIR", tmp_path / "assets")
    monkeypatch.setitem(convqa.models.SHIPPED_MODELS, "tiny-reranker-alias", "tiny-reranker")
    model = initial_model(RerankRunConfig(init_model="tiny-reranker-alias", lora_r=0))
    inputs = shipped.encode_pairs(["which harbour"] * 2, toy_examples(1)[0].positives * 2)
    with torch.no_grad():
        assert torch.allclose(model.eval()(**inputs), shipped.eval()(**inputs), atol=1e-5)
    # --lora 0 trains every weight, not only the head (the adapter's base loads frozen)
    assert all(parameter.requires_grad for parameter in model.parameters())
    before = weights(model)
    train_reranker(model, toy_examples(8), tmp_path / "run", config(epochs=1))
    changed = {k for k, v in weights(model).items() if not torch.equal(v, before[k])}
    assert any(k.startswith("encoder.") for k in changed) and "head.weight" in changed
