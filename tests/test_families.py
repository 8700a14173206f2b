"""Model families: one name swaps the shipped reader (and adds a reranker) on every front door."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from demo_helpers import build_film_config

from convqa.errors import ConfigError, ConvQAError
from convqa.front.families import (DEFAULT_FAMILY, FAMILIES, family_named, with_family)
from convqa.front.paths import PhraseIndexPath, RerankerConfig, configured_path, embedded_path
from convqa.models import SHIPPED_MODELS
from convqa.model_packages import ALL_MPNET_BASE_V2, installed_path

LARGE = family_named("large")


def parse(*argv):
    from convqa.front.cli.main import build_parser

    return build_parser().parse_args(list(argv))


@pytest.fixture()
def film_yaml(tmp_path) -> Path:
    config = tmp_path / "films.yaml"
    values = build_film_config(tmp_path)
    values["reader"] = {"name": "extractive", "model": "convqa-reader", "always_answer": True}
    config.write_text(yaml.safe_dump(values), encoding="utf-8")
    return config


def test_every_family_names_shipped_models():
    for family in FAMILIES.values():
        assert family.reader in SHIPPED_MODELS
        assert family.reranker is None or family.reranker in SHIPPED_MODELS
        assert (family.rerank_second_stage is None
                or family.rerank_second_stage["model"] in SHIPPED_MODELS)
    assert FAMILIES[DEFAULT_FAMILY].reader == "convqa-reader"
    with pytest.raises(ConfigError, match="--model-family must be one of default, large"):
        family_named("huge")


def test_the_large_family_swaps_the_reader_and_puts_a_reranker_before_it(tmp_path, film_yaml):
    path = with_family(embedded_path("dense", cache_dir=tmp_path), LARGE)
    assert path.reader == {"name": "extractive", "model": LARGE.reader}
    assert path.reranker == RerankerConfig("cross_encoder", {
        "model": LARGE.reranker, "top_n": LARGE.rerank_top_n,
        "rescore_within": 4.0, "rescore_word_matches": 6,
        "second_stage": {"model": "convqa-reranker-large", "top_n": 5}})
    # the shortlist options build: the family's reranker spec is a valid one
    from retrievers.rerank.reranker import CrossEncoderRerankerOptions

    options = CrossEncoderRerankerOptions(**path.reranker.options)
    assert (options.rescore_within, options.rescore_word_matches) == (4.0, 6)
    assert path.retriever == embedded_path("dense", cache_dir=tmp_path).retriever
    configured = with_family(configured_path(film_yaml), LARGE)
    assert configured.reader["always_answer"] is True  # the file's reader options stay
    assert configured.reader["model"] == LARGE.reader
    plain = embedded_path("bm25", cache_dir=tmp_path)
    assert with_family(plain, FAMILIES[DEFAULT_FAMILY]) is plain


def test_a_reranker_the_path_names_is_kept(tmp_path):
    from dataclasses import replace

    own = RerankerConfig("cross_encoder", {"model": "runs/rr", "top_n": 50})
    path = replace(embedded_path("dense", cache_dir=tmp_path), reranker=own)
    assert with_family(path, LARGE).reranker == own


def test_paths_without_an_extractive_reader_are_refused(tmp_path):
    from dataclasses import replace

    with pytest.raises(ConfigError, match="needs a path with one"):
        with_family(embedded_path("dense", reader=None, cache_dir=tmp_path), LARGE)
    with pytest.raises(ConfigError, match="needs a path with one"):
        with_family(PhraseIndexPath(tmp_path), LARGE)
    fid = replace(embedded_path("dense", cache_dir=tmp_path), reader={"name": "fid", "model": "m"})
    with pytest.raises(ConfigError, match="reader is 'fid'"):
        with_family(fid, LARGE)


def test_answer_flags_and_set_win_over_the_family(film_yaml):
    from convqa.front.cli.answer import answering_path

    path = answering_path(parse("answer", "q", "--config", str(film_yaml),
                                "--model-family", "large"))
    assert path.reader["model"] == LARGE.reader and path.reranker.options["model"] == LARGE.reranker
    path = answering_path(parse("answer", "q", "--config", str(film_yaml), "--model-family",
                                "large", "--set", "reader.model=runs/reader", "--rerank", "RR"))
    assert path.reader["model"] == "runs/reader"
    assert path.reranker == RerankerConfig("cross_encoder", {"model": "RR"})
    with pytest.raises(ConvQAError, match="--model-family"):
        answering_path(parse("answer", "q", "--phrase-index", str(film_yaml.parent),
                             "--model-family", "large"))


def test_serve_and_demo_read_with_the_family(film_yaml, tmp_path, monkeypatch):
    import apps.pipelines
    import convqa.front.serve.pipelines as serve_pipelines
    from convqa.front.cli.demo import make_pipelines
    from convqa.front.cli.serve import pipeline_source

    served = []
    monkeypatch.setattr(serve_pipelines, "path_source", lambda path: served.append(path) or path)
    pipeline_source(parse("serve", "--cache-dir", str(tmp_path), "--model-family", "large"))
    pipeline_source(parse("serve", "--config", str(film_yaml), "--model-family", "large",
                          "--set", "reader.model=runs/reader"))
    assert [p.reader["model"] for p in served] == [LARGE.reader, "runs/reader"]
    assert all(p.reranker.options["model"] == LARGE.reranker for p in served)
    with pytest.raises(ConfigError, match="needs a path with one"):
        pipeline_source(parse("serve", "--no-reader", "--model-family", "large"))

    monkeypatch.setattr(apps.pipelines, "build_path", lambda path, progress=True: path)
    pipelines, _ = make_pipelines(parse("demo", "--cache-dir", str(tmp_path),
                                        "--model-family", "large"))
    assert pipelines.get("dense", "extractive").reader["model"] == LARGE.reader
    assert pipelines.get("dense", "none").reader is None
    pipelines, _ = make_pipelines(parse("demo", "--config", str(film_yaml),
                                        "--model-family", "large"))
    assert pipelines.get("films", "extractive").reranker.options["model"] == LARGE.reranker


@pytest.mark.skipif(installed_path(ALL_MPNET_BASE_V2) is None,
                    reason="the large family needs `convqa models install all-mpnet-base-v2`")
def test_the_large_family_answers_the_readme_question(capsys):
    """On the embedded collection (built or reused in the convqa cache), end to end."""
    from convqa.front.cli.main import main

    assert main(["answer", "Who directed 2001: A Space Odyssey?", "--model-family", "large",
                 "--json"]) == 0
    assert "Stanley Kubrick" in capsys.readouterr().out
