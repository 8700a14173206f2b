"""`convqa eval`: tables, JSON and PNGs from a systems file; cache reuse; one-line errors.

The tiny benchmark of tests/fixtures/benchmark (built as in test_eval_retrieval.py) has four
retrieval-evaluable dev turns, 3_1 (first), 3_2 (no-switch), 3_4 and 3_5 (switch). BM25 over
its own store with q_t only (reasoned by hand in test_eval_retrieval.test_bm25_end_to_end):
3_1, 3_2 and 3_5 find their article (40) at rank 1, 3_4 ("who discovered gravity with one?")
shares no word with the corpus and gets no hits. So article level: H@k 75.0 for every k, MRR
0.750; first 1/1, no-switch 1/1, switch 1/2.
The answer-evaluable turns are 3_2 (answer passage 40#0), 3_4 (30#0) and 3_5 (40#0): an
oracle reader that answers right when it is given an answer passage gets 3_2 and 3_5 at every
k: EM = F1 = 66.7 (no-switch 100, switch 50).
"""
from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from convqa.benchmark import load_labelled_turns
from convqa.benchmark.topiocqa_wiki import build_benchmark, full_wiki_source
from convqa.front.cli.main import main
from convqa.corpus import PassageStore, read_passages
from convqa.front.evaluation.retrieval import evaluate_retrieval
from convqa.registry import READERS
from convqa.types import Answer
from retrievers.bm25 import BM25Retriever

PNG = b"\x89PNG\r\n\x1a\n"
BM25_QT = ("  - label: BM25 q_t\n"
           "    retriever: {name: bm25, index: '{corpus}/indexes/bm25', backend: numpy}\n"
           "    history: question_only\n")
BM25_XT = ("  - label: BM25 X_t\n"
           "    retriever: {name: bm25, index: '{corpus}/indexes/bm25', backend: numpy}\n"
           "    history: full\n")
QT_ROW = ("| BM25 q_t | 4 | 75.0 | 75.0 | 75.0 | 75.0 | 0.750 | 100.0 / 100.0 (1) | "
          "100.0 / 100.0 (1) | 50.0 / 50.0 (2) |")


@dataclass
class OracleConfig:
    benchmark: str = ""


@READERS.register("test-eval-cli-oracle", config=OracleConfig)
class OracleReader:
    """Answers with the gold answer when an answer passage is among the passages given."""

    def __init__(self, config: OracleConfig):
        turns = load_labelled_turns(config.benchmark).turns
        self.gold = {t.question: (t.answers[0], set(t.answer_passage_ids)) for t in turns
                     if t.answer_evaluable}

    def read(self, question, history, passages):
        answer, pids = self.gold[question]
        if any(p.id in pids for p in passages):
            return Answer(answer, 1.0, next(p.id for p in passages if p.id in pids))
        return Answer("something else", 0.0, None)

    def fingerprint(self) -> str:
        return "test-eval-cli-oracle-v1"


@pytest.fixture(scope="module")
def bench(fixtures_dir, tmp_path_factory) -> Path:
    fx = fixtures_dir / "benchmark"
    out = tmp_path_factory.mktemp("bench") / "tiny"
    build_benchmark(fx / "topiocqa_tiny.json", full_wiki_source(fx / "articles.jsonl"), out,
                    max_words=10, dev_fraction=0.34, seed=0)
    return out


@pytest.fixture
def bm25_calls(monkeypatch) -> list[int]:
    """The number of queries of every BM25 retrieve_batch call."""
    calls: list[int] = []
    original = BM25Retriever.retrieve_batch

    def counting(self, queries, *args, **kwargs):
        calls.append(len(queries))
        return original(self, queries, *args, **kwargs)

    monkeypatch.setattr(BM25Retriever, "retrieve_batch", counting)
    return calls


def systems_file(tmp_path: Path, rows: str, name: str = "systems.yaml", head: str = "") -> Path:
    path = tmp_path / name
    path.write_text(head + "systems:\n" + rows, encoding="utf-8")
    return path


