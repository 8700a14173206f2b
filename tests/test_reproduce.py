"""The reproduction matrix (benchmarks/reproduce.yaml) and `convqa reproduce`.

The tiny run evaluates BM25 with q_t on the tiny benchmark of tests/fixtures/benchmark, whose
numbers are reasoned by hand in test_eval_retrieval.test_bm25_end_to_end (article level: H@1
0.75, MRR 0.75, switch turns H@100 0.5).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from convqa.benchmark.topiocqa_wiki import build_benchmark, full_wiki_source
from convqa.front.cli.main import main
from convqa.config import load_yaml
from convqa.errors import ConfigError
from convqa.front.evaluation.reproduce import load_matrix, lookup
from convqa.io import load_json

REPO = Path(__file__).resolve().parents[1]
TINY_RUN = """
  tiny-bm25:
    description: BM25 q_t on the tiny benchmark
    needs:
      - {path: "{bench}/tiny/turns.jsonl", how: "build the tiny benchmark"}
    command: [convqa, eval, retrieval, --benchmark, "tiny={bench}/tiny", --systems,
              "{here}/systems.yaml", --out, "{out}/retrieval", --cache-dir, "{out}/cache",
              --no-plots, --quiet]
    output: "{out}/retrieval.json"
    expect:
      - {path: [results, tiny, "label=BM25 q_t", levels, article, groups, all, hits@1],
         value: 0.75, tolerance: 0.0005}
      - {path: [results, tiny, "label=BM25 q_t", levels, article, groups, all, mrr],
         value: 0.75, tolerance: 0.0005}
      - {path: [results, tiny, 0, levels, article, groups, switch, hits@100], value: 0.5}
"""
OTHER_RUNS = """
  wrong:
    description: a score off by more than its tolerance, and a metric the output lacks
    command: [python, "{here}/write.py", "{out}/scores.json"]
    output: "{out}/scores.json"
    expect:
      - {path: [score], value: 0.5, tolerance: 0.01}
      - {path: [nested, other], value: 1}
  crashing:
    command: [python, -c, "import sys; sys.exit(3)"]
    output: "{out}/never.json"
    expect: [{path: [score], value: 1}]
  unbuilt:
    needs: [{path: "{bench}/nowhere/turns.jsonl", how: "convqa data topiocqa-wiki --out {bench}"}]
    command: [convqa, --version]
    output: "{out}/x.json"
    expect: [{path: [score], value: 1}]
