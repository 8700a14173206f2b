"""Calibrating the extractive reader's decoding on training questions
(readers/extractive/calibrate.py, calibration_data.py, no_answer_check.py): the passage fusion
chosen under the "more passages never hurt" constraint, the confidence model and the no-answer
threshold, and `convqa train reader-decoding` (convqa/front/cli/train_decoding.py) with the
held-out check (convqa/front/tools/reader_no_answer_check.py) end to end on a tiny benchmark
and on real SQuAD v2.0."""
from __future__ import annotations

import dataclasses
import json
import random

import numpy as np
import pytest

from conftest import shared_file
from convqa.errors import ConfigError
from convqa.loaders.squad import read_squad
from convqa.types import Passage
from readers.extractive.calibrate import (Samples, Table, calibrate_no_answer, choose_fusion,
                                          choose_threshold, fit_logistic, fused_f1,
                                          meets_constraint, table)
from readers.extractive.calibration_data import (Source, cached_reads, squad_questions,
                                                 unanswerable_share)
from readers.extractive.data import is_unanswerable
from readers.extractive.decode import Fusion, PassageSpan, choose_span
from readers.extractive.decoding import Decoding, NoAnswer, confidence_features
from readers.extractive.fusion_tuning import ReadTurn, scores_at
from readers.extractive.reader import SpanReader
from reader_helpers import tiny_reader
from reader_helpers import single_thread  # noqa: F401 (autouse fixture: one thread)

SCORES = [3.0, 2.0, 1.0]  # the retriever ranks the passages in order


def turn(qid: str, answers: list[str], texts: list[str], span_scores: list[float | None],
         selections: list[float] | None = None, scores: list[float] = SCORES) -> ReadTurn:
    """A read turn whose passage i answers texts[i] with span score span_scores[i] (None: no
    span in that passage)."""
    passages = [Passage(f"{qid}#{i}", f"It is {text}.", "T") for i, text in enumerate(texts)]
    spans = []
    for i, score in enumerate(span_scores):
        if score is None:
            spans.append(None)
            continue
        selection = selections[i] if selections is not None else 0.0
        spans.append(PassageSpan(i, 0, 0, 0, score, selection, 6, 6 + len(texts[i])))
    return ReadTurn(qid, qid.split("_")[0], answers, passages, list(scores[:len(texts)]), spans)


def test_fused_f1_is_what_the_decoder_answers():
    """The arrays give exactly the F1 the decoder's own choice gets, ties and empty passages
    included, at every k."""
    rng = random.Random(0)
    words = ["Paris", "Lyon", "Rome", "Oslo"]
    turns = []
    for n in range(40):
        texts = [rng.choice(words) for _ in range(3)]
        spans = [rng.choice([None, 1.0, 2.0, round(rng.uniform(-2, 4), 1)]) for _ in range(3)]
        selections = [rng.choice([0.0, 1.0, -1.0]) for _ in range(3)]
        scores = [rng.choice([1.0, 2.0, 3.0]) for _ in range(3)]
        turns.append(turn(f"c{n}_1", [rng.choice(words)], texts, spans, selections, scores))
    for fusion in (Fusion(1, 0, 0), Fusion(0, 1, 0), Fusion(0, 0.1, 0.25), Fusion(0.5, 1, 4),
                   Fusion(0, 0, 1000)):
        for k in (1, 2, 3):
            assert fused_f1(table(turns, k, "topiocqa"), fusion) == pytest.approx(
                scores_at(turns, k, fusion)["f1"], abs=1e-6)


def _paris_and_berlin() -> list[ReadTurn]:
    """Three turns whose answer is the retriever's best passage but a wrong second passage has
    the higher span score, and two whose answer is only in lower passages."""
    first = [turn(f"p{n}_1", ["Paris"], ["Paris", "Lyon", "Paris"], [1.0, 5.0, 10.0])
             for n in range(3)]
    later = [turn(f"b{n}_1", ["Berlin"], ["Rome", "Berlin", "Berlin"], [1.0, 5.0, 10.0])
             for n in range(2)]
    return first + later


