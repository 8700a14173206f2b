"""Quiet by default: `convqa answer`, `retrieve`, `demo`, `index`, `eval` and `train` print none
of the other libraries' progress bars and warnings (transformers' "Loading weights" bars, the
FutureWarning about `is_gradient_checkpointing` when peft attaches an adapter) unless
`--verbose`; our own output stays.

The commands run as a user runs them (a fresh interpreter, stderr read whole) over a tiny
setup: ~40 real film articles of the vital-article summaries, a tiny random BERT with LoRA
adapters as retriever (its dense index) and as reader."""
from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
from conftest import REPO

from convqa.quiet import quiet_third_party
from demo_helpers import free_port

QUESTION = "Who directed 2001: A Space Odyssey?"
THIRD_PARTY_NOISE = ("Loading weights", "FutureWarning", "is_gradient_checkpointing")


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """The commands below remember choices (precision) in convqa's cache: not the user's."""
    monkeypatch.setenv("CONVQA_CACHE", str(tmp_path / "convqa-cache"))


# -- the context, in process ------------------------------------------------------------------

def _warn_from(module: str, message: str, category=UserWarning) -> None:
    """`warnings.warn` as code of module `module` calls it."""
    exec("import warnings\nwarnings.warn(message, category)",
         {"__name__": module, "message": message, "category": category})


def test_third_party_warnings_are_dropped_ours_kept():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with quiet_third_party():
            _warn_from("somelib.loading", "library chatter")
            _warn_from("convqa.loaders.squad", "3 answer offsets did not match")
            _warn_from("convqa.towers", "a library's deprecation at our call site", FutureWarning)
            _warn_from("readers.extractive.model", "no passage-selection head")
        _warn_from("somelib.loading", "after the block: shown again")
    assert [str(w.message) for w in caught] == [
        "3 answer offsets did not match", "no passage-selection head",
        "after the block: shown again"]


def test_verbose_keeps_everything():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with quiet_third_party(enabled=False):
            _warn_from("somelib.loading", "library chatter", FutureWarning)
    assert [str(w.message) for w in caught] == ["library chatter"]


def test_transformers_bars_and_logs_off_inside_restored_after():
    from transformers.utils import logging as hf_logging

    before = (hf_logging.is_progress_bar_enabled(), hf_logging.get_verbosity())
    with quiet_third_party():
        assert not hf_logging.is_progress_bar_enabled()
        assert hf_logging.get_verbosity() == logging.ERROR
    assert (hf_logging.is_progress_bar_enabled(), hf_logging.get_verbosity()) == before


def test_library_log_records_below_error_are_dropped(capsys):
    """Libraries without a log handler of their own reach stderr through logging.lastResort."""
    root = logging.getLogger()
    saved = root.handlers[:]
    root.handlers.clear()  # as in the `convqa` command: nothing configures logging
    try:
        with quiet_third_party():
            logging.getLogger("somelib.hub").warning("somelib: a warning")
            logging.getLogger("somelib.hub").error("somelib: an error")
            logging.getLogger("retrievers.dense.encode").warning("ours: a warning")
        logging.getLogger("somelib.hub").warning("somelib: after the block")
    finally:
        root.handlers[:] = saved
    assert capsys.readouterr().err.splitlines() == [
        "somelib: an error", "ours: a warning", "somelib: after the block"]


# -- the commands, as a user runs them --------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_config(tmp_path_factory) -> Path:
    """A pipeline YAML: film passages, dense retriever and extractive reader, each a tiny
    random BERT with LoRA adapters (so loading them goes through transformers and peft)."""
    import yaml

    from convqa.corpus import PassageStore
    from demo_helpers import build_film_config
    from reader_helpers import reader_config, save_tiny_encoder
    from readers.extractive.model import ExtractiveReader
    from retrievers.dense.build import build_dense_index
    from retrievers.dense.model import DualEncoder, DualEncoderConfig

    root = tmp_path_factory.mktemp("quiet")
    config = build_film_config(root)
    base = save_tiny_encoder(root / "base")
    retriever = DualEncoder.build(DualEncoderConfig(model=str(base), passage_max_length=64))
    retriever.add_lora(r=2).save_pretrained(root / "retriever")
    with PassageStore.open(config["passages"]) as store:
        build_dense_index(str(root / "retriever"), store, root / "dense", progress=False)
    reader = ExtractiveReader.build(reader_config(model=str(base)))
    reader.add_lora(r=2).save_pretrained(root / "reader")
    config.update(retriever={"name": "dense", "index": str(root / "dense")}, top_k=3,
                  reader={"name": "extractive", "model": str(root / "reader")})
    path = root / "pipeline.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def convqa_process(*args: str, **popen) -> subprocess.Popen:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="")
    return subprocess.Popen([sys.executable, "-m", "convqa.front.cli.main", *args], cwd=REPO,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            **popen)


def run_convqa(*args: str) -> tuple[str, str]:
    process = convqa_process(*args)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    return out, err


def command_args(command: str, config: Path) -> list[str]:
    if command == "answer":
        return [command, QUESTION, "--config", str(config)]
    return [command, "--retriever", str(config), "--question", QUESTION, "--k", "3"]


