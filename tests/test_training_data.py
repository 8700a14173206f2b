"""Training examples from the benchmark, and the seeded batches built from them."""
from __future__ import annotations

import json

import numpy as np
import pytest

from convqa.corpus import PassageStore
from convqa.errors import ConfigError, DataError
from convqa.training.schedule import epoch_order, example_rng, global_batches
from retrievers.training.data import (ExampleSet, PassageLookup, TrainingExample,
                                      build_examples, load_examples, make_batch, sample_group,
                                      save_examples)
from training_helpers import make_benchmark


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    return make_benchmark(tmp_path_factory.mktemp("bench"))


def test_answer_positives_from_train_turns(bench):
    examples = build_examples(bench)
    assert [e.qid for e in examples.examples] == ["c1_1", "c1_2", "c1_3", "c2_2", "c3_1",
                                                   "c3_2", "c3_3"]
    assert examples.counts == {"turns": 9, "examples": 7, "skipped_no_positive": 2,
                               "skipped_empty_query": 0}
    by_qid = {e.qid: e for e in examples.examples}
    assert by_qid["c3_3"].positive_ids == ["F#0", "F#1"]
    assert by_qid["c1_3"].gold_article_id == "B" and by_qid["c1_3"].question_type == "switch"
    # oldest_first: q1 [SEP] a1 [SEP] q2, nothing to truncate at this length
    assert by_qid["c1_2"].query == ("what is alpha centauri? [SEP] the closest star system "
                                    "to the Sun [SEP] how far away is it?")
    assert examples.positives == "answer" and examples.history["name"] == "oldest_first"
    assert examples.history["max_tokens"] == 128


def test_article_positives_add_the_turn_without_answer_passage(bench):
    examples = build_examples(bench, positives="article")
    by_qid = {e.qid: e for e in examples.examples}
    assert len(examples) == 8 and examples.counts["skipped_no_positive"] == 1
    assert by_qid["c2_3"].positive_ids == ["C#0", "C#1"]
    assert by_qid["c1_1"].positive_ids == ["A#0", "A#1"]


def test_history_only_skips_empty_first_turn_queries(bench):
    examples = build_examples(bench, history="history_only")
    assert examples.counts["skipped_empty_query"] == 2  # c1_1 and c3_1 have no history
    assert examples.counts["skipped_no_positive"] == 2
    by_qid = {e.qid: e for e in examples.examples}
    assert by_qid["c1_2"].query == ("what is alpha centauri? [SEP] the closest star system "
                                    "to the Sun")


def test_dev_split_and_bad_options(bench):
    assert [e.qid for e in build_examples(bench, split="dev").examples] == ["c4_1", "c4_2"]
    with pytest.raises(ConfigError, match="positives must be one of answer, article"):
        build_examples(bench, positives="passage")
    with pytest.raises(ConfigError, match="unknown history strategy 'oldest'"):
        build_examples(bench, history="oldest")


def test_a_bad_turns_file_is_one_line_error(tmp_path):
    folder = make_benchmark(tmp_path / "b")
    lines = (folder / "turns.jsonl").read_text().splitlines()
    record = json.loads(lines[1])
    del record["answer_passage_ids"]
    lines[1] = json.dumps(record)
    (folder / "turns.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"turns.jsonl:2: field 'answer_passage_ids': missing"):
        build_examples(folder)


def test_save_and_load_round_trip(bench, tmp_path):
    examples = build_examples(bench)
    save_examples(tmp_path, examples)
    loaded = load_examples(tmp_path)
    assert loaded.examples == examples.examples and loaded.meta() == examples.meta()
    path = tmp_path / "examples.jsonl"
    lines = path.read_text().splitlines()
    lines[2] = json.dumps({**json.loads(lines[2]), "positive_ids": []})
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"examples.jsonl:3: field 'positive_ids'"):
        load_examples(tmp_path)


