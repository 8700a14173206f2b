"""The retrieval evaluation runner on the tiny benchmark of tests/fixtures/benchmark.

The benchmark is built as in test_benchmark.py (max_words=10, dev_fraction=0.34, seed=0): its dev
split is conversation 3, whose retrieval-evaluable turns are (see FULL_EXPECTED there)
    3_1 first      gold article 40 (40#0)      not answer-evaluable
    3_2 no-switch  gold article 40 (40#0)      answer passage 40#0
    3_4 switch     gold article 30 (30#0, 30#1) answer passage 30#0
    3_5 switch     gold article 40 (40#0)      answer passage 40#0
(3_3 has no topic: not evaluable). Every expected number below is worked out by hand.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from convqa.benchmark.topiocqa_wiki import build_benchmark, full_wiki_source
from convqa.errors import ConfigError, ConvQAError, DataError
from convqa.front.evaluation import evaluate_retrieval, markdown_table, read_run, write_run
from convqa.specs import parse_spec
from convqa.types import Hit
from retrievers.base import Retriever
from retrievers.bm25 import BM25Config, BM25Retriever

FAKE = [f"x#{i}" for i in range(25)]  # passages of no gold article
RANKINGS = {  # query (question_only = the question) -> ranked passage ids
    "what is an apple?": ["20#0", "10#0", "40#0"],                 # article rank 3
    "where do they grow?": ["40#0"],                                # rank 1
    "who discovered gravity with one?": ["10#1", "30#1", "30#0"],  # article rank 2, answer 3
    "back to apples: where do they grow?": FAKE + ["40#0"],         # rank 26
}


class Scripted(Retriever):
    """Returns RANKINGS[query]; counts the queries it was asked."""

    def __init__(self):
        self.asked: list[str] = []

    def retrieve_batch(self, queries, k=10):
        self.asked.extend(queries)
        return [[Hit(pid, 1.0 / rank, rank) for rank, pid in
                 enumerate(RANKINGS.get(q, [])[:k], start=1)] for q in queries]

    def fingerprint(self) -> str:
        return "scripted-v1"


@pytest.fixture(scope="module")
def bench(fixtures_dir, tmp_path_factory) -> Path:
    fx = fixtures_dir / "benchmark"
    out = tmp_path_factory.mktemp("bench") / "full"
    build_benchmark(fx / "topiocqa_tiny.json", full_wiki_source(fx / "articles.jsonl"), out,
                    max_words=10, dev_fraction=0.34, seed=0)
    return out


def test_hits_and_mrr_by_hand(bench, tmp_path):
    scripted = Scripted()
    result = evaluate_retrieval(bench, scripted, "question_only", split="dev",
                                cache_dir=tmp_path, progress=False)
    assert sorted(scripted.asked) == sorted(RANKINGS)
    article = result["levels"]["article"]
    assert article["num_queries"] == 4
    groups = article["groups"]
    assert list(groups) == ["all", "first", "no-switch", "switch"]
    # ranks of the first gold passage: 3_1 -> 3, 3_2 -> 1, 3_4 -> 2, 3_5 -> 26
    assert groups["all"] == pytest.approx({
        "count": 4, "hits@1": 1 / 4, "hits@5": 3 / 4, "hits@20": 3 / 4, "hits@100": 1.0,
        "mrr": (1 / 3 + 1 + 1 / 2 + 1 / 26) / 4})
    assert groups["first"] == pytest.approx({
        "count": 1, "hits@1": 0, "hits@5": 1, "hits@20": 1, "hits@100": 1, "mrr": 1 / 3})
    assert groups["no-switch"] == pytest.approx({
        "count": 1, "hits@1": 1, "hits@5": 1, "hits@20": 1, "hits@100": 1, "mrr": 1})
    assert groups["switch"] == pytest.approx({
        "count": 2, "hits@1": 0, "hits@5": 0.5, "hits@20": 0.5, "hits@100": 1,
        "mrr": (1 / 2 + 1 / 26) / 2})
    # answer level: 3_2 -> rank 1, 3_4 -> 30#0 at rank 3, 3_5 -> rank 26; 3_1 is not evaluable
    answer = result["levels"]["answer"]["groups"]
    assert "first" not in answer
    assert answer["all"] == pytest.approx({
        "count": 3, "hits@1": 1 / 3, "hits@5": 2 / 3, "hits@20": 2 / 3, "hits@100": 1,
        "mrr": (1 + 1 / 3 + 1 / 26) / 3})
    assert answer["switch"] == pytest.approx({
        "count": 2, "hits@1": 0, "hits@5": 0.5, "hits@20": 0.5, "hits@100": 1,
        "mrr": (1 / 3 + 1 / 26) / 2})
    table = markdown_table(result)
    assert "| article | all | 4 | 25.0 | 75.0 | 75.0 | 100.0 | 0.468 |" in table
    assert "| answer | switch | 2 | 0.0 | 50.0 | 50.0 | 100.0 | 0.186 |" in table
    json.dumps(result)  # JSON-ready


def test_run_is_cached_by_config(bench, tmp_path):
    first = Scripted()
    one = evaluate_retrieval(bench, first, "question_only", cache_dir=tmp_path, progress=False)
    assert not one["cached"] and len(first.asked) == 4
    again = Scripted()
    two = evaluate_retrieval(bench, again, "question_only", cache_dir=tmp_path, progress=False)
    assert two["cached"] and again.asked == []
    assert two["levels"] == one["levels"] and two["run_key"] == one["run_key"]
    # The cached run is a readable run file with the query texts.
    run = read_run(one["run_file"])
    assert set(run.hits) == {"3_1", "3_2", "3_4", "3_5"}
    assert run.queries["3_4"] == "who discovered gravity with one?"
    # Another history strategy (or option, or k) is another configuration.
    other = Scripted()
    three = evaluate_retrieval(bench, other, {"name": "question_only", "max_tokens": 64},
                               cache_dir=tmp_path, progress=False)
    assert not three["cached"] and len(other.asked) == 4
    assert three["run_key"] != one["run_key"]


def test_empty_queries_are_misses_without_asking(bench, tmp_path):
    """a_{t-1} at turn 1 is empty: no hits, and the retriever is not asked for it."""
    scripted = Scripted()
    result = evaluate_retrieval(bench, scripted, "last_answer", cache_dir=tmp_path,
                                use_cache=False, progress=False)
    # a_{t-1} of 3_2, 3_4, 3_5: "A fruit", "UNANSWERABLE", "Isaac Newton"
    assert sorted(scripted.asked) == ["A fruit", "Isaac Newton", "UNANSWERABLE"]
    first = result["levels"]["article"]["groups"]["first"]
    assert first["count"] == 1 and first["hits@100"] == 0 and first["mrr"] == 0
    assert result["run_file"] is None and not result["cached"]


def test_bm25_end_to_end(bench, tmp_path):
    """BM25 over the benchmark's own store, spec built by name, q_t only (reasoned by hand):
    "what is an apple?" and "...apples: where do they grow?" match only 40#0 (apple/apples/grow),
    "where do they grow?" only 40#0 (grow); "who discovered gravity with one?" shares no word
    with the corpus: no hits."""
    from convqa.corpus import PassageStore

    store = PassageStore.open(bench / "passages")
    BM25Retriever.build_from_store(store, BM25Config(backend="numpy")).save(tmp_path / "bm25")
    result = evaluate_retrieval(bench, {"name": "bm25", "index": str(tmp_path / "bm25")},
                                "question_only", cache_dir=tmp_path / "runs", progress=False)
    groups = result["levels"]["article"]["groups"]
    assert groups["all"]["hits@1"] == 0.75 and groups["all"]["mrr"] == 0.75
    assert groups["switch"]["hits@100"] == 0.5
    run = read_run(result["run_file"])
    assert run.hits["3_4"] == [] and run.hits["3_2"][0].passage_id == "40#0"
    assert evaluate_retrieval(bench, {"name": "bm25", "index": str(tmp_path / "bm25")},
                              "question_only", cache_dir=tmp_path / "runs",
                              progress=False)["cached"]


def test_bad_inputs(bench, tmp_path):
    with pytest.raises(ConfigError, match="unknown retriever 'telepathy'"):
        evaluate_retrieval(bench, "telepathy", cache_dir=tmp_path, progress=False)
    with pytest.raises(DataError, match="BM25 index not found"):
        evaluate_retrieval(bench, {"name": "bm25", "index": str(tmp_path / "none")},
                           cache_dir=tmp_path, progress=False)
    with pytest.raises(DataError, match="not a benchmark folder"):
        evaluate_retrieval(tmp_path, Scripted(), cache_dir=tmp_path, progress=False)
    with pytest.raises(ConfigError, match="unknown split 'test'"):
        evaluate_retrieval(bench, Scripted(), split="test", cache_dir=tmp_path, progress=False)
    with pytest.raises(ConfigError, match="k=10 is smaller than the largest cutoff 100"):
        evaluate_retrieval(bench, Scripted(), k=10, cache_dir=tmp_path, progress=False)
    with pytest.raises(ConfigError, match="unknown history strategy 'everything'"):
        evaluate_retrieval(bench, Scripted(), "everything", cache_dir=tmp_path, progress=False)


def test_damaged_cache_is_reported(bench, tmp_path):
    result = evaluate_retrieval(bench, Scripted(), "question_only", cache_dir=tmp_path,
                                progress=False)
    path = Path(result["run_file"])
    lines = path.read_text(encoding="utf-8").splitlines()
    path.write_text("\n".join(lines[:2]) + "\n", encoding="utf-8")  # two queries lost
    with pytest.raises(DataError, match="cached run lacks query"):
        evaluate_retrieval(bench, Scripted(), "question_only", cache_dir=tmp_path,
                           progress=False)


# --- run files -----------------------------------------------------------------------------------

def test_run_file_round_trip(tmp_path):
    hits = {"1_1": [Hit("a#0", 2.5, 1), Hit("b#3", 1.0, 2)], "1_2": []}
    write_run(tmp_path / "run.jsonl", hits, {"1_1": "q one", "1_2": ""})
    run = read_run(tmp_path / "run.jsonl")
    assert run.hits == hits and run.queries == {"1_1": "q one", "1_2": ""}
    write_run(tmp_path / "run.trec", hits)
    assert (tmp_path / "run.trec").read_text(encoding="utf-8").splitlines() == [
        "1_1 Q0 a#0 1 2.500000 convqa", "1_1 Q0 b#3 2 1.000000 convqa"]
    assert read_run(tmp_path / "run.trec").hits == {"1_1": hits["1_1"]}


@pytest.mark.parametrize("content, expected", [
    ('{"qid": "1_1", "hits": []}\n{"qid": "1_1", "hits": []}\n',
     ":2: field 'qid': query '1_1' appears twice"),
    ('{"qid": "1_1"}\n', ":1: field 'hits': missing"),
    ('{"qid": "1_1", "hits": [\n', ":1: malformed JSON"),
    ('{"qid": "1_1", "hits": [{"passage_id": "a", "score": 1, "rank": 2}]}\n',
     ":1: field 'hits[0].rank': expected rank 1"),
    ('{"qid": "1_1", "hits": [{"passage_id": "a", "score": "high", "rank": 1}]}\n',
     ":1: field 'hits[0].score': expected a number"),
    ('{"qid": "1_1", "hits": [{"passage_id": "", "score": 1, "rank": 1}]}\n',
     ":1: field 'hits[0].passage_id': expected a non-empty string"),
    ('[1, 2]\n', ":1: expected a JSON object"),
])
def test_corrupt_run_files(tmp_path, content, expected):
    path = tmp_path / "run.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DataError) as exc:
        read_run(path)
    assert str(exc.value) == f"{path}{expected}" or str(exc.value).startswith(f"{path}{expected}")
    assert "\n" not in str(exc.value)


def test_corrupt_trec_runs(tmp_path):
    path = tmp_path / "run.trec"
    path.write_text("1_1 Q0 a 1 2.0 t\n1_1 Q0 b 3 1.0 t\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"run.trec:2: query '1_1': expected rank 2, got 3"):
        read_run(path)
    path.write_text("1_1 Q0 a 1 2.0\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"run.trec:1: expected 6 columns"):
        read_run(path)
    path.write_text("1_1 Q0 a one 2.0 t\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"run.trec:1: rank must be an integer"):
        read_run(path)


def test_parse_spec(tmp_path):
    assert parse_spec("bm25") == ("bm25", {})
    assert parse_spec("{name: bm25, index: /x/y}") == ({"name": "bm25", "index": "/x/y"}, {})
    config = tmp_path / "pipe.yaml"
    config.write_text("passages: p\nretriever: {name: bm25, index: i}\nhistory: full\n",
                      encoding="utf-8")
    assert parse_spec(str(config)) == ({"name": "bm25", "index": "i"},
                                       {"passages": "p", "history": "full"})
    with pytest.raises(ConfigError, match="file not found"):
        parse_spec(str(tmp_path / "nope.yaml"))
    with pytest.raises(ConfigError, match="needs a 'name' field"):
        parse_spec("{index: x}")
    with pytest.raises(ConfigError, match="malformed inline YAML"):
        parse_spec("{name: [bm25")
    with pytest.raises(ConvQAError):
        parse_spec("  ")


# --- the table script ----------------------------------------------------------------------------

def test_retrieval_table_script(bench, tmp_path):
    """Builds the missing BM25 index, writes the tables, keeps the notes around the markers."""
    from convqa.front.tools import retrieval_table as script

    systems = tmp_path / "systems.yaml"
    systems.write_text(
        "systems:\n"
        "  - label: BM25 q_t\n"
        "    retriever: {name: bm25, index: '{corpus}/indexes/bm25', backend: numpy}\n"
        "    history: question_only\n", encoding="utf-8")
    out = tmp_path / "retrieval.md"
    out.write_text("# Notes before\n<!-- retrieval-table:start -->\nold\n"
                   "<!-- retrieval-table:end -->\nnotes after\n", encoding="utf-8")
    argv = ["--corpus", f"tiny={bench}", "--systems", str(systems), "--out", str(out),
            "--cache-dir", str(tmp_path / "runs"), "--quiet"]
    assert script.main(argv) == 0
    assert (bench / "indexes" / "bm25" / "convqa_bm25.json").exists()  # built on demand
    text = out.read_text(encoding="utf-8")
    assert text.startswith("# Notes before\n") and text.endswith("notes after\n")
    assert "old" not in text.split("<!-- retrieval-table:start -->")[1].split("notes after")[0]
    # The hand-reasoned BM25 numbers of test_bm25_end_to_end: H@1 75.0, MRR 0.750;
    # first 1 turn hit at 5 and 20, no-switch 1/1, switch 1 of 2.
    assert ("| BM25 q_t | 4 | 75.0 | 75.0 | 75.0 | 75.0 | 0.750 | 100.0 / 100.0 (1) | "
            "100.0 / 100.0 (1) | 50.0 / 50.0 (2) |") in text
    data = json.loads(out.with_suffix(".json").read_text(encoding="utf-8"))
    assert data["results"]["tiny"][0]["label"] == "BM25 q_t"
    assert script.main(["--corpus", "novalue"]) == 2
