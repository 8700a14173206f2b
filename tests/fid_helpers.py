"""Shared by tests/test_fid_*.py: a word-level tokenizer made here and a tiny random T5.

The tokenizer mirrors T5's conventions (pad, eos appended to every encoded input, unk) so no
test needs downloaded weights; ids come from the tokenizer, never written by hand.
"""
from __future__ import annotations

from pathlib import Path

from convqa.types import Passage

# Every example asks the same question and has the same two distractor passages: only passage
# 3 differs, so a model that answers them all must read passage 3.
QUESTION = "what colour is the box ?"
DISTRACTORS = [Passage("d1", "the sky is wide and the sea is deep", "weather"),
               Passage("d2", "a dog runs far across the field", "animals")]
COLOURS = ["red", "blue", "green", "yellow"]

CORPUS = [
    "question : title : context : [ sep ]",
    QUESTION, "is it large ? it is small . which box ? the old one",
    *(p.text + " " + p.title for p in DISTRACTORS),
    *(f"the box is {c} box" for c in COLOURS),
    "alpha centauri lies 4.37 light - years away from the sun",
    "how far away is it ? what is alpha centauri ? the closest star system",
]


def colour_examples():
    from convqa.types import Turn
    from readers.fid.data import FiDExample

    return [FiDExample(f"c{i}", QUESTION, [Turn("which box ?", "the old one")], [colour],
                       [*DISTRACTORS, Passage(f"b{i}", f"the box is {colour}", "box")])
            for i, colour in enumerate(COLOURS)]


def make_tokenizer():
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(CORPUS, trainers.WordLevelTrainer(
        special_tokens=["<pad>", "</s>", "<unk>"]))
    eos = tok.token_to_id("</s>")
    tok.post_processor = processors.TemplateProcessing(single="$A </s>",
                                                       special_tokens=[("</s>", eos)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>",
                                   unk_token="<unk>")


def tiny_t5(tokenizer, seed: int = 0, dropout: float = 0.0):
    import torch
    from transformers import T5Config, T5ForConditionalGeneration

    torch.manual_seed(seed)
    config = T5Config(vocab_size=len(tokenizer), d_model=32, d_ff=64, d_kv=8, num_layers=2,
                      num_decoder_layers=2, num_heads=4, relative_attention_num_buckets=8,
                      dropout_rate=dropout, pad_token_id=tokenizer.pad_token_id,
                      eos_token_id=tokenizer.eos_token_id,
                      decoder_start_token_id=tokenizer.pad_token_id)
    return T5ForConditionalGeneration(config)


def tiny_reader(seed: int = 0, dropout: float = 0.0, tokenizer=None, **settings):
    """A FiDReader over a random 2-layer, 32-d T5 (3 passages, 32-token inputs by default)."""
    from readers.fid.model import FiDConfig, FiDReader

    tokenizer = tokenizer if tokenizer is not None else make_tokenizer()
    options = {"model": "tiny-random-t5", "n_passages": 3, "passage_max_length": 32,
               "max_new_tokens": 6, **settings}
    return FiDReader(FiDConfig(**options), tiny_t5(tokenizer, seed, dropout), tokenizer)


def save_checkpoint(folder: Path, seed: int = 0) -> Path:
    """A plain seq2seq checkpoint folder (weights + tokenizer), as a hub download would be."""
    tokenizer = make_tokenizer()
    tiny_t5(tokenizer, seed).save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return folder