def test_the_choice_never_reads_worse_with_more_passages():
    source = Source("bench", "topiocqa", _paris_and_berlin(), [])
    spans_only, retriever_only = Fusion(0, 1, 0), Fusion(0, 0, 1000)
    # by span score: F1 60 / 40 / 100 at 1 / 2 / 3 passages (best mean, but reading two
    # passages loses 20 points); by the retriever: 60 at every k
    result = choose_fusion([source], (1, 2, 3), grid=[spans_only, retriever_only])
    assert result["chosen"]["fusion"] == retriever_only.to_dict()
    assert result["eligible"] == 1 and result["candidates"] == 2
    assert result["chosen"]["f1"] == {"bench": {"1": 60.0, "2": 60.0, "3": 60.0}}
    # the whole grid: the best weighting that meets the constraint
    full = choose_fusion([source], (1, 2, 3), current=spans_only)
    assert full["current"]["meets_constraint"] is False
    chosen = full["chosen"]
    assert chosen["meets_constraint"]
    f1 = {int(k): v for k, v in chosen["f1"]["bench"].items()}
    assert meets_constraint(f1) and chosen["mean_f1"] >= 60.0
    assert chosen["mean_f1"] == max(row["mean_f1"] for row in full["best_eligible"])
    # a weighting that reads the first passage unless a later one is far better gets more
    assert chosen["mean_f1"] > 60.0


def test_the_constraint():
    assert meets_constraint({1: 50.0, 5: 49.6, 20: 49.6})
    assert not meets_constraint({1: 50.0, 5: 49.4, 20: 60.0})
    assert not meets_constraint({1: 50.0, 5: 55.0, 20: 54.9})
    assert meets_constraint({1: 50.0, 5: 49.4, 20: 49.4}, tolerance=1.0)


def test_logistic_fit_recovers_a_known_model():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4000, 3)) * [1.0, 3.0, 0.5] + [0.0, 2.0, -1.0]
    true_w, true_b = np.array([1.5, -0.5, 0.0]), 0.3
    y = 1 / (1 + np.exp(-(x @ true_w + true_b)))  # soft targets: the probabilities themselves
    w, b = fit_logistic(x, y, np.ones(len(x)), l2=0.0)
    assert w == pytest.approx(true_w, abs=1e-3) and b == pytest.approx(true_b, abs=1e-3)


def _samples(confidence_f1_answerable) -> tuple[np.ndarray, Samples]:
    conf = np.array([c for c, _, _ in confidence_f1_answerable])
    f1 = np.array([f for _, f, _ in confidence_f1_answerable])
    answerable = np.array([a for _, _, a in confidence_f1_answerable])
    return conf, Samples(np.zeros((len(conf), 3)), f1, answerable, np.ones(len(conf)),
                         ["g"] * len(conf))


def test_threshold_maximises_f1_with_no_answer_credit():
    conf, samples = _samples([(0.8, 1.0, True), (0.9, 1.0, True), (0.1, 0.0, False),
                              (0.2, 0.0, False)])
    assert choose_threshold(conf, samples) == (pytest.approx(0.5), pytest.approx(1.0))
    # an unanswerable question answered confidently cannot be caught without losing the right
    # answer; a wrong answer to an answerable question scores 0 answered or not, so of the
    # equal thresholds the lowest (answer more) is kept
    conf, samples = _samples([(0.3, 0.0, True), (0.9, 1.0, True), (0.2, 0.0, False),
                              (0.95, 0.0, False)])
    assert choose_threshold(conf, samples) == (pytest.approx(0.25), pytest.approx(0.5))
    # everything answerable and right: always answer (threshold 0, the lowest of equals)
    conf, samples = _samples([(0.3, 1.0, True), (0.9, 1.0, True)])
    assert choose_threshold(conf, samples) == (0.0, pytest.approx(1.0))


