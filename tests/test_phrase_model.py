"""The phrase model: vectors and filter logits, passage tokenization with text offsets, query
formatting, save/load (full and LoRA), fingerprints, and clear refusals."""
from __future__ import annotations

import json

import pytest
import torch

from convqa.errors import ConvQAError, DataError
from convqa.types import Turn
from phrase_index.model import (HEADS_FILE, META_FILE, NOT_TEXT, QUERY_DIR, PhraseModel,
                                PhraseModelConfig)
from phrase_model_helpers import phrase_config, tiny_base, tiny_phrase_model
from reader_helpers import single_thread  # noqa: F401 (autouse fixture: one thread)

TITLES = ["Danube", "Alpha Centauri"]
TEXTS = ["The Danube is 2850 kilometres long and flows into the Black Sea.",
         "Alpha Centauri is the closest star system to the Sun."]


def vectors(model: PhraseModel):
    model.eval()
    enc = model.tokenize_passages(TITLES, TEXTS)
    with torch.no_grad():
        return model.encode_passages(enc["input_ids"], enc["attention_mask"]), enc


def query_vectors(model: PhraseModel, texts=("how long is the danube?",)):
    model.eval()
    enc = model.tokenize_queries(list(texts))
    with torch.no_grad():
        return model.encode_queries(enc["input_ids"], enc["attention_mask"])


def test_passage_vectors_filter_logits_and_shapes():
    model = tiny_phrase_model()
    out, enc = vectors(model)
    batch, length = enc["input_ids"].shape
    assert out.start.shape == out.end.shape == (batch, length, 32)
    assert out.start_filter.shape == out.end_filter.shape == (batch, length)
    assert all(t.dtype == torch.float32 for t in out)
    assert out.start is out.end and model.shares_start_end  # one vector per token (module doc)
    # the filter is Linear(h, 2) on the token vectors: check one logit by hand
    w, b = model.filter_head.weight, model.filter_head.bias
    assert torch.allclose(out.end_filter[1, 3], out.start[1, 3] @ w[1] + b[1], atol=1e-6)
    # vectors have gradients in training mode
    model.train()
    grad_out = model.encode_passages(enc["input_ids"], enc["attention_mask"])
    grad_out.start_filter.sum().backward()
    assert model.filter_head.weight.grad is not None


def test_offsets_point_into_the_text_and_only_text_tokens_are_boundaries(minilm_tokenizer):
    model = tiny_phrase_model()
    enc = model.tokenize_passages(TITLES, TEXTS)
    for row, text in enumerate(TEXTS):
        mask, offsets = enc["phrase_mask"][row], enc["offset_mapping"][row]
        ids = enc["input_ids"][row]
        words = [text[s:e] for s, e in offsets[mask].tolist()]
        # the text tokens spell the text (lower-cased, the tokenizer is uncased)
        assert "".join(words).lower() == text.replace(" ", "").lower()
        assert minilm_tokenizer.decode(ids[mask]) == text.lower()
        # title, [CLS], [SEP] and padding are never boundaries and carry NOT_TEXT offsets
        assert (offsets[~mask] == NOT_TEXT).all()
        assert not mask[0] and ids[0] == minilm_tokenizer.cls_token_id
        title_tokens = len(minilm_tokenizer(TITLES[row], add_special_tokens=False)["input_ids"])
        assert not mask[:title_tokens + 2].any() and mask[title_tokens + 2]


def test_long_text_is_cut_or_windowed_and_titles_cut():
    model = tiny_phrase_model(max_passage_tokens=32, max_title_tokens=2)
    text = " ".join(f"word{n}" for n in range(60))
    cut = model.tokenize_passages(["A very long title indeed"], [text])
    assert cut["input_ids"].shape == (1, 32)
    # the title kept 2 tokens: [CLS] t1 t2 [SEP] then text
    assert model.tokenizer.decode(cut["input_ids"][0, 1:3]) == "a very"
    assert cut["phrase_mask"][0, 4] and not cut["phrase_mask"][0, 3]
    windows = model.tokenize_passages(["T"], [text], stride=8)
    mapping = windows["overflow_to_sample_mapping"].tolist()
    assert len(mapping) > 1 and set(mapping) == {0}
    # every window's offsets still index the passage text
    last = windows["offset_mapping"][-1][windows["phrase_mask"][-1]]
    assert text[last[-1, 0]:last[-1, 1]] == "59"


