"""`convqa train convdr --weak-positives`: a benchmark's train turns whose free-form answer
occurs in no passage word for word join the query tower's data with the passage the rule names
as their positive, and the siblings that may hold the answer too are never mined as negatives."""
from __future__ import annotations

import json

import pytest

from convqa.benchmark.weak_positives import WeakLabel, WeakPositiveRule, weak_label
from convqa.errors import ConfigError, DataError
from convqa.front.cli.main import main
from retrievers.convdr.data import (benchmark_examples, build_examples, load_examples_jsonl,
                                    save_examples_jsonl)
from retrievers.convdr.mining import ConvDRMiningConfig, load_groups, mine_groups
from retrievers.convdr.run import ConvDRRunConfig
from retrievers.convdr.targets import encode_teacher_queries
from retrievers.dense.build import build_dense_index, load_encoder

from convdr_helpers import examples, make_index, make_teacher
from training_helpers import TURNS, WEAK_TURNS, make_benchmark

RULE = WeakPositiveRule(min_coverage=0.7, min_lead=0.2, max_negative_coverage=0.5)
# B#0 covers a quarter of turn c5_1's answer: a second source under this rule, not under RULE
STRICT = WeakPositiveRule(min_coverage=0.6, min_lead=0.2, max_negative_coverage=0.2)


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    return make_benchmark(tmp_path_factory.mktemp("convdr_weak") / "tiny", TURNS + WEAK_TURNS)


def test_a_label_names_the_siblings_that_cover_much_of_the_answer():
    texts = {"X#0": "Paris is the capital of France.", "X#1": "Paris has many museums.",
             "X#2": "France borders Spain."}
    answer = "Paris is the capital city of France"  # paris, capital, city, france
    assert weak_label(answer, texts, RULE) == WeakLabel("X#0", ())
    loose = WeakPositiveRule(min_coverage=0.7, min_lead=0.2, max_negative_coverage=0.25)
    assert weak_label(answer, texts, loose) == WeakLabel("X#0", ("X#1", "X#2"))
    assert weak_label("France", texts, RULE) is None
    assert WeakPositiveRule.for_coverage(None) is None  # no --weak-positives
    assert WeakPositiveRule.for_coverage(0.4) == WeakPositiveRule(min_coverage=0.4,
                                                                  max_negative_coverage=0.4)


def test_weak_turns_join_the_benchmark_source(bench):
    exact = {e.id: e for e in benchmark_examples(bench)}
    weak = {e.id: e for e in benchmark_examples(bench, RULE)}
    assert sorted(set(weak) - set(exact)) == ["c5_1"]
    added = weak["c5_1"]
    assert added.source == "benchmark:weak" and [p.id for p in added.positives] == ["B#1"]
    assert added.not_negatives == [] and added.history == []
    assert all(weak[k].to_dict() == e.to_dict() for k, e in exact.items())
    strict = {e.id: e for e in benchmark_examples(bench, STRICT)}
    assert strict["c5_1"].not_negatives == ["B#0"]
    assert [p.id for p in strict["c5_2"].positives] == ["D#0"]  # 2 of 3 words pass 0.6
    built = build_examples([("benchmark", str(bench))], weak=STRICT)
    assert built.counts["benchmark"]["weak"] == 2
    assert built.counts["benchmark"]["kept"] == len(exact) + 2


def test_not_negatives_survive_the_jsonl_round_trip(bench, tmp_path):
    examples_ = benchmark_examples(bench, STRICT)
    path = tmp_path / "examples.jsonl"
    save_examples_jsonl(path, examples_)
    back = {e.id: e for e in load_examples_jsonl(path)}
    assert back["c5_1"].not_negatives == ["B#0"]
    assert [e.to_dict() for e in examples_] == [back[e.id].to_dict() for e in examples_]
    record = examples_[0].to_dict()
    assert "not_negatives" not in record  # files without weak turns are as before
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({**record, "not_negatives": "B#0"}) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"bad.jsonl:1: field 'not_negatives'"):
        load_examples_jsonl(bad)


def test_mining_never_takes_a_not_negative(tmp_path):
    teacher_dir = make_teacher(tmp_path / "teacher")
    store, index_dir = make_index(tmp_path, teacher_dir)
    teacher = load_encoder(str(teacher_dir))
    data = examples()[:2]
    queries = encode_teacher_queries(teacher, [e.rewrite for e in data])[0]
    config = ConvDRMiningConfig(top_k=len(store))
    mine_groups(teacher, data, queries, index_dir, tmp_path / "m", config)
    before, _ = load_groups(tmp_path / "m", data)
    assert store.index("p1") in before[0].negatives
    data[0].not_negatives = ["p1", "not-in-store"]
    mine_groups(teacher, data, queries, index_dir, tmp_path / "m", config)  # mined again
    after, _ = load_groups(tmp_path / "m", data)
    assert after[0].negatives == [n for n in before[0].negatives if n != store.index("p1")]
    assert after[1].negatives == before[1].negatives


def test_weak_positives_need_a_benchmark_source():
    with pytest.raises(ConfigError, match="give --data benchmark=DIR"):
        ConvDRRunConfig(data=[("canard", "dev.json")], weak_positives=0.7)
    with pytest.raises(ConfigError, match="min_coverage must be in"):
        ConvDRRunConfig(data=[("benchmark", "bench")], weak_positives=1.5)


def test_a_run_trains_on_the_weak_turns(bench, tmp_path, capsys):
    from convqa.corpus import PassageStore

    teacher = make_teacher(tmp_path / "teacher")
    with PassageStore.open(bench / "passages") as store:
        build_dense_index(str(teacher), store, tmp_path / "index", batch_size=8,
                          precision="fp32", dtype="float32", progress=False)
    out = tmp_path / "run"
    argv = ["train", "convdr", "--mode", "multitask", "--anchor", "--out", str(out),
            "--teacher", str(teacher), "--data", f"benchmark={bench}", "--weak-positives",
            "0.6", "--index", str(tmp_path / "index"), "--mine-top-k", "6", "--negatives",
            "2", "--history-max-tokens", "62", "--batch-size", "2", "--max-steps", "2",
            "--heldout-fraction", "0", "--fidelity-examples", "0", "--quiet"]
    assert main(argv) == 0
    capsys.readouterr()
    train = {e.id: e for e in load_examples_jsonl(out / "examples" / "train.jsonl")}
    assert train["c5_1"].source == "benchmark:weak"
    assert [p.id for p in train["c5_1"].positives] == ["B#1"]
    assert "c6_1" not in train
    # another coverage is another run: the folder refuses it rather than mixing the two
    assert main([a if a != "0.6" else "0.7" for a in argv]) == 2
    assert "made with other settings (examples differ)" in capsys.readouterr().err
