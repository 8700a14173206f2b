"""The reranker keeps part of the retriever's opinion (retrievers/rerank/fusion.py): logit + w *
standardised retriever score, w chosen on training turns by `convqa train reranker-fusion` and
recorded per retriever in the model folder, which a pipeline and an eval row then apply."""
from __future__ import annotations

import json

import pytest

from convqa.errors import ConfigError
from convqa.registry import RERANKERS
from convqa.types import Hit, Passage, RerankedHit
from reader_helpers import single_thread  # noqa: F401 (autouse fixture)
from reranker_helpers import tiny_cross_encoder
from retrievers.rerank.fusion import (choose_weight, fuse, retriever_key, standardised,
                                      weight_scores)
from retrievers.rerank.model import META_FILE, read_weights, write_weight

# the reranker prefers c, then b, then a; the retriever a, then b, then c
RERANKED = [RerankedHit("c", 2.0, 1, 10.0, 3), RerankedHit("b", 1.5, 2, 20.0, 2),
            RerankedHit("a", 1.0, 3, 40.0, 1)]


def ids(hits):
    return [h.passage_id for h in hits]


def test_weight_zero_is_the_reranker_and_a_large_weight_the_retriever():
    assert fuse(RERANKED, 0.0) == RERANKED
    assert ids(fuse(RERANKED, 100.0)) == ["a", "b", "c"]
    fused = fuse(RERANKED, 0.5)
    assert [h.rank for h in fused] == [1, 2, 3]
    z = dict(zip("cba", standardised([10.0, 20.0, 40.0])))
    expected = {pid: logit + 0.5 * z[pid] for pid, logit in zip("cba", (2.0, 1.5, 1.0))}
    assert ids(fused) == sorted(expected, key=lambda pid: -expected[pid]) == ["a", "c", "b"]
    assert [h.score for h in fused] == pytest.approx([expected[p] for p in "acb"])
    assert [h.retriever_rank for h in fused] == [1, 3, 2]  # kept with each passage


def test_the_weight_does_not_depend_on_the_retrievers_scale():
    scaled = [RerankedHit(h.passage_id, h.score, h.rank, h.retriever_score / 100, h.retriever_rank)
              for h in RERANKED]
    for weight in (0.25, 1.0, 3.0):
        assert ids(fuse(scaled, weight)) == ids(fuse(RERANKED, weight))
    assert standardised([3.0, 3.0]) == [0.0, 0.0]


def test_the_weight_of_the_best_answer_passage_mrr_is_chosen():
    # the answer passage is the retriever's first and the reranker's last: only a retriever
    # weight ranks it first; where the reranker is right, weight 0 is best
    scores = weight_scores([(RERANKED, {"a"})])
    assert scores[0.0]["mrr"] == pytest.approx(1 / 3) and scores[5.0]["hits@1"] == 1.0
    assert choose_weight(scores) > 0
    assert choose_weight(weight_scores([(RERANKED, {"c"})])) == 0.0  # tie: the smallest
    with pytest.raises(ConfigError, match="no turns"):
        weight_scores([])


def test_retriever_keys():
    assert retriever_key("bm25") == "bm25"
    assert retriever_key({"name": "dense", "model": "convqa-dpr-ihn", "index": "x"}) == \
        "dense:convqa-dpr-ihn"
    assert retriever_key({"name": "bm25", "index": "x"}) == "bm25"
    assert retriever_key(object()) is None


def test_a_dense_spec_without_model_takes_the_encoder_its_index_records(tmp_path):
    """`{name: dense, index: DIR}` (the encoder read from the index) shares the weight
    calibrated for `{name: dense, model: convqa-dpr-ihn, ...}`."""
    import numpy as np

    from retrievers.dense.index import DenseIndex

    vectors = np.random.default_rng(0).standard_normal((6, 8)).astype("float32")
    DenseIndex.build(vectors, encoder="convqa-dpr-ihn").save(tmp_path / "dense")
    assert retriever_key({"name": "dense", "index": str(tmp_path / "dense")}) == \
        "dense:convqa-dpr-ihn"
    assert retriever_key({"name": "dense", "index": tmp_path / "dense", "model": "other"}) == \
        "dense:other"
    assert retriever_key({"name": "dense", "index": str(tmp_path / "missing")}) == "dense"