def test_format_query_is_current_first_within_the_query_budget():
    model = tiny_phrase_model(max_query_tokens=24)
    history = [Turn("who wrote hamlet?", "shakespeare"), Turn("when was he born?", "1564")]
    assert model.format_query("where?", history) == \
        "where? [SEP] 1564 [SEP] when was he born? [SEP] shakespeare [SEP] who wrote hamlet?"
    long = [Turn("what " * 30, "answer " * 30)]
    query = model.format_query("where was the globe theatre?", long)
    assert query.startswith("where was the globe theatre? [SEP]")
    tokens = model.tokenize_queries([query])["input_ids"]
    assert tokens.shape[1] <= 24 and tokens[0, -1] == model.tokenizer.sep_token_id
    assert len(model.tokenizer(query)["input_ids"]) <= 24  # never cut by the encoder
    with pytest.raises(DataError, match="question"):
        model.format_query("  ", history)


def test_query_vectors_ignore_padding_and_start_equal_end_before_training():
    model = tiny_phrase_model()
    alone = query_vectors(model, ["how long?"])
    padded = query_vectors(model, ["how long?", "a much longer question about the danube?"])
    assert torch.allclose(alone.start[0], padded.start[0], atol=1e-5)
    assert alone.start.shape == (1, 32)
    assert torch.equal(alone.start, alone.end)  # identity-initialised heads
    with torch.no_grad():
        model.query_end_head.weight.mul_(2.0)
    changed = query_vectors(model, ["how long?"])
    assert torch.allclose(changed.end, 2 * changed.start, atol=1e-5)


def test_shared_query_encoder_and_parameter_groups():
    shared = tiny_phrase_model(shared_query_encoder=True)
    assert shared.separate_query_encoder is None and shared.query_encoder is shared.phrase_encoder
    ids = {id(p) for p in shared.query_parameters()}
    assert not ids & {id(p) for p in shared.phrase_encoder.parameters()}
    separate = tiny_phrase_model()
    phrase = {id(p) for p in separate.phrase_parameters()}
    query = {id(p) for p in separate.query_parameters()}
    assert not phrase & query
    assert phrase | query == {id(p) for p in separate.parameters()}


def test_full_save_load_round_trip_and_fingerprints(tmp_path):
    model = tiny_phrase_model(seed=3)
    model.save(tmp_path / "m")
    files = {p.name for p in (tmp_path / "m").iterdir()}
    assert {META_FILE, HEADS_FILE, "model.safetensors", QUERY_DIR} <= files
    assert not any(name.endswith((".bin", ".pt", ".pkl")) for name in files)
    meta = json.loads((tmp_path / "m" / META_FILE).read_text())
    loaded = PhraseModel.load(tmp_path / "m")
    assert loaded.config == model.config
    assert loaded.fingerprint() == model.fingerprint() == meta["fingerprint"]
    assert loaded.full_fingerprint() == model.full_fingerprint() == meta["full_fingerprint"]
    a, b = vectors(model)[0], vectors(loaded)[0]
    assert torch.equal(a.start, b.start) and torch.equal(a.start_filter, b.start_filter)
    assert torch.equal(query_vectors(model).end, query_vectors(loaded).end)
    # the query side leaves the (index) fingerprint alone but not the full one
    with torch.no_grad():
        loaded.query_start_head.bias.add_(0.1)
    assert loaded.fingerprint() == model.fingerprint()
    assert loaded.full_fingerprint() != model.full_fingerprint()
    with torch.no_grad():
        loaded.filter_head.bias.add_(0.1)
    assert loaded.fingerprint() != model.fingerprint()
    # saving again replaces the folder atomically, leaving no temporary folders
    other = tiny_phrase_model(seed=4)
    other.save(tmp_path / "m")
    assert PhraseModel.load(tmp_path / "m").fingerprint() == other.fingerprint()
    assert [p.name for p in tmp_path.iterdir()] == ["m"]


