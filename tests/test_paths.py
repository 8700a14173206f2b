"""Answering paths (convqa/front/paths.py): one typed config, one builder, one naming scheme for
`convqa answer`, the demo and serve. Real BM25 over film articles; no reader is loaded."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from demo_helpers import FILM_TITLE, FIRST_QUESTION, READER, build_film_config

from apps.pipelines import config_pipelines, embedded_pipelines, with_phrase_indexes
from convqa.errors import ConfigError, DataError
from convqa.front.embedded import DEFAULT_READER, RETRIEVER_CHOICES, embedded_dir
from convqa.front.paths import (PHRASE_INDEX, RETRIEVER_READER, PhraseIndexPath, RerankerConfig,
                                RetrieverReaderPath, build, configured_path, embedded_path,
                                without_reader)
from convqa.front.serve.pipelines import config_source, embedded_source, phrase_source
from convqa.pipeline import Pipeline


@pytest.fixture(scope="module")
def film_yaml(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("films")
    path = folder / "films.yaml"
    path.write_text(yaml.safe_dump(dict(build_film_config(folder), reader=READER)),
                    encoding="utf-8")
    return path


def test_names_are_one_scheme_for_answer_demo_and_serve(film_yaml, tmp_path):
    configured = configured_path(film_yaml)
    assert (configured.name, configured.without_reader().name) == ("films+extractive", "films")
    dense = embedded_path("dense", cache_dir=tmp_path)
    assert (dense.name, embedded_path("bm25", None, tmp_path).name) == (
        "dense+extractive", "bm25")
    phrase = PhraseIndexPath(tmp_path / "v1")
    assert phrase.name == "phrase:v1" and phrase.kind == PHRASE_INDEX
    assert dense.kind == RETRIEVER_READER and phrase.reader_name is None
    # serve lists exactly these names (nothing is loaded to list them)
    assert config_source(film_yaml).names == ["films+extractive", "films"]
    assert embedded_source("bm25", cache_dir=tmp_path).names == ["bm25+extractive", "bm25"]
    (tmp_path / "v1").mkdir()
    assert phrase_source(tmp_path / "v1").names == ["phrase:v1"]
    # and the demo offers them as its choices
    assert config_pipelines(film_yaml).retrievers == ("films",)
    assert embedded_pipelines(tmp_path).retrievers == RETRIEVER_CHOICES
    assert with_phrase_indexes(None, [tmp_path / "v1"]).retrievers == ("phrase:v1",)
    assert not embedded_dir(tmp_path).exists()  # nothing was built


def test_embedded_path_is_the_default_config(tmp_path):
    path = embedded_path("hybrid", cache_dir=tmp_path)
    assert path.reader == DEFAULT_READER and path.embedded.retriever == "hybrid"
    assert path.retriever["name"] == "rrf" and path.top_k == 5
    assert path.pipeline_config()["passages"] == str(embedded_dir(tmp_path) / "passages")
    with pytest.raises(ConfigError, match="embedded retriever must be one of dense, bm25, hybrid"):
        embedded_path("bm26", cache_dir=tmp_path)


def test_a_configured_path_builds_the_pipeline_of_its_file(film_yaml):
    path = configured_path(film_yaml, ["top_k=3", "reader="])
    assert path.reader_name is None and path.top_k == 3
    pipeline = build(path)
    assert isinstance(pipeline, Pipeline) and pipeline.kind == RETRIEVER_READER
    assert pipeline.history_strategy is pipeline.history and pipeline.reader is None
    result = pipeline.answer(FIRST_QUESTION)
    assert result.passages[0].title == FILM_TITLE and len(result.hits) == 3
    bare = without_reader(pipeline)
    assert bare.retriever is pipeline.retriever and bare.passages is pipeline.passages


def test_config_errors_keep_their_messages(film_yaml, tmp_path):
    broken = RetrieverReaderPath.from_config({"passages": "x", "retriever": "bm25", "rank": 1},
                                             "broken")
    assert broken.extra == {"rank": 1}
    with pytest.raises(ConfigError, match="pipeline config: unknown key 'rank'"):
        build(broken)
    missing = RetrieverReaderPath.from_config({"passages": "x"}, "missing")
    with pytest.raises(ConfigError, match="pipeline config: missing 'retriever'"):
        build(missing)
    with pytest.raises(ConfigError, match="is not of the form key.sub=value"):
        configured_path(film_yaml, ["top_k"])
    with pytest.raises(DataError, match="no such phrase index folder"):
        phrase_source(tmp_path / "nowhere")


def test_a_reranker_sits_between_retriever_and_reader(film_yaml, tmp_path):
    from reranker_helpers import tiny_cross_encoder
    from retrievers.rerank.reranker import CrossEncoderReranker

    folder = tmp_path / "reranker"
    tiny_cross_encoder(seed=4).save_pretrained(folder)
    spec = {"name": "cross_encoder", "model": str(folder), "top_n": 4, "precision": "fp32",
            "device": "cpu"}
    path = configured_path(film_yaml, [f"reranker.{k}={v}" for k, v in spec.items()])
    assert path.reranker == RerankerConfig.from_spec(spec) and path.reranker.name == \
        "cross_encoder"
    assert path.with_overrides(["top_k=2"]).reranker == path.reranker
    # the reranker hands on its top 4: a reader asked for 5 would read 4 without a word
    with pytest.raises(ConfigError, match=r"top_k 5 is more than the 4 passages the reranker returns \(reranker.top_n\)"):
        build(path.without_reader())
    pipeline = build(path.with_overrides(["top_k=2"]).without_reader())
    assert isinstance(pipeline.reranker, CrossEncoderReranker)
    with pytest.raises(ConfigError, match="top_k 6 is more than the 4 passages"):
        pipeline.answer("Who directed the film?", top_k=6)
    plain = build(configured_path(film_yaml).without_reader())
    question = "Who directed the film?"
    retrieved = plain.answer(question, top_k=4)
    reranked = pipeline.answer(question, top_k=2)
    # the reader's passages are the reranker's best 2 of the retriever's top 4, in its order
    own = pipeline.reranker.rerank_turn(question, [], retrieved.hits, retrieved.passages)
    assert [h.passage_id for h in reranked.hits] == [h.passage_id for h in own[:2]]
    assert [p.id for p in reranked.passages] == [h.passage_id for h in own[:2]]
    assert reranked.hits[0].score >= reranked.hits[1].score and "rerank" in reranked.timings_ms
    with pytest.raises(ConfigError, match="'reranker' must name a reranker"):
        RerankerConfig.from_spec({"model": "x"})


def test_phrase_paths_from_a_systems_file_entry(tmp_path):
    path = PhraseIndexPath.from_spec({"index": "runs/v2", "nprobe": 8}, passages=tmp_path)
    assert (path.index, path.nprobe, path.passages) == ("runs/v2", 8, str(tmp_path))
    own = PhraseIndexPath.from_spec({"index": "runs/v2", "passages": "store"}, tmp_path)
    assert own.passages == "store" and PhraseIndexPath.from_spec("runs/v2").index == "runs/v2"
    with pytest.raises(ConfigError, match="phrase_index: unknown option 'nprob'"):
        PhraseIndexPath.from_spec({"index": "runs/v2", "nprob": 8})
    with pytest.raises(ConfigError, match="answers without a reader already"):
        without_reader(type("Phrase", (), {"kind": PHRASE_INDEX})())


def test_answer_flags_put_a_reranker_on_the_path(film_yaml):
    import argparse

    from convqa.front.cli import answer

    parser = argparse.ArgumentParser()
    answer.add_parser(parser.add_subparsers())
    args = parser.parse_args(["answer", "q", "--config", str(film_yaml), "--rerank", "RR",
                              "--rerank-top-n", "50"])
    path = answer.answering_path(args)
    assert path.reranker == RerankerConfig("cross_encoder", {"model": "RR", "top_n": 50})
    assert path.pipeline_config()["reranker"] == {"name": "cross_encoder", "model": "RR",
                                                  "top_n": 50}
    from convqa.errors import ConvQAError

    with pytest.raises(ConvQAError, match="--rerank-top-n goes with --rerank"):
        answer.answering_path(parser.parse_args(["answer", "q", "--rerank-top-n", "5"]))
    # a second stage reorders the reranker's best 5
    two = answer.answering_path(parser.parse_args(["answer", "q", "--config", str(film_yaml),
                                                   "--rerank", "RR", "--rerank-then", "BIG"]))
    assert two.pipeline_config()["reranker"] == {"name": "cross_encoder", "model": "RR",
                                                 "second_stage": {"model": "BIG"}}
    with pytest.raises(ConvQAError, match="--rerank-then goes with --rerank"):
        answer.answering_path(parser.parse_args(["answer", "q", "--rerank-then", "BIG"]))
    # --set refines the reranker the flags put on the path (e.g. its shortlist)
    refined = answer.answering_path(parser.parse_args([
        "answer", "q", "--config", str(film_yaml), "--rerank", "RR", "--rerank-top-n", "50",
        "--set", "reranker.rescore_within=3", "--set", "reranker.rescore_word_matches=4"]))
    assert refined.pipeline_config()["reranker"] == {
        "name": "cross_encoder", "model": "RR", "top_n": 50, "rescore_within": 3,
        "rescore_word_matches": 4}