def eval_args(table: str, bench: Path, systems: Path, out: Path, cache: Path,
              plots: bool = True) -> list[str]:
    return ["eval", table, "--benchmark", f"tiny={bench}", "--systems", str(systems),
            "--out", str(out), "--cache-dir", str(cache)] + ([] if plots else ["--no-plots"]) + [
            "--quiet"]


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_retrieval_table_markdown_json_and_plots(bench, tmp_path):
    systems = systems_file(tmp_path, BM25_QT)
    out = tmp_path / "results" / "retrieval"
    assert main(eval_args("retrieval", bench, systems, out, tmp_path / "runs")) == 0
    markdown = (tmp_path / "results" / "retrieval.md").read_text(encoding="utf-8")
    assert "### tiny corpus, article level" in markdown and QT_ROW in markdown
    assert "| BM25 q_t | switch | 2 | 50.0 | 50.0 | 50.0 | 50.0 | 0.500 |" in markdown
    data = json.loads((tmp_path / "results" / "retrieval.json").read_text(encoding="utf-8"))
    assert data["command"].startswith("convqa eval retrieval --benchmark tiny=")
    [result] = data["results"]["tiny"]
    # the JSON holds what the evaluation function returns (recomputed without the cache)
    direct = evaluate_retrieval(bench, {"name": "bm25", "index": str(bench / "indexes" / "bm25"),
                                        "backend": "numpy"}, "question_only",
                                cache_dir=tmp_path / "fresh", progress=False)
    assert not direct["cached"] and result["levels"] == direct["levels"]
    assert result["levels"]["article"]["groups"]["all"]["mrr"] == 0.75
    for level in ("article", "answer"):
        for kind in ("hits", "types"):
            png = tmp_path / "results" / f"retrieval-tiny-{level}-{kind}.png"
            assert png.read_bytes()[:8] == PNG and png.stat().st_size > 5000
            assert f"]({png.name})" in markdown


def test_rerun_retrieves_only_new_rows(bench, tmp_path, bm25_calls):
    def run(systems: Path, *extra: str) -> int:
        return main(eval_args("retrieval", bench, systems, tmp_path / "retrieval",
                              tmp_path / "runs", plots=False) + list(extra))

    assert run(systems_file(tmp_path, BM25_QT)) == 0
    assert sum(bm25_calls) == 4  # the four dev turns, q_t
    both = systems_file(tmp_path, BM25_QT + BM25_XT, "both.yaml")
    assert run(both) == 0
    assert sum(bm25_calls) == 8  # only X_t's four queries are new
    data = json.loads((tmp_path / "retrieval.json").read_text(encoding="utf-8"))
    assert [r["cached"] for r in data["results"]["tiny"]] == [True, False]
    assert run(both) == 0
    assert sum(bm25_calls) == 8
    assert run(both, "--no-cache") == 0
    assert sum(bm25_calls) == 16  # --no-cache retrieves again


def test_only_picks_systems(bench, tmp_path, bm25_calls):
    both = systems_file(tmp_path, BM25_QT + BM25_XT)
    args = eval_args("retrieval", bench, both, tmp_path / "r", tmp_path / "runs")
    assert main(args + ["--only", "X_t", "--no-plots"]) == 0
    data = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert [r["label"] for r in data["results"]["tiny"]] == ["BM25 X_t"]
    assert not list(tmp_path.glob("r-*.png"))


def test_answers_table(bench, tmp_path):
    rows = (BM25_QT.replace("BM25 q_t", "BM25 q_t + oracle")
            + "    reader: {name: test-eval-cli-oracle, benchmark: '{corpus}'}\n")
    systems = systems_file(tmp_path, rows, head="top_ks: [1, 5]\n")
    out = tmp_path / "answers"
    assert main(eval_args("answers", bench, systems, out, tmp_path / "runs")) == 0
    markdown = (tmp_path / "answers.md").read_text(encoding="utf-8")
    assert ("| BM25 q_t + oracle | 3 | 66.7 / 66.7 | 66.7 / 66.7 | - | 100.0 / 100.0 (1) | "
            "50.0 / 50.0 (2) |") in markdown
    data = json.loads((tmp_path / "answers.json").read_text(encoding="utf-8"))
    [result] = data["tiny"]
    assert result["by_k"]["5"]["groups"]["all"]["em"] == pytest.approx(200 / 3)
    assert not result["by_k"]["5"]["cached"]
    for kind in ("em-f1", "types"):
        assert (tmp_path / f"answers-tiny-{kind}.png").read_bytes()[:8] == PNG
    assert main(eval_args("answers", bench, systems, out, tmp_path / "runs")) == 0
    again = json.loads((tmp_path / "answers.json").read_text(encoding="utf-8"))["tiny"][0]
    assert again["by_k"]["5"]["cached"] and again["by_k"]["5"]["groups"] == \
        result["by_k"]["5"]["groups"]
    # --no-cache recomputes everything (same scores) and leaves no run in the cache folder
    before = sorted(p.name for p in (tmp_path / "runs").rglob("*"))
    assert main(eval_args("answers", bench, systems, out, tmp_path / "runs")
                + ["--no-cache"]) == 0
    fresh = json.loads((tmp_path / "answers.json").read_text(encoding="utf-8"))["tiny"][0]
    assert not fresh["by_k"]["5"]["cached"] and fresh["retrieval_run"] is None
    assert fresh["by_k"]["5"]["groups"] == result["by_k"]["5"]["groups"]
    assert sorted(p.name for p in (tmp_path / "runs").rglob("*")) == before


