"""A two-stage reranker skips its slow second stage on turns where the first stage's best passage
leads by a calibrated margin (retrievers/rerank/cascade.py), chosen on training turns by `convqa
train reranker-cascade` and recorded in the first stage's folder."""
from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest

from convqa.errors import ConfigError
from convqa.pipeline import Pipeline
from convqa.registry import RERANKERS
from convqa.types import Hit, Passage, RerankedHit, Turn
from reader_helpers import single_thread  # noqa: F401 (autouse fixture)
from reranker_helpers import tiny_cross_encoder
from retrievers.rerank.cascade import (cascade_key, choose_margin, continue_below, lead,
                                       margin_scores, skips)
from retrievers.rerank.model import META_FILE, write_margin

PASSAGES = [Passage(f"p{i}", f"passage number {i} " + "about a harbour " * i, f"Title {i}")
            for i in range(6)]
HITS = [Hit(p.id, 60.0 - 10 * i, i + 1) for i, p in enumerate(PASSAGES)]


def ranked(*pairs):
    return [RerankedHit(pid, score, rank, 0.0, rank) for rank, (pid, score) in
            enumerate(pairs, start=1)]


def test_the_lead_is_the_gap_between_the_first_two_scores():
    assert lead(ranked(("a", 3.0), ("b", 1.5), ("c", 0.0))) == 1.5
    assert lead(ranked(("a", 3.0))) == math.inf and lead([]) == math.inf
    assert skips(ranked(("a", 3.0), ("b", 1.5)), 1.5)
    assert not skips(ranked(("a", 3.0), ("b", 1.5)), 1.6)
    assert not skips(ranked(("a", 3.0), ("b", 1.5)), None)  # None: never skip


def test_the_margin_of_the_best_hits_at_1_is_chosen():
    # turn 1: the first stage is sure (lead 2) and right, the second stage wrong;
    # turn 2: the first stage is unsure (lead 0.5) and wrong, the second stage right
    turns = [(ranked(("a", 3.0), ("b", 1.0)), ranked(("b", 9.0), ("a", 1.0)), {"a"}),
             (ranked(("c", 1.0), ("d", 0.5)), ranked(("d", 2.0), ("c", 1.0)), {"d"})]
    scores = margin_scores(turns, margins=(0.0, 0.5, 1.0, 2.0, 3.0))
    assert scores[None] == {"hits@1": 0.5, "skipped": 0.0}
    assert scores[0.0] == {"hits@1": 0.5, "skipped": 1.0}
    assert scores[1.0] == scores[2.0] == {"hits@1": 1.0, "skipped": 0.5}
    assert scores[3.0] == {"hits@1": 0.5, "skipped": 0.0}
    assert choose_margin([scores]) == 1.0  # the best; of the tied 1 and 2 the smaller
    # never skipping is kept when every margin loses, and a tie goes to the margin
    worse = {None: {"hits@1": 0.6, "skipped": 0.0}, 1.0: {"hits@1": 0.5, "skipped": 0.4}}
    assert choose_margin([worse]) is None
    assert choose_margin([{**worse, 2.0: {"hits@1": 0.6, "skipped": 0.1}}]) == 2.0


def test_with_several_collections_the_worst_gain_decides():
    """A margin that helps one collection a lot and costs another is not chosen over one that
    helps both a little."""
    def scores(never, *pairs):
        return {None: {"hits@1": never, "skipped": 0.0},
                **{m: {"hits@1": h, "skipped": 0.5} for m, h in pairs}}

    full = scores(0.45, (0.5, 0.44), (1.0, 0.47))
    vital = scores(0.64, (0.5, 0.77), (1.0, 0.70))
    assert choose_margin([full, vital]) == 1.0  # the mean (0.605 against 0.585) would take 0.5
    assert choose_margin([vital]) == 0.5
    assert choose_margin([scores(0.5, (1.0, 0.4)), scores(0.5, (1.0, 0.9))]) is None
    with pytest.raises(ConfigError, match="no benchmarks"):
        choose_margin([])
    with pytest.raises(ConfigError, match="no turns"):
        margin_scores([])


