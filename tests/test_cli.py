"""The `convqa` command: subcommands listed, unknown ones refused, bad input is one line."""
import json
import subprocess
import sys

import pytest

from convqa.front.cli.main import main

SUBCOMMANDS = ["data", "index", "retrieve", "train", "answer", "eval", "reproduce", "demo",
               "serve", "models"]


def test_help_lists_every_subcommand(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for name in SUBCOMMANDS:
        assert name in out


def test_unknown_subcommand_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["evaluate-everything"])
    assert exit_info.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_empty_question_is_one_line_error(capsys):
    assert main(["answer", "   "]) == 2
    assert capsys.readouterr().err.strip() == "convqa answer: error: the question is empty"


def test_bad_history_file_is_one_line_error(tmp_path, capsys):
    bad = tmp_path / "hist.json"
    bad.write_text(json.dumps([{"question": "who?", "answer": "x"}, {"answer": "y"}]), encoding="utf-8")
    assert main(["answer", "and then?", "--history", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"convqa answer: error: {bad}: field 'question': turns[1]: missing or empty"
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"question": "a"}\n{"question": \n', encoding="utf-8")
    assert main(["answer", "and then?", "--history", str(broken)]) == 2
    assert f"{broken}:2: malformed JSON" in capsys.readouterr().err


def test_unknown_component_in_config_is_one_line_error(tmp_path, capsys):
    config = tmp_path / "pipe.yaml"
    config.write_text("passages: x\nretriever: {name: telepathy}\n", encoding="utf-8")
    assert main(["answer", "who?", "--config", str(config)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("convqa answer: error: unknown retriever 'telepathy' (known: ")
    assert "\n" not in err


def test_console_script_runs_as_module():
    proc = subprocess.run([sys.executable, "-m", "convqa.front.cli.main", "--version"],
                          capture_output=True, text=True, check=True)
    assert proc.stdout.startswith("convqa ")
