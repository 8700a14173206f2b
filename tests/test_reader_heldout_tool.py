"""convqa/front/tools/reader_heldout.py: readers scored on the same held-out questions, each
compared with the first question by question."""
from __future__ import annotations

import dataclasses
import json

import pytest

from reader_helpers import single_thread, squad_train_examples, tiny_reader  # noqa: F401


def test_scores_each_reader_and_compares_it_with_the_first(tmp_path, capsys):
    from convqa.front.tools import reader_heldout as tool
    from readers.extractive.data import save_examples

    chosen = squad_train_examples(6)
    examples = [dataclasses.replace(e, split="heldout",
                                    source="squad:dev-v2.0" if i < 4 else "topiocqa-wiki:full")
                for i, e in enumerate(chosen)]
    save_examples(tmp_path / "heldout.jsonl", examples)
    for seed, folder in ((0, "r0"), (1, "r1"), (0, "r0-again")):
        tiny_reader(seed).save_pretrained(tmp_path / folder)
    names = [str(tmp_path / folder) for folder in ("r0", "r1", "r0-again")]
    assert tool.main(names + ["--examples", str(tmp_path / "heldout.jsonl"), "--per-source", "3",
                              "--out", str(tmp_path / "scores.json")]) == 0
    printed = capsys.readouterr().out
    assert printed.count("| mean of sources |") == 2
    saved = json.loads((tmp_path / "scores.json").read_text())
    model = saved["models"][names[0]]
    assert {s: r["count"] for s, r in model.items()} == {"squad:dev-v2.0": 3,
                                                         "topiocqa-wiki:full": 2}
    for row in model.values():   # the per-question F1s are the ones the table averages
        assert sum(row["f1_by_id"].values()) / row["count"] == pytest.approx(row["f1"], abs=0.01)
    # the same reader against itself: no difference, every question a tie
    same = saved["comparisons"][names[2]]
    assert same["against"] == names[0]
    assert (same["mean"]["mean"], same["mean"]["ties"]) == (0.0, 5)
    other = saved["comparisons"][names[1]]["sources"]["squad:dev-v2.0"]
    a, b = (saved["models"][n]["squad:dev-v2.0"]["f1"] for n in (names[1], names[0]))
    assert other["mean"] == pytest.approx(a - b, abs=0.02)


def test_a_file_without_examples_is_one_line(tmp_path, capsys):
    from convqa.front.tools import reader_heldout as tool

    (tmp_path / "empty.jsonl").write_text("")
    tiny_reader(0).save_pretrained(tmp_path / "r")
    capsys.readouterr()
    assert tool.main([str(tmp_path / "r"), "--examples", str(tmp_path / "empty.jsonl")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("reader_heldout: error:") and "empty.jsonl" in err and "\n" not in err


def test_a_reader_named_twice_is_one_line(tmp_path, capsys):
    from convqa.front.tools import reader_heldout as tool

    (tmp_path / "heldout.jsonl").write_text("")
    assert tool.main(["convqa-reader", "convqa-reader", "--examples",
                      str(tmp_path / "heldout.jsonl")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "reader_heldout: error: reader named twice: convqa-reader (each is read once)"
