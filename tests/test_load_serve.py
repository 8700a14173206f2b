"""convqa/front/tools/load_serve.py on a small real setup: a `convqa serve --config` server over the
film passages (BM25, no reader) and real TopiOCQA conversations from ../shared/data."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import shared_file
from demo_helpers import build_film_config

from convqa.registry import HISTORY_STRATEGIES
from convqa.types import Turn


def load_script():
    from convqa.front.tools import load_serve
    return load_serve


def test_checker_recomputes_the_query_and_spots_other_conversations():
    script = load_script()
    strategy = HISTORY_STRATEGIES.build("current_first")
    checker = script.Checker({"films": strategy}, kept_turns=20)
    history = [Turn("who directed jaws?", "Steven Spielberg")]
    expected = checker.expected("films", "when was it released?", history, used=1)
    assert expected == "when was it released? [SEP] Steven Spielberg [SEP] who directed jaws?"
    assert checker.expected("films", "when was it released?", history, used=0) == \
        "when was it released?"
    checker.active = {0: ["who directed jaws?", "when was it released?"],
                      1: ["what is the capital of peru?"]}
    assert not checker.foreign(0, expected)
    assert checker.foreign(0, "when was it released? [SEP] What is the capital of Peru?")
    assert not checker.foreign(1, "what is the capital of peru?")  # its own question


def run_load(tmp_path, *extra) -> tuple[int, dict]:
    shared_file("topiocqa/topiocqa_train.json.gz")
    config = tmp_path / "films.yaml"
    config.write_text(yaml.safe_dump(build_film_config(tmp_path)), encoding="utf-8")
    out = tmp_path / "load.json"
    code = load_script().main([
        "--serve-args", f"--config {config} --workers 2", "--clients", "3", "--seconds", "3",
        "--json", str(out), *extra])
    return code, json.loads(Path(out).read_text(encoding="utf-8"))


def test_load_script_on_real_conversations(tmp_path):
    code, report = run_load(tmp_path, "--baseline-seconds", "1", "--baseline-threads", "1")
    assert code == 0, report
    assert report["answers"] > 20 and report["errors"] == 0
    assert report["follow_ups_checked"] > 10
    assert report["cross_talk"] == 0 and report["foreign_questions"] == 0
    assert report["single_process"]["answers"] > 0 and report["server_vs_single"] > 0


@pytest.mark.slow
def test_load_script_kills_and_restarts_the_server(tmp_path):
    """~25 s: the server is killed (-9) half-way and started again."""
    code, report = run_load(tmp_path, "--baseline-seconds", "0", "--kill-restart",
                            "--probes", "5")
    assert code == 0, report
    assert report["restart"]["same_answers"] == report["restart"]["probes"] == 5
    assert report["restart"]["all_ok"] and report["cross_talk"] == 0
    assert report["history_lost"] == 0  # conversations cut by the kill are not continued