@pytest.mark.parametrize("table, row, expected", [
    ("retrieval", "  - {label: foo, retriever: {name: bm26}}\n",
     "system 'foo': unknown retriever 'bm26' (known: bm25, "),
    ("retrieval", "  - {label: foo, retriever: {name: bm25, idx: x}}\n",
     "system 'foo': retriever 'bm25': unknown option 'idx' (options: index, "),
    ("retrieval", "  - {label: foo, retriever: bm25, history: everything}\n",
     "system 'foo': unknown history strategy 'everything' (known: "),
    ("retrieval", "  - {label: foo, retriever: bm25, histroy: full}\n",
     "system 'foo': unknown key 'histroy'"),
    ("retrieval", "  - {retriever: bm25}\n", "systems[1] needs 'label'"),
    ("retrieval", "  - {label: BM25 q_t, retriever: bm25}\n", "system 'BM25 q_t' appears twice"),
    ("answers", "    reader: {name: telepathy}\n",
     "system 'BM25 q_t': unknown reader 'telepathy' "),
    ("answers", "", "systems[0] needs 'reader'"),
])
def test_unknown_components_fail_before_any_run(bench, tmp_path, capsys, bm25_calls, table, row,
                                                expected):
    rows = BM25_QT + row  # a valid first row: nothing of it may run
    systems = systems_file(tmp_path, rows)
    out = tmp_path / "out"
    assert main(eval_args(table, bench, systems, out, tmp_path / "runs")) == 2
    err = one_error_line(capsys)
    assert err.startswith(f"convqa eval: error: {systems}: {expected}"), err
    assert bm25_calls == [] and not list(tmp_path.glob("out*"))


def test_malformed_files_are_one_line_errors(bench, tmp_path, capsys, fixtures_dir):
    systems = systems_file(tmp_path, BM25_QT)
    broken = tmp_path / "broken"
    shutil.copytree(bench, broken)
    turns = broken / "turns.jsonl"
    lines = turns.read_text(encoding="utf-8").splitlines()
    turns.write_text("\n".join([lines[0], '{"qid": "1_2", "turn": ', *lines[2:]]) + "\n",
                     encoding="utf-8")
    assert main(eval_args("retrieval", broken, systems, tmp_path / "o", tmp_path / "r")) == 2
    assert one_error_line(capsys).startswith(f"convqa eval: error: {turns}:2: malformed JSON")
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("systems:\n  - label: x\n   retriever: bm25\n", encoding="utf-8")
    assert main(eval_args("retrieval", bench, bad_yaml, tmp_path / "o", tmp_path / "r")) == 2
    assert one_error_line(capsys).startswith(f"convqa eval: error: {bad_yaml}:3: malformed YAML")
    assert main(eval_args("retrieval", tmp_path, systems, tmp_path / "o", tmp_path / "r")) == 2
    assert "not a benchmark folder" in one_error_line(capsys)
    records = json.loads((fixtures_dir / "eval" / "topiocqa_dev_later_release.json").read_text())
    records[1]["Turn_no"] = "two"
    official = tmp_path / "dev.json"
    official.write_text(json.dumps(records, indent=1), encoding="utf-8")
    store = tmp_path / "collection" / "passages"
    PassageStore.build(read_passages(fixtures_dir / "eval" / "topiocqa_collection.tsv"), store,
                       progress=False).close()
    assert main(["eval", "retrieval", "--dataset", "topiocqa", "--data", str(official),
                 "--passages", str(store), "--systems", str(systems), "--out",
                 str(tmp_path / "o"), "--quiet"]) == 2
    err = one_error_line(capsys)
    assert err.startswith(f"convqa eval: error: {official}:") and "'Turn_no'" in err
    qrecc = json.loads((fixtures_dir / "qrecc_eval" / "qrecc_test.json").read_text())
    del qrecc[1]["Question"]
    qrecc_file = tmp_path / "qrecc_test.json"
    qrecc_file.write_text(json.dumps(qrecc, indent=1), encoding="utf-8")
    assert main(["eval", "retrieval", "--dataset", "qrecc", "--data", str(qrecc_file),
                 "--passages", str(fixtures_dir / "qrecc_eval" / "passages.jsonl"),
                 "--systems", str(systems), "--out", str(tmp_path / "o"), "--quiet"]) == 2
    err = one_error_line(capsys)
    assert err.startswith(f"convqa eval: error: {qrecc_file}:") and "'Question'" in err