@pytest.mark.parametrize("command", ["answer", "retrieve"])
def test_command_is_quiet(command, tiny_config):
    out, err = run_convqa(*command_args(command, tiny_config))
    assert out.startswith("answer: ") if command == "answer" else "\n  [1] " in out
    assert err == ""


@pytest.mark.parametrize("command", ["answer", "retrieve"])
def test_command_verbose_shows_third_party_output(command, tiny_config):
    out, err = run_convqa(*command_args(command, tiny_config), "--verbose")
    assert out.startswith("answer: ") if command == "answer" else "\n  [1] " in out
    for noise in THIRD_PARTY_NOISE:
        assert noise in err


def _demo_output(config: Path, *flags: str, ready: str) -> tuple[str, str]:
    """Start `convqa demo`, stop it once stdout shows `ready`; (stdout, stderr) until then."""
    process = convqa_process("demo", "--config", str(config), "--port", str(free_port()),
                             *flags, bufsize=1)
    lines = []
    deadline = time.monotonic() + 120
    try:
        for line in process.stdout:
            lines.append(line)
            if ready in line or time.monotonic() > deadline:
                break
    finally:
        process.terminate()
        _, err = process.communicate(timeout=30)
    return "".join(lines), err


def test_demo_is_quiet(tiny_config):
    pytest.importorskip("gradio", reason='needs gradio (pip install "convqa[demo]")')
    out, err = _demo_output(tiny_config, ready="serving on")
    assert "convqa demo: serving on http://127.0.0.1:" in out
    assert "share=True" not in out  # Gradio's share-link hint: the demo never shares
    assert err.splitlines() == ["convqa demo: preparing the pipeline + extractive pipeline"]


def test_demo_verbose_shows_third_party_output(tiny_config):
    pytest.importorskip("gradio", reason='needs gradio (pip install "convqa[demo]")')
    out, err = _demo_output(tiny_config, "--verbose", ready="Running on local URL")
    assert "Running on local URL" in out
    for noise in THIRD_PARTY_NOISE:
        assert noise in err


def _serve_output(config: Path, *flags: str) -> str:
    """Start `convqa serve`, stop it once it says it is ready; its output (both streams)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="")
    process = subprocess.Popen(
        [sys.executable, "-m", "convqa.front.cli.main", "serve", "--config", str(config),
         "--port", str(free_port()), *flags], cwd=REPO, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, bufsize=1)
    lines = []
    deadline = time.monotonic() + 120
    try:
        for line in process.stdout:
            lines.append(line)
            if "ready in" in line or time.monotonic() > deadline:
                break
    finally:
        process.terminate()
        process.communicate(timeout=30)
    return "".join(lines)


def test_serve_log_is_quiet_unless_verbose(tiny_config):
    pytest.importorskip("fastapi", reason="needs fastapi and uvicorn (pip install -e .)")
    quiet = _serve_output(tiny_config)
    assert "convqa serve: listening on http://127.0.0.1:" in quiet and "ready in" in quiet
    for noise in THIRD_PARTY_NOISE:
        assert noise not in quiet
    verbose = _serve_output(tiny_config, "--verbose")
    assert "ready in" in verbose
    for noise in THIRD_PARTY_NOISE:
        assert noise in verbose


def test_our_progress_bars_stay(tmp_path):
    """Building the embedded BM25 index (real vital-article text) shows convqa's own bars."""
    out, err = run_convqa("answer", "--prepare", "--retriever", "bm25",
                          "--cache-dir", str(tmp_path))
    assert out.startswith("embedded index ready at ")
    assert "passage store passages" in err
    assert re.search(r"BM25 index: 100%\|.*\| (\d+)/\1 ", err)  # the finished bar
    for noise in THIRD_PARTY_NOISE:
        assert noise not in err


def test_index_is_quiet_and_keeps_its_own_bars(tiny_config, tmp_path):
    """`convqa index --dense` loads the tiny retriever through transformers and peft: their
    output only with --verbose; the FAISS bar is convqa's and stays."""
    root = tiny_config.parent
    command = ["index", "--dense", "--passages", str(root / "passages"),
               "--model", str(root / "retriever")]
    out, err = run_convqa(*command, "--out", str(tmp_path / "quiet"))
    assert out.startswith("dense index (Flat) of ")
    assert re.search(r"FAISS Flat: 100%\|.*\| (\d+)/\1 ", err)
    for noise in THIRD_PARTY_NOISE:
        assert noise not in err
    _, err = run_convqa(*command, "--out", str(tmp_path / "verbose"), "--verbose")
    for noise in THIRD_PARTY_NOISE:
        assert noise in err


def test_eval_and_train_commands_are_quiet_unless_verbose():
    """Every `eval` table and `train` job takes --verbose, off by default: `main` runs it
    inside `quiet_third_party` as it runs `index` above."""
    import argparse

    from convqa.front.cli.main import build_parser

    def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
        actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        return dict(actions[0].choices) if actions else {}

    commands = subcommands(build_parser())
    leaves = {f"{name} {job}": sub for name in ("eval", "train")
              for job, sub in subcommands(commands[name]).items()}
    assert {"eval retrieval", "eval answers", "train reader", "train fid",
            "train phrase"} <= set(leaves)
    for name, parser in leaves.items():
        flags = {flag for action in parser._actions for flag in action.option_strings}
        assert "--verbose" in flags, name
        assert parser.get_default("verbose") is False, name
