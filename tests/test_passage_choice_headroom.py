"""The passage-choice headroom tool: first passage, the fusion's choice, the vote of agreeing
passages and the best span read, on read turns written as a reads cache keeps them."""
from __future__ import annotations

import json

import pytest

from convqa.errors import DataError
from convqa.front.tools import passage_choice_headroom as tool
from convqa.types import Passage
from readers.extractive.calibration_data import turn_read_to_dict
from readers.extractive.decode import Fusion, PassageSpan
from readers.extractive.fusion_tuning import ReadTurn

SPAN_ONLY = Fusion(0.0, 1.0, 0.0)


def read_turn(qid: str, gold: str, texts: list[str], span_scores: list[float]) -> ReadTurn:
    passages = [Passage(f"{qid}#{i}", f"It is {text}.", "T") for i, text in enumerate(texts)]
    spans = [PassageSpan(i, 0, 0, 0, score, 0.0, 6, 6 + len(texts[i]))
             for i, score in enumerate(span_scores)]
    return ReadTurn(qid, qid.split("_")[0], [gold], passages, [3.0, 2.0, 1.0], spans)


TURNS = [
    # the first passage is wrong; two lower passages agree on the right answer, each scoring
    # below the wrong one alone: only the vote finds it
    read_turn("1_1", "Paris", ["Lyon", "Paris", "Paris"], [2.0, 1.5, 1.5]),
    # the fusion finds the right one in the second passage
    read_turn("2_1", "Rome", ["Oslo", "Rome", "Bern"], [1.0, 3.0, 0.5]),
    # nothing read is right
    read_turn("3_1", "Vienna", ["Oslo", "Bern", "Lyon"], [1.0, 2.0, 0.5]),
    # the right answer is read but scored lowest: only the ceiling counts it
    read_turn("4_1", "Madrid", ["Oslo", "Bern", "Madrid"], [1.0, 2.0, 0.5]),
]


def test_each_row_scores_what_its_choice_answers():
    rows = tool.headroom(TURNS, [1, 3], SPAN_ONLY)
    assert rows["first passage"] == {"1": 0.0, "3": 0.0}
    assert rows["fusion"] == {"1": 0.0, "3": 25.0}                  # turn 2
    assert rows["fusion + agreement"] == {"1": 0.0, "3": 50.0}      # turns 1 and 2
    assert rows["best of the k read"] == {"1": 0.0, "3": 75.0}      # turns 1, 2 and 4


def test_reads_a_cache_file_and_prints_the_table(tmp_path, capsys):
    path = tmp_path / "turn-reads-x.jsonl"
    lines = [{"key": "{}"}] + [{"turn": t.qid, **turn_read_to_dict(t)} for t in TURNS]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    assert len(tool.read_turns(path)) == 4
    assert tool.main([str(path), "--fusion", "0", "1", "0", "--ks", "1", "3",
                      "--json", str(tmp_path / "out.json")]) == 0
    out = capsys.readouterr().out
    assert "4 turns" in out and "best of the k read" in out
    assert json.loads((tmp_path / "out.json").read_text())["f1"]["fusion + agreement"]["3"] == 50.0


def test_a_file_that_is_not_a_reads_cache_is_refused(tmp_path, capsys):
    path = tmp_path / "other.jsonl"
    path.write_text('{"qid": "1_1"}\n', encoding="utf-8")
    with pytest.raises(DataError, match="not a reads cache file"):
        tool.read_turns(path)
    assert tool.main([str(path), "--fusion", "0", "1", "0"]) == 1
    assert "not a reads cache file" in capsys.readouterr().err
