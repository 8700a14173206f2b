"""The FiD model on a tiny random T5: fused encoding, loss, generation, save/load, LoRA."""
from __future__ import annotations

import pytest
import torch

from convqa.errors import ConfigError, ConvQAError
from convqa.types import Passage, Turn
from fid_helpers import (COLOURS, DISTRACTORS, QUESTION, make_tokenizer, save_checkpoint,
                         tiny_reader, tiny_t5)
from readers.fid.model import META_FILE, FiDConfig, FiDReader
from reader_helpers import single_thread  # noqa: F401 (autouse fixture: one thread)

BOX = [Passage(f"b{i}", f"the box is {c}", "box") for i, c in enumerate(COLOURS)]


@pytest.fixture(scope="module")
def tokenizer():
    return make_tokenizer()


def test_passages_are_encoded_separately_then_fused(tokenizer):
    reader = tiny_reader(tokenizer=tokenizer).eval()
    passages = [[*DISTRACTORS, BOX[0]], [BOX[1], DISTRACTORS[0]]]
    batch = reader.tokenize([QUESTION, "which box ?"], passages)
    b, n, length = batch["input_ids"].shape
    assert (b, n) == (2, 3)
    with torch.no_grad():
        encoded, mask = reader.encode(batch["input_ids"], batch["attention_mask"],
                                      batch["passage_mask"])
    fused = encoded.last_hidden_state
    assert fused.shape == (2, 3 * length, 32) and mask.shape == (2, 3 * length)
    # block j of the fused states is the encoder's output for pair j on its own
    for i, question in enumerate([QUESTION, "which box ?"]):
        for j, passage in enumerate(passages[i]):
            alone = reader.tokenize([question], [[passage]])
            with torch.no_grad():
                single = reader.core.get_encoder()(
                    input_ids=alone["input_ids"][:, 0],
                    attention_mask=alone["attention_mask"][:, 0]).last_hidden_state[0]
            real = alone["attention_mask"][0, 0].sum()
            block = fused[i, j * length:j * length + real]
            assert torch.allclose(block, single[:real], atol=1e-5)
            assert mask[i, j * length:j * length + real].all()
            assert not mask[i, j * length + real:(j + 1) * length].any()
    # the empty third slot of question 2 is hidden from the decoder entirely
    assert not mask[1, 2 * length:].any()


def test_the_decoder_reads_every_passage(tokenizer):
    reader = tiny_reader(tokenizer=tokenizer, n_passages=3).eval()

    def loss(passages):
        batch = reader.tokenize([QUESTION], [passages], ["red"])
        with torch.no_grad():
            return reader(**batch).item()

    base = [DISTRACTORS[0], DISTRACTORS[1], BOX[0], BOX[1]]
    reference = loss(base)
    # changing passage 2 (or 3) changes the loss: the decoder attends to it
    assert abs(loss([base[0], BOX[2], base[2], base[3]]) - reference) > 1e-4
    assert abs(loss([base[0], base[1], BOX[2], base[3]]) - reference) > 1e-4
    # passage 4 is beyond n_passages=3: never read
    assert loss([base[0], base[1], base[2], BOX[3]]) == pytest.approx(reference, abs=1e-6)
    # empty slots of a shorter question change nothing: alone or batched, the same score
    short = [BOX[1]]
    alone = reader.generate_scored(["which box ?"], [short])
    batched = reader.generate_scored([QUESTION, "which box ?"], [base, short])
    assert batched[1][0] == alone[0][0]
    assert batched[1][1] == pytest.approx(alone[0][1], abs=1e-5)


