"""Shared by tests/test_reader_*.py: tiny random BERT readers with MiniLM's tokenizer, a tiny
encoder / QA checkpoint on disk, and a handful of real SQuAD examples."""
from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from convqa.types import Passage

TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
            max_position_embeddings=160)


def bert_config(dropout: float = 0.0):
    from transformers import BertConfig

    from convqa.models import load_tokenizer

    return BertConfig(vocab_size=load_tokenizer().vocab_size, hidden_dropout_prob=dropout,
                      attention_probs_dropout_prob=dropout, **TINY)


def reader_config(**overrides):
    from readers.extractive.model import ExtractiveReaderConfig

    base = dict(model="tiny-random-bert", max_length=128, doc_stride=32, max_query_length=32,
                max_title_length=8)
    return ExtractiveReaderConfig(**{**base, **overrides})


def tiny_reader(seed: int = 0, dropout: float = 0.0, selection: bool = True, **overrides):
    """A random 2-layer, 32-d BERT reader (no pooler) with MiniLM's tokenizer."""
    import torch
    from transformers import BertModel

    from convqa.models import load_tokenizer
    from readers.extractive.model import ExtractiveReader

    torch.manual_seed(seed)
    encoder = BertModel(bert_config(dropout), add_pooling_layer=False)
    span = torch.nn.Linear(32, 2)
    head = torch.nn.Linear(32, 1) if selection else None
    return ExtractiveReader(reader_config(**overrides), encoder, load_tokenizer(), span, head)


def save_tiny_encoder(folder: Path, seed: int = 0) -> Path:
    """A plain HF checkpoint (BertModel + MiniLM's tokenizer files) to build readers from."""
    import torch
    from transformers import BertModel

    from convqa.models import load_tokenizer

    torch.manual_seed(seed)
    BertModel(bert_config(), add_pooling_layer=False).save_pretrained(str(folder))
    load_tokenizer().save_pretrained(str(folder))
    return folder


def save_tiny_qa_checkpoint(folder: Path, seed: int = 0):
    """A Hugging Face BertForQuestionAnswering checkpoint; returns the model too."""
    import torch
    from transformers import BertForQuestionAnswering

    from convqa.models import load_tokenizer

    torch.manual_seed(seed)
    model = BertForQuestionAnswering(bert_config()).eval()
    model.save_pretrained(str(folder))
    load_tokenizer().save_pretrained(str(folder))
    return model


@contextlib.contextmanager
def one_thread():
    """Tiny models on a busy 2-core machine run far faster on one thread (no spin-waiting).
    FAISS has its own OpenMP pool: OPQ training on two of its threads took 2-4x as long as on
    one on a 2-core AVX2 machine whose other core was busy, so it gets one thread too."""
    import faiss
    import torch

    before, before_faiss = torch.get_num_threads(), faiss.omp_get_max_threads()
    torch.set_num_threads(1)
    faiss.omp_set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
        faiss.omp_set_num_threads(before_faiss)


@pytest.fixture(autouse=True)
def single_thread():
    """Every test of a module that imports this fixture runs under `one_thread()`."""
    with one_thread():
        yield


def mpnet_tokenizer():
    """An MPNet tokenizer (<s> A </s></s> B </s>, no token type ids) over MiniLM's word pieces:
    all-mpnet-base-v2's layout without its files."""
    from transformers import MPNetTokenizerFast

    from convqa.models import load_tokenizer

    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2}
    for token, _ in sorted(load_tokenizer().get_vocab().items(), key=lambda item: item[1]):
        vocab.setdefault(token, len(vocab))
    vocab["<mask>"] = len(vocab)
    return MPNetTokenizerFast(vocab=vocab)


def save_tiny_mpnet(folder: Path, seed: int = 0) -> Path:
    """A plain HF checkpoint of a random 2-layer, 32-d MPNetModel and its tokenizer."""
    import torch
    from transformers import MPNetConfig, MPNetModel

    tokenizer = mpnet_tokenizer()
    torch.manual_seed(seed)
    config = MPNetConfig(vocab_size=len(tokenizer), hidden_dropout_prob=0.0,
                         attention_probs_dropout_prob=0.0, **TINY)
    MPNetModel(config, add_pooling_layer=False).save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return folder


def squad_train_examples(count: int = 8):
    """`count` real SQuAD v2.0 dev questions of training articles with one gold span each and
    paragraphs under 700 characters (2 negatives each); skips without ../shared/data."""
    from conftest import shared_file
    from readers.extractive.build_examples import squad_examples

    built = squad_examples(shared_file("squad/dev-v2.0.json"), negatives=2, max_examples=60,
                           max_heldout=1)
    chosen = [e for e in built if e.split == "train" and len(e.positives[0].passage.text) < 700
              and len(set(e.answers)) == 1 and len(e.positives[0].spans) == 1][:count]
    assert len(chosen) == count
    return chosen


# Four passages and a question that the second answers, for the decoding tests: with retriever
# scores that rank them in reverse, a large retriever weight answers from the last passage,
# whatever a random reader prefers.
FOUR_PASSAGES = [
    Passage("a#0", "The Eiffel Tower is a wrought-iron lattice tower in Paris.", "Eiffel"),
    Passage("a#1", "It was completed in 1889 as the entrance to the World's Fair.", "Eiffel Tower"),
    Passage("b#0", "The Danube is 2850 kilometres long and flows into the Black Sea.", "Danube"),
    Passage("c#0", "Canberra became the capital of Australia in 1913.", "Canberra")]
TOWER_QUESTION = "when was the tower completed?"
REVERSE_SCORES = [1.0, 2.0, 3.0, 4.0]