@pytest.fixture()
def folder(tmp_path):
    path = tmp_path / "model"
    tiny_cross_encoder(seed=4).save_pretrained(path)
    return path


PASSAGES = [Passage(f"p{i}", f"passage number {i} " + "about a harbour " * i, f"Title {i}")
            for i in range(5)]
HITS = [Hit(p.id, 50.0 - 10 * i, i + 1) for i, p in enumerate(PASSAGES)]


def test_the_folder_weight_applies_to_its_retriever_only(folder):
    write_weight(folder, "bm25", 100.0, {"chosen_on": "test"})
    write_weight(folder, "dense:m", 0.5, {})
    assert read_weights(folder) == {"bm25": 100.0, "dense:m": 0.5}
    meta = json.loads((folder / META_FILE).read_text())
    assert meta["retriever_weights"]["bm25"]["chosen_on"] == "test"
    spec = {"name": "cross_encoder", "model": str(folder), "top_n": 5, "precision": "fp32"}
    alone = RERANKERS.build(spec)
    after_bm25 = RERANKERS.build(spec).for_retriever({"name": "bm25", "index": "i"})
    other = RERANKERS.build(spec).for_retriever({"name": "dense", "model": "other"})
    forced = RERANKERS.build({**spec, "retriever_weight": 0}).for_retriever("bm25")
    assert (alone.retriever_weight, after_bm25.retriever_weight, other.retriever_weight,
            forced.retriever_weight) == (0.0, 100.0, 0.0, 0.0)
    assert ids(after_bm25.rerank("where is the harbour?", HITS, PASSAGES)) == ids(HITS)
    assert alone.fingerprint() == other.fingerprint() != after_bm25.fingerprint()
    # a saved copy of the loaded model keeps the weights with the weights they were chosen for
    copy = folder.parent / "copy"
    after_bm25.model.save_pretrained(copy)
    assert read_weights(copy) == {"bm25": 100.0, "dense:m": 0.5}


def test_a_bad_weight_in_the_folder_names_the_file(folder):
    meta = json.loads((folder / META_FILE).read_text())
    meta["retriever_weights"] = {"bm25": {"weight": -1}}
    (folder / META_FILE).write_text(json.dumps(meta))
    with pytest.raises(ConfigError, match=r"convqa_reranker.json: 'retriever_weights.bm25.weight' "
                                          r"must be a number >= 0, got -1"):
        RERANKERS.build({"name": "cross_encoder", "model": str(folder)})
    with pytest.raises(ConfigError, match="retriever_weight must be a number >= 0"):
        RERANKERS.build({"name": "cross_encoder", "model": str(folder),
                         "retriever_weight": -0.5})


def test_pipeline_and_eval_rows_follow_their_retriever(folder, tmp_path):
    from convqa.corpus import PassageStore
    from convqa.front.evaluation.rerank import open_reranker
    from convqa.pipeline import Pipeline
    from retrievers.bm25 import BM25Retriever

    write_weight(folder, "bm25", 2.0, {})
    PassageStore.build(iter(PASSAGES), tmp_path / "passages", progress=False)
    with PassageStore.open(tmp_path / "passages") as store:
        BM25Retriever.build_from_store(store).save(tmp_path / "bm25")
    reranker = {"name": "cross_encoder", "model": str(folder), "precision": "fp32"}
    pipeline = Pipeline.from_config({
        "passages": str(tmp_path / "passages"), "reranker": reranker,
        "retriever": {"name": "bm25", "index": str(tmp_path / "bm25")}})
    assert pipeline.reranker.retriever_weight == 2.0
    row = open_reranker(reranker, {"name": "bm25", "index": "elsewhere"})
    assert row.model.retriever_weight == 2.0
    assert open_reranker(reranker).model.retriever_weight == 0.0


