"""Stopping a read after its first passage when that passage's answer is sure
(`stop_when_sure`: readers/extractive/reader.py, decoding.py), its choice on training turns
(readers/extractive/stop_when_sure.py) and `convqa train reader-decoding --stop-when-sure`."""
from __future__ import annotations

import json

import pytest

import readers.extractive.reader  # noqa: F401 - registers "extractive"
from conftest import shared_file
from convqa.errors import ConfigError, DataError
from convqa.registry import READERS
from convqa.types import Passage
from readers.extractive.calibration_data import Source
from readers.extractive.decode import Fusion, PassageSpan
from readers.extractive.decoding import Decoding, NoAnswer
from readers.extractive.fusion_tuning import ReadTurn
from readers.extractive.model import META_FILE, ExtractiveReader
from readers.extractive.stop_when_sure import candidates, choose_stop_when_sure
from reader_helpers import FOUR_PASSAGES, REVERSE_SCORES, TOWER_QUESTION, tiny_reader
from reader_helpers import single_thread  # noqa: F401 (autouse fixture: one thread)

PASSAGES, QUESTION = FOUR_PASSAGES, TOWER_QUESTION
# The retriever ranks the passages in reverse and the fusion follows it: read whole, the answer
# comes from the last passage; stopped after the first, from the first.
SCORES = REVERSE_SCORES
FOLLOW_RETRIEVER = Fusion(0.0, 0.0, 1000.0)


def _decoding(sure: float, threshold: float = 0.5, stop: float | None = None,
              after: float | None = None) -> Decoding:
    """A block whose every answer is confident (several passages: 0.5 >= threshold 0) and
    whose one-passage confidence is the constant `sure` (a logistic of nothing but its bias)."""
    import math

    bias = math.log(sure / (1 - sure))
    one = NoAnswer({"span": 0.0}, bias, threshold)
    return Decoding(fusion=FOLLOW_RETRIEVER, no_answer=NoAnswer({"span": 0.0}, 0.0, 0.0, one),
                    stop_when_sure=stop,
                    after_reranker=Decoding(stop_when_sure=after) if after is not None
                    else None)


def _reader(tmp_path, decoding: Decoding, **options):
    folder = tmp_path / f"reader-{abs(hash(json.dumps(decoding.to_dict(), sort_keys=True)))}"
    if not folder.exists():
        model = tiny_reader(seed=4)
        model.decoding = decoding
        model.save_pretrained(folder)
    return READERS.build({"name": "extractive", "model": str(folder), "precision": "fp32",
                          **options})


def _spy(reader) -> list[int]:
    """The number of passages of every `passage_spans` call the reader makes from now on."""
    calls: list[int] = []
    original = reader.passage_spans

    def counted(query, passages):
        calls.append(len(passages))
        return original(query, passages)

    reader.passage_spans = counted
    return calls


def _read(reader, **options):
    return reader.read(QUESTION, [], PASSAGES, scores=SCORES, **options)


def test_a_sure_first_passage_is_all_that_is_read(tmp_path):
    whole = _read(_reader(tmp_path, _decoding(0.9)))
    assert whole.passage_id == "c#0"  # the fusion answers from the retriever's best
    reader = _reader(tmp_path, _decoding(0.9, stop=0.8))
    calls = _spy(reader)
    stopped = _read(reader)
    assert calls == [1]
    assert stopped.passage_id == "a#0" and stopped.confidence == pytest.approx(0.9)
    alone = reader.read(QUESTION, [], PASSAGES[:1], scores=SCORES[:1])
    assert (stopped.text, stopped.score, stopped.start) == (alone.text, alone.score, alone.start)


def test_an_unsure_first_passage_reads_on_and_answers_as_without_stopping(tmp_path):
    plain = _read(_reader(tmp_path, _decoding(0.7)))
    reader = _reader(tmp_path, _decoding(0.7, stop=0.8))
    calls = _spy(reader)
    read_on = _read(reader)
    assert calls == [1, 3]  # the first passage is not read twice
    assert (read_on.passage_id, read_on.text, read_on.score, read_on.confidence) == \
        (plain.passage_id, plain.text, plain.score, plain.confidence)
    assert _read(reader, always_answer=True).passage_id == "c#0"


def test_auto_precision_is_not_decided_on_a_first_passage_read_alone(tmp_path, monkeypatch):
    """A first passage read alone is one window, whose agreement can only be 0 or 1: `auto`
    reads it in fp32 and decides on the first read with PROBE_WINDOWS windows."""
    from readers.extractive import reader as module

    monkeypatch.setattr(module, "PROBE_WINDOWS", 3)
    reader = _reader(tmp_path, _decoding(0.7, stop=0.8), precision="auto")
    calls = _spy(reader)
    reader.read(QUESTION, [], PASSAGES[:1], scores=SCORES[:1])
    assert reader.precision is None and reader.precision_choice is None
    _read(reader)  # unsure: the first passage alone (still undecided), then the other 3
    assert calls == [1, 1, 3]
    assert reader.precision in ("fp32", "bf16", "int8")
    assert reader.precision_choice.agreement["fp32"] == 1.0


