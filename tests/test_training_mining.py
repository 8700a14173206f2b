"""Hard-negative mining: filtering, provenance, reuse, the negatives file, the mining sub-store."""
from __future__ import annotations

import json

import pytest

from convqa.corpus import PassageStore
from convqa.errors import ConfigError, DataError
from retrievers.training.data import build_examples
from retrievers.training.mining import (MiningConfig, build_mining_store, filter_negatives,
                                        load_negatives, mine_hard_negatives)
from training_helpers import make_benchmark, passages, tiny_encoder


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    return make_benchmark(tmp_path_factory.mktemp("bench"))


def test_filter_negatives_by_hand():
    ranked = ["A#1", "B#0", "A#0", "C#2"]
    assert filter_negatives(ranked, ["A#0"], "A", MiningConfig()) == [1, 3]
    assert filter_negatives(ranked, ["A#0"], "A",
                            MiningConfig(exclude_gold_article=False)) == [0, 1, 3]
    assert filter_negatives(ranked, ["A#0"], "A",
                            MiningConfig(keep_positives_in_negatives=True)) == [0, 1, 2, 3]
    # article ids may contain '#': only the last '#' separates the passage number
    assert filter_negatives(["C#sharp#0", "C#1"], ["C#sharp#1"], "C#sharp",
                            MiningConfig()) == [1]


def test_mining_writes_filtered_negatives_with_provenance(bench, tmp_path):
    examples = build_examples(bench)  # 7 examples, answer positives
    store = PassageStore.open(bench / "passages")
    model = tiny_encoder()
    config = MiningConfig(top_k=6, progress=False)
    meta = mine_hard_negatives(model, examples, store, tmp_path, config, model_path="tiny")
    assert meta["model_fingerprint"] == model.fingerprint()
    assert meta["corpus_checksum"] == store.checksum and meta["corpus_size"] == 16
    assert meta["k"] == 6 and meta["filter"] == "gold-article" and meta["queries"] == 7
    assert meta["history"]["name"] == "oldest_first" and meta["positives"] == "answer"
    assert meta["date"] and meta["model"] == "tiny"
    rows = [json.loads(line) for line in (tmp_path / "negatives.jsonl").open()]
    assert [r["qid"] for r in rows] == [e.qid for e in examples.examples]
    by_qid = {e.qid: e for e in examples.examples}
    found = 0
    for row in rows:
        example = by_qid[row["qid"]]
        article = example.gold_article_id
        # the top-6 minus every passage of the gold article (2 passages in this benchmark)
        assert 4 <= len(row["negatives"]) <= 6
        assert not any(pid.rsplit("#", 1)[0] == article for pid in row["negatives"])
        assert row["scores"] == sorted(row["scores"], reverse=True)
        found += bool(row["positive_ranks"])
    assert meta["hits_at_k"] == round(found / 7, 4)
    assert set(load_negatives(tmp_path, examples)) == set(by_qid)
    # a second call with the same model, corpus and settings reuses the file
    assert mine_hard_negatives(model, examples, store, tmp_path, config) == meta
    # other settings mine again (the encoded corpus is reused: same encoder)
    again = mine_hard_negatives(model, examples, store, tmp_path,
                                MiningConfig(top_k=3, keep_positives_in_negatives=True,
                                             progress=False))
    assert again["k"] == 3 and again["filter"] == "none"
    rows = [json.loads(line) for line in (tmp_path / "negatives.jsonl").open()]
    assert all(len(r["negatives"]) == 3 for r in rows)


def test_load_negatives_errors(tmp_path, bench):
    path = tmp_path / "negatives.jsonl"
    path.write_text('{"qid": "c1_1", "negatives": ["G#0"]}\n{"qid": "c1_1", "negatives": []}\n')
    with pytest.raises(DataError, match=r"negatives.jsonl:2: field 'qid': duplicate query"):
        load_negatives(path)
    path.write_text('{"qid": "c1_1", "negatives": [3]}\n')
    with pytest.raises(DataError, match=r"negatives.jsonl:1: field 'negatives'"):
        load_negatives(path)
    path.write_text('{"qid": "c1_1", "negatives": ["G#0"]}\n')
    with pytest.raises(DataError, match=r"no negatives for 6 training queries \(first: 'c1_2'\)"):
        load_negatives(path, build_examples(bench))


def test_bad_mining_settings():
    with pytest.raises(ConfigError, match="top_k must be an integer >= 1"):
        MiningConfig(top_k=0)
    with pytest.raises(ConfigError, match="batch_size"):
        MiningConfig(batch_size=0)


def test_mining_store_holds_train_gold_articles_and_a_sample(bench, tmp_path):
    store = build_mining_store(bench, tmp_path / "mine", sample=2, seed=0, progress=False)
    ids = list(store.ids())
    gold = [p.id for p in passages() if p.id[0] in "ABCDEF"]  # train turns' gold articles
    assert [i for i in ids if i[0] in "ABCDEF"] == gold
    assert len(ids) == 14 and set(ids) - set(gold) <= {"G#0", "H#0", "I#0", "J#0"}
    original = [p.id for p in passages()]
    assert ids == sorted(ids, key=original.index)  # benchmark order kept
    assert store.get("A#1").text == "It lies 4.37 light-years away from the Sun."
    assert "mining subset" in store.meta["source"]
    everything = build_mining_store(bench, tmp_path / "all", sample=100, progress=False)
    assert len(everything) == 16
    # the first passage of each gold article, plus the answer passages (A#1, D#1, F#1)
    lead = build_mining_store(bench, tmp_path / "lead", per_article=1, progress=False)
    assert list(lead.ids()) == ["A#0", "A#1", "B#0", "C#0", "D#0", "D#1", "E#0", "F#0", "F#1"]
    assert "the first 1 + answer passages" in lead.meta["source"]
    with pytest.raises(ConfigError, match="sample must be an integer >= 0"):
        build_mining_store(bench, tmp_path / "bad", sample=-1, progress=False)
    with pytest.raises(ConfigError, match="per_article must be an integer >= 1"):
        build_mining_store(bench, tmp_path / "bad", per_article=0, progress=False)