@pytest.fixture()
def folders(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    tiny_cross_encoder(seed=4).save_pretrained(first)
    tiny_cross_encoder(seed=9).save_pretrained(second)
    return first, second


def build(first, second, **second_options):
    return RERANKERS.build({"name": "cross_encoder", "model": str(first), "top_n": 6,
                            "precision": "fp32", "device": "cpu",
                            "second_stage": {"model": str(second), "top_n": 3,
                                             "precision": "fp32", **second_options}})


def test_a_confident_first_stage_skips_the_second(folders):
    first, second = folders
    question, history = "where is the harbour?", [Turn("what is a port?", "a harbour")]
    alone = RERANKERS.build({"name": "cross_encoder", "model": str(first), "top_n": 6,
                             "precision": "fp32", "device": "cpu"})
    first_order = alone.rerank_turn(question, history, HITS, PASSAGES)
    never = build(first, second, skip_margin="never")
    reordered = never.rerank_turn(question, history, HITS, PASSAGES)
    always = build(first, second, skip_margin=0)
    assert always.rerank_turn(question, history, HITS, PASSAGES) == first_order[:3]
    assert always.rerank(question, HITS, PASSAGES) == alone.rerank(question, HITS, PASSAGES)[:3]
    above = build(first, second, skip_margin=lead(first_order) + 1e-3)
    assert above.rerank_turn(question, history, HITS, PASSAGES) == reordered
    # auto without a recorded margin: never skip, and the same fingerprint as before margins
    auto = build(first, second)
    assert auto.skip_margin is None and auto.fingerprint() == never.fingerprint()
    assert auto.rerank_turn(question, history, HITS, PASSAGES) == reordered
    assert always.fingerprint() != never.fingerprint() != above.fingerprint()
    # a recorded margin applies to its retriever and second stage only
    key = cascade_key("bm25", never.second.model.known_fingerprint())
    assert never.second.model.known_fingerprint() == never.second.model.fingerprint()
    write_margin(first, key, 0.0, {"chosen_on": "test"})
    assert json.loads((first / META_FILE).read_text())["cascade_margins"][key] == \
        {"skip_margin": 0.0, "chosen_on": "test"}
    recorded = build(first, second).for_retriever({"name": "bm25", "index": "i"})
    assert recorded.skip_margin == 0.0
    assert recorded.rerank_turn(question, history, HITS, PASSAGES) == first_order[:3]
    assert build(first, second).for_retriever("dense").skip_margin is None
    assert build(first, second, skip_margin="never").for_retriever("bm25").skip_margin is None
    assert build(first, first).for_retriever("bm25").skip_margin is None  # another second stage
    # a saved copy of the first stage keeps its margins
    copy = first.parent / "copy"
    recorded.model.save_pretrained(copy)
    assert build(copy, second).for_retriever("bm25").skip_margin == 0.0


def test_the_rest_follows_below_the_reordered_best():
    head = ranked(("c", 7.0), ("a", 4.0))   # the second stage's order, its own scale
    first = ranked(("a", 2.0), ("c", 1.5), ("d", 1.0), ("e", -0.5))
    rest = continue_below(head, first)
    assert [(h.passage_id, h.score, h.rank) for h in rest] == [("d", 3.5, 3), ("e", 2.0, 4)]
    assert continue_below([], first) == first


def test_keep_rest_hands_on_the_first_stage_after_the_second(folders):
    """A second stage that reorders the best 3 of 6 hands on all 6 with keep_rest: its order of
    the 3, then the first stage's other 3 in its order, scored below them; on a turn that skips
    it, the first stage's whole order; the reader may then read past the second stage's 3."""
    first, second = folders
    question, history = "where is the harbour?", [Turn("what is a port?", "a harbour")]
    alone = RERANKERS.build({"name": "cross_encoder", "model": str(first), "top_n": 6,
                             "precision": "fp32", "device": "cpu"})
    first_order = alone.rerank_turn(question, history, HITS, PASSAGES)
    three = build(first, second, skip_margin="never").rerank_turn(question, history, HITS,
                                                                   PASSAGES)
    kept = build(first, second, skip_margin="never", keep_rest=True)
    assert kept.returned == 6 and kept.returned_by == "reranker.top_n"
    assert build(first, second).returned == 3
    got = kept.rerank_turn(question, history, HITS, PASSAGES)
    assert got[:3] == three
    assert [h.passage_id for h in got[3:]] == [h.passage_id for h in first_order[3:]]
    assert [h.rank for h in got] == [1, 2, 3, 4, 5, 6]
    assert all(a.score >= b.score for a, b in zip(got, got[1:]))
    assert kept.rerank(question, HITS, PASSAGES)[3:] == \
        continue_below(kept.rerank(question, HITS, PASSAGES)[:3],
                       alone.rerank(question, HITS, PASSAGES))
    skipping = build(first, second, skip_margin=0, keep_rest=True)
    assert skipping.rerank_turn(question, history, HITS, PASSAGES) == first_order
    by_id = {p.id: p for p in PASSAGES}
    assert skipping.rerank_turn(question, history, [], by_id) == []  # nothing retrieved
    assert kept.rerank(question, [], by_id) == []
    assert kept.fingerprint() != build(first, second, skip_margin="never").fingerprint()
    # a pipeline asking for 5 passages of a cascade that hands on 3 is told how to get them
    with pytest.raises(ConfigError, match=r"top_k 5 is more than the 3 passages the reranker "
                       r"returns \(reranker.second_stage.top_n\): lower top_k or raise "
                       r"reranker.second_stage.top_n, or set reranker.second_stage.keep_rest"):
        Pipeline._check_depth(SimpleNamespace(reranker=build(first, second)), 5)
    Pipeline._check_depth(SimpleNamespace(reranker=kept), 5)
    with pytest.raises(ConfigError, match="keep_rest belongs in second_stage"):
        RERANKERS.build({"name": "cross_encoder", "model": str(first), "keep_rest": True,
                         "second_stage": str(second)})
    # the second stage's options are read as the first stage's are ("yes" as a YAML true)
    assert build(first, second, keep_rest="yes").second.options.keep_rest is True
    # a misspelt option of the second stage is named with the options there are
    with pytest.raises(ConfigError, match=r"^reranker 'cross_encoder': second_stage: unknown "
                                          r"option 'keep_rst' \(options: model, top_n, "):
        RERANKERS.build({"name": "cross_encoder", "model": str(first),
                         "second_stage": {"model": str(second), "keep_rst": True}})
    with pytest.raises(ConfigError, match=r"second_stage: option 'keep_rest': expected "
                                          r"true/false, got 'maybe'"):
        RERANKERS.build({"name": "cross_encoder", "model": str(first),
                         "second_stage": {"model": str(second), "keep_rest": "maybe"}})


def test_bad_margins_are_one_line_errors(folders):
    first, second = folders
    for bad in (-1, "sometimes", True, float("nan")):
        with pytest.raises(ConfigError, match="skip_margin must be 'auto', 'never' or a number"):
            build(first, second, skip_margin=bad)
    with pytest.raises(ConfigError, match="skip_margin belongs in second_stage"):
        RERANKERS.build({"name": "cross_encoder", "model": str(first), "skip_margin": 1,
                         "second_stage": str(second)})
    meta = json.loads((first / META_FILE).read_text())
    meta["cascade_margins"] = {"bm25 > x": {"skip_margin": -2}}
    (first / META_FILE).write_text(json.dumps(meta))
    with pytest.raises(ConfigError, match=r"convqa_reranker.json: 'cascade_margins.bm25 > x."
                                          r"skip_margin' must be a number >= 0, got -2"):
        build(first, second)


def test_command_line_chooses_and_writes_the_margin(folders, tmp_path, capsys):
    from training_helpers import make_benchmark_with_bm25

    from convqa.front.cli.main import main as convqa

    first, second = folders
    bench, bm25 = make_benchmark_with_bm25(tmp_path)
    retriever = {"name": "bm25", "index": str(bm25)}
    args = ["train", "reranker-cascade", "--reranker", str(first), "--then", str(second),
            "--top-n", "4", "--then-top-n", "2", "--benchmark", str(bench),
            "--retriever", json.dumps(retriever), "--history", "current_first",
            "--cache", str(tmp_path / "cache"), "--report", str(tmp_path / "r.json"), "--quiet"]
    before = (first / META_FILE).read_text()
    assert convqa(args) == 0
    assert (first / META_FILE).read_text() == before  # nothing written without --write
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["top_n"] == 4 and report["then_top_n"] == 2 and report["turns"] > 0
    scores = {None if k == "never" else float(k): v for k, v in report["scores"].items()}
    each = [{None if k == "never" else float(k): v for k, v in b["scores"].items()}
            for b in report["benchmarks"]]
    assert report["skip_margin"] == choose_margin(each)
    assert scores[0.0]["skipped"] == 1.0 and scores[None]["skipped"] == 0.0
    cached = sorted((tmp_path / "cache").glob("rerank-*.json"))
    assert len(cached) == 2  # one file per stage
    stamps = [path.stat().st_mtime_ns for path in cached]
    assert convqa(args + ["--write"]) == 0  # both stages' scores come from the cache
    assert [path.stat().st_mtime_ns for path in cached] == stamps
    out = capsys.readouterr().out
    if report["skip_margin"] is None:
        assert "never skip" in out and "cascade_margins" not in (first / META_FILE).read_text()
        return
    assert f"skip margin {report['skip_margin']:g} (written)" in out
    cascade = RERANKERS.build({"name": "cross_encoder", "model": str(first), "top_n": 4,
                               "second_stage": {"model": str(second), "top_n": 2}})
    assert cascade.for_retriever(retriever).skip_margin == report["skip_margin"]

    # a margin of one's own is scored beside the rule's and recorded with the rule's choice
    assert convqa(args + ["--margin", "1.1", "--write"]) == 0
    given = json.loads((tmp_path / "r.json").read_text())
    assert given["skip_margin"] == 1.1 and given["given"]
    assert given["rule_margin"] == report["skip_margin"] and "1.1" in given["scores"]
    assert "skip margin 1.1 (written), given (the rule chooses" in capsys.readouterr().out
    assert cascade.for_retriever(retriever).skip_margin == report["skip_margin"]  # built before
    again = RERANKERS.build({"name": "cross_encoder", "model": str(first), "top_n": 4,
                             "second_stage": {"model": str(second), "top_n": 2}})
    assert again.for_retriever(retriever).skip_margin == 1.1
    entry = next(iter(json.loads((first / META_FILE).read_text())["cascade_margins"].values()))
    assert "given by --margin" in entry["chosen_on"]


def test_command_line_bad_input_is_one_line(folders, tmp_path, capsys):
    from convqa.front.cli.main import main as convqa

    first, second = folders
    for extra, message in [(["--then", str(tmp_path)], "not a reranker folder"),
                           (["--then", str(second), "--top-n", "2", "--then-top-n", "3"],
                            "--then-top-n 3 is more than the first stage's --top-n 2"),
                           (["--then", str(second), "--margin", "-1"],
                            "--margin must be a number >= 0, got -1")]:
        code = convqa(["train", "reranker-cascade", "--reranker", str(first), *extra,
                       "--benchmark", str(tmp_path), "--retriever", "bm25"])
        assert code != 0
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0]