def test_no_answer_calibration_separates_and_the_reader_abstains():
    """Answerable questions read with high span scores, unanswerable ones with low: the
    confidence separates them, and a reader with that calibration abstains on the latter."""
    answerable = [turn(f"a{n}_1", ["Paris"], ["Paris", "Lyon", "Rome"],
                       [4.0 + n % 3, 1.0, 0.5]) for n in range(12)]
    unanswerable = [turn(f"u{n}_1", ["UNANSWERABLE"], ["Lyon", "Rome", "Oslo"],
                         [-1.0 - n % 3, -2.0, -3.0]) for n in range(12)]
    squad_has = [turn(f"s{n}_1", ["Oslo"], ["Oslo"], [3.0 + n % 2], scores=[0.0])
                 for n in range(6)]
    squad_none = [turn(f"n{n}_1", [], ["Rome"], [-2.0 - n % 2], scores=[0.0]) for n in range(6)]
    sources = [Source("bench", "topiocqa", answerable, unanswerable),
               Source("squad", "squad", squad_has, squad_none)]
    assert is_unanswerable(unanswerable[0].answers) and is_unanswerable([])
    fusion = Fusion(0, 1, 0.25)
    result = calibrate_no_answer(sources, fusion, ks=(1, 3))
    assert result["f1"] == 100.0 and result["f1_always_answer"] == 50.0
    groups = result["groups"]
    assert groups["bench:answerable"]["no_answer_share"] == 0.0
    assert groups["bench:unanswerable"]["no_answer_share"] == 100.0
    assert groups["squad:unanswerable"]["no_answer_share"] == 100.0
    assert groups["bench:answerable"]["answers"] == 24  # 12 turns at k=1 and k=3
    no_answer = NoAnswer.from_dict(result["no_answer"], "test")
    assert no_answer.weights["span"] > 0

    model = tiny_reader()
    model.decoding = Decoding(fusion=fusion, no_answer=no_answer)
    reader = SpanReader.from_model(model)
    for read, abstains in ((answerable[0], False), (unanswerable[0], True),
                           (squad_none[1], True)):
        answer = reader.answer_from(read.spans, read.passages, read.scores)
        assert answer.no_answer is abstains
        assert answer.evidence is not None
    assert reader.answer_from(unanswerable[0].spans, unanswerable[0].passages,
                              unanswerable[0].scores, always_answer=True).text == "Lyon"


def _overlapping(share: float | None) -> Source:
    """Answerable turns (right answer) at span scores 2, 3, 4 and unanswerable ones at 1 and
    2.5: no threshold separates them, so where it falls depends on how the two kinds weigh."""
    answerable = [turn(f"a{n}_1", ["Paris"], ["Paris"], [2.0 + n % 3], scores=[1.0])
                  for n in range(12)]
    unanswerable = [turn(f"u{n}_1", ["UNANSWERABLE"], ["Lyon"], [1.0 + 1.5 * (n % 2)],
                         scores=[1.0]) for n in range(12)]
    return Source("bench", "topiocqa", answerable, unanswerable, share)


def test_the_threshold_follows_the_natural_share_of_unanswerable_questions():
    """Balanced halves make abstaining on a third of the answerable turns pay (every
    unanswerable one is caught); at a natural 5% share no answerable turn abstains."""
    fusion = Fusion(0, 1, 0)
    balanced = calibrate_no_answer([_overlapping(0.05)], fusion, ks=(1,), prevalence="balanced")
    natural = calibrate_no_answer([_overlapping(0.05)], fusion, ks=(1,))
    assert balanced["prevalence"] == "balanced" and natural["prevalence"] == "natural"
    assert balanced["groups"]["bench:answerable"]["no_answer_share"] > 30.0
    assert balanced["groups"]["bench:unanswerable"]["no_answer_share"] == 100.0
    assert natural["groups"]["bench:answerable"]["no_answer_share"] == 0.0
    assert natural["groups"]["bench:answerable"]["weight"] == pytest.approx(0.95)
    assert natural["groups"]["bench:unanswerable"]["weight"] == pytest.approx(0.05)
    # an unknown share weighs like balanced
    unknown = calibrate_no_answer([_overlapping(None)], fusion, ks=(1,))
    assert unknown["no_answer"]["threshold"] == balanced["no_answer"]["threshold"]
    with pytest.raises(ConfigError, match="prevalence"):
        calibrate_no_answer([_overlapping(0.05)], fusion, ks=(1,), prevalence="often")