def test_command_line_chooses_and_writes_the_weight(folder, tmp_path, capsys):
    from training_helpers import make_benchmark_with_bm25

    from convqa.front.cli.main import main as convqa

    bench, bm25 = make_benchmark_with_bm25(tmp_path)
    retriever = json.dumps({"name": "bm25", "index": str(bm25)})
    args = ["train", "reranker-fusion", "--reranker", str(folder), "--benchmark", str(bench),
            "--retriever", retriever, "--history", "current_first", "--top-n", "4",
            "--cache", str(tmp_path / "cache"), "--report", str(tmp_path / "r.json"), "--quiet"]
    before = (folder / META_FILE).read_text()
    assert convqa(args) == 0
    assert (folder / META_FILE).read_text() == before  # nothing written without --write
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["retriever"] == "bm25" and report["top_n"] == 4 and report["turns"] > 0
    best = max(s["mrr"] for s in report["scores"].values())
    assert report["scores"][str(report["weight"])]["mrr"] == best
    cached = list((tmp_path / "cache").glob("rerank-*.json"))
    assert len(cached) == 1
    stamp = cached[0].stat().st_mtime_ns
    assert convqa(args + ["--write"]) == 0  # the scores come from the cache this time
    assert cached[0].stat().st_mtime_ns == stamp
    assert list((tmp_path / "cache").glob("rerank-*.json")) == cached
    assert read_weights(folder) == {"bm25": report["weight"]}
    assert f"retriever bm25: weight {report['weight']:g} (written)" in capsys.readouterr().out


def test_command_line_bad_input_is_one_line(tmp_path, capsys):
    from convqa.front.cli.main import main as convqa

    code = convqa(["train", "reranker-fusion", "--reranker", str(tmp_path), "--benchmark",
                   str(tmp_path), "--retriever", "bm25"])
    assert code != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a reranker folder" in err[0]


def test_several_benchmarks_choose_on_the_mean_of_their_mrrs(folder, tmp_path, capsys):
    from training_helpers import make_benchmark

    from convqa.corpus import PassageStore
    from convqa.front.cli.main import main as convqa
    from retrievers.bm25 import BM25Retriever

    specs = []
    for name in ("one", "two"):
        bench = make_benchmark(tmp_path / name)
        with PassageStore.open(bench / "passages") as store:
            BM25Retriever.build_from_store(store).save(tmp_path / f"bm25-{name}")
        specs += ["--benchmark", str(bench), "--retriever",
                  json.dumps({"name": "bm25", "index": str(tmp_path / f"bm25-{name}")})]
    args = ["train", "reranker-fusion", "--reranker", str(folder), *specs,
            "--history", "current_first", "--top-n", "4", "--report", str(tmp_path / "r.json"),
            "--quiet", "--write"]
    assert convqa(args) == 0
    report = json.loads((tmp_path / "r.json").read_text())
    first, second = report["benchmarks"]
    assert report["turns"] == first["turns"] + second["turns"]
    for weight, scores in report["scores"].items():
        mean = (first["scores"][weight]["mrr"] + second["scores"][weight]["mrr"]) / 2
        assert scores["mrr"] == pytest.approx(mean)
    best = max(s["mrr"] for s in report["scores"].values())
    assert report["scores"][str(report["weight"])]["mrr"] == best
    chosen_on = json.loads((folder / META_FILE).read_text())["retriever_weights"]["bm25"]
    assert "one" in chosen_on["chosen_on"] and "two" in chosen_on["chosen_on"]
    assert "on the mean MRR of one, two" in capsys.readouterr().out


def test_several_benchmarks_must_follow_one_retriever(folder, tmp_path, capsys):
    from convqa.front.cli.main import main as convqa

    base = ["train", "reranker-fusion", "--reranker", str(folder),
            "--benchmark", str(tmp_path / "a"), "--benchmark", str(tmp_path / "b")]
    assert convqa(base + ["--retriever", "bm25", "--retriever",
                          json.dumps({"name": "dense", "model": "convqa-dpr-ihn"})]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "one weight is chosen for one retriever" in err[0]
    assert convqa(base + ["--retriever", "bm25", "--history", "full", "--history", "full",
                          "--history", "full"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "3 --history for 2 --benchmark" in err[0]