def test_a_read_that_may_abstain_stops_only_above_the_no_answer_threshold(tmp_path):
    """Sure enough to stop (0.6 >= 0.55) but under the one-passage no-answer threshold (0.65):
    a user's read goes on rather than stop on "no answer"; evaluation, always answering,
    stops."""
    reader = _reader(tmp_path, _decoding(0.6, threshold=0.65, stop=0.55))
    assert _read(reader).passage_id == "c#0" and not _read(reader).no_answer
    assert _read(reader, always_answer=True).passage_id == "a#0"
    assert _read(_reader(tmp_path, _decoding(0.6, threshold=0.65, stop=0.55),
                         always_answer=True)).passage_id == "a#0"


def test_one_passage_and_no_calibration_read_as_before(tmp_path):
    reader = _reader(tmp_path, _decoding(0.9, stop=0.8))
    calls = _spy(reader)
    reader.read(QUESTION, [], PASSAGES[:1])
    assert calls == [1]
    plain = _reader(tmp_path, Decoding(fusion=FOLLOW_RETRIEVER))
    assert plain.stop_when_sure is None and _read(plain).passage_id == "c#0"


def test_options_override_the_folder(tmp_path):
    folder_value = _reader(tmp_path, _decoding(0.9, stop=0.8))
    assert folder_value.stop_when_sure == 0.8
    off = _reader(tmp_path, _decoding(0.9, stop=0.8), stop_when_sure=False)
    assert off.stop_when_sure is None and _read(off).passage_id == "c#0"
    assert off.fingerprint() != folder_value.fingerprint()
    higher = _reader(tmp_path, _decoding(0.9, stop=0.8), stop_when_sure=0.95)
    assert higher.stop_when_sure == 0.95 and _read(higher).passage_id == "c#0"
    one = _reader(tmp_path, _decoding(0.9, stop=0.8), stop_when_sure=1)  # 1 is not `true`
    assert one.stop_when_sure == 1.0
    assert _reader(tmp_path, _decoding(0.9, stop=0.8), stop_when_sure=True).stop_when_sure \
        == 0.8
    # a number turns it on for a folder that records none, if it has a one-passage fit
    chosen = _reader(tmp_path, _decoding(0.9), stop_when_sure=0.5)
    assert _read(chosen).passage_id == "a#0"


def test_options_that_cannot_work_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="stop_when_sure: true needs a reader folder"):
        _reader(tmp_path, _decoding(0.9), stop_when_sure=True)
    no_fit = Decoding(no_answer=NoAnswer({"span": 1.0}, 0.0, 0.3))
    with pytest.raises(ConfigError, match="one-passage confidence"):
        _reader(tmp_path, no_fit, stop_when_sure=0.5)
    with pytest.raises(ConfigError, match="one-passage confidence"):
        _reader(tmp_path, Decoding(), stop_when_sure=0.5)
    for bad in (1.5, -0.1):
        with pytest.raises(ConfigError, match="stop_when_sure must be true, false or a "
                                              "probability"):
            _reader(tmp_path, _decoding(0.9), stop_when_sure=bad)
    with pytest.raises(ConfigError, match="option 'stop_when_sure'"):
        _reader(tmp_path, _decoding(0.9), stop_when_sure="often")


def test_passages_a_reranker_ordered_use_the_after_reranker_value(tmp_path):
    reader = _reader(tmp_path, _decoding(0.9, after=0.8))
    assert (reader.stop_when_sure, reader.reranked_stop_when_sure) == (None, 0.8)
    assert _read(reader).passage_id == "c#0"
    calls = _spy(reader)
    assert _read(reader, reranked=True).passage_id == "a#0" and calls == [1]
    # an outer value serves reranked passages too unless the block has its own
    both = _reader(tmp_path, _decoding(0.9, stop=0.95, after=0.8))
    assert (both.stop_when_sure, both.reranked_stop_when_sure) == (0.95, 0.8)
    outer = _reader(tmp_path, _decoding(0.9, stop=0.8))
    assert outer.reranked_stop_when_sure == 0.8


