"""convqa/front/tools/bench_answer.py: per-stage latency over the turns of one benchmark split; a split
without enough turns is a one-line error naming the file and the splits it holds."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from training_helpers import TURNS, make_benchmark, passages

TRAIN_ONLY = [t for t in TURNS if t[6] == "train"]  # 9 train turns, no dev turn


@pytest.fixture(scope="module")
def bench():
    from convqa.front.tools import bench_answer
    return bench_answer


@pytest.fixture(scope="module")
def pipeline_yaml(tmp_path_factory) -> Path:
    """BM25 over the tiny benchmark's passages, no reader: fast to load and to answer."""
    from retrievers.bm25 import BM25Retriever

    folder = make_benchmark(tmp_path_factory.mktemp("bench-answer") / "bench")
    BM25Retriever.build(passages()).save(folder / "bm25")
    path = folder / "pipeline.yaml"
    path.write_text(yaml.safe_dump({
        "passages": str(folder / "passages"), "retriever": {"name": "bm25",
                                                            "index": str(folder / "bm25")},
        "history": {"name": "current_first"}, "top_k": 3}), encoding="utf-8")
    return path


def test_benchmark_without_dev_turns_is_one_line(bench, pipeline_yaml, tmp_path, capsys):
    folder = make_benchmark(tmp_path / "train-only", TRAIN_ONLY)
    assert bench.main(["--config", str(pipeline_yaml), "--benchmark", str(folder)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        f"bench_answer: error: {folder / 'turns.jsonl'}: 0 turns in split 'dev', the benchmark "
        "needs more than 5 (5 warm up the pipeline); turns per split: train 9 (choose one "
        "with --split)"]


def test_too_few_turns_in_the_split_is_one_line(bench, pipeline_yaml, capsys):
    folder = pipeline_yaml.parent  # the tiny benchmark: 9 train turns, 2 dev turns
    assert bench.main(["--config", str(pipeline_yaml), "--benchmark", str(folder)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1
    assert err[0].startswith(f"bench_answer: error: {folder / 'turns.jsonl'}: 2 turns in "
                             "split 'dev'")
    assert err[0].endswith("turns per split: dev 2, train 9 (choose one with --split)")


def test_another_split_is_measured(bench, pipeline_yaml, tmp_path, capsys):
    folder = make_benchmark(tmp_path / "train-only", TRAIN_ONLY)
    report = tmp_path / "report.json"
    assert bench.main(["--config", str(pipeline_yaml), "--benchmark", str(folder),
                       "--split", "train", "--json", str(report)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("4 turns, ")  # 9 train turns, 5 of them warm the pipeline up
    assert "| retrieve |" in out and "| **total** |" in out
    numbers = yaml.safe_load(report.read_text(encoding="utf-8"))
    assert numbers["turns"] == 4
    assert set(numbers["stages_ms"]) == {"history", "retrieve", "fetch"}
    assert 0 < numbers["stages_ms"]["retrieve"]["p50"] <= numbers["total_ms"]["p90"]
    from convqa.precision import cpu_name
    assert numbers["cpu"] == cpu_name() and f"({cpu_name()})" in out.splitlines()[0]


def test_a_model_family_swaps_its_models_into_the_timed_pipeline(bench, pipeline_yaml, tmp_path,
                                                                 capsys):
    import argparse

    config = yaml.safe_load(pipeline_yaml.read_text(encoding="utf-8"))
    with_reader = tmp_path / "with-reader.yaml"
    with_reader.write_text(yaml.safe_dump({**config, "reader": {"name": "extractive",
                                                                "model": "convqa-reader"}}),
                           encoding="utf-8")
    args = argparse.Namespace(config=str(with_reader), model_family="large")
    timed = bench.pipeline_config(args)
    assert timed["reader"]["model"] == "convqa-reader-large"
    assert timed["reranker"]["model"] == "convqa-reranker"
    assert timed["reranker"]["top_n"] == 50
    assert timed["retriever"] == config["retriever"] and timed["top_k"] == 3
    default = bench.pipeline_config(argparse.Namespace(config=str(with_reader),
                                                       model_family="default"))
    assert default["reader"] == {"name": "extractive", "model": "convqa-reader"}
    assert "reranker" not in default
    # a path with no reader has none to swap: one line, before anything loads
    assert bench.main(["--config", str(pipeline_yaml), "--benchmark", str(pipeline_yaml.parent),
                       "--split", "train", "--turns", "2", "--model-family", "large"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("bench_answer: error: ")


def test_set_overrides_a_value_of_the_timed_pipeline(bench, pipeline_yaml, tmp_path):
    import argparse

    config = yaml.safe_load(pipeline_yaml.read_text(encoding="utf-8"))
    with_reader = tmp_path / "with-reader.yaml"
    with_reader.write_text(yaml.safe_dump({**config, "reader": {"name": "extractive",
                                                                "model": "convqa-reader"}}),
                           encoding="utf-8")
    args = argparse.Namespace(config=str(with_reader), model_family="default",
                              overrides=["reader.stop_when_sure=false", "top_k=2"])
    timed = bench.pipeline_config(args)
    assert timed["reader"] == {"name": "extractive", "model": "convqa-reader",
                               "stop_when_sure": False}
    assert timed["top_k"] == 2 and timed["retriever"] == config["retriever"]


def test_a_cascade_reports_on_how_many_turns_its_second_stage_ran(bench, pipeline_yaml,
                                                                  tmp_path, capsys):
    """The second reranking stage is timed apart (`rerank_second`), and the report counts the
    turns it ran on: all of them with `skip_margin: never`, none with a margin of 0."""
    from reranker_helpers import tiny_cross_encoder

    first, second = tmp_path / "first", tmp_path / "second"
    tiny_cross_encoder(seed=4).save_pretrained(first)
    tiny_cross_encoder(seed=9).save_pretrained(second)
    config = yaml.safe_load(pipeline_yaml.read_text(encoding="utf-8"))
    folder = make_benchmark(tmp_path / "train-only", TRAIN_ONLY)
    ran = {}
    for margin in ("never", 0):
        path = tmp_path / f"cascade-{margin}.yaml"
        path.write_text(yaml.safe_dump({**config, "top_k": 2, "reranker": {
            "name": "cross_encoder", "model": str(first), "top_n": 3, "precision": "fp32",
            "second_stage": {"model": str(second), "top_n": 2, "precision": "fp32",
                             "skip_margin": margin}}}), encoding="utf-8")
        report = tmp_path / f"report-{margin}.json"
        assert bench.main(["--config", str(path), "--benchmark", str(folder), "--split", "train",
                           "--json", str(report)]) == 0
        numbers = yaml.safe_load(report.read_text(encoding="utf-8"))
        assert {"rerank", "rerank_second"} <= set(numbers["stages_ms"])
        ran[margin] = numbers["second_stage_turns"]
        assert f"ran on {ran[margin]} of 4 turns" in capsys.readouterr().out
    assert ran == {"never": 4, 0: 0}
