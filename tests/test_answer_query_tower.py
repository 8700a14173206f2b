"""The shipped answer-passage query tower (`convqa-dpr-ihn-answer`): a ConvDR student over
DPR-IHN's passage index, read by alias, anchored near DPR-IHN's own query embedding, and used
through the `convdr` retriever on a benchmark built from the TopiOCQA fixture."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from convqa.registry import RETRIEVERS
from retrievers.convdr.model import ConvDR
from retrievers.dense.model import DualEncoder


@pytest.fixture(scope="module")
def bench(fixtures_dir, tmp_path_factory):
    from convqa.benchmark.topiocqa_wiki import build_benchmark, full_wiki_source
    from convqa.corpus import PassageStore
    from retrievers.dense.build import build_dense_index

    root = tmp_path_factory.mktemp("answer_tower")
    fx = fixtures_dir / "benchmark"
    built = build_benchmark(fx / "topiocqa_tiny.json", full_wiki_source(fx / "articles.jsonl"),
                            root / "full", max_words=10, dev_fraction=0.34, seed=0)
    with PassageStore.open(built.out_dir / "passages") as store:
        build_dense_index("convqa-dpr-ihn", store, root / "index", batch_size=16,
                          precision="fp32", dtype="float32", progress=False)
    return built.out_dir, root / "index"


def conversations(folder):
    from convqa.benchmark.labelled_turns import load_labelled_turns
    from convqa.history import build_history_strategy

    data = load_labelled_turns(folder)
    strategy = build_history_strategy({"name": "oldest_first", "max_tokens": 128})
    return [strategy.format(t.question, data.conversations[t.conversation_id].history(t.turn))
            for t in data.turns]


def test_the_tower_is_dpr_ihns_query_side_moved_a_little(bench):
    tower = ConvDR.from_pretrained("convqa-dpr-ihn-answer").eval()
    teacher = DualEncoder.from_pretrained("convqa-dpr-ihn").eval()
    assert tower.teacher_fingerprint == teacher.fingerprint()
    assert tower.has_adapters
    texts = conversations(bench[0])
    with torch.no_grad():
        moved = tower.encode_query(tower.tokenize_queries(texts)).numpy()
        before = teacher.encode_query(teacher.tokenize_queries(texts)).numpy()
    cosines = (moved * before).sum(1) / (np.linalg.norm(moved, axis=1)
                                         * np.linalg.norm(before, axis=1))
    # anchored (trained with KD towards these very embeddings) but trained: neither far away
    # nor the teacher itself
    assert 0.8 < cosines.min() and cosines.max() < 0.9999, cosines


def test_it_searches_dpr_ihns_index_through_the_registry(bench):
    import retrievers.convdr.retriever  # noqa: F401  (registers "convdr")
    import retrievers.dense.retriever  # noqa: F401  (registers "dense")

    folder, index = bench
    texts = conversations(folder)
    tower = RETRIEVERS.build({"name": "convdr", "model": "convqa-dpr-ihn-answer",
                              "index": str(index), "precision": "fp32"})
    dense = RETRIEVERS.build({"name": "dense", "index": str(index), "precision": "fp32"})
    ours, theirs = tower.retrieve_batch(texts, k=5), dense.retrieve_batch(texts, k=5)
    assert all(len(hits) == 5 for hits in ours)
    # the same passages scored by another query: close to DPR-IHN's scores, not equal to them
    differences = [abs(a.score - b.score) for x, y in zip(ours, theirs) for a, b in zip(x, y)]
    assert 0 < max(differences) < 0.3