def test_the_block_round_trips_and_bad_values_name_the_field(tmp_path):
    decoding = _decoding(0.9, stop=0.45, after=0.6)
    folder = tmp_path / "r"
    model = tiny_reader()
    model.decoding = decoding
    model.save_pretrained(folder)
    assert ExtractiveReader.from_pretrained(folder).decoding == decoding
    meta = json.loads((folder / META_FILE).read_text())
    assert meta["decoding"]["stop_when_sure"] == 0.45
    assert meta["decoding"]["after_reranker"] == {"stop_when_sure": 0.6}
    for path, field in ((("stop_when_sure",), "decoding.stop_when_sure"),
                        (("after_reranker", "stop_when_sure"),
                         "decoding.after_reranker.stop_when_sure")):
        for bad in (1.5, "high", True):
            broken = json.loads(json.dumps(meta))
            block = broken["decoding"]
            for key in path[:-1]:
                block = block[key]
            block[path[-1]] = bad
            (folder / META_FILE).write_text(json.dumps(broken))
            with pytest.raises(DataError) as error:
                ExtractiveReader.from_pretrained(folder)
            assert f"field '{field}'" in str(error.value)
            assert str(folder / META_FILE) in str(error.value)


# ---------------------------------------------------------------------------------------------
# Choosing the value on read turns


def _turn(qid: str, answers: list[str], texts: list[str], span_scores: list[float]) -> ReadTurn:
    passages = [Passage(f"{qid}#{i}", f"It is {text}.", "T") for i, text in enumerate(texts)]
    spans = [PassageSpan(i, 0, 0, 0, score, 0.0, 6, 6 + len(texts[i]))
             for i, score in enumerate(span_scores)]
    return ReadTurn(qid, qid, answers, passages, [3.0, 2.0, 1.0][:len(texts)], spans)


# confidence = sigmoid(span score of the answer): first passages with span score 3 are right
# (0.953), those with 0.5 wrong (0.622) and put right by the second passage (span score 2)
CHOICE = Decoding(fusion=Fusion(0.0, 1.0, 0.0), no_answer=NoAnswer(
    {"span": 1.0}, 0.0, 0.1, NoAnswer({"span": 1.0}, 0.0, 0.3)))
SURE = [_turn(f"s{n}", ["Paris"], ["Paris", "Paris", "Lyon"], [3.0, 2.0, 0.1])
        for n in range(10)]
UNSURE = [_turn(f"u{n}", ["Rome"], ["Oslo", "Rome", "Lyon"], [0.5, 2.0, 0.1])
          for n in range(10)]


def test_the_lowest_value_that_costs_nothing_is_chosen():
    source = Source("bench", "topiocqa", SURE + UNSURE, [], 0.0)
    report = choose_stop_when_sure([source], CHOICE, ks=(1, 3))
    assert report["ks"] == [3]
    assert report["read_all"]["bench"]["3"]["f1_always"] == 100.0
    assert report["chosen"] == 0.625  # the first of the grid above 0.622: the unsure read on
    chosen = next(r for r in report["candidates"] if r["stop_when_sure"] == 0.625)
    assert chosen["scores"]["bench"]["3"] == {"f1_always": 100.0, "f1_abstaining": 100.0,
                                              "stops": 50.0}
    lower = next(r for r in report["candidates"] if r["stop_when_sure"] == 0.6)
    assert not lower["eligible"] and lower["scores"]["bench"]["3"]["f1_always"] == 50.0
    assert min(r["stop_when_sure"] for r in report["candidates"]) == 0.3


def test_a_value_that_stops_nothing_is_not_chosen():
    wrong_but_sure = [_turn(f"w{n}", ["Rome"], ["Oslo", "Rome", "Lyon"], [3.0, 4.0, 0.1])
                      for n in range(10)]
    report = choose_stop_when_sure([Source("bench", "topiocqa", wrong_but_sure, [], 0.0)],
                                   CHOICE, ks=(3,))
    assert report["chosen"] is None
    assert all(not r["eligible"] for r in report["candidates"])


def test_unanswerable_turns_weigh_at_their_share():
    """A sure first passage on unanswerable turns answers where the whole read says "no
    answer": stopping there costs the abstaining F1, at the turns' share."""
    decoding = Decoding(fusion=Fusion(0.0, 1.0, 0.0), no_answer=NoAnswer(
        {"span": 1.0, "agreement": 12.0}, -9.0, 0.5, NoAnswer({"span": 1.0}, 0.0, 0.3)))
    # read whole: sigmoid(-9 + 3 + 12 * agreement), 0.88 where two of three passages agree
    # (answered), 0.12 where none does (no answer)
    unanswerable = [_turn(f"n{n}", ["UNANSWERABLE"], ["Oslo", "Rome", "Lyon"],
                          [3.0, -5.0, -5.0]) for n in range(10)]
    few = Source("bench", "topiocqa", SURE, unanswerable, 0.004)  # costs 0.4 F1: tolerated
    many = Source("bench", "topiocqa", SURE, unanswerable, 0.5)
    assert choose_stop_when_sure([few], decoding, ks=(3,))["chosen"] == 0.3
    assert choose_stop_when_sure([many], decoding, ks=(3,))["chosen"] is None


