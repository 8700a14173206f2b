"""Phrase-index rows of `convqa eval` (convqa/front/evaluation/phrase.py) on the tiny benchmark of
tests/fixtures (7 passages; dev split = conversation 3, see test_eval_retrieval.py), with a
phrase index of a tiny random phrase model built by `convqa index --phrase` over the benchmark's
own passage store. The model's answers are random, so every expected number is recomputed here
from `PhrasePipeline` itself and the benchmark's gold labels: what is tested is that the table
scores exactly the pipeline's passages and answers, caches them by the index's identity, and
refuses malformed rows before anything runs."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from phrase_model_helpers import one_thread, tiny_phrase_index
from test_eval_retrieval import bench  # noqa: F401  (the fixture)

from convqa.benchmark import load_labelled_turns
from convqa.front.cli.main import main
from convqa.runs import read_run
from convqa.front.evaluation.systems import check_components, load_systems
from convqa.front.evaluation.tables import PHRASE_NOTE, answer_rows, write_answer_outputs
from convqa.metrics.answer import score_answer
from phrase_index.answerer import PhrasePipeline

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _threads():
    with one_thread():
        yield


@pytest.fixture(scope="module")
def phrase_dir(bench, tmp_path_factory):  # noqa: F811
    return tiny_phrase_index(tmp_path_factory.mktemp("phrase"), bench / "passages")


def systems_file(folder: Path, rows: list[dict], top_ks: list[int] | None = None) -> Path:
    data = {"systems": rows, **({"top_ks": top_ks} if top_ks else {})}
    path = folder / "systems.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def run_eval(table: str, folder: Path, systems: Path, out: Path, cache: Path,
             *extra: str) -> int:
    return main(["eval", table, "--benchmark", f"tiny={folder}", "--systems", str(systems),
                 "--out", str(out), "--cache-dir", str(cache), "--quiet", "--no-plots", *extra])


def dev_turns(folder: Path, evaluable: str):
    data = load_labelled_turns(folder)
    turns = [t for t in data.turns if t.split == "dev" and getattr(t, evaluable)]
    return turns, data.conversations


def test_retrieval_row_scores_the_passages_of_the_best_phrases(bench, phrase_dir, tmp_path):  # noqa: F811
    systems = systems_file(tmp_path, [{"label": "phrase",
                                       "phrase_index": {"index": str(phrase_dir)}}])
    assert run_eval("retrieval", bench, systems, tmp_path / "out", tmp_path / "runs") == 0
    (result,) = json.loads((tmp_path / "out.json").read_text())["results"]["tiny"]
    assert result["retriever"] is None and result["k"] == 100
    assert result["phrase_index_meta"]["corpus_checksum"].startswith("sha256:")
    run = read_run(result["run_file"]).hits
    pipe = PhrasePipeline.from_folder(phrase_dir, passages=bench / "passages")
    turns, conversations = dev_turns(bench, "retrieval_evaluable")
    assert len(turns) == 4
    ranks = []
    for turn in turns:
        expected = pipe.answer(turn.question, conversations[turn.conversation_id]
                               .history(turn.turn), top_k=100)
        ids = [hit.passage_id for hit in run[turn.qid]]
        assert ids == [hit.passage_id for hit in expected.hits]
        assert len(set(ids)) == len(ids) <= 7  # each passage once: fewer than k come back
        gold = set(turn.gold_passage_ids())
        ranks.append(next((r for r, pid in enumerate(ids, start=1) if pid in gold), None))
    overall = result["levels"]["article"]["groups"]["all"]
    for k in (1, 5, 20, 100):
        assert overall[f"hits@{k}"] == pytest.approx(
            sum(r is not None and r <= k for r in ranks) / 4)
    assert overall["mrr"] == pytest.approx(sum(1 / r for r in ranks if r) / 4)
    assert "| phrase | 4 |" in (tmp_path / "out.md").read_text()


def test_answers_row_is_the_best_phrase_scored_once(bench, phrase_dir, tmp_path):  # noqa: F811
    systems = systems_file(tmp_path, [{"label": "PRO-ConvQA phrase index",
                                       "phrase_index": str(phrase_dir)}], top_ks=[1, 5, 20])
    cache = tmp_path / "runs"
    assert run_eval("retrieval", bench, systems, tmp_path / "retrieval", cache) == 0
    assert run_eval("answers", bench, systems, tmp_path / "answers", cache) == 0
    (result,) = json.loads((tmp_path / "answers.json").read_text())["tiny"]
    (retrieval,) = json.loads((tmp_path / "retrieval.json").read_text())["results"]["tiny"]
    # one run serves both tables; the answers are scored once, as @1
    assert result["retrieval_run"] == retrieval["run_file"]
    assert list(result["by_k"]) == ["1"] and result["reader"] is None
    # what `auto` chose for the query encoder is recorded with the row
    assert result["query_precision"]["precision"] in ("fp32", "bf16", "int8")
    assert set(result["query_precision"]["agreement"]) >= {"fp32"}
    turns, conversations = dev_turns(bench, "answer_evaluable")
    pipe = PhrasePipeline.from_folder(phrase_dir, passages=bench / "passages")
    predictions_file = Path(result["by_k"]["1"]["predictions"])
    predictions = {r["qid"]: r for r in map(json.loads, predictions_file.read_text().splitlines())}
    em = {}
    for turn in turns:
        answer = pipe.answer(turn.question, conversations[turn.conversation_id].history(turn.turn))
        assert predictions[turn.qid]["prediction"] == answer.answer.text
        assert predictions[turn.qid]["passage_id"] == answer.answer.passage_id
        em[turn.qid] = 100 * score_answer(answer.answer.text, turn.answers, "topiocqa")["em"]
    assert sorted(em) == ["3_2", "3_4", "3_5"]
    assert result["by_k"]["1"]["groups"]["all"]["em"] == pytest.approx(sum(em.values()) / 3)
    text = (tmp_path / "answers.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| PRO-ConvQA"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "3" and cells[3:5] == ["-", "-"] and PHRASE_NOTE in text
    # the cached predictions are what is scored: make the switch turn 3_4 right by hand
    predictions["3_4"]["prediction"] = next(t.answers[0] for t in turns if t.qid == "3_4")
    predictions_file.write_text("".join(json.dumps(r) + "\n" for r in predictions.values()))
    assert run_eval("answers", bench, systems, tmp_path / "again", cache) == 0
    (again,) = json.loads((tmp_path / "again.json").read_text())["tiny"]
    scores = again["by_k"]["1"]
    assert scores["cached"] is True
    assert again["query_precision"] is None  # nothing was encoded: every answer was cached
    assert scores["groups"]["switch"]["em"] == pytest.approx((100 + em["3_5"]) / 2)
    assert scores["groups"]["all"]["em"] == pytest.approx((em["3_2"] + 100 + em["3_5"]) / 3)


def test_tables_mix_reader_rows_and_phrase_rows(bench, phrase_dir, tmp_path):  # noqa: F811
    """The Markdown and both PNGs of a table with a reader row (numbers made up here) and a
    phrase row: the phrase row fills the first EM / F1 column and the per-type columns."""
    def scores(em: float) -> dict:
        groups = {g: {"em": em, "f1": em + 10, "count": n}
                  for g, n in (("all", 3), ("no-switch", 1), ("switch", 2))}
        return {"groups": groups, "reader_ms": {"mean": 9.0, "p50": 9.0, "p90": 12.0}}

    reader_row = {"label": "BM25 + reader", "turns": 3,
                  "by_k": {"1": scores(10.0), "5": scores(20.0), "20": scores(30.0)}}
    phrase_row = {"label": "phrase", "turns": 3, "phrase_index": {"index": str(phrase_dir)},
                  "by_k": {"1": scores(40.0)}}
    lines = answer_rows([reader_row, phrase_row], [1, 5, 20])
    assert lines[2].startswith("| BM25 + reader | 3 | 10.0 / 20.0 | 20.0 / 30.0 | 30.0 / 40.0 |")
    assert lines[3] == ("| phrase | 3 | 40.0 / 50.0 | - | - | - | 40.0 / 50.0 (1) | "
                        "40.0 / 50.0 (2) | 9 / 12 |")
    written = write_answer_outputs(tmp_path / "mixed", {"tiny": [reader_row, phrase_row]},
                                   [1, 5, 20], "test")
    assert [p.name for p in written] == ["mixed.md", "mixed.json", "mixed-tiny-em-f1.png",
                                         "mixed-tiny-types.png"]
    assert all(p.stat().st_size > 1000 for p in written[2:])


def test_a_rebuilt_index_is_not_served_from_the_cache(bench, phrase_dir, tmp_path,  # noqa: F811
                                                       monkeypatch):
    index = tmp_path / "copy" / "phrase-index"
    shutil.copytree(phrase_dir, index)  # the same index (its model: the fixture's)
    systems = systems_file(tmp_path, [{"label": "phrase", "phrase_index": str(index)}])
    asked: list[int] = []
    original = PhrasePipeline.answer_queries

    def counting(self, texts, *args, **kwargs):
        asked.append(len(texts))
        return original(self, texts, *args, **kwargs)

    monkeypatch.setattr(PhrasePipeline, "answer_queries", counting)

    def run(name: str) -> dict:
        assert run_eval("retrieval", bench, systems, tmp_path / name, tmp_path / "runs") == 0
        return json.loads((tmp_path / f"{name}.json").read_text())["results"]["tiny"][0]

    first = run("first")
    assert not first["cached"] and asked == [4]
    second = run("second")
    assert second["cached"] and second["run_key"] == first["run_key"] and asked == [4]
    tiny_phrase_index(tmp_path / "copy", bench / "passages", seed=1)  # rebuilt in place
    third = run("third")
    assert not third["cached"] and third["run_key"] != first["run_key"] and asked == [4, 4]


@pytest.mark.parametrize("row, expected", [
    ({"phrase_index": {"index": "/nowhere"}, "retriever": "bm25"},
     "system 'p': 'phrase_index' does not go with 'retriever'"),
    ({"phrase_index": "/nowhere", "reader": "extractive"},
     "system 'p': 'phrase_index' does not go with 'reader'"),
    ({"phrase_index": "/nowhere", "history": "full"},
     "system 'p': 'phrase_index' does not go with 'history'"),
    ({}, "systems[1] needs 'retriever' or a 'phrase_index' (system 'p')"),
    ({"phrase_index": None}, "system 'p': 'phrase_index' is empty"),
    ({"phrase_index": {"model": "m"}}, "system 'p': phrase_index needs 'index'"),
    ({"phrase_index": {"index": "/nowhere", "nprob": 8}},
     "system 'p': phrase_index: unknown option 'nprob' (options: index, model, passages, "),
    ({"phrase_index": {"index": "/nowhere", "nprobe": 0}},
     "system 'p': phrase_index: nprobe must be a positive integer, got 0"),
    ({"phrase_index": {"index": "/nowhere", "candidates": "64"}},
     "system 'p': phrase_index: candidates must be a positive integer, got '64'"),
    ({"phrase_index": ["/nowhere"]},
     "system 'p': phrase_index must be a folder or a mapping with 'index'"),
    ({"phrase_index": {"index": "/nowhere", "sparse_weight": -1}},
     "system 'p': phrase_index: sparse weight must be a number >= 0, got -1"),
    ({"phrase_index": {"index": "/nowhere", "sparse_passages": 0}},
     "system 'p': phrase_index: sparse passages must be a positive integer, got 0"),
    ({"phrase_index": {"index": "/nowhere", "sparse_history": "newest"}},
     "system 'p': phrase_index: sparse_history: "),
    ({"phrase_index": {"index": "/nowhere", "precision": "fp8"}},
     "system 'p': phrase_index: precision: unknown precision 'fp8'"),
])
@pytest.mark.parametrize("table", ["retrieval", "answers"])
def test_malformed_phrase_rows_fail_before_anything_runs(bench, tmp_path, capsys, row,  # noqa: F811
                                                         expected, table):
    first = {"label": "BM25", "retriever": {"name": "bm25", "index": str(tmp_path / "bm25")},
             "reader": "extractive"}
    systems = systems_file(tmp_path, [first, {"label": "p", **row}])
    capsys.readouterr()
    assert run_eval(table, bench, systems, tmp_path / "out", tmp_path / "runs") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"convqa eval: error: {systems}: {expected}"] or \
        (len(err) == 1 and err[0].startswith(f"convqa eval: error: {systems}: {expected}")), err
    assert not (tmp_path / "bm25").exists() and not (tmp_path / "runs").exists()


def test_a_missing_index_is_one_line(bench, tmp_path, capsys):  # noqa: F811
    systems = systems_file(tmp_path, [{"label": "p", "phrase_index": "{corpus}/indexes/none"}])
    capsys.readouterr()
    assert run_eval("retrieval", bench, systems, tmp_path / "out", tmp_path / "runs") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("convqa eval: error: ")
    assert f"{bench}/indexes/none" in err[0] and "no such index folder" in err[0]


def test_qrecc_refuses_phrase_rows(fixtures_dir, tmp_path, capsys):
    fx = fixtures_dir / "qrecc_eval"
    systems = systems_file(tmp_path, [{"label": "p", "phrase_index": "/nowhere"}])
    capsys.readouterr()
    assert main(["eval", "retrieval", "--dataset", "qrecc", "--data",
                 str(fx / "qrecc_test.json"), "--passages", str(fx / "passages.jsonl"),
                 "--systems", str(systems), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"convqa eval: error: {systems}: system 'p': phrase_index rows do not run "
                   "on --dataset qrecc yet (leave them out with 'corpora' or --only)"]


def test_the_benchmark_answer_systems_file_has_a_phrase_row():
    systems = load_systems(REPO / "benchmarks" / "answer_systems.yaml", "answers")
    check_components(systems)
    rows = [s for s in systems.systems if s.phrase_index is not None]
    assert len(rows) == 1 and rows[0].corpora == ("vital",)
    assert rows[0].runs_on("vital") and not rows[0].runs_on("full")
    resolved = rows[0].resolved({"corpus": "/tmp/bench/vital", "passages": "unused"})
    index = resolved.phrase_index["index"] if isinstance(resolved.phrase_index, dict) \
        else resolved.phrase_index
    assert index == "/tmp/bench/vital/indexes/phrase"
    assert resolved.retriever is None and resolved.reader is None