def test_command_line_leaves_out_the_turns_a_model_trained_on(folders, tmp_path, capsys):
    from training_helpers import make_benchmark_with_bm25

    from convqa.benchmark import load_labelled_turns
    from convqa.front.cli.main import main as convqa

    first, second = folders
    bench, bm25 = make_benchmark_with_bm25(tmp_path)
    data = load_labelled_turns(bench)
    usable = [t for t in data.turns
              if t.split == "train" and t.answer_evaluable and t.answer_passage_ids]
    report = tmp_path / "r.json"
    args = ["train", "reranker-cascade", "--reranker", str(first), "--then", str(second),
            "--top-n", "4", "--then-top-n", "2", "--benchmark", str(bench),
            "--retriever", json.dumps({"name": "bm25", "index": str(bm25)}),
            "--turns", "1000", "--cache", str(tmp_path / "cache"), "--report", str(report),
            "--quiet"]
    assert convqa(args) == 0
    assert json.loads(report.read_text())["turns"] == len(usable) >= 2

    trained = tmp_path / "examples.jsonl"
    trained.write_text(json.dumps({"id": f"another-collection/{usable[0].qid}"}) + "\n"
                       + json.dumps({"id": "dev-v2.0/some-squad-question"}) + "\n")
    assert convqa(args + ["--unseen-by", str(trained)]) == 0
    assert json.loads(report.read_text())["turns"] == len(usable) - 1

    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"id": "dev-v2.0/some-squad-question"}) + "\n")
    broken = tmp_path / "broken.jsonl"
    broken.write_text(json.dumps({"id": f"full/{usable[0].qid}"}) + "\n[1, 2]\n")
    capsys.readouterr()
    for path, message in [(other, f"no example is a turn of {bench}"),
                          (broken, f"{broken}:2")]:
        assert convqa(args + ["--unseen-by", str(path)]) != 0
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err