def test_natural_shares_are_counted_before_sampling():
    squad = shared_file("squad/dev-v2.0.json")
    has, none, share = squad_questions(squad, "train", count=5, with_share=True)
    assert len(has) == len(none) == 5
    examples = read_squad(squad, strict=False).examples
    impossible = sum(e.is_impossible for e in examples) / len(examples)
    assert abs(share - impossible) < 0.05  # the train articles are 90% of the file
    assert unanswerable_share(92, 8) == pytest.approx(0.08)
    assert unanswerable_share(0, 0) is None


def test_reads_are_cached(tmp_path):
    reads = _paris_and_berlin()
    calls = []

    def compute():
        calls.append(1)
        return reads

    first, cached = cached_reads(tmp_path, {"what": "x"}, compute)
    assert not cached and first == reads
    again, cached = cached_reads(tmp_path, {"what": "x"}, compute)
    assert cached and again == reads and len(calls) == 1
    _, cached = cached_reads(tmp_path, {"what": "y"}, compute)
    assert not cached and len(calls) == 2


def test_table_marks_absent_passages():
    t = table([turn("a_1", ["Paris"], ["Paris", "Lyon"], [None, 2.0], scores=[2.0, 1.0])],
              3, "topiocqa")
    assert isinstance(t, Table) and t.valid.tolist() == [[False, True, False]]
    assert fused_f1(t, Fusion(0, 1, 0)) == 0.0  # Lyon


# ---------------------------------------------------------------------------------------------
# End to end


@pytest.fixture(scope="module")
def tiny_setup(tmp_path_factory):
    from training_helpers import make_benchmark_with_bm25

    root = tmp_path_factory.mktemp("calibrate")
    make_benchmark_with_bm25(root)
    return root, root / "bench"


def _calibrate_args(root, bench, reader_dir, *extra):
    return ["train", "reader-decoding", "--reader", str(reader_dir), "--benchmark", str(bench),
            "--retriever", json.dumps({"name": "bm25", "index": str(root / "bm25")}),
            "--history", "current_first", "--k", "3", "--ks", "1", "2", "3",
            "--no-answer-ks", "2", "--cache", str(root / "reads"), "--quiet", *extra]


def test_command_line_writes_the_block_the_reader_then_uses(tiny_setup, tmp_path, capsys):
    from convqa.registry import READERS
    from convqa.front.cli.main import main as convqa
    from readers.extractive.model import META_FILE

    root, bench = tiny_setup
    reader_dir = tmp_path / "reader"
    model = tiny_reader(seed=1)
    model.decoding = Decoding(max_answer_length=12)
    model.save_pretrained(reader_dir)
    before = json.loads((reader_dir / META_FILE).read_text())
    report = tmp_path / "report.json"
    assert convqa(_calibrate_args(root, bench, reader_dir, "--report", str(report))) == 0
    assert json.loads((reader_dir / META_FILE).read_text()) == before  # not without --write
    assert convqa(_calibrate_args(root, bench, reader_dir, "--report", str(report),
                                "--write")) == 0
    result = json.loads(report.read_text())
    # the share counts every labelled train turn, the answer-evaluable ones and the one whose
    # answer the collection lacks: 1 UNANSWERABLE of 9
    assert result["questions"] == {"bench": {"answerable": 7, "unanswerable": 1,
                                             "unanswerable_share": pytest.approx(1 / 9)}}
    meta = json.loads((reader_dir / META_FILE).read_text())
    assert meta["decoding"] == result["decoding"] and result["written"]
    assert meta["decoding"]["max_answer_length"] == 12  # what was not calibrated is kept
    assert {k: v for k, v in meta.items() if k != "decoding"} == \
        {k: v for k, v in before.items() if k != "decoding"}
    assert result["passage_choice"]["chosen"]["meets_constraint"]
    reader = READERS.build({"name": "extractive", "model": str(reader_dir)})
    assert reader.fusion == Fusion(**result["passage_choice"]["chosen"]["fusion"])
    assert reader.no_answer == NoAnswer.from_dict(result["no_answer"]["no_answer"], "x")
    out = capsys.readouterr().out
    assert "passage choice:" in out and "written into" in out

    from convqa.front.tools.reader_no_answer_check import main as check

    checked = tmp_path / "check.json"
    assert check(["--reader", str(reader_dir), "--benchmark", str(bench),
                  "--retriever", json.dumps({"name": "bm25", "index": str(root / "bm25")}),
                  "--history", "current_first", "--split", "train", "--ks", "1", "2",
                  "--cache", str(root / "reads"), "--quiet", "--report", str(checked)]) == 0
    scores = json.loads(checked.read_text())["sources"]
    rows = next(iter(scores.values()))
    assert [row["k"] for row in rows] == [1, 2]
    assert rows[0]["answerable"] == 7 and rows[0]["unanswerable"] == 1
    assert rows[0]["no_answer_f1"] in (0.0, 100.0)