def test_lora_adapters_save_load_and_merge(tmp_path):
    base = tiny_base(tmp_path / "base")
    model = PhraseModel.build(phrase_config(base=str(base)))
    assert getattr(model.phrase_encoder, "pooler", None) is None
    model.add_lora(r=4, alpha=8, dropout=0.0)
    torch.manual_seed(1)
    with torch.no_grad():  # LoRA B starts at zero: make the adapters do something
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(std=0.5)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert any("lora_" in n for n in trainable) and "filter_head.weight" in trainable
    assert not any("lora_" not in n and "encoder" in n for n in trainable)
    plain = PhraseModel.build(phrase_config(base=str(base)))
    model.save(tmp_path / "a")
    files = {p.name for p in (tmp_path / "a").iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", HEADS_FILE} <= files
    assert "model.safetensors" not in files
    assert (tmp_path / "a" / QUERY_DIR / "adapter_model.safetensors").exists()
    loaded = PhraseModel.load(tmp_path / "a")
    assert loaded.has_adapters and loaded.fingerprint() == model.fingerprint()
    assert loaded.full_fingerprint() == model.full_fingerprint()
    assert torch.allclose(vectors(loaded)[0].start, vectors(model)[0].start, atol=1e-6)
    assert not torch.allclose(vectors(plain)[0].start, vectors(model)[0].start, atol=1e-3)
    assert torch.allclose(query_vectors(loaded).start, query_vectors(model).start, atol=1e-6)
    fingerprint = model.fingerprint()
    model.merge_adapters()
    assert not model.has_adapters and model.fingerprint() == fingerprint
    with pytest.raises(ConvQAError, match="no LoRA adapters"):
        model.save(tmp_path / "b", adapter_only=True)


def test_bad_inputs_are_one_line_errors(tmp_path):
    with pytest.raises(ValueError, match="max_answer_tokens"):
        PhraseModelConfig(max_answer_tokens=0)
    with pytest.raises(ValueError, match="history"):
        PhraseModelConfig(history={"window": 6})
    model = tiny_phrase_model()
    with pytest.raises(ConvQAError, match="2 titles for 1 passage texts"):
        model.tokenize_passages(["a", "b"], ["text"])
    with pytest.raises(DataError, match=r"passages\[0\]"):
        model.tokenize_passages([None], ["text"])
    with pytest.raises(DataError, match="not a convqa phrase model"):
        PhraseModel.load(tmp_path / "missing")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "x.txt").write_text("x")
    with pytest.raises(ConvQAError, match="not a convqa phrase model; not replacing"):
        model.save(tmp_path / "other")
    model.save(tmp_path / "m")
    meta_path = tmp_path / "m" / META_FILE
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({**meta, "config": {**meta["config"], "colour": 1}}))
    with pytest.raises(DataError, match="unknown phrase model option 'colour'") as info:
        PhraseModel.load(tmp_path / "m")
    assert "\n" not in str(info.value) and str(meta_path) in str(info.value)
    meta_path.write_text(json.dumps({**meta, "version": 9}))
    with pytest.raises(DataError, match="version"):
        PhraseModel.load(tmp_path / "m")
    meta_path.write_text(json.dumps(meta))
    from safetensors.torch import load_file, save_file
    heads = load_file(str(tmp_path / "m" / HEADS_FILE))
    save_file({**heads, "filter.weight": torch.zeros(2, 8)}, str(tmp_path / "m" / HEADS_FILE))
    with pytest.raises(DataError, match=r"filter head has shape \(2, 8\)"):
        PhraseModel.load(tmp_path / "m")
    (tmp_path / "m" / HEADS_FILE).write_bytes(b"not safetensors")
    with pytest.raises(DataError, match="cannot read phrase heads"):
        PhraseModel.load(tmp_path / "m")
    (tmp_path / "m" / HEADS_FILE).unlink()
    with pytest.raises(DataError, match="phrase heads missing"):
        PhraseModel.load(tmp_path / "m")
