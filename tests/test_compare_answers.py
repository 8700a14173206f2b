"""convqa/front/tools/compare_answers.py: two systems of one answer evaluation compared turn by turn."""
from __future__ import annotations

import json
from importlib import import_module

import pytest

TURNS = [("c_1", "first", ["Stanley Kubrick"]), ("c_2", "no-switch", ["1968"]),
         ("c_3", "switch", ["Arthur C. Clarke"]), ("c_4", "no-switch", ["HAL 9000"])]


def _eval_folder(tmp_path, phrase_answers):
    bench = tmp_path / "bench"
    bench.mkdir()
    bench.joinpath("turns.jsonl").write_text("".join(
        json.dumps({"qid": q, "question_type": kind, "answers": gold, "split": "dev"}) + "\n"
        for q, kind, gold in TURNS))
    rows = []
    for label, answers in (("phrase defaults", phrase_answers),
                           ("DPR-IHN + reader", ["Kubrick", "1968", "Clarke", "HAL"])):
        path = tmp_path / f"{label.split()[0]}.jsonl"
        path.write_text("".join(json.dumps({"qid": q, "prediction": a}) + "\n"
                                for (q, _, _), a in zip(TURNS, answers)))
        rows.append({"label": label, "benchmark": str(bench),
                     "by_k": {"1": {"predictions": str(path)}}})
    out = tmp_path / "eval.json"
    out.write_text(json.dumps({"vital": rows}))
    return out


def test_compare_scores_each_turn_against_the_benchmark(tmp_path, capsys):
    script = import_module("convqa.front.tools.compare_answers")
    out = _eval_folder(tmp_path, ["Stanley Kubrick", "1969", "Arthur C. Clarke", "HAL"])
    result = script.compare(out, "vital", "phrase", "DPR-IHN@1")
    assert result["turns"] == 4
    # per turn, a vs b: 100 vs 66.7, 0 vs 100, 100 vs 50, 66.7 vs 66.7 ("HAL" against "HAL 9000")
    assert result["a_minus_b"]["wins"] == 2 and result["a_minus_b"]["losses"] == 1
    assert result["a_minus_b"]["ties"] == 1
    assert result["by_type"]["no-switch"]["turns"] == 2
    assert result["by_type"]["first"]["wins"] == 1
    assert result["f1_a"] - result["f1_b"] == pytest.approx(result["a_minus_b"]["mean"])
    assert script.main([str(out), "--benchmark", "vital", "--a", "phrase", "--b", "DPR"]) == 0
    assert "a wins 2 turns, loses 1, ties 1" in capsys.readouterr().out


def test_bad_names_are_one_line_errors(tmp_path, capsys):
    script = import_module("convqa.front.tools.compare_answers")
    out = _eval_folder(tmp_path, ["Kubrick", "1968", "Clarke", "HAL"])
    assert script.main([str(out), "--benchmark", "full", "--a", "phrase", "--b", "DPR"]) == 2
    assert "no benchmark 'full'" in capsys.readouterr().err
    assert script.main([str(out), "--benchmark", "vital", "--a", "", "--b", "DPR"]) == 2
    assert "2 systems' labels start with ''" in capsys.readouterr().err
    assert script.main([str(out), "--benchmark", "vital", "--a", "phrase@5", "--b", "DPR"]) == 2
    assert "has no top-5 row" in capsys.readouterr().err
    report = json.loads(out.read_text())
    del report["vital"][0]["by_k"]["1"]["predictions"]
    (tmp_path / "bare.json").write_text(json.dumps(report))
    assert script.main([str(tmp_path / "bare.json"), "--benchmark", "vital", "--a", "phrase",
                        "--b", "DPR"]) == 2
    assert "records no answer file at top 1" in capsys.readouterr().err
    (tmp_path / "phrase.jsonl").unlink()
    assert script.main([str(out), "--benchmark", "vital", "--a", "phrase", "--b", "DPR"]) == 2
    assert "answer file gone" in capsys.readouterr().err


def test_a_full_label_picks_its_row_beside_longer_labels_it_begins(tmp_path):
    """'DPR-IHN + reader' names that row exactly, even beside 'DPR-IHN + reader, fusion';
    a bare prefix of both stays an error."""
    script = import_module("convqa.front.tools.compare_answers")
    out = _eval_folder(tmp_path, ["Stanley Kubrick", "1969", "Arthur C. Clarke", "HAL"])
    report = json.loads(out.read_text())
    fusion = dict(report["vital"][0], label="DPR-IHN + reader, fusion")
    report["vital"].append(fusion)   # the phrase answers under a longer DPR-IHN label
    out.write_text(json.dumps(report))
    exact = script.compare(out, "vital", "phrase", "DPR-IHN + reader")
    assert exact["a_minus_b"]["wins"] == 2 and exact["a_minus_b"]["losses"] == 1
    same = script.compare(out, "vital", "phrase", "DPR-IHN + reader, fusion")
    assert same["a_minus_b"]["ties"] == 4
    with pytest.raises(Exception, match="2 systems' labels start with 'DPR'"):
        script.compare(out, "vital", "phrase", "DPR")
