"""Shared by the training tests: a tiny benchmark folder, a tiny random dual encoder, and a way to
stop a training run after a given step as a kill would (`kill_after`).

The benchmark follows docs/benchmark_format.md: 4 conversations (3 train, 1 dev), 10 articles.
Train turns, by hand:
  c1: t1 Alpha (answer A#0), t2 Alpha (answer A#1), t3 Beatles (answer B#0, switch)
  c2: t1 no topic (not evaluable), t2 Carbon (answer C#0), t3 Carbon (no answer passage)
  c3: t1 Danube (answer D#1), t2 Eiffel (answer E#0), t3 Fugue (answers F#0 and F#1)
so answer-level positives give 7 examples (2 turns skipped), article-level ones 8 (1 skipped).
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent

ARTICLES = {
    "A": ("Alpha Centauri", ["Alpha Centauri is the closest star system to the Sun.",
                             "It lies 4.37 light-years away from the Sun."]),
    "B": ("The Beatles", ["The Beatles were an English rock band formed in Liverpool.",
                          "Their members were Lennon, McCartney, Harrison and Starr."]),
    "C": ("Carbon", ["Carbon is a chemical element with symbol C and atomic number 6.",
                     "Carbon forms more compounds than any other element."]),
    "D": ("Danube", ["The Danube flows through central and eastern Europe.",
                     "The Danube is 2850 kilometres long."]),
    "E": ("Eiffel Tower", ["The Eiffel Tower is a wrought-iron tower in Paris.",
                           "It was completed in 1889 for the World's Fair."]),
    "F": ("Fugue", ["A fugue is a contrapuntal composition technique.",
                    "Bach wrote many fugues, for example in The Art of Fugue."]),
    "G": ("Granite", ["Granite is an igneous rock made mostly of quartz and feldspar."]),
    "H": ("Helium", ["Helium is a noble gas, the second lightest element."]),
    "I": ("Iceland", ["Iceland is a Nordic island country in the North Atlantic."]),
    "J": ("Jupiter", ["Jupiter is the largest planet in the Solar System."]),
}

# (conversation, turn, question, answer, article or None, answer passage ids, split, type)
TURNS = [
    ("c1", 1, "what is alpha centauri?", "the closest star system to the Sun", "A", ["A#0"],
     "train", "first"),
    ("c1", 2, "how far away is it?", "4.37 light-years", "A", ["A#1"], "train", "no-switch"),
    ("c1", 3, "who were the beatles?", "an English rock band", "B", ["B#0"], "train", "switch"),
    ("c2", 1, "tell me something", "UNANSWERABLE", None, [], "train", "first"),
    ("c2", 2, "what is carbon's atomic number?", "6", "C", ["C#0"], "train", "no-switch"),
    ("c2", 3, "is it common?", "yes", "C", [], "train", "no-switch"),
    ("c3", 1, "how long is the danube?", "2850 kilometres", "D", ["D#1"], "train", "first"),
    ("c3", 2, "what is the eiffel tower made of?", "wrought-iron", "E", ["E#0"], "train",
     "switch"),
    ("c3", 3, "what is a fugue?", "a contrapuntal composition technique", "F",
     ["F#0", "F#1"], "train", "switch"),
    ("c4", 1, "which star is closest?", "Alpha Centauri", "A", ["A#0"], "dev", "first"),
    ("c4", 2, "what about jupiter?", "the largest planet", "J", ["J#0"], "dev", "switch"),
]


# train turns whose free-form answer occurs in no passage word for word (weak positives)
WEAK_TURNS = [
    # B#1 names three of the four content words, B#0 one: B#1 is the positive, B#0 a negative
    ("c5", 1, "who was in the band?", "Lennon and McCartney were members of the band",
     "B", [], "train", "first"),
    # D#0 covers 2 of 3 words (danube, europe; not river): under 0.7, no positive
    ("c5", 2, "where does it flow?", "The Danube is a river of Europe", "D", [], "train",
     "no-switch"),
    # one content word ("sun", in both passages of Alpha Centauri): too short to place
    ("c5", 3, "what is near it?", "the Sun", "A", [], "train", "switch"),
    # a dev turn is never weakly labelled
    ("c6", 1, "what is granite?", "an igneous rock of quartz and feldspar", "G", [], "dev",
     "first"),
]


def passages() -> list:
    from convqa.types import Passage

    return [Passage(f"{aid}#{n}", text, title)
            for aid, (title, texts) in ARTICLES.items() for n, text in enumerate(texts)]


def make_benchmark(folder: Path, turns: list | None = None) -> Path:
    """Write the tiny benchmark (turns.jsonl, conversations.jsonl, passages/) into `folder`."""
    from convqa.corpus import PassageStore

    folder.mkdir(parents=True, exist_ok=True)
    turns = TURNS if turns is None else turns
    conversations: dict[str, list] = {}
    records = []
    for cid, number, question, answer, article, answer_ids, split, qtype in turns:
        topic = ARTICLES[article][0] if article else ""
        conversations.setdefault(cid, []).append(
            {"question": question, "answer": answer, "meta": {"topic": topic}})
        records.append({
            "qid": f"{cid}_{number}", "conversation_id": cid, "turn": number,
            "question": question, "answers": [answer], "topic": topic, "topic_section": "",
            "is_nq": False, "question_type": qtype, "retrieval_evaluable": article is not None,
            "answer_evaluable": bool(answer_ids), "gold_article_id": article,
            "gold_passage_count": len(ARTICLES[article][1]) if article else 0,
            "answer_passage_ids": answer_ids, "split": split})
    with open(folder / "turns.jsonl", "w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(r) + "\n" for r in records)
    with open(folder / "conversations.jsonl", "w", encoding="utf-8") as handle:
        handle.writelines(json.dumps({"id": cid, "turns": t}) + "\n"
                          for cid, t in conversations.items())
    PassageStore.build(passages(), folder / "passages", progress=False)
    return folder


def make_benchmark_with_bm25(root: Path, turns: list | None = None) -> tuple[Path, Path]:
    """The tiny benchmark (`make_benchmark`) in root/bench and a BM25 index of its passages in
    root/bm25."""
    from convqa.corpus import PassageStore
    from retrievers.bm25 import BM25Retriever

    bench = make_benchmark(root / "bench", turns)
    with PassageStore.open(bench / "passages") as store:
        BM25Retriever.build_from_store(store).save(root / "bm25")
    return bench, root / "bm25"


def tiny_encoder(seed: int = 0, normalize: bool = True, dropout: float = 0.1):
    """A random 2-layer, 32-d BERT with MiniLM's tokenizer, as a DualEncoder."""
    import torch
    from transformers import BertConfig, BertModel

    from convqa.models import load_tokenizer
    from retrievers.dense.model import DualEncoder, DualEncoderConfig

    tokenizer = load_tokenizer()
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64,
                        max_position_embeddings=160, hidden_dropout_prob=dropout,
                        attention_probs_dropout_prob=dropout)
    return DualEncoder(DualEncoderConfig(model="tiny-random-bert", normalize=normalize,
                                         query_max_length=130, passage_max_length=48),
                       BertModel(config, add_pooling_layer=False), tokenizer)


class Killed(Exception):
    """A training run stopped by `kill_after`, as a kill would stop it."""


def kill_after(step: int):
    """An `on_step(step, loss)` callback that stops the run once optimizer step `step` is done
    (its checkpoint, if any, is the last one a killed run leaves)."""
    def on_step(done: int, loss: float) -> None:
        if done == step:
            raise Killed

    return on_step


def torchrun(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """`args` (a script and its arguments, or -m MODULE ...) under torchrun on 2 CPU processes:
    a free local port, one thread each, this tests folder on PYTHONPATH, output captured.
    torchrun, not `accelerate launch --cpu`: accelerate starts several CPU processes only
    through mpirun; under torchrun, Accelerator(cpu=True) joins a gloo process group."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get(
        "PYTHONPATH", "")]), "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
               "--master_addr", "127.0.0.1", "--master_port", str(port), *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)


def two_process_ranks(script: str, folder: Path, out: Path, *args: object) -> list[dict]:
    """Run the Python `script` (written to FOLDER/train2.py) with `args` under `torchrun`;
    it must succeed. Returns what each process wrote to OUT/rank{0,1}.json."""
    path = folder / "train2.py"
    path.write_text(script)
    done = torchrun(str(path), *(str(a) for a in args))
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]

