"""The retriever's evidence in the extractive reader's choice: the fused score, the options and
the fingerprint, the pipeline and `convqa eval answers` passing hit scores, and the choice of
weights on held-out turns (readers/extractive/fusion_tuning.py, convqa/front/tools/tune_reader_fusion.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from convqa.errors import ConfigError
from convqa.types import Hit, Passage
from readers.extractive.decode import (Fusion, PassageSpan, choose_fused, retriever_evidence,
                                       span_answer)
from readers.extractive.fusion_tuning import (ReadTurn, answer_at, read_turns, scores_at,
                                              split_conversations, tune, weight_grid)
from readers.extractive.reader import SpanReader
from reader_helpers import tiny_reader
from reader_helpers import single_thread  # noqa: F401 (autouse fixture: one thread)

PASSAGES = [Passage("p0", "Paris is the capital of France.", "France"),
            Passage("p1", "Lyon is a city in France.", "Lyon"),
            Passage("p2", "Berlin is the capital of Germany.", "Germany")]


def span(passage: int, text: str, span_score: float, selection: float | None) -> PassageSpan:
    start = PASSAGES[passage].text.index(text)
    return PassageSpan(passage, 0, 0, 0, span_score, selection, start, start + len(text))


def test_evidence_is_standardised_against_the_best():
    assert retriever_evidence([3.0, 1.0, 2.0], 3) == pytest.approx(
        [0.0, -2 / 0.816496580927726, -1 / 0.816496580927726])
    assert retriever_evidence([30.0, 10.0, 20.0], 3) == pytest.approx(
        retriever_evidence([3.0, 1.0, 2.0], 3))  # scale-free
    assert retriever_evidence(None, 3) == [0.0, 0.0, 0.0]
    assert retriever_evidence([5.0], 1) == [0.0]
    assert retriever_evidence([2.0, 2.0], 2) == [0.0, 0.0]
    with pytest.raises(ConfigError, match="2 retriever scores for 3 passages"):
        retriever_evidence([1.0, 2.0], 3)


def test_weights_decide_which_passage_answers():
    spans = [span(0, "Paris", 2.0, 0.5), span(1, "Lyon", 1.0, 3.0), None]
    # selection alone (DPR) picks Lyon; the span score picks Paris; so does a retriever that
    # ranked p0 far above p1
    assert choose_fused(spans, [0, 0, 0], Fusion(1, 0, 0))[0].passage == 1
    assert choose_fused(spans, [0, 0, 0], Fusion(0, 1, 0))[0].passage == 0
    evidence = retriever_evidence([9.0, 1.0, 0.5], 3)
    best, score = choose_fused(spans, evidence, Fusion(1, 0, 4))
    assert best.passage == 0 and score == pytest.approx(0.5)
    answer = span_answer(spans, PASSAGES, fusion=Fusion(1, 0, 4), retriever_scores=[9, 1, 0.5])
    assert (answer.text, answer.passage_id) == ("Paris", "p0")
    assert span_answer([None, None, None], PASSAGES, fusion=Fusion()) is None


def test_fusion_option_checks_and_fingerprint():
    assert Fusion.from_value({"selection": 1, "retriever": 2}) == Fusion(1.0, 0.0, 2.0)
    with pytest.raises(ConfigError, match="unknown weight 'ret'"):
        Fusion.from_value({"ret": 1})
    with pytest.raises(ConfigError, match="weight 'span' must be a number"):
        Fusion.from_value({"span": "high"})
    model = tiny_reader(max_length=128)
    plain = SpanReader.from_model(model)
    fused = SpanReader.from_model(model, fusion={"selection": 1, "span": 0.1, "retriever": 2})
    other = SpanReader.from_model(model, fusion={"selection": 1, "span": 0.1, "retriever": 3})
    assert len({plain.fingerprint(), fused.fingerprint(), other.fingerprint()}) == 3


def test_reader_and_pipeline_use_the_retriever_scores():
    from convqa.pipeline import read_passages

    model = tiny_reader(seed=3, max_length=128)
    # a retriever weight that dominates: the answer comes from the retriever's best passage,
    # whatever the random reader thinks; the reader's own choice ignores the scores
    reader = SpanReader.from_model(model, fusion={"selection": 1, "span": 1, "retriever": 1e6})
    for best in range(3):
        scores = [1.0, 1.0, 1.0]
        scores[best] = 5.0
        hits = [Hit(p.id, s, i + 1) for i, (p, s) in enumerate(zip(PASSAGES, scores))]
        answer = read_passages(reader, "what is the capital?", [], PASSAGES, hits)
        assert answer.passage_id == PASSAGES[best].id
    own = SpanReader.from_model(model)
    chosen = {own.read("what is the capital?", [], PASSAGES, scores=s).passage_id
              for s in ([5, 1, 1], [1, 5, 1], [1, 1, 5])}
    assert len(chosen) == 1

    class OldStyle:  # a reader without retriever scores gets the old call
        def read(self, question, history, passages):
            return passages[-1].id

    assert read_passages(OldStyle(), "q", [], PASSAGES, []) == "p2"


def _turn(qid: str, conversation: str, answers, spans, scores) -> ReadTurn:
    return ReadTurn(qid, conversation, list(answers), PASSAGES, list(scores), spans)


def test_tuning_never_ends_below_top1():
    # turn 1: the retriever's best passage holds the answer, the reader's selection prefers a
    # wrong one; turn 2: the reader's selection is right and the retriever's second is
    turns = [_turn("a_1", "a", ["Paris"], [span(0, "Paris", 1.0, 0.0),
                                            span(1, "Lyon", 1.0, 2.0), None], [9, 1, 0]),
             _turn("b_1", "b", ["Berlin"], [span(0, "Paris", 1.0, 0.0), None,
                                             span(2, "Berlin", 1.0, 3.0)], [9, 0, 5])]
    assert answer_at(turns[0], 1, None) == "Paris"
    assert scores_at(turns, 1, None)["f1"] == 50.0
    assert scores_at(turns, 3, None)["f1"] == 50.0  # reads Lyon for turn 1, Berlin for 2
    chosen = tune(turns, [1, 3])
    assert chosen["f1_at_1"] == 50.0 and chosen["eligible"] > 0
    fusion = Fusion(**chosen["fusion"])
    assert scores_at(turns, 3, fusion)["f1"] == 100.0  # a weighting that gets both right
    assert all(row["fusion"] != {"selection": 0.0, "span": 0.0, "retriever": 0.0}
               for row in chosen["candidates"])
    assert len(chosen["candidates"]) == len(weight_grid())


def test_split_by_conversation():
    class T:
        def __init__(self, cid):
            self.conversation_id = cid

    turns = [T(str(c)) for c in range(10) for _ in range(3)]
    tuning, reporting = split_conversations(turns, 0.5, seed=0)
    assert len(tuning) == len(reporting) == 15
    assert not {t.conversation_id for t in tuning} & {t.conversation_id for t in reporting}
    assert split_conversations(turns, 0.5, seed=1)[0] != tuning


def test_read_turns_and_script_on_the_tiny_benchmark(tmp_path, minilm_tokenizer):
    """The tuning script end to end: a tiny benchmark, BM25, a tiny random reader saved to disk."""
    from training_helpers import make_benchmark_with_bm25

    from convqa.benchmark import load_labelled_turns
    from convqa.corpus import PassageStore

    bench, bm25 = make_benchmark_with_bm25(tmp_path, _more_dev_turns())
    reader_dir = tmp_path / "reader"
    tiny_reader(seed=1, max_length=128).save_pretrained(reader_dir)
    data = load_labelled_turns(bench)
    turns = [t for t in data.turns if t.answer_evaluable and t.split == "dev"]
    reader = SpanReader.from_model(tiny_reader(seed=1, max_length=128))
    run = {t.qid: [Hit(pid, 1.0 / (i + 1), i + 1) for i, pid in enumerate(["A#0", "J#0", "B#0"])]
           for t in turns}
    with PassageStore.open(bench / "passages") as store:
        read = read_turns(reader, turns, data.conversations, run, store, 3)
    assert [len(r.spans) for r in read] == [3] * len(turns)
    direct = reader.read(turns[0].question, data.conversations[turns[0].conversation_id]
                         .history(turns[0].turn), [store_passage(bench, p) for p in
                                                   ("A#0", "J#0", "B#0")])
    assert answer_at(read[0], 3, None) == direct.text

    from convqa.front.tools import tune_reader_fusion as module
    out = tmp_path / "fusion.json"
    code = module.main(["--benchmark", str(bench), "--retriever",
                        json.dumps({"name": "bm25", "index": str(bm25)}),
                        "--history", "current_first", "--reader", str(reader_dir),
                        "--ks", "1", "3", "--cache", str(tmp_path / "cache"), "--out",
                        str(out), "--quiet"])
    assert code == 0
    result = json.loads(out.read_text())
    assert result["tuning_turns"] + result["reporting_turns"] == len(turns)
    assert result["tuning_conversations"] and result["reporting_conversations"]
    assert result["reader_spec"]["fusion"] == result["chosen"]["fusion"]
    tuned = result["tuning"]["fusion"]
    assert tuned["3"]["f1"] >= tuned["1"]["f1"]


def test_cached_reads_survive_scores_that_move(tmp_path, minilm_tokenizer, monkeypatch):
    """The read cache keeps turns by their passages, not their retriever scores: a rerun whose
    scores moved in their last digits reads nothing and carries the new scores; a turn whose
    passages changed is the only one read again."""
    from training_helpers import make_benchmark_with_bm25

    from convqa.benchmark import load_labelled_turns
    from readers.extractive.calibration_data import read_benchmark_turns

    bench, _ = make_benchmark_with_bm25(tmp_path, _more_dev_turns())
    data = load_labelled_turns(bench)
    turns = [t for t in data.turns if t.answer_evaluable and t.split == "dev"]
    assert len(turns) >= 2
    reader = SpanReader.from_model(tiny_reader(seed=1, max_length=128))

    def run(scale, swapped=()):
        return {t.qid: [Hit(pid, scale / (i + 1), i + 1) for i, pid in
                        enumerate(("J#0", "A#0", "B#0") if t.qid in swapped
                                  else ("A#0", "J#0", "B#0"))]
                for t in turns}

    cache = tmp_path / "reads"
    first, cached = read_benchmark_turns(reader, turns, data.conversations, run(1.0),
                                         bench / "passages", 3, cache)
    assert not cached
    spans = SpanReader.passage_spans
    read = []
    monkeypatch.setattr(SpanReader, "passage_spans",
                        lambda self, q, p: read.append(q) or spans(self, q, p))
    moved = 1.0 + 1e-6
    again, cached = read_benchmark_turns(reader, turns, data.conversations, run(moved),
                                         bench / "passages", 3, cache)
    assert cached and read == [] and [r.spans for r in again] == [r.spans for r in first]
    assert again[0].scores == [moved, moved / 2, moved / 3] != first[0].scores
    changed, cached = read_benchmark_turns(reader, turns, data.conversations,
                                           run(1.0, {turns[0].qid}), bench / "passages", 3,
                                           cache)
    assert not cached and len(read) == 1
    assert [p.id for p in changed[0].passages] == ["J#0", "A#0", "B#0"]
    assert [r.spans for r in changed[1:]] == [r.spans for r in first[1:]]


def store_passage(bench: Path, pid: str) -> Passage:
    from convqa.corpus import PassageStore

    with PassageStore.open(bench / "passages") as store:
        return store.get(pid)


def _more_dev_turns() -> list:
    """The tiny benchmark with four dev conversations (two to tune on, two to report on)."""
    from training_helpers import TURNS

    extra = [("c5", 1, "how far is alpha centauri?", "4.37 light-years", "A", ["A#1"], "dev",
              "first"),
             ("c6", 1, "what is the danube's length?", "2850 kilometres", "D", ["D#1"], "dev",
              "first"),
             ("c7", 1, "when was the eiffel tower completed?", "1889", "E", ["E#1"], "dev",
              "first")]
    return list(TURNS) + extra
