"""convqa/front/tools/no_answer_absent_article.py: the reader's confidence on train turns read
as retrieved and with their topic article taken out, on the tiny benchmark with BM25 and a
random reader."""
from __future__ import annotations

import json

import pytest

from convqa.types import Hit
from readers.extractive.decoding import NoAnswer
from reader_helpers import tiny_reader
from reader_helpers import single_thread  # noqa: F401 (autouse fixture: one thread)


@pytest.fixture(scope="module")
def bench_and_bm25(tmp_path_factory):
    from training_helpers import make_benchmark_with_bm25

    return make_benchmark_with_bm25(tmp_path_factory.mktemp("absent"))


def _reader(folder, threshold: float | None):
    model = tiny_reader(seed=3)
    if threshold is not None:
        from readers.extractive.decoding import Decoding

        model.decoding = Decoding(no_answer=NoAnswer({"span": 0.5}, 0.0, threshold))
    model.save_pretrained(folder)
    return folder


def _run(bench, bm25, reader, capsys):
    from convqa.front.tools.no_answer_absent_article import main

    capsys.readouterr()  # what writing the reader printed
    code = main(["--benchmark", str(bench), "--reader", str(reader), "--k", "2", "--quiet",
                 "--retriever", json.dumps({"name": "bm25", "index": str(bm25)})])
    out = capsys.readouterr()
    return code, out


def test_taking_an_article_out_keeps_the_order_of_the_rest():
    from convqa.front.tools.no_answer_absent_article import article_taken_out

    hits = [Hit("A#1", 3.0, 1), Hit("B#0", 2.0, 2), Hit("A#0", 1.5, 3), Hit("C#0", 1.0, 4),
            Hit("D#0", 0.5, 5)]
    assert [h.passage_id for h in article_taken_out(hits, "A", 2)] == ["B#0", "C#0"]
    assert [h.passage_id for h in article_taken_out(hits, "Z", 3)] == ["A#1", "B#0", "A#0"]


@pytest.mark.parametrize("threshold, below", [(1.0, 100.0), (0.0, 0.0)])
def test_the_report_counts_the_answers_under_the_threshold(bench_and_bm25, tmp_path, capsys,
                                                             threshold, below):
    bench, bm25 = bench_and_bm25
    code, out = _run(bench, bm25, _reader(tmp_path / "reader", threshold), capsys)
    assert code == 0, out.err
    report = json.loads(out.out)
    assert report["turns"] == 7 and report["threshold"] == threshold  # answer-evaluable train
    for run in ("as retrieved", "topic article taken out"):
        assert report[run]["below_threshold"] == below
        quantiles = report[run]["quantiles_10_25_50_75_90"]
        assert quantiles == sorted(quantiles) and all(0.0 <= q <= 1.0 for q in quantiles)


def test_a_reader_without_a_calibrated_confidence_is_a_one_line_error(bench_and_bm25, tmp_path,
                                                                      capsys):
    bench, bm25 = bench_and_bm25
    code, out = _run(bench, bm25, _reader(tmp_path / "reader", None), capsys)
    assert code == 2 and out.out == ""
    assert out.err.count("\n") == 1 and "no calibrated confidence" in out.err