class FixedRetriever:
    """Returns the module's hits whatever the query."""

    def retrieve(self, query, k):
        return HITS[:k]


def test_a_pipeline_times_the_second_stage_as_a_stage_of_its_own(folders):
    """`timings_ms` splits a cascade's reranking into "rerank" (the first stage) and
    "rerank_second" (0 on a turn that skips it); one reranker keeps "rerank" alone."""
    from convqa.pipeline import Pipeline
    from convqa.registry import HISTORY_STRATEGIES

    first, second = folders
    question, history = "where is the harbour?", [Turn("what is a port?", "a harbour")]
    passages = {p.id: p for p in PASSAGES}

    def timings(reranker):
        pipeline = Pipeline(FixedRetriever(), HISTORY_STRATEGIES.build("current_first"),
                            passages, reranker=reranker, top_k=3)
        return pipeline.answer(question, history).timings_ms

    runs = timings(build(first, second, skip_margin="never"))
    skipped = timings(build(first, second, skip_margin=0))
    alone = timings(RERANKERS.build({"name": "cross_encoder", "model": str(first), "top_n": 6,
                                     "precision": "fp32", "device": "cpu"}))
    assert runs["rerank_second"] > 0 and runs["rerank"] > 0
    assert skipped["rerank_second"] == 0.0 and skipped["rerank"] > 0
    assert "rerank_second" not in alone and alone["rerank"] > 0
    # a reranker whose rerank_turn takes no timings still runs in a pipeline
    class Plain:
        options = type("Options", (), {"top_n": 6})()

        def rerank_turn(self, question, history, hits, passages):
            return [RerankedHit(h.passage_id, -h.score, r, h.score, h.rank)
                    for r, h in enumerate(reversed(list(hits)), start=1)]

    plain = Pipeline(FixedRetriever(), HISTORY_STRATEGIES.build("current_first"), passages,
                     reranker=Plain(), top_k=3).answer(question, history)
    assert [h.passage_id for h in plain.hits] == ["p5", "p4", "p3"]
    assert "rerank" in plain.timings_ms and "rerank_second" not in plain.timings_ms