def test_candidates_start_at_the_one_passage_threshold():
    assert candidates(0.405)[:2] == [0.425, 0.45] and candidates(0.405)[-1] == 1.0
    assert candidates(0.4)[0] == 0.4
    with pytest.raises(ConfigError, match="one-passage confidence"):
        choose_stop_when_sure([Source("b", "topiocqa", SURE, [], 0.0)],
                              Decoding(no_answer=NoAnswer({"span": 1.0}, 0.0, 0.1)), ks=(3,))
    with pytest.raises(ConfigError, match="a k above 1"):
        choose_stop_when_sure([Source("b", "topiocqa", SURE, [], 0.0)], CHOICE, ks=(1,))


# ---------------------------------------------------------------------------------------------
# The command line, and the shipped reader on real questions


def test_command_line_chooses_and_writes_the_value(tmp_path, capsys):
    from training_helpers import make_benchmark_with_bm25

    from convqa.front.cli.main import main as convqa

    root = tmp_path / "setup"
    root.mkdir()
    make_benchmark_with_bm25(root)
    reader_dir = tmp_path / "reader"
    model = tiny_reader(seed=1)
    model.decoding = Decoding(no_answer=NoAnswer({"span": 0.3}, -0.2, 0.2,
                                                 NoAnswer({"span": 0.5}, 0.1, 0.3)))
    model.save_pretrained(reader_dir)
    args = ["train", "reader-decoding", "--reader", str(reader_dir), "--benchmark",
            str(root / "bench"), "--retriever",
            json.dumps({"name": "bm25", "index": str(root / "bm25")}),
            "--history", "current_first", "--k", "3", "--ks", "1", "3", "--no-answer-ks", "3",
            "--cache", str(root / "reads"), "--quiet", "--keep-fusion", "--keep-no-answer"]
    assert convqa(args) == 2
    assert "leaves nothing to calibrate" in capsys.readouterr().err
    report = tmp_path / "report.json"
    assert convqa(args + ["--stop-when-sure", "--stop-tolerance", "100", "--write",
                          "--report", str(report)]) == 0
    result = json.loads(report.read_text())
    stopping = result["stop_when_sure"]
    # any value may cost up to 100 F1: the lowest candidate that stops a read is chosen
    first = next(r for r in stopping["candidates"]
                 if any(c["stops"] > 0 for c in r["scores"]["bench"].values()))
    assert stopping["chosen"] == first["stop_when_sure"] and stopping["chosen"] >= 0.3
    meta = json.loads((reader_dir / META_FILE).read_text())
    assert meta["decoding"]["stop_when_sure"] == stopping["chosen"]
    assert meta["decoding"]["no_answer"] == model.decoding.no_answer.to_dict()  # kept
    assert READERS.build({"name": "extractive", "model": str(reader_dir)}).stop_when_sure \
        == stopping["chosen"]
    assert f"stop_when_sure {stopping['chosen']}" in capsys.readouterr().out
    # calibrating the confidence again drops the value chosen for the old one
    assert convqa(args[:-2] + ["--write"]) == 0
    assert "stop_when_sure" not in json.loads((reader_dir / META_FILE).read_text())["decoding"]


def test_the_shipped_reader_stops_exactly_where_its_first_passage_is_sure():
    """Real SQuAD v2.0 questions, each read against its own paragraph then two of other
    articles: with stopping, every answer is the first paragraph's alone when its one-passage
    confidence reaches the value, and the whole read's otherwise."""
    from convqa.loaders.squad import read_squad

    examples = [e for e in read_squad(shared_file("squad/dev-v2.0.json"), strict=False).examples
                if not e.is_impossible][:360:60]
    paragraphs = {e.title: Passage(f"{e.title}#0", e.context, e.title) for e in examples}
    from readers.extractive.reader import ExtractiveReaderOptions, SpanReader

    # one precision for both: `auto` probes each reader on its own, and on a loaded machine
    # the two probes can pick differently, which moves confidences in their last digits
    plain = READERS.build({"name": "extractive", "model": "convqa-reader",
                           "stop_when_sure": False, "precision": "fp32"})
    value = 0.5
    stopping = SpanReader(plain.model, ExtractiveReaderOptions(
        model="convqa-reader", stop_when_sure=value, precision="fp32"))
    stops = 0
    for example in examples:
        others = [p for title, p in paragraphs.items() if title != example.title][:2]
        passages = [Passage("gold", example.context, example.title), *others]
        whole = plain.read(example.question, [], passages, always_answer=True)
        alone = plain.read(example.question, [], passages[:1], always_answer=True)
        got = stopping.read(example.question, [], passages, always_answer=True)
        expected = alone if alone.confidence >= value else whole
        stops += expected is alone
        assert (got.text, got.passage_id, got.confidence) == \
            (expected.text, expected.passage_id, pytest.approx(expected.confidence))
    assert 0 < stops < len(examples)
