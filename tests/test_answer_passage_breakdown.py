"""convqa/front/tools/answer_passage_breakdown.py: end-to-end F1 split by whether the answer passage was read."""
from __future__ import annotations

import json
from importlib import import_module


def test_turns_are_split_by_the_answer_passage_among_the_top_k(tmp_path):
    script = import_module("convqa.front.tools.answer_passage_breakdown")
    turns = {"c_1": {"qid": "c_1", "answers": ["Stanley Kubrick"], "answer_passage_ids": ["k#0"]},
             "c_2": {"qid": "c_2", "answers": ["1968"], "answer_passage_ids": ["k#1"]}}
    hits = {"c_1": ["x#0", "k#0"], "c_2": ["y#0", "y#1"]}
    answers = [{"qid": "c_1", "prediction": "Kubrick", "passage_id": "x#0"},
               {"qid": "c_2", "prediction": "1968", "passage_id": "y#0"},
               {"qid": "other", "prediction": "x", "passage_id": "z"}]
    top1 = script.breakdown(turns, hits, answers, 1)
    assert top1["read"] == 0 and top1["turns"] == 2 and top1["f1_other"] == 83.3
    top2 = script.breakdown(turns, hits, answers, 2)
    assert top2["read"] == 1 and top2["read_percent"] == 50.0
    assert top2["f1_read"] == 66.7 and top2["from_answer_passage_percent"] == 0.0
    assert top2["f1_other"] == 100.0

    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "turns.jsonl").write_text("".join(
        json.dumps({**t, "split": "dev", "answer_evaluable": True}) + "\n" for t in turns.values()))
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "run.jsonl").write_text("".join(
        json.dumps({"qid": q, "hits": [{"passage_id": p} for p in ids]}) + "\n"
        for q, ids in hits.items()))
    (tmp_path / "cache" / "run.jsonl.answers-ab-k2.jsonl").write_text(
        "".join(json.dumps(a) + "\n" for a in answers))
    assert script.main(["--benchmark", str(tmp_path / "bench"), "--cache-dir",
                        str(tmp_path / "cache")]) == 0
    (tmp_path / "cache" / "run.jsonl").write_text("{broken\n")
    assert script.main(["--benchmark", str(tmp_path / "bench"), "--cache-dir",
                        str(tmp_path / "cache")]) == 2