@pytest.mark.parametrize("args, expected", [
    (["--dataset", "topiocqa"], "--dataset topiocqa needs --data FILE"),
    (["--dataset", "topiocqa", "--data", "x.json"], "--dataset topiocqa needs --passages STORE"),
    (["--dataset", "qrecc"], "--dataset qrecc needs --data qrecc_*.json and --passages"),
    (["--data", "x.json"], "--dataset topiocqa-wiki reads --benchmark DIR"),
    ([], "--dataset topiocqa-wiki needs --benchmark"),
    (["--benchmark", "a=", "--batch-size", "0"], "--batch-size must be at least 1"),
])
def test_flag_errors(tmp_path, capsys, args, expected):
    assert main(["eval", "retrieval", *args, "--out", str(tmp_path / "o")]) == 2
    assert one_error_line(capsys).startswith(f"convqa eval: error: {expected}")


def test_official_topiocqa_file(fixtures_dir, tmp_path):
    """--dataset topiocqa: a BM25 index is built over the store on the way; the tables have
    one section per level and the JSON holds what the evaluation function returns."""
    from convqa.front.evaluation.topiocqa import evaluate_topiocqa_retrieval

    store = tmp_path / "collection" / "passages"
    PassageStore.build(read_passages(fixtures_dir / "eval" / "topiocqa_collection.tsv"), store,
                       progress=False).close()
    systems = systems_file(tmp_path, BM25_XT)
    data = fixtures_dir / "eval" / "topiocqa_dev_later_release.json"
    assert main(["eval", "retrieval", "--dataset", "topiocqa", "--data", f"dev={data}",
                 "--passages", str(store), "--levels", "passage,article", "--systems",
                 str(systems), "--out", str(tmp_path / "t"), "--cache-dir",
                 str(tmp_path / "runs"), "--quiet"]) == 0
    assert (tmp_path / "collection" / "indexes" / "bm25").is_dir()  # {corpus} = store's folder
    markdown = (tmp_path / "t.md").read_text(encoding="utf-8")
    assert "### dev corpus, passage level" in markdown
    assert "### dev corpus, article level" in markdown
    [result] = json.loads((tmp_path / "t.json").read_text(encoding="utf-8"))["results"]["dev"]
    direct = evaluate_topiocqa_retrieval(
        data, store, {"name": "bm25", "index": str(tmp_path / "collection" / "indexes" / "bm25"),
                      "backend": "numpy"}, "full", levels=("passage", "article"),
        cache_dir=tmp_path / "fresh", progress=False)
    assert result["levels"] == direct["levels"] and result["gold"] == direct["gold"]
    assert result["levels"]["passage"]["num_queries"] == 4


def test_qrecc_dispatch(fixtures_dir, tmp_path):
    """--dataset qrecc runs convqa.front.evaluation.qrecc on its fixture (gold ids from the
    qrels)."""
    from convqa.front.evaluation.qrecc import evaluate_qrecc_retrieval, load_qrecc_eval

    fx = fixtures_dir / "qrecc_eval"
    systems = systems_file(tmp_path, "  - {label: BM25 rewrite, retriever: bm25, "
                                     "history: rewrite}\n")
    assert main(["eval", "retrieval", "--dataset", "qrecc", "--data", str(fx / "qrecc_test.json"),
                 "--passages", str(fx / "passages.jsonl"), "--qrels",
                 str(fx / "qrecc_test_qrels_binary.json"), "--systems", str(systems),
                 "--out", str(tmp_path / "q"), "--cache-dir", str(tmp_path / "cache"),
                 "--quiet"]) == 0
    markdown = (tmp_path / "q.md").read_text(encoding="utf-8")
    assert "| system | relevance | no gold |" in markdown and "BM25 rewrite" in markdown
    assert (tmp_path / "q-qrecc_test-gold-ids-hits.png").read_bytes()[:8] == PNG
    [result] = json.loads((tmp_path / "q.json").read_text(encoding="utf-8"))["results"][
        "qrecc_test"]
    dataset = load_qrecc_eval(fx / "qrecc_test.json", fx / "passages.jsonl",
                              fx / "qrecc_test_qrels_binary.json", cache_dir=tmp_path / "cache")
    direct = evaluate_qrecc_retrieval(dataset, "bm25", "rewrite", cache_dir=tmp_path / "cache",
                                      progress=False, use_cache=False)
    assert result["levels"] == direct["levels"]