def test_epoch_batches_are_seeded_permutations_without_ragged_tail():
    batches = global_batches(10, 4, seed=1, epoch=0)
    assert [len(b) for b in batches] == [4, 4]  # 2 examples dropped this epoch
    assert len(set(np.concatenate(batches).tolist())) == 8
    assert [b.tolist() for b in batches] == [b.tolist() for b in global_batches(10, 4, 1, 0)]
    assert epoch_order(10, 1, 0).tolist() != epoch_order(10, 1, 1).tolist()
    assert sorted(epoch_order(10, 1, 1).tolist()) == list(range(10))


def test_sample_group(bench):
    store = PassageStore.open(bench / "passages")
    lookup = PassageLookup([store])
    example = TrainingExample("q", "query", ["A#0", "A#1"], "A")
    positive, negatives, filled = sample_group(example, ["G#0", "H#0", "I#0"], 2,
                                               np.random.default_rng(0))
    assert positive in {"A#0", "A#1"} and filled == 0
    assert len(set(negatives)) == 2 and set(negatives) <= {"G#0", "H#0", "I#0"}
    assert sample_group(example, [], 0, np.random.default_rng(0), "first") == ("A#0", [], 0)
    # too few mined: all of them, then repeats
    _, negatives, filled = sample_group(example, ["G#0"], 3, np.random.default_rng(0))
    assert negatives == ["G#0", "G#0", "G#0"] and filled == 2
    # none mined: random passages of the store, never a positive
    for seed in range(20):
        _, negatives, filled = sample_group(example, [], 3, np.random.default_rng(seed),
                                            fallback=lookup)
        assert filled == 3 and not set(negatives) & {"A#0", "A#1"}
        assert all(pid in store for pid in negatives)
    with pytest.raises(DataError, match="no hard negatives"):
        sample_group(example, [], 1, np.random.default_rng(0))
    with pytest.raises(ConfigError, match="positive_choice"):
        sample_group(example, [], 0, np.random.default_rng(0), "best")


def test_make_batch_layout_and_determinism(bench):
    examples = build_examples(bench)
    lookup = PassageLookup([PassageStore.open(bench / "passages")])
    negatives = {e.qid: ["G#0", "H#0", "I#0", "J#0"] for e in examples.examples}
    batch = make_batch(examples, [6, 0], lookup, seed=3, epoch=2, hard_negatives=2,
                       negatives=negatives)
    assert batch.group_size == 3 and len(batch.passage_ids) == 6
    assert batch.queries == [examples.examples[6].query, examples.examples[0].query]
    assert batch.passage_ids[0] in {"F#0", "F#1"} and batch.passage_ids[3] == "A#0"
    assert set(batch.passage_ids[1:3]) | set(batch.passage_ids[4:6]) <= set(negatives["c1_1"])
    assert batch.positive_ids == [{"F#0", "F#1"}, {"A#0"}]
    assert [p.id for p in batch.passages] == batch.passage_ids
    assert batch.passages[3].title == "Alpha Centauri"
    again = make_batch(examples, [6, 0], lookup, 3, 2, 2, negatives)
    assert again.passage_ids == batch.passage_ids
    # the same example draws from its own generator, whatever batch it is in
    alone = make_batch(examples, [0], lookup, 3, 2, 2, negatives)
    assert alone.passage_ids == batch.passage_ids[3:]
    rng_a, rng_b = example_rng(3, 2, 0), example_rng(3, 2, 1)
    assert rng_a.integers(1 << 30) != rng_b.integers(1 << 30)


def test_lookup_names_the_stores_for_a_missing_passage(bench):
    lookup = PassageLookup([PassageStore.open(bench / "passages")])
    with pytest.raises(DataError, match=r"passage 'Z#0' is in none of the passage stores"):
        lookup["Z#0"]
    example_set = ExampleSet([TrainingExample("q", "x", ["Z#0"])], "answer", {})
    with pytest.raises(DataError, match="Z#0"):
        make_batch(example_set, [0], lookup, 0, 0)
