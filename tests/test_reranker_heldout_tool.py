"""convqa/front/tools/reranker_heldout.py: two rerankers ranked on the same held-out sample."""
from __future__ import annotations

import json

from reader_helpers import single_thread  # noqa: F401
from reranker_helpers import tiny_cross_encoder, toy_examples


def test_ranks_each_model_on_the_same_sample_and_writes_json(tmp_path, capsys):
    from convqa.front.tools import reranker_heldout as tool
    from retrievers.rerank.data import save_examples

    examples = toy_examples(12, split="train") + toy_examples(10, split="heldout", offset=3)
    save_examples(tmp_path / "examples.jsonl", examples)
    for seed in (0, 1):
        tiny_cross_encoder(seed).save_pretrained(tmp_path / f"m{seed}")
    names = [str(tmp_path / "m0"), str(tmp_path / "m1")]
    assert tool.main(names + ["--examples", str(tmp_path / "examples.jsonl"), "--per-source",
                              "4", "--out", str(tmp_path / "scores.json")]) == 0
    printed = capsys.readouterr().out
    assert "| toy (4; 6.0) |" in printed and "| all (4) |" in printed
    saved = json.loads((tmp_path / "scores.json").read_text())
    for name in names:
        scores = saved["models"][name]
        assert scores["count"] == 4 and scores["candidates"] == 6.0
        assert 1 / 6 <= scores["mrr"] <= 1.0
    # ranking the same sample again gives the same scores
    again = tool.rank_models(names[:1], str(tmp_path / "examples.jsonl"), 4)
    assert again[names[0]]["mrr"] == saved["models"][names[0]]["mrr"]


def test_a_file_without_heldout_questions_is_one_line(tmp_path, capsys):
    from convqa.front.tools import reranker_heldout as tool
    from retrievers.rerank.data import save_examples

    save_examples(tmp_path / "train.jsonl", toy_examples(4, split="train"))
    tiny_cross_encoder(0).save_pretrained(tmp_path / "m")
    capsys.readouterr()
    assert tool.main([str(tmp_path / "m"), "--examples", str(tmp_path / "train.jsonl")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("reranker_heldout: error:") and "train.jsonl" in err and "\n" not in err