def test_answer_table_script(bench, tmp_path):
    """convqa/front/tools/answer_table.py keeps its flags and writes through the same code."""
    from convqa.front.tools import answer_table as script

    rows = (BM25_QT + "    reader: {name: test-eval-cli-oracle, benchmark: '{corpus}'}\n")
    systems = systems_file(tmp_path, rows, head="top_ks: [1]\n")
    out = tmp_path / "answers.md"
    out.write_text("# Notes\n<!-- answer-table:start -->\nold\n<!-- answer-table:end -->\n"
                   "after\n", encoding="utf-8")
    assert script.main(["--corpus", f"tiny={bench}", "--systems", str(systems), "--out",
                        str(out), "--cache-dir", str(tmp_path / "runs"), "--quiet",
                        "--no-plots"]) == 0
    text = out.read_text(encoding="utf-8")
    assert text.startswith("# Notes\n") and text.endswith("after\n") and "\nold\n" not in text
    assert "| BM25 q_t | 3 | 66.7 / 66.7 |" in text
    assert script.main(["--corpus", "novalue", "--systems", str(systems)]) == 2


def test_two_retrieval_rows_compared_turn_by_turn(bench, tmp_path, capsys):
    from convqa.front.tools import compare_retrieval

    systems = systems_file(tmp_path, BM25_QT + BM25_XT)
    out = tmp_path / "retrieval"
    assert main(eval_args("retrieval", bench, systems, out, tmp_path / "runs", plots=False)) == 0
    report = json.loads((tmp_path / "retrieval.json").read_text(encoding="utf-8"))
    levels = {row["label"]: row["levels"] for row in report["results"]["tiny"]}
    result = compare_retrieval.compare(tmp_path / "retrieval.json", "tiny", "BM25 X", "BM25 q",
                                       ks=(1, 5))
    assert result["split"] == "dev" and result["b"] == "BM25 q_t"
    article = result["levels"]["article"]
    assert article["turns"] == 4 and article["by_k"]["1"]["hits_b"] == 75.0  # by hand, above
    assert result["levels"]["answer"]["turns"] == 3
    for level, entry in result["levels"].items():
        for k, row in entry["by_k"].items():
            # the same Hits as the eval's own table, and a paired difference of them
            for side, label in (("hits_a", "BM25 X_t"), ("hits_b", "BM25 q_t")):
                table = levels[label][level]["groups"]["all"][f"hits@{k}"]
                assert row[side] == pytest.approx(100 * table)
            assert row["mean"] == pytest.approx(row["hits_a"] - row["hits_b"])
            assert row["wins"] + row["losses"] + row["ties"] == entry["turns"]
    json_out = tmp_path / "comparison.json"
    assert compare_retrieval.main([str(tmp_path / "retrieval.json"), "--benchmark", "tiny",
                                   "--a", "BM25 X", "--b", "BM25 q", "--json",
                                   str(json_out)]) == 0
    assert "article (4) H@1:" in capsys.readouterr().out
    assert json.loads(json_out.read_text())["levels"]["article"]["by_k"]["20"]["hits_b"] == 75.0
    cases = [(["--benchmark", "full", "--a", "BM25 X", "--b", "BM25 q"], "no benchmark 'full'"),
             (["--benchmark", "tiny", "--a", "BM25", "--b", "BM25 q"],
              "2 systems' labels start with 'BM25'"),
             (["--benchmark", "tiny", "--a", "BM25 X", "--b", "BM25 q", "--ks", "0"],
              "every k must be >= 1")]
    for argv, message in cases:
        assert compare_retrieval.main([str(tmp_path / "retrieval.json"), *argv]) == 2
        assert message in one_error_line(capsys)
    for run in (tmp_path / "runs").glob("*.jsonl"):
        run.unlink()
    assert compare_retrieval.main([str(tmp_path / "retrieval.json"), "--benchmark", "tiny",
                                   "--a", "BM25 X", "--b", "BM25 q"]) == 2
    assert "run file gone" in one_error_line(capsys)