def test_calibrating_after_a_reranker_writes_only_its_block(tiny_setup, tmp_path, capsys):
    """--reranker: the retrieved passages are rescored before they are read, and the choice
    goes into the after_reranker block; the outer block is left as it was."""
    from convqa.front.cli.main import main as convqa
    from convqa.registry import READERS
    from readers.extractive.model import META_FILE
    from reranker_helpers import tiny_cross_encoder

    root, bench = tiny_setup
    reranker_dir = tmp_path / "reranker"
    tiny_cross_encoder(seed=3).save_pretrained(reranker_dir)
    reader_dir = tmp_path / "reader"
    model = tiny_reader(seed=1)
    outer = Decoding(fusion=Fusion(0.0, 0.1, 0.25), max_answer_length=12)
    model.decoding = outer
    model.save_pretrained(reader_dir)
    report = tmp_path / "report.json"
    cache = tmp_path / "cache"
    spec = json.dumps({"model": str(reranker_dir), "top_n": 3})
    args = ["train", "reader-decoding", "--reader", str(reader_dir), "--benchmark", str(bench),
            "--retriever", json.dumps({"name": "bm25", "index": str(root / "bm25")}),
            "--history", "current_first", "--k", "3", "--ks", "1", "2", "3",
            "--no-answer-ks", "2", "--cache", str(cache), "--quiet", "--reranker", spec,
            "--report", str(report), "--write"]
    assert convqa(args) == 0
    result = json.loads(report.read_text())
    assert result["reranker"] == {"name": "cross_encoder", "model": str(reranker_dir),
                                  "top_n": 3}
    decoding = folder_decoding(reader_dir)
    assert decoding.fusion == outer.fusion and decoding.max_answer_length == 12
    after = decoding.after_reranker
    assert after.fusion == Fusion(**result["passage_choice"]["chosen"]["fusion"])
    assert after.no_answer == NoAnswer.from_dict(result["no_answer"]["no_answer"], "x")
    assert json.loads((reader_dir / META_FILE).read_text())["decoding"] == result["decoding"]
    reader = READERS.build({"name": "extractive", "model": str(reader_dir)})
    assert reader.fusion == outer.fusion and reader.reranked_fusion == after.fusion
    # the reranked hits are kept: a rerun reranks nothing and chooses the same
    assert len(list(cache.glob("rerank-*.json"))) == 1
    stamp = next(cache.glob("rerank-*.json")).stat().st_mtime_ns
    assert convqa(args) == 0
    assert next(cache.glob("rerank-*.json")).stat().st_mtime_ns == stamp
    assert json.loads(report.read_text())["decoding"] == result["decoding"]
    # --keep-no-answer: only the passage choice; the outer confidence goes on applying
    first = dataclasses.replace(outer, no_answer=NoAnswer({"span": 0.5}, -1.0, 0.3))
    model.decoding = first
    model.save_pretrained(reader_dir)
    assert convqa(args + ["--keep-no-answer"]) == 0
    written = folder_decoding(reader_dir)
    assert written.no_answer == first.no_answer and written.after_reranker.no_answer is None
    assert written.after_reranker.fusion == after.fusion  # the same reads, the same choice
    assert json.loads(report.read_text())["no_answer"] is None
    reader = READERS.build({"name": "extractive", "model": str(reader_dir)})
    assert reader.reranked_no_answer == first.no_answer
    capsys.readouterr()
    assert convqa(args + ["--keep-no-answer", "--keep-fusion"]) == 2
    assert "leaves nothing to calibrate" in capsys.readouterr().err
    bad = args[:args.index("--reranker") + 1] + ["{model: [x"] + args[args.index("--reranker") + 2:]
    assert convqa(bad) == 2
    assert "--reranker: malformed inline YAML" in capsys.readouterr().err
    # reading past the reranked passages is refused
    assert convqa(args[:args.index("--k") + 1] + ["4"] + args[args.index("--k") + 2:]) == 2
    assert "reads past the reranker's top_n 3" in capsys.readouterr().err
    # calibrating the outer block again (no --reranker) keeps the after_reranker one
    before = folder_decoding(reader_dir).after_reranker
    outer_args = args[:args.index("--reranker")] + args[args.index("--reranker") + 2:]
    assert convqa(outer_args + ["--keep-fusion"]) == 0
    again = folder_decoding(reader_dir)
    assert again.after_reranker == before and again.fusion == outer.fusion
    assert again.no_answer is not None and again.no_answer != first.no_answer


