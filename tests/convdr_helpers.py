"""Shared by tests/test_convdr_*.py: a tiny random BERT teacher, a small passage store with the
teacher's dense index, and hand-written ConvDR examples."""
from __future__ import annotations

import json
from pathlib import Path

PASSAGES = [
    ("p0", "The Eiffel Tower is a wrought-iron lattice tower in Paris, finished in 1889."),
    ("p1", "Gustave Eiffel's company designed and built the tower for the World's Fair."),
    ("p2", "The Danube is Europe's second-longest river, flowing through ten countries."),
    ("p3", "Vienna, Budapest and Belgrade all lie on the banks of the Danube."),
    ("p4", "Photosynthesis converts light energy into chemical energy in plants."),
    ("p5", "Chlorophyll absorbs mostly blue and red light and reflects green."),
    ("p6", "The Beatles were an English rock band formed in Liverpool in 1960."),
    ("p7", "Abbey Road was the last album the Beatles recorded together."),
    ("p8", "Mount Everest is Earth's highest mountain above sea level."),
    ("p9", "Tenzing Norgay and Edmund Hillary first reached the summit in 1953."),
    ("p10", "Jupiter is the largest planet of the Solar System."),
    ("p11", "Granite is a coarse-grained igneous rock of quartz and feldspar."),
]

# (id, conversation, turn, question, history [(q, a)], rewrite, positive ids)
EXAMPLES = [
    ("e1_1", "e1", 1, "what is the eiffel tower?", [], "what is the eiffel tower?", ["p0"]),
    ("e1_2", "e1", 2, "who built it?", [("what is the eiffel tower?", "a tower in Paris")],
     "who built the eiffel tower?", ["p1"]),
    ("d1_1", "d1", 1, "how long is the danube?", [], "how long is the danube?", ["p2"]),
    ("d1_2", "d1", 2, "which capitals are on it?", [("how long is the danube?", "2850 km")],
     "which capitals are on the danube?", ["p3"]),
    ("f1_1", "f1", 1, "what is photosynthesis?", [], "what is photosynthesis?", ["p4"]),
    ("f1_2", "f1", 2, "what colour does it reflect?",
     [("what is photosynthesis?", "light to chemical energy")],
     "what colour does chlorophyll reflect?", ["p5"]),
    ("b1_1", "b1", 1, "who were the beatles?", [], "who were the beatles?", ["p6"]),
    ("b1_2", "b1", 2, "what was their last album?", [("who were the beatles?", "a band")],
     "what was the beatles' last album?", ["p7"]),
]


def make_teacher(folder: Path, seed: int = 0, dropout: float = 0.1) -> Path:
    """A random 2-layer, 32-d BERT with MiniLM's tokenizer, saved as a plain checkpoint."""
    import torch
    from transformers import BertConfig, BertModel

    from convqa.models import load_tokenizer

    tokenizer = load_tokenizer()
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=256,
                        hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    BertModel(config, add_pooling_layer=False).save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return folder


def make_index(root: Path, teacher: Path, name: str = "index"):
    """(store, index folder): PASSAGES as a store, indexed by `teacher` (float32 vectors)."""
    from convqa.corpus import PassageStore
    from convqa.types import Passage
    from retrievers.dense.build import build_dense_index

    store_dir = root / "store"
    store = PassageStore.open(store_dir) if store_dir.exists() else PassageStore.build(
        [Passage(pid, text) for pid, text in PASSAGES], store_dir, progress=False)
    build_dense_index(str(teacher), store, root / name, batch_size=8, precision="fp32",
                      dtype="float32", shard_size=5, progress=False)
    return store, root / name


def examples(with_positives: bool = True):
    from convqa.types import Turn
    from retrievers.convdr.data import ConvDRExample, PassageRef

    out = []
    for eid, conv, turn, question, history, rewrite, positives in EXAMPLES:
        out.append(ConvDRExample(eid, "test", conv, turn, question,
                                 [Turn(q, a) for q, a in history], rewrite,
                                 [PassageRef(p) for p in positives] if with_positives else []))
    return out


def write_examples_jsonl(path: Path, rows=None) -> Path:
    rows = rows if rows is not None else [e.to_dict() for e in examples()]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path