"""


@pytest.fixture(scope="module")
def bench_root(fixtures_dir, tmp_path_factory) -> Path:
    fx = fixtures_dir / "benchmark"
    root = tmp_path_factory.mktemp("bench")
    build_benchmark(fx / "topiocqa_tiny.json", full_wiki_source(fx / "articles.jsonl"),
                    root / "tiny", max_words=10, dev_fraction=0.34, seed=0)
    return root


@pytest.fixture
def matrix(tmp_path) -> Path:
    (tmp_path / "systems.yaml").write_text(
        "systems:\n  - label: BM25 q_t\n"
        "    retriever: {name: bm25, index: '{corpus}/indexes/bm25', backend: numpy}\n"
        "    history: question_only\n", encoding="utf-8")
    (tmp_path / "write.py").write_text(
        "import json, sys\njson.dump({'score': 0.52, 'nested': {}}, open(sys.argv[1], 'w'))\n",
        encoding="utf-8")
    path = tmp_path / "matrix.yaml"
    path.write_text("runs:" + TINY_RUN + OTHER_RUNS, encoding="utf-8")
    return path


def reproduce(matrix: Path, bench_root: Path, out: Path, *args: str) -> int:
    return main(["reproduce", *args, "--matrix", str(matrix), "--bench", str(bench_root),
                 "--out", str(out), "--quiet"])


def test_a_matching_run_passes(matrix, bench_root, tmp_path, capsys):
    assert reproduce(matrix, bench_root, tmp_path / "out", "tiny-bm25") == 0
    out = capsys.readouterr().out
    assert "| tiny / BM25 q_t / article / all / hits@1 | 0.75 | 0.75 | +0 | 0.0005 | pass |" in out
    assert out.count("| pass |") == 3 and "3 of 3 metrics match" in out
    assert (tmp_path / "out" / "retrieval.md").is_file()


def test_a_mismatch_fails_with_exit_status_1(matrix, bench_root, tmp_path, capsys):
    assert reproduce(matrix, bench_root, tmp_path / "out", "wrong") == 1
    out = capsys.readouterr().out
    assert "| score | 0.5 | 0.52 | +0.02 | 0.01 | FAIL |" in out
    assert "| nested / other | 1 | - | - | 0 | FAIL (missing: no key 'other') |" in out
    assert "0 of 2 metrics match; 2 do NOT" in out
    assert reproduce(matrix, bench_root, tmp_path / "out2", "crashing") == 1
    assert "the command exited with status 3" in capsys.readouterr().err


def test_missing_inputs_say_how_to_make_them(matrix, bench_root, tmp_path, capsys):
    assert reproduce(matrix, bench_root, tmp_path / "out", "unbuilt") == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"convqa reproduce: error: {bench_root}/nowhere/turns.jsonl: run 'unbuilt' "
                   f"needs this; make it with: convqa data topiocqa-wiki --out {bench_root}")


def test_list_dry_run_and_unknown_name(matrix, bench_root, tmp_path, capsys):
    assert main(["reproduce", "--list", "--matrix", str(matrix)]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in listed] == ["tiny-bm25", "wrong", "crashing", "unbuilt"]
    assert reproduce(matrix, bench_root, tmp_path / "out", "tiny-bm25", "--dry-run") == 0
    out = capsys.readouterr().out
    assert f"--benchmark tiny={bench_root}/tiny --systems {tmp_path}/systems.yaml" in out
    assert f"needs {bench_root}/tiny/turns.jsonl: ok" in out
    assert not (tmp_path / "out").exists()  # nothing ran
    assert reproduce(matrix, bench_root, tmp_path / "out", "nope") == 2
    assert "no run named 'nope' (runs: tiny-bm25, wrong, crashing, unbuilt)" in \
        capsys.readouterr().err


@pytest.mark.parametrize("run, expected", [
    ("{command: [convqa], output: x}", "run 'r': 'expect' must be a non-empty list"),
    ("{output: x, expect: [{path: [a], value: 1}]}", "run 'r': 'command' must be a non-empty"),
    ("{command: [convqa], expect: [{path: [a], value: 1}]}", "run 'r': 'output' must name"),
    ("{command: [convqa], output: x, expect: [{path: [a], value: high}]}",
     "run 'r': expect[0]: 'value' and 'tolerance' (>= 0) must be numbers"),
    ("{command: [convqa], output: x, expect: [{value: 1}]}",
     "run 'r': expect[0] needs a non-empty 'path' list"),
    ("{command: [convqa], output: x, expect: [{path: [a], value: 1}], outputs: y}",
     "run 'r': unknown key 'outputs'"),
])
def test_malformed_matrix(tmp_path, run, expected):
    path = tmp_path / "m.yaml"
    path.write_text(f"runs:\n  r: {run}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as exc:
        load_matrix(path)
    assert str(exc.value).startswith(f"{path}: {expected}")


def test_lookup_steps():
    data = {"results": {"vital": [{"label": "a", "x": 1}, {"label": "b", "x": 2}]}}
    assert lookup(data, ["results", "vital", "label=b", "x"]) == 2
    assert lookup(data, ["results", "vital", 0, "x"]) == 1
    for path, message in ((["results", "full"], "no key 'full'"),
                          (["results", "vital", "label=c"], "no element with label 'c'"),
                          (["results", "vital", 5], "bad list step 5")):
        with pytest.raises(KeyError, match=message):
            lookup(data, path)


def test_shipped_matrix_expects_the_measured_numbers():
    """Every expected value of benchmarks/reproduce.yaml is the number at the same path in its
    source file (docs/results/*.json, measured); the systems each run selects exist."""
    matrix = load_matrix(REPO / "benchmarks" / "reproduce.yaml")
    assert "bm25-xt-vital" in matrix.runs  # the quick check the docs point to
    for name, run in matrix.runs.items():
        assert run.source, name
        measured = load_json(REPO / run.source)
        for expectation in run.expect:
            assert lookup(measured, expectation.path) == expectation.value, (name, expectation)
            assert expectation.tolerance > 0
        command = list(run.command)
        assert command[0] == "convqa" and run.needs, name
        systems = load_yaml(REPO / "benchmarks" / Path(command[command.index("--systems") + 1])
                            .name)
        label = command[command.index("--only") + 1]
        assert label in [s["label"] for s in systems["systems"]], (name, label)
        assert {e.path[2 if e.path[0] == "results" else 1] for e in run.expect} == \
            {f"label={label}"}, name
    json.dumps([str(p) for p in matrix.runs])  # names are plain strings
