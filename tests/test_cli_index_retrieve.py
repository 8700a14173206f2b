"""`convqa index` and `convqa retrieve` on small fixtures: stores, indexes, run files, readable
hits, the --history shortcut flag, and every bad input as one line on stderr."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from convqa.benchmark.topiocqa_wiki import build_benchmark, full_wiki_source
from convqa.front.cli.main import main
from convqa.corpus import PassageStore
from convqa.front.evaluation import read_run


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(err: str, command: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"convqa {command}: error: ")
    return lines[0]


@pytest.fixture(scope="module")
def bench(fixtures_dir, tmp_path_factory) -> Path:
    fx = fixtures_dir / "benchmark"
    out = tmp_path_factory.mktemp("bench") / "full"
    build_benchmark(fx / "topiocqa_tiny.json", full_wiki_source(fx / "articles.jsonl"), out,
                    max_words=10, dev_fraction=0.34, seed=0)
    return out


@pytest.fixture(scope="module")
def bench_index(bench, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("idx") / "bm25"
    assert main(["index", "--bm25", "--passages", str(bench / "passages"), "--out", str(out),
                 "--quiet"]) == 0
    return out


def test_index_from_jsonl_builds_store_next_to_it(fixtures_dir, tmp_path, capsys):
    out = tmp_path / "idx" / "bm25"
    code, stdout, _ = run_cli(["index", "--bm25", "--passages",
                               str(fixtures_dir / "corpus" / "passages.jsonl"),
                               "--out", str(out), "--preset", "qrecc", "--quiet"], capsys)
    assert code == 0
    assert "4 passages" in stdout and "k1=0.82, b=0.68" in stdout
    store = PassageStore.open(tmp_path / "idx" / "passages")
    assert list(store.ids()) == ["doc1#0", "doc1#1", "42", "東京#0"]
    meta = json.loads((out / "convqa_bm25.json").read_text(encoding="utf-8"))
    assert meta["corpus"] == {"count": 4, "checksum": store.checksum}
    assert (meta["config"]["k1"], meta["config"]["b"]) == (0.82, 0.68)
    # Readable top hits for one question; the title is shown, and the text.
    code, stdout, _ = run_cli(["retrieve", "--retriever", "bm25", "--index", str(out),
                               "--passages", str(store.path), "--history", "question_only",
                               "--question", "What is the capital of Japan?", "--k", "3"],
                              capsys)
    assert code == 0
    lines = stdout.splitlines()
    assert lines[0] == "query (6 words): What is the capital of Japan?"
    assert lines[1].startswith("  [1] 東京  (score ") and lines[1].endswith("id 東京#0)")
    assert lines[2].strip() == "Tokyo is the capital of Japan."
    assert len([line for line in lines if line.startswith("  [")]) == 1  # one passage matches
    # A TSV collection works the same; --store puts the store elsewhere.
    code, _, _ = run_cli(["index", "--bm25", "--passages",
                          str(fixtures_dir / "corpus" / "collection.tsv"), "--out",
                          str(tmp_path / "tsv"), "--store", str(tmp_path / "tsv_store"),
                          "--quiet"], capsys)
    assert code == 0 and len(PassageStore.open(tmp_path / "tsv_store")) == 2


def test_history_flag_changes_the_query(bench, bench_index, tmp_path, capsys):
    history = tmp_path / "history.json"
    history.write_text(json.dumps([{"question": "what is an apple?", "answer": "A fruit"},
                                   {"question": "where do they grow?", "answer": "On trees"}]),
                       encoding="utf-8")
    expected = {
        "question_only": "who planted them?",
        "last_answer": "On trees",
        "history_only": "what is an apple? [SEP] A fruit [SEP] where do they grow? [SEP] On trees",
        "full": "what is an apple? [SEP] A fruit [SEP] where do they grow? [SEP] On trees "
                "[SEP] who planted them?",
        "current_first": "who planted them? [SEP] On trees [SEP] where do they grow? [SEP] "
                         "A fruit [SEP] what is an apple?",
    }
    for name, query in expected.items():
        code, stdout, _ = run_cli(
            ["retrieve", "--retriever", f"{{name: bm25, index: {bench_index}}}", "--passages",
             str(bench / "passages"), "--history", name, "--question", "who planted them?",
             "--history-file", str(history), "--k", "5"], capsys)
        assert code == 0
        first = stdout.splitlines()[0]
        assert first.split(": ", 1)[1] == query
        if name == "question_only":  # "planted" is in no passage
            assert stdout.splitlines()[1] == "  (nothing matched)"
        else:  # "trees" (and "apple", "grow") are only in 40#0, the Apple passage
            assert "  [1] Apple  (score" in stdout and "id 40#0)" in stdout
    # Turn 1 with last_answer: nothing to retrieve with, said plainly.
    code, stdout, _ = run_cli(["retrieve", "--retriever", "bm25", "--index", str(bench_index),
                               "--history", "last_answer", "--question", "who?"], capsys)
    assert code == 0 and "query: (empty" in stdout


def test_retrieve_turns_writes_a_run_file(bench, bench_index, tmp_path, capsys):
    out = tmp_path / "run.jsonl"
    code, stdout, _ = run_cli(["retrieve", "--retriever", "bm25", "--index", str(bench_index),
                               "--passages", str(bench / "passages"), "--history", "full",
                               "--turns", str(bench), "--split", "dev", "--k", "3",
                               "--out", str(out), "--quiet"], capsys)
    assert code == 0 and "5 queries (dev, history full)" in stdout
    run = read_run(out)
    assert list(run.hits) == ["3_1", "3_2", "3_3", "3_4", "3_5"]  # every dev turn, in order
    assert run.queries["3_1"] == "what is an apple?"
    assert run.queries["3_2"] == "what is an apple? [SEP] A fruit [SEP] where do they grow?"
    assert all(1 <= len(hits) <= 3 for hits in run.hits.values())
    assert run.hits["3_2"][0].passage_id == "40#0"
    # Only the evaluable turns, TREC format, another split.
    trec = tmp_path / "run.trec"
    code, _, _ = run_cli(["retrieve", "--retriever", "bm25", "--index", str(bench_index),
                          "--history", "question_only", "--turns", str(bench),
                          "--evaluable-only", "--split", "all", "--out", str(trec), "--quiet"],
                         capsys)
    assert code == 0
    assert len(read_run(trec).hits) <= 13  # 13 retrieval-evaluable turns in all; some get none
    assert {line.split()[0] for line in trec.read_text(encoding="utf-8").splitlines()} >= {
        "1_2", "3_2"}


def test_pipeline_config_as_retriever_spec(bench, bench_index, tmp_path, capsys):
    config = tmp_path / "pipe.yaml"
    config.write_text(f"passages: {bench / 'passages'}\nretriever: {{name: bm25, index: "
                      f"{bench_index}}}\nhistory: last_answer\n", encoding="utf-8")
    history = tmp_path / "h.json"
    history.write_text(json.dumps(["what is force?", "Galileo studied it"]), encoding="utf-8")
    code, stdout, _ = run_cli(["retrieve", "--retriever", str(config), "--question", "when?",
                               "--history-file", str(history)], capsys)
    assert code == 0
    assert stdout.splitlines()[0].endswith(": Galileo studied it")  # the config's history
    assert "  [1] Force  (score" in stdout  # title from the config's passages


def test_bad_inputs_are_one_line_errors(bench, bench_index, fixtures_dir, tmp_path, capsys):
    base = ["retrieve", "--history", "full", "--question", "what?"]
    code, _, err = run_cli(base + ["--retriever", "telepathy"], capsys)
    assert code == 2 and "unknown retriever 'telepathy' (known: " in one_line_error(err, "retrieve")
    code, _, err = run_cli(base + ["--retriever", "bm25", "--index", str(tmp_path / "no")], capsys)
    assert code == 2 and "BM25 index not found" in one_line_error(err, "retrieve")
    code, _, err = run_cli(base + ["--retriever", "bm25"], capsys)
    assert code == 2 and "option 'index'" in one_line_error(err, "retrieve")
    code, _, err = run_cli(["retrieve", "--retriever", "bm25", "--index", str(bench_index),
                            "--history", "everything", "--question", "what?"], capsys)
    assert "unknown history strategy 'everything'" in one_line_error(err, "retrieve")
    code, _, err = run_cli(["retrieve", "--retriever", "bm25", "--index", str(bench_index),
                            "--turns", str(bench)], capsys)
    assert "--turns needs --out FILE" in one_line_error(err, "retrieve")
    code, _, err = run_cli(["retrieve", "--retriever", "bm25", "--index", str(bench_index),
                            "--turns", str(tmp_path), "--out", str(tmp_path / "r.jsonl")], capsys)
    assert "turns.jsonl" in one_line_error(err, "retrieve")
    code, _, err = run_cli(base + ["--retriever", "bm25", "--index", str(bench_index), "--k", "0"],
                           capsys)
    assert "--k must be at least 1" in one_line_error(err, "retrieve")
    # An index paired with another corpus's store.
    other = tmp_path / "other"
    PassageStore.build(iter(PassageStore.open(bench / "passages")), other, progress=False)
    assert main(["index", "--bm25", "--passages", str(fixtures_dir / "corpus" / "passages.jsonl"),
                 "--out", str(tmp_path / "small" / "bm25"), "--quiet"]) == 0
    capsys.readouterr()
    code, _, err = run_cli(base + ["--retriever", "bm25", "--index", str(tmp_path / "small" /
                                                                      "bm25"),
                                   "--passages", str(other)], capsys)
    assert "do not belong together" in one_line_error(err, "retrieve")
    # index: existing output, existing store, missing passages, unknown preset.
    code, _, err = run_cli(["index", "--bm25", "--passages", str(bench / "passages"), "--out",
                            str(bench_index)], capsys)
    assert code == 2 and "already exists; add --overwrite" in one_line_error(err, "index")
    code, _, err = run_cli(["index", "--bm25", "--passages",
                            str(fixtures_dir / "corpus" / "passages.jsonl"), "--out",
                            str(tmp_path / "small" / "bm25b")], capsys)
    assert "passages: already exists; pass it as --passages" in one_line_error(err, "index")
    code, _, err = run_cli(["index", "--bm25", "--passages", str(tmp_path / "none.jsonl"),
                            "--out", str(tmp_path / "x")], capsys)
    assert "none.jsonl: file not found" in one_line_error(err, "index")
    code, _, err = run_cli(["index", "--bm25", "--preset", "bm42", "--passages",
                            str(bench / "passages"), "--out", str(tmp_path / "y")], capsys)
    assert "unknown preset 'bm42'" in one_line_error(err, "index")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "text": "fine"}\n{"id": "b"}\n', encoding="utf-8")
    code, _, err = run_cli(["index", "--bm25", "--passages", str(bad), "--out",
                            str(tmp_path / "bad" / "bm25"), "--quiet"], capsys)
    assert f"{bad}:2" in one_line_error(err, "index")
    assert not (tmp_path / "bad" / "passages").exists()  # nothing half-built left behind


def test_dense_index_flag_wiring(bench, tmp_path, capsys, monkeypatch):
    """--dense hands the flags to retrievers.dense.build.build_dense_index (real encoding: the
    MiniLM test below)."""
    pytest.importorskip("retrievers.dense.build")
    import retrievers.dense.build as build

    calls = []

    class Built:
        count = 7

    def fake(model, store, out, factory, batch_size, precision, progress):
        calls.append((model, len(store), Path(out), factory, batch_size, precision, progress))
        return Built()

    monkeypatch.setattr(build, "build_dense_index", fake)
    code, stdout, _ = run_cli(["index", "--dense", "--passages", str(bench / "passages"),
                               "--out", str(tmp_path / "d"), "--factory", "HNSW32",
                               "--batch-size", "8", "--no-fast", "--quiet"], capsys)
    assert code == 0 and "dense index (HNSW32) of 7 passages" in stdout
    assert calls == [("all-MiniLM-L6-v2", 7, tmp_path / "d", "HNSW32", 8, "fp32", False)]
    code, _, err = run_cli(["index", "--dense", "--preset", "qrecc", "--passages",
                            str(bench / "passages"), "--out", str(tmp_path / "d")], capsys)
    assert "BM25 options" in one_line_error(err, "index")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep", encoding="utf-8")
    code, _, err = run_cli(["index", "--dense", "--overwrite", "--passages",
                            str(bench / "passages"), "--out", str(tmp_path / "mine")], capsys)
    assert "not a dense index; not replacing it" in one_line_error(err, "index")
    assert (tmp_path / "mine" / "notes.txt").exists()


def test_dense_index_and_retrieve_with_minilm(bench, tmp_path, capsys):
    """MiniLM zero-shot over the 7 passages: "who discovered gravity?" finds Isaac Newton."""
    pytest.importorskip("retrievers.dense.build")
    out = tmp_path / "dense"
    code, _, _ = run_cli(["index", "--dense", "--passages", str(bench / "passages"), "--out",
                          str(out), "--quiet"], capsys)
    assert code == 0
    code, stdout, _ = run_cli(["retrieve", "--retriever", f"{{name: dense, index: {out}}}",
                               "--passages", str(bench / "passages"), "--history",
                               "question_only", "--question", "who discovered gravity?",
                               "--k", "2"], capsys)
    assert code == 0
    assert stdout.splitlines()[1].startswith("  [1] Isaac Newton  (score ")