def folder_decoding(folder):
    from readers.extractive.model import ExtractiveReader

    return ExtractiveReader.from_pretrained(folder).decoding


def test_taking_the_topic_article_away_leaves_what_a_collection_without_it_returns(tiny_setup):
    from types import SimpleNamespace

    from convqa.corpus import PassageStore
    from convqa.types import Hit
    from readers.extractive.calibration_data import without_topic_article

    _, bench = tiny_setup
    ids = ["A#0", "J#0", "B#0", "A#1", "C#0"]
    hits = [Hit(pid, 5.0 - i, i + 1) for i, pid in enumerate(ids)]
    with PassageStore.open(bench / "passages") as store:
        # A's passages go (its article) and so does J#0, another article's passage that
        # holds the answer; what stays keeps its order and score, renumbered
        about_a = SimpleNamespace(gold_article_id="A", answers=["the largest planet"])
        assert without_topic_article(about_a, hits, store) == [Hit("B#0", 3.0, 1),
                                                                Hit("C#0", 1.0, 2)]
        assert without_topic_article(about_a, hits, store, keep=1) == [Hit("B#0", 3.0, 1)]
        # a yes / no answer is never matched in a passage; only the article goes
        about_c = SimpleNamespace(gold_article_id="C", answers=["yes"])
        assert [h.passage_id for h in without_topic_article(about_c, hits, store)] == \
            ["A#0", "J#0", "B#0", "A#1"]


def test_turns_read_without_their_article_join_the_calibration_and_the_check(
        tiny_setup, tmp_path, capsys):
    from convqa.front.cli.main import main as convqa
    from convqa.front.tools.reader_no_answer_check import main as check

    root, bench = tiny_setup
    reader_dir = tmp_path / "reader"
    tiny_reader(seed=2).save_pretrained(reader_dir)
    report = tmp_path / "report.json"
    assert convqa(_calibrate_args(root, bench, reader_dir, "--absent-article", "3",
                                  "--report", str(report))) == 0
    result = json.loads(report.read_text())
    # up to three answer-evaluable train turns read as retrieved and without their article
    # (BM25 returns only passages sharing a word with the question: a turn whose retrieved
    # passages are all of its article has nothing left to read and is dropped), each way
    # weighing half; the benchmark's own turns are as before
    absent = result["questions"]["bench-without-topic-article"]
    assert 1 <= absent["answerable"] == absent["unanswerable"] <= 3
    assert absent["unanswerable_share"] == 0.5
    assert result["questions"]["bench"]["answerable"] == 7
    assert "bench-without-topic-article:unanswerable" in result["no_answer"]["groups"]
    checked = tmp_path / "check.json"
    assert check(["--reader", str(reader_dir), "--benchmark", str(bench),
                  "--retriever", json.dumps({"name": "bm25", "index": str(root / "bm25")}),
                  "--history", "current_first", "--split", "train", "--ks", "1", "2",
                  "--absent-article", "3", "--cache", str(root / "reads"), "--quiet",
                  "--report", str(checked)]) == 0
    rows = json.loads(checked.read_text())["sources"]["bench-without-topic-article-train"]
    assert [row["k"] for row in rows] == [1, 2]
    assert rows[0]["answerable"] == rows[0]["unanswerable"] == absent["answerable"]
    assert 0.0 <= rows[0]["no_answer_f1"] <= 100.0