def test_gradient_checkpointing_gives_the_same_loss_and_gradients(tokenizer):
    def loss_and_grads(checkpointing: bool):
        reader = tiny_reader(seed=3, dropout=0.1, tokenizer=tokenizer).train()
        reader.gradient_checkpointing(checkpointing)
        batch = reader.tokenize([QUESTION, "which box ?"], [[*DISTRACTORS, BOX[0]], [BOX[1]]],
                                ["red", "the old one"])
        torch.manual_seed(11)  # dropout on: the recomputation must replay the same masks
        loss = reader(**batch)
        loss.backward()
        return loss.item(), {n: p.grad.clone() for n, p in reader.named_parameters()
                             if p.grad is not None}, reader

    plain_loss, plain, _ = loss_and_grads(False)
    ckpt_loss, ckpt, reader = loss_and_grads(True)
    assert reader.core.encoder.gradient_checkpointing and reader.core.decoder.gradient_checkpointing
    assert ckpt_loss == pytest.approx(plain_loss, abs=1e-6)
    assert plain.keys() == ckpt.keys() and len(plain) > 20
    for name in plain:
        assert torch.allclose(plain[name], ckpt[name], atol=1e-6), name
    reader.gradient_checkpointing(False)
    assert not reader.core.encoder.gradient_checkpointing


def test_history_is_formatted_with_the_readers_tokenizer(tokenizer):
    reader = tiny_reader(tokenizer=tokenizer)
    history = [Turn("which box ?", "the old one")]
    assert reader.format_question(QUESTION, history) == \
        "what colour is the box ? [SEP] the old one [SEP] which box ?"
    oldest = tiny_reader(tokenizer=tokenizer, history={"name": "oldest_first", "max_tokens": 9,
                                                        "separator": " | "})
    # 9 tokens: q_t (6) first, then q1 has priority: its last 2 tokens + the separator
    assert oldest.format_question(QUESTION, history) == "box ? | what colour is the box ?"
    with pytest.raises(ConfigError, match="unknown history strategy 'newest'"):
        tiny_reader(tokenizer=tokenizer, history="newest")
    with pytest.raises(ValueError, match="no 'tokenizer' option"):
        FiDConfig(history={"name": "current_first", "tokenizer": "t5-small"})


def test_generation_scores_are_mean_token_log_probabilities(tokenizer):
    reader = tiny_reader(seed=5, tokenizer=tokenizer).eval()
    passages = [[*DISTRACTORS, BOX[0]]]
    [(text, score)] = reader.generate_scored([QUESTION], passages)
    batch = reader.tokenize([QUESTION], passages)
    encoded, mask = reader.encode(batch["input_ids"], batch["attention_mask"],
                                  batch["passage_mask"])
    out = reader.core.generate(encoder_outputs=encoded, attention_mask=mask, max_new_tokens=6,
                               do_sample=False, output_scores=True, return_dict_in_generate=True)
    steps = reader.core.compute_transition_scores(out.sequences, out.scores,
                                                  normalize_logits=True)[0]
    tokens = out.sequences[0, 1:]
    eos = tokenizer.eos_token_id
    keep = len(tokens) if eos not in tokens.tolist() else tokens.tolist().index(eos) + 1
    assert score == pytest.approx(steps[:keep].mean().item(), abs=1e-4)
    assert text == tokenizer.decode(tokens, skip_special_tokens=True).strip()
    # beam search runs through the same fused states
    beams = tiny_reader(seed=5, tokenizer=tokenizer, num_beams=3)
    assert len(beams.generate([QUESTION, "which box ?"], [passages[0], [BOX[1]]])) == 2


def test_save_and_load_round_trip(tokenizer, tmp_path):
    reader = tiny_reader(seed=1, tokenizer=tokenizer)
    questions = [QUESTION, "which box ?"]
    passages = [[*DISTRACTORS, BOX[0]], [BOX[2]]]
    expected = reader.generate_scored(questions, passages)
    reader.save_pretrained(tmp_path / "fid")
    files = sorted(p.name for p in (tmp_path / "fid").iterdir())
    assert META_FILE in files and "model.safetensors" in files and "tokenizer.json" in files
    assert not [f for f in files if f.endswith((".bin", ".pt", ".pth"))]
    loaded = FiDReader.from_pretrained(tmp_path / "fid")
    assert loaded.config == reader.config and loaded.fingerprint() == reader.fingerprint()
    assert loaded.generate_scored(questions, passages) == expected
    # settings can be overridden at load time, and they are part of the fingerprint
    fewer = FiDReader.from_pretrained(tmp_path / "fid", n_passages=1)
    assert fewer.config.n_passages == 1 and fewer.fingerprint() != reader.fingerprint()
    # saving again replaces the folder; other weights, other fingerprint
    other = tiny_reader(seed=2, tokenizer=tokenizer)
    other.save_pretrained(tmp_path / "fid")
    assert FiDReader.from_pretrained(tmp_path / "fid").fingerprint() == other.fingerprint() \
        != reader.fingerprint()
    assert [p.name for p in tmp_path.iterdir()] == ["fid"]  # no temporary folders left
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(ConvQAError, match="not a convqa FiD reader; not replacing it"):
        reader.save_pretrained(tmp_path / "busy")


