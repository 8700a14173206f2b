"""Hard negatives for the reader from a dense index: never the gold article (by id or by
title), never a passage holding a gold answer, cached to a file that a killed mining resumes and
that refuses other settings; and `convqa train reader --dense-negatives` puts them into the
benchmark turns' examples. A tiny random encoder; real SQuAD paragraphs for the filter."""
from __future__ import annotations

import json

import pytest

from conftest import shared_file
from convqa.corpus import PassageStore
from convqa.errors import ConfigError
from convqa.types import Passage
from readers.extractive.build_examples import benchmark_examples, squad_examples
from readers.extractive.data import find_answer_spans
from readers.extractive.dense_negatives import (DenseNegativesConfig, add_dense_negatives,
                                                filter_hits, mine_dense_negatives)
from retrievers.dense.build import build_dense_index
from test_dense_model import make_tiny_bert
from training_helpers import make_benchmark


@pytest.fixture(scope="module")
def bench(tmp_path_factory, minilm_tokenizer):
    """The tiny benchmark and a dense index of its passages by a random tiny encoder."""
    root = tmp_path_factory.mktemp("dense-negatives")
    folder = make_benchmark(root / "bench")
    encoder = make_tiny_bert(root / "bert", minilm_tokenizer)
    with PassageStore.open(folder / "passages") as store:
        build_dense_index(str(encoder), store, root / "index", batch_size=8, precision="fp32",
                          progress=False)
    return folder, root / "index"


def test_mined_negatives_skip_the_gold_article_and_answers(bench, tmp_path):
    folder, index = bench
    examples = benchmark_examples(folder, negatives=2)
    config = DenseNegativesConfig(str(index), top_k=20, keep=20, progress=False)
    mined = mine_dense_negatives(examples, config, tmp_path / "neg.jsonl")
    assert set(mined) == {e.id for e in examples}
    store = list(PassageStore.open(folder / "passages"))
    for example in examples:
        gold = {p.passage.id.split("#")[0] for p in example.positives}
        ids = [item["id"] for item in mined[example.id]]
        assert ids and not any(pid.split("#")[0] in gold for pid in ids)
        scores = [item["score"] for item in mined[example.id]]
        assert scores == sorted(scores, reverse=True)
        # top_k covers the whole store: every passage outside the gold article without an
        # answer in it is a negative
        expected = {p.id for p in store if p.id.split("#")[0] not in gold
                    and not find_answer_spans(p.text, example.golds())}
        assert set(ids) == expected and len(expected) >= len(store) - 4
    counts = add_dense_negatives(examples, mined, 3)
    assert counts["examples"] == len(examples) and counts["filled_with_bm25"] == 0
    assert all(len(e.negatives) == 3 for e in examples)
    assert all(e.negatives[0].id == mined[e.id][0]["id"] for e in examples)


def test_cache_resumes_after_a_cut_line_and_refuses_other_settings(bench, tmp_path):
    folder, index = bench
    examples = benchmark_examples(folder, negatives=0)
    config = DenseNegativesConfig(str(index), top_k=10, keep=4, batch_size=3, progress=False)
    cache = tmp_path / "neg.jsonl"
    first = mine_dense_negatives(examples, config, cache)
    lines = cache.read_text().splitlines(keepends=True)
    assert len(lines) == 1 + len(examples)
    # a kill in the middle of a line: the whole lines are kept, the rest mined again
    cache.write_text("".join(lines[:3]) + lines[3][:17])
    again = mine_dense_negatives(examples, config, cache)
    assert again == first
    assert cache.read_text().splitlines() == [line.rstrip("\n") for line in lines[:3]] + [
        json.dumps({"id": e.id, "negatives": first[e.id]}, ensure_ascii=False)
        for e in examples if e.id not in {json.loads(l)["id"] for l in lines[1:3]}]
    with pytest.raises(ConfigError, match="another index or other settings"):
        mine_dense_negatives(examples, DenseNegativesConfig(str(index), top_k=11, keep=4,
                                                            progress=False), cache)


def test_filter_on_real_squad_paragraphs():
    """Another corpus's gold article is known by its title; passages holding the answer go."""
    examples = [e for e in squad_examples(shared_file("squad/dev-v2.0.json"), negatives=0,
                                          max_examples=50, max_heldout=1)
                if e.split == "train"][:10]
    example = examples[0]
    gold = example.positives[0].passage
    answer = example.golds()[0]
    holder = Passage("other#1", f"Some other text. {answer} appears here too.", "Elsewhere")
    renamed = Passage("mirror#0", gold.text[::-1], gold.title.upper())  # same title, other id
    plain = [e.positives[0].passage for e in examples if e.positives[0].passage.title
             != gold.title and not any(a.lower() in e.positives[0].passage.text.lower()
                                       for a in example.golds())][:3]
    assert plain
    passages = {p.id: p for p in [renamed, holder, *plain]}

    class Store:
        def get(self, pid):
            return passages[pid]

    class Hit:
        def __init__(self, pid, score):
            self.passage_id, self.score = pid, score

    hits = [Hit(pid, 10.0 - i) for i, pid in enumerate(passages)]
    kept, dropped = filter_hits(example, hits, Store(), keep=10)
    assert [k["id"] for k in kept] == [p.id for p in plain]
    assert dropped == {"gold_article": 1, "holds_answer": 1}


def test_train_reader_cli_uses_dense_negatives(bench, tmp_path):
    from convqa.front.cli.main import main

    folder, index = bench
    out = tmp_path / "run"
    code = main(["train", "reader", "--out", str(out), "--benchmark", str(folder),
                 "--init-model", str(make_tiny_bert(tmp_path / "enc", _tokenizer())),
                 "--dense-negatives", str(index), "--negatives", "2", "--max-steps", "1",
                 "--batch-size", "2", "--max-length", "128", "--no-eval", "--quiet"])
    assert code == 0
    meta = json.loads((out / "data" / "data.json").read_text())
    assert meta["params"]["dense_negatives"]["top_k"] == 50
    counts = meta["counts"][next(iter(meta["counts"]))]
    assert counts["train_dense_negatives"] == 2 * counts["train_examples"]
    cached = (out / "data" / "dense-negatives.jsonl").read_text().splitlines()
    assert len(cached) == 1 + counts["train_examples"] + counts["heldout_examples"]


def _tokenizer():
    from convqa.models import load_tokenizer

    return load_tokenizer()