def test_command_line_errors(tiny_setup, tmp_path, capsys):
    from convqa.front.cli.main import main as convqa

    root, bench = tiny_setup
    assert convqa(["train", "reader-decoding", "--reader", str(tmp_path / "missing"),
                   "--benchmark", str(bench), "--retriever", "bm25"]) == 2
    assert "not a reader folder" in capsys.readouterr().err
    reader_dir = tmp_path / "reader"
    tiny_reader().save_pretrained(reader_dir)
    assert convqa(["train", "reader-decoding", "--reader", str(reader_dir)]) == 2
    assert "nothing to calibrate on" in capsys.readouterr().err
    assert convqa(["train", "reader-decoding", "--reader", str(reader_dir),
                   "--benchmark", str(bench)]) == 2
    assert "give its --retriever or --run" in capsys.readouterr().err


def test_squad_v2_training_articles_calibrate_the_confidence(tmp_path):
    """Real SQuAD v2.0: questions of the training articles only, both kinds, read against
    their paragraphs; the held-out articles are scored by the check."""
    from convqa.front.cli.main import main as convqa
    from readers.extractive.calibration_data import squad_questions
    from readers.extractive.data import heldout_keys
    from convqa.front.tools.reader_no_answer_check import main as check

    squad = shared_file("squad/dev-v2.0.json")
    has, none = squad_questions(squad, "train", count=5)
    held_has, held_none = squad_questions(squad, "heldout", count=5)
    assert len(has) == len(none) == len(held_has) == len(held_none) == 5
    assert all(q.answers for q in has) and not any(q.answers for q in none)
    heldout = heldout_keys(set(_titles(squad)), 0.1, 0)
    assert heldout and not {q.title for q in has + none} & heldout
    assert {q.title for q in held_has + held_none} <= heldout

    reader_dir = tmp_path / "reader"
    tiny_reader(seed=3).save_pretrained(reader_dir)
    report = tmp_path / "report.json"
    assert convqa(["train", "reader-decoding", "--reader", str(reader_dir), "--squad",
                   str(squad), "--squad-questions", "5", "--report", str(report), "--write",
                   "--quiet"]) == 0
    result = json.loads(report.read_text())
    assert result["passage_choice"] is None  # no benchmark: the passage choice is kept
    counts = result["questions"]["squad-train"]
    assert (counts["answerable"], counts["unanswerable"]) == (5, 5)
    assert 0.4 < counts["unanswerable_share"] < 0.6  # the file's own share, not the sample's
    assert 0.0 <= result["no_answer"]["no_answer"]["threshold"] <= 1.0
    checked = tmp_path / "check.json"
    assert check(["--reader", str(reader_dir), "--squad", str(squad), "--squad-questions", "5",
                  "--quiet", "--report", str(checked)]) == 0
    row = json.loads(checked.read_text())["sources"]["squad-v2-heldout-articles"]
    assert row["answerable"] == row["unanswerable"] == 5
    assert row["overall_f1"] == pytest.approx((row["has_answer_f1"] + row["no_answer_f1"]) / 2)
    share = row["unanswerable_share"]
    assert 0.4 < share < 0.6
    assert row["natural_f1"] == pytest.approx(
        (1 - share) * row["has_answer_f1"] + share * row["no_answer_f1"], abs=0.01)
    assert row["natural_f1_always"] == pytest.approx(
        (1 - share) * row["has_answer_f1_always"], abs=0.01)


def _titles(path) -> list[str]:
    return [article["title"] for article in json.loads(path.read_text())["data"]]


def _paris_bench() -> tuple[list, list[Source]]:
    """(answerable reads, [a benchmark of 12 answerable + 12 unanswerable reads 3 deep]): the
    answerable ones agree on "Paris" across passages, the unanswerable ones do not agree."""
    answerable = [turn(f"a{n}_1", ["Paris"], ["Paris", "Paris", "Lyon"],
                       [1.0 + n % 3, 3.0, 0.5], scores=[3.0, 2.0, 1.0]) for n in range(12)]
    unanswerable = [turn(f"u{n}_1", ["UNANSWERABLE"], ["Lyon", "Rome", "Oslo"],
                         [1.5 + n % 2, 1.0, 0.5], scores=[3.0, 2.0, 1.0]) for n in range(12)]
    return answerable, [Source("bench", "topiocqa", answerable, unanswerable, 0.5)]