def test_plain_checkpoints_and_bad_models(tmp_path):
    folder = save_checkpoint(tmp_path / "t5")
    reader = FiDReader.from_pretrained(folder, n_passages=2)
    assert reader.config.model == str(folder) and reader.config.n_passages == 2
    assert reader.config.template == "question: {question} title: {title} context: {text}"
    assert reader.fingerprint() == tiny_reader(n_passages=2, passage_max_length=256,
                                               max_new_tokens=32).fingerprint()
    with pytest.raises(ConfigError, match="unknown FiD option 'passages'"):
        FiDReader.from_pretrained(folder, passages=2)
    with pytest.raises(ConfigError, match="the model comes from the path"):
        FiDReader.from_pretrained(folder, model="other")
    with pytest.raises(ConfigError, match="n_passages must be an int >= 1"):
        FiDReader.from_pretrained(folder, n_passages=0)
    # an encoder-only checkpoint (MiniLM, a BERT) is not a seq2seq model
    with pytest.raises(ConvQAError, match="cannot load seq2seq model 'all-MiniLM-L6-v2'"):
        FiDReader.build(FiDConfig(model="all-MiniLM-L6-v2"))
    with pytest.raises(ConvQAError, match="cannot load seq2seq model"):
        FiDReader.from_pretrained(tmp_path / "empty-dir-not-there")
    tokenizer = make_tokenizer()
    model = tiny_t5(tokenizer)
    model.config.decoder_start_token_id = None
    with pytest.raises(ConfigError, match="no decoder_start_token_id"):
        FiDReader(FiDConfig(model="x"), model, tokenizer)


def test_lora_adapters_save_small_and_load_the_same(tmp_path):
    base = save_checkpoint(tmp_path / "t5", seed=4)
    reader = FiDReader.from_pretrained(base, n_passages=3, max_new_tokens=6)
    plain = reader.fingerprint()
    reader.add_lora(r=4, alpha=8, dropout=0.0, target_modules=["q", "v"])
    trainable = [n for n, p in reader.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert reader.fingerprint() == plain  # fresh LoRA B = 0: the same function
    with torch.no_grad():
        for name, p in reader.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    tuned = reader.fingerprint()
    assert tuned != plain
    questions, passages = [QUESTION], [[*DISTRACTORS, BOX[3]]]
    expected = reader.generate_scored(questions, passages)
    reader.save_pretrained(tmp_path / "adapter")
    files = {p.name for p in (tmp_path / "adapter").iterdir()}
    assert {"adapter_model.safetensors", "adapter_config.json", META_FILE} <= files
    assert "model.safetensors" not in files
    loaded = FiDReader.from_pretrained(tmp_path / "adapter")
    assert loaded.has_adapters and loaded.fingerprint() == tuned
    assert loaded.generate_scored(questions, passages) == expected
    # merged full weights: a standalone folder with the same fingerprint
    reader.save_pretrained(tmp_path / "full", adapter_only=False)
    assert "model.safetensors" in {p.name for p in (tmp_path / "full").iterdir()}
    full = FiDReader.from_pretrained(tmp_path / "full")
    assert not full.has_adapters and full.fingerprint() == tuned
    assert loaded.merge_adapters().fingerprint() == tuned
    with pytest.raises(ConvQAError, match="already has LoRA adapters"):
        reader.add_lora()
    with pytest.raises(ConvQAError, match="has no LoRA adapters"):
        full.save_pretrained(tmp_path / "x", adapter_only=True)