def test_one_passage_gets_a_fit_of_its_own_that_the_reader_uses():
    """Read five deep, a confident answer has other passages to agree with; read one deep it
    has none. With `one_passage` the calibration fits the one-passage reads separately: the
    block reads both ways, and the reader picks the fit by how many passages it read."""
    from readers.extractive.calibrate import calibrated_decoding

    answerable, sources = _paris_bench()
    fusion = Fusion(0, 1, 0)
    plain, _, report = calibrated_decoding(sources, keep_fusion=True,
                                           existing=Decoding(fusion=fusion), no_answer_ks=(3,))
    assert plain.no_answer.one_passage is None and "one_passage" not in report
    both, _, report = calibrated_decoding(sources, keep_fusion=True,
                                          existing=Decoding(fusion=fusion), no_answer_ks=(3,),
                                          one_passage=True)
    assert both.no_answer.weights == plain.no_answer.weights  # the top-3 fit is unchanged
    one = both.no_answer.one_passage
    assert one is not None and report["no_answer"] == both.no_answer.to_dict()
    assert report["one_passage"]["groups"]["bench:answerable"]["answers"] == 12
    assert NoAnswer.from_dict(both.no_answer.to_dict(), "x") == both.no_answer

    model = tiny_reader()
    model.decoding = both
    reader = SpanReader.from_model(model)
    read = answerable[0]
    for count, fit in ((1, one), (3, both.no_answer)):
        answer = reader.answer_from(read.spans[:count], read.passages[:count],
                                    read.scores[:count])
        chosen = choose_span(read.spans[:count], "best_passage", fusion, read.scores[:count])
        features = confidence_features(chosen, read.spans[:count], read.passages[:count],
                                       False)
        assert answer.confidence == pytest.approx(fit.confidence(features))
    # a threshold the user sets holds for both fits
    strict = SpanReader.from_model(model, no_answer_threshold=1.0)
    assert strict.no_answer.threshold == strict.no_answer.one_passage.threshold == 1.0
    assert strict.answer_from(read.spans[:1], read.passages[:1], read.scores[:1]).no_answer


def test_a_kept_confidence_gets_a_one_passage_fit_of_its_own():
    """A reader whose confidence was fitted earlier (on other questions) keeps it exactly;
    `one_passage` with `keep_no_answer` fits only the one-passage confidence beside it, as a
    full calibration would have fitted it on these questions."""
    from readers.extractive.calibrate import calibrated_decoding

    _, sources = _paris_bench()
    fusion = Fusion(0, 1, 0)
    kept = NoAnswer({"span": 0.5, "agreement": 1.0}, -1.0, 0.3)
    fresh, _, _ = calibrated_decoding(sources, keep_fusion=True,
                                      existing=Decoding(fusion=fusion), no_answer_ks=(3,),
                                      one_passage=True)
    decoding, _, report = calibrated_decoding(
        sources, keep_fusion=True, existing=Decoding(fusion=fusion, no_answer=kept),
        no_answer_ks=(3,), keep_no_answer=True, one_passage=True)
    got = decoding.no_answer
    assert (got.weights, got.bias, got.threshold) == (kept.weights, kept.bias, kept.threshold)
    assert got.one_passage == fresh.no_answer.one_passage
    assert report["kept"] and report["no_answer"] == got.to_dict()
    assert report["one_passage"]["groups"]["bench:answerable"]["answers"] == 12
    # without --one-passage the kept confidence stays as it was, with no report
    plain, _, report = calibrated_decoding(
        sources, keep_fusion=True, existing=Decoding(fusion=fusion, no_answer=kept),
        no_answer_ks=(3,), keep_no_answer=True)
    assert plain.no_answer == kept and report is None
    with pytest.raises(ConfigError, match="needs a kept confidence"):
        calibrated_decoding(sources, keep_fusion=True, existing=Decoding(fusion=fusion),
                            no_answer_ks=(3,), keep_no_answer=True, one_passage=True)
