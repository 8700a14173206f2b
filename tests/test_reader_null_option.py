"""The extractive reader's "no passage answers" option: the loss on hand-made logits, batches and
example files with unanswerable questions, a short training where unanswerable questions learn
negative selection logits, the `answerable` confidence feature, and the builders on real
SQuAD v2.0 and on a tiny benchmark."""
from __future__ import annotations

import json
import math

import pytest
import torch

from convqa.errors import ConfigError, DataError
from convqa.types import Passage
from readers.extractive.data import (GoldSpan, ReaderExample, ReaderPassage, load_examples,
                                     save_examples)
from readers.extractive.loss import reader_loss
from readers.extractive.train import ReaderTrainConfig, make_reader_batch, train_reader
from reader_helpers import tiny_reader
from reader_helpers import single_thread  # noqa: F401 (autouse fixture: one thread)


def lse(*values: float) -> float:
    return math.log(sum(math.exp(v) for v in values))


# ---------------------------------------------------------------------------------------------
# The loss


def _no_gold(questions: int, passages: int, length: int = 3):
    return torch.zeros(questions, passages, length, dtype=torch.bool)


def test_null_column_by_hand():
    """Two questions, two passages each: the first answerable (positive 0), the second not."""
    start = torch.zeros(2, 2, 3)
    end = torch.zeros(2, 2, 3)
    text = torch.ones(2, 2, 3, dtype=torch.bool)
    gold_start, gold_end = _no_gold(2, 2), _no_gold(2, 2)
    gold_start[0, 0, 1] = gold_end[0, 0, 2] = True
    selection = torch.tensor([[2.0, -1.0], [0.5, -0.5]])
    answerable = torch.tensor([True, False])
    loss = reader_loss(start, end, selection, text, gold_start, gold_end, null_option=True,
                       answerable=answerable)
    answered = lse(2, -1, 0) - 2          # -log softmax([2, -1, 0])[0]
    none = lse(0.5, -0.5, 0) - 0          # -log softmax([0.5, -0.5, 0])[null]
    assert loss.selection.item() == pytest.approx((answered + none) / 2)
    # span loss only from the answerable question's positive (uniform logits over 3 tokens)
    assert loss.span_rows == 1
    assert loss.span.item() == pytest.approx(2 * math.log(3))
    # without the option the same answerable question has no null column
    plain = reader_loss(start[:1], end[:1], selection[:1], text[:1], gold_start[:1],
                        gold_end[:1])
    assert plain.selection.item() == pytest.approx(lse(2, -1) - 2)
    # with the option and only answerable questions, the column is still there
    only = reader_loss(start[:1], end[:1], selection[:1], text[:1], gold_start[:1],
                       gold_end[:1], null_option=True)
    assert only.selection.item() == pytest.approx(answered)


def test_gradient_pushes_unanswerable_logits_down_and_padding_stays_out():
    selection = torch.tensor([[1.0, 0.0, 30.0]], requires_grad=True)
    start = torch.zeros(1, 3, 3, requires_grad=True)
    end = torch.zeros(1, 3, 3, requires_grad=True)
    text = torch.ones(1, 3, 3, dtype=torch.bool)
    mask = torch.tensor([[True, True, False]])  # the third passage is padding
    loss = reader_loss(start, end, selection, text, _no_gold(1, 3), _no_gold(1, 3),
                       passage_mask=mask, null_option=True,
                       answerable=torch.tensor([False]))
    assert loss.selection.item() == pytest.approx(lse(1, 0, 0) - 0)
    assert loss.span is None and loss.span_rows == 0
    loss.total.backward()
    # d/dlogit = softmax: every real passage's logit goes down, the padding gets nothing
    denominator = math.exp(1) + 1 + 1
    assert selection.grad[0].tolist() == pytest.approx([math.exp(1) / denominator,
                                                        1 / denominator, 0.0])
    # an all-unanswerable batch keeps the span heads in the graph (zero gradients)
    assert start.grad is not None and not start.grad.any()
    assert end.grad is not None and not end.grad.any()


def test_an_unanswerable_question_may_have_only_padding():
    selection = torch.tensor([[5.0, 5.0], [1.0, 2.0]])
    start = end = torch.zeros(2, 2, 3)
    text = torch.ones(2, 2, 3, dtype=torch.bool)
    mask = torch.tensor([[False, False], [True, True]])
    loss = reader_loss(start, end, selection, text, _no_gold(2, 2), _no_gold(2, 2),
                       passage_mask=mask, null_option=True,
                       answerable=torch.tensor([False, False]))
    # the first question's softmax is the null option alone: loss 0
    assert loss.selection.item() == pytest.approx((0.0 + lse(1, 2, 0)) / 2)
    assert math.isfinite(loss.total.item())


def test_null_option_refusals():
    start = end = torch.zeros(1, 2, 3)
    text = torch.ones(1, 2, 3, dtype=torch.bool)
    selection = torch.zeros(1, 2)
    no = torch.tensor([False])
    with pytest.raises(ValueError, match="need the null option"):
        reader_loss(start, end, selection, text, _no_gold(1, 2), _no_gold(1, 2), answerable=no)
    with pytest.raises(ValueError, match="needs selection logits"):
        reader_loss(start, end, None, text, _no_gold(1, 2), _no_gold(1, 2), null_option=True)
    gold = _no_gold(1, 2)
    gold[0, 0, 1] = True
    with pytest.raises(ValueError, match="unanswerable question has gold span"):
        reader_loss(start, end, selection, text, gold, gold, null_option=True, answerable=no)
    # the positive of an answerable question must still be a real passage
    with pytest.raises(ValueError, match="positive passage is masked"):
        reader_loss(start, end, selection, text, _no_gold(1, 2), _no_gold(1, 2),
                    passage_mask=torch.tensor([[False, True]]), null_option=True)


# ---------------------------------------------------------------------------------------------
# Examples and batches

TEXTS = {
    "ada": ("Ada Lovelace", "Ada Lovelace wrote the first computer program in 1843."),
    "danube": ("Danube", "The Danube is 2850 kilometres long and flows into the Black Sea."),
    "france": ("Paris", "Paris is the capital and largest city of France."),
    "bach": ("Bach", "Bach wrote many fugues, for example in The Art of Fugue."),
    "granite": ("Granite", "Granite is an igneous rock made mostly of quartz and feldspar."),
    "jupiter": ("Jupiter", "Jupiter is the largest planet in the Solar System."),
}
P = {key: Passage(key, text, title) for key, (title, text) in TEXTS.items()}


def answerable(qid: str, question: str, key: str, answer: str, negatives: list[str]
               ) -> ReaderExample:
    text = P[key].text
    return ReaderExample(qid, question, [], [ReaderPassage(P[key], [GoldSpan(
        answer, text.index(answer))])], [P[n] for n in negatives], [answer])


def unanswerable(qid: str, question: str, negatives: list[str]) -> ReaderExample:
    return ReaderExample(qid, question, [], [], [P[n] for n in negatives], unanswerable=True)


TOY = [
    answerable("a1", "who wrote the first computer program?", "ada", "Ada Lovelace",
               ["bach", "granite"]),
    answerable("a2", "how long is the danube?", "danube", "2850 kilometres",
               ["jupiter", "france"]),
    answerable("a3", "what is the capital of france?", "france", "Paris", ["danube", "ada"]),
    answerable("a4", "which is the largest planet?", "jupiter", "Jupiter", ["granite", "bach"]),
    unanswerable("u1", "what is the capital of peru?", ["france", "danube"]),
    unanswerable("u2", "how long is the nile?", ["danube", "jupiter"]),
    unanswerable("u3", "who wrote the first novel?", ["ada", "bach"]),
    unanswerable("u4", "what is marble made of?", ["granite", "france"]),
]


def test_batch_with_an_unanswerable_example():
    reader = tiny_reader()
    lonely = unanswerable("u0", "anything?", ["granite"])  # one negative: the rest is padding
    items = [TOY[0], TOY[4], lonely]
    batch = make_reader_batch(items, [0, 1, 2], lambda i: items[i].question, reader, 3, 0, 0)
    assert batch.answerable.tolist() == [True, False, False]
    assert batch.passage_mask.tolist() == [[True, True, True], [True, True, True],
                                           [True, False, False]]
    assert (batch.padded, batch.no_span) == (2, 0)
    assert batch.gold_starts[0, 0].any() and not batch.gold_starts[1:].any()
    assert not batch.gold_ends[1:].any()
    # slot 0 of an unanswerable example is its first negative, read every time
    for epoch in range(4):
        again = make_reader_batch(items, [1], lambda i: items[i].question, reader, 2, 0, epoch)
        first = again.features.tensors["input_ids"][0]
        assert "peru" in reader.tokenizer.decode(first) and \
            "capital and largest city" in reader.tokenizer.decode(first)


def test_unanswerable_examples_round_trip_and_loader_errors(tmp_path):
    path = tmp_path / "ex.jsonl"
    assert save_examples(path, TOY) == len(TOY)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[4]["unanswerable"] is True and lines[4]["positives"] == []
    assert "unanswerable" not in lines[0]  # answerable lines are written as before
    loaded = load_examples(path)
    assert [e.to_dict() for e in loaded] == [e.to_dict() for e in TOY]
    assert loaded[4].unanswerable and not loaded[0].unanswerable
    base = {"id": "q", "question": "who?", "history": [],
            "negatives": [{"id": "n", "text": "Something else."}]}
    cases = [({**base, "positives": []}, "positives", "needs at least one positive"),
             ({**base, "positives": [], "unanswerable": False}, "positives",
              "needs at least one positive"),
             ({**base, "unanswerable": True, "positives": [
                 {"id": "p", "text": "Ada", "answers": [{"text": "Ada", "start": 0}]}]},
              "positives", "an unanswerable example has no positive"),
             ({**base, "unanswerable": True, "positives": [], "negatives": []}, "negatives",
              "needs at least one negative"),
             ({**base, "unanswerable": "yes", "positives": []}, "unanswerable",
              "expected bool, got str")]
    for record, field, message in cases:
        bad = tmp_path / "bad.jsonl"
        bad.write_text(json.dumps(record) + "\n")
        with pytest.raises(DataError) as error:
            load_examples(bad)
        text = str(error.value)
        assert text.startswith(f"{bad}:1: field '{field}': ") and message in text
        assert len(text.splitlines()) == 1


# ---------------------------------------------------------------------------------------------
# Training


def _selections(reader, example) -> list[float]:
    from readers.extractive.reader import SpanReader

    span_reader = SpanReader.from_model(reader, precision="fp32")
    passages = [p.passage for p in example.positives] + list(example.negatives)
    spans = span_reader.passage_spans(example.question, passages)
    return [s.selection for s in spans]


def test_training_teaches_unanswerable_questions_a_negative_logit(tmp_path):
    from readers.extractive.decoding import answerable_log_odds
    from readers.extractive.model import META_FILE, ExtractiveReader
    from readers.extractive.reader import SpanReader

    reader = tiny_reader(seed=3)
    settings = ReaderTrainConfig(batch_size=4, passages_per_question=2, epochs=40, lr=5e-3,
                                 warmup_ratio=0.0, progress=False, checkpoint_every=0)
    result = train_reader(reader, TOY, tmp_path, settings)
    assert result.steps == 80 and reader.config.null_option
    log = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert sum(r["unanswerable"] for r in log[:2]) == 4  # one epoch: each of the 4 once
    for example in TOY:
        logits = _selections(reader, example)
        if example.unanswerable:
            assert max(logits) < 0, (example.id, logits)
        else:
            assert logits[0] > 0, (example.id, logits)
    # the saved folder records the option and reads back the same
    meta = json.loads((tmp_path / "model" / META_FILE).read_text())
    assert meta["config"]["null_option"] is True
    loaded = ExtractiveReader.from_pretrained(tmp_path / "model")
    assert loaded.config.null_option and loaded.fingerprint() == reader.fingerprint()
    record = json.loads((tmp_path / "training.json").read_text())
    assert record["config"]["schedule"]["null_option"] is True
    # the answerable feature: the log-odds that some passage read answers
    span_reader = SpanReader.from_model(loaded, precision="fp32")
    for example in TOY:
        passages = [p.passage for p in example.positives] + list(example.negatives)
        odds = answerable_log_odds(span_reader.passage_spans(example.question, passages))
        assert (odds < 0) == example.unanswerable, (example.id, odds)


def test_a_reader_without_the_option_is_saved_and_hashed_as_before(tmp_path):
    from readers.extractive.model import META_FILE, ExtractiveReader

    reader = tiny_reader(seed=1)
    before = reader.fingerprint()
    reader.save_pretrained(tmp_path / "old")
    meta = json.loads((tmp_path / "old" / META_FILE).read_text())
    assert "null_option" not in meta["config"]
    loaded = ExtractiveReader.from_pretrained(tmp_path / "old")
    assert not loaded.config.null_option and loaded.fingerprint() == before
    # the same weights with the option are another model
    reader.config.null_option = True
    assert reader.fingerprint() != before
    # answerable-only training keeps a reader's option
    settings = ReaderTrainConfig(batch_size=2, passages_per_question=2, max_steps=1,
                                 progress=False, checkpoint_every=0)
    train_reader(reader, TOY[:4], tmp_path / "keep", settings)
    kept = json.loads((tmp_path / "keep" / "model" / META_FILE).read_text())
    assert kept["config"]["null_option"] is True
    # a folder that claims the option without a selection head is refused
    meta["config"]["null_option"] = True
    meta["selection_head"] = False
    from safetensors.torch import load_file, save_file

    heads = load_file(tmp_path / "old" / "reader_heads.safetensors")
    save_file({k: v for k, v in heads.items() if k.startswith("span.")},
              tmp_path / "old" / "reader_heads.safetensors")
    (tmp_path / "old" / META_FILE).write_text(json.dumps(meta))
    with pytest.raises(DataError, match="null_option needs a selection head"):
        ExtractiveReader.from_pretrained(tmp_path / "old")


# ---------------------------------------------------------------------------------------------
# The confidence feature


def test_answerable_feature_by_hand_and_only_with_the_option():
    from readers.extractive.decode import Choice, PassageSpan
    from readers.extractive.decoding import (BASE_FEATURES, answerable_log_odds,
                                             confidence_features)

    passages = [Passage("x", "It is Paris.", "T"), Passage("y", "It is Lyon.", "T"),
                Passage("z", "", "T")]
    spans = [PassageSpan(0, 0, 0, 0, 3.0, 1.0, 6, 11), PassageSpan(1, 1, 0, 0, 1.0, -2.0, 6, 10),
             None]
    choice = Choice(spans[0], 1.0, 0.0)
    assert answerable_log_odds(spans) == pytest.approx(lse(1.0, -2.0))
    assert answerable_log_odds([None]) == -1e4
    plain = confidence_features(choice, spans, passages)
    assert tuple(plain) == BASE_FEATURES
    with_option = confidence_features(choice, spans, passages, null_option=True)
    assert with_option["answerable"] == pytest.approx(lse(1.0, -2.0))
    # the null option's 0 counts against the answer only for a reader trained with it
    assert with_option["answer_odds"] == pytest.approx(1.0 - lse(-2.0, 0.0))
    assert plain["answer_odds"] == pytest.approx(3.0)
    assert {k: v for k, v in with_option.items() if k not in ("answerable", "answer_odds")} \
        == {k: v for k, v in plain.items() if k != "answer_odds"}


def test_answer_odds_weigh_the_passages_that_back_the_answer_against_the_rest():
    """Four passages each as sure they answer, each with another city, back the chosen one far
    less than one sure passage among unsure ones: the case of a collection without the answer."""
    from readers.extractive.decode import Choice, PassageSpan
    from readers.extractive.decoding import ODDS_LIMIT, answer_log_odds, confidence_features

    cities = ["Melbourne", "Sydney", "Adelaide", "Hobart"]
    passages = [Passage(f"p{i}", f"{city} is a capital.", "T") for i, city in enumerate(cities)]

    def spans(selections):
        return [PassageSpan(i, i, 0, 0, 9.0, sel, 0, len(city))
                for i, (city, sel) in enumerate(zip(cities, selections))]

    split = spans([3.0, 4.3, 3.5, 2.6])
    sure = spans([4.0, -3.6, -2.1, -3.9])
    for case, null_option in ((split, True), (split, False), (sure, True)):
        odds = confidence_features(Choice(case[0], 1.0, 0.0), case, passages,
                                   null_option)["answer_odds"]
        others = [s.selection for s in case[1:]] + ([0.0] if null_option else [])
        assert odds == pytest.approx(case[0].selection - lse(*others))
    low = confidence_features(Choice(split[0], 1.0, 0.0), split, passages, True)["answer_odds"]
    high = confidence_features(Choice(sure[0], 1.0, 0.0), sure, passages, True)["answer_odds"]
    assert low < -1.5 and high > 3.5

    # two passages with the same answer (as normalised) add up; a lone passage is sure without
    # the null option; a reader without a selection head has no such evidence
    twice = [PassageSpan(0, 0, 0, 0, 9.0, 1.0, 0, 9), PassageSpan(1, 1, 0, 0, 9.0, 1.0, 0, 9)]
    same = [Passage("a", "Melbourne, Victoria", "T"), Passage("b", "melbourne.", "T")]
    assert confidence_features(Choice(twice[0], 1.0, 0.0), twice, same, True)["answer_odds"] \
        == pytest.approx(lse(1.0, 1.0))
    assert answer_log_odds([True], twice[:1]) == ODDS_LIMIT
    assert answer_log_odds([True, False], [PassageSpan(0, 0, 0, 0, 9.0, None, 0, 9), None],
                           True) == 0.0
    assert answer_log_odds([True, False], [PassageSpan(0, 0, 0, 0, 9.0, -30.0, 0, 9),
                                           PassageSpan(1, 1, 0, 0, 9.0, 0.0, 0, 9)]) == -ODDS_LIMIT


def test_calibration_weighs_the_feature_and_the_reader_uses_it(tmp_path):
    from readers.extractive.calibrate import calibrate_no_answer
    from readers.extractive.calibration_data import Source
    from readers.extractive.decode import Fusion, PassageSpan
    from readers.extractive.decoding import Decoding, NoAnswer
    from readers.extractive.fusion_tuning import ReadTurn
    from readers.extractive.reader import SpanReader

    def read(qid, answers, selection, span_score=4.0):
        """One passage "It is Paris." whose span has the same score whether or not the
        question is answerable: only the selection logit tells them apart."""
        passage = Passage(f"{qid}#0", "It is Paris.", "T")
        return ReadTurn(qid, qid, answers, [passage], [0.0],
                        [PassageSpan(0, 0, 0, 0, span_score, selection, 6, 11)])

    has = [read(f"a{n}", ["Paris"], 2.0 + 0.1 * n) for n in range(10)]
    none = [read(f"u{n}", [], -2.0 - 0.1 * n) for n in range(10)]
    sources = [Source("squad", "squad", has, none, 0.5)]
    plain = calibrate_no_answer(sources, Fusion(1, 0, 0), ks=(1,))
    assert "answerable" not in plain["no_answer"]["weights"]
    result = calibrate_no_answer(sources, Fusion(1, 0, 0), ks=(1,), null_option=True)
    weights = result["no_answer"]["weights"]
    assert set(weights) == {"selection", "span", "evidence", "words", "agreement", "several",
                            "answer_odds", "answerable"}
    assert result["f1"] == 100.0
    # a reader folder whose confidence weighs the feature: fine with the option, refused
    # (one line) without it
    decoding = Decoding(no_answer=NoAnswer.from_dict(result["no_answer"], "test"))
    model = tiny_reader(seed=2)
    model.decoding = decoding
    with pytest.raises(ConfigError, match="weighs 'answerable'"):
        SpanReader.from_model(model)
    model.config.null_option = True
    reader = SpanReader.from_model(model, precision="fp32")
    answer = reader.read("where?", [], [Passage("p", "It is Paris.", "T")])
    assert answer is not None and answer.confidence is not None


# ---------------------------------------------------------------------------------------------
# Builders on real and tiny data


def test_squad_v2_unanswerable_examples():
    from conftest import shared_file
    from convqa.loaders.squad import load_squad
    from readers.extractive.build_examples import squad_examples
    from readers.extractive.data import BuildReport, heldout_keys

    path = shared_file("squad/dev-v2.0.json")
    raw = load_squad(path)
    heldout = heldout_keys({e.title for e in raw}, 0.1, 0)
    impossible = [e for e in raw if e.is_impossible]
    train_impossible = [e for e in impossible if e.title not in heldout]
    report = BuildReport()
    built = squad_examples(path, negatives=2, report=report, unanswerable=True)
    plain = squad_examples(path, negatives=2)
    counts = report.to_dict()["squad:dev-v2.0"]
    none = [e for e in built if e.unanswerable]
    assert len(none) == counts["train_unanswerable"] == len(train_impossible) > 4000
    assert counts["heldout_unanswerable"] == 0
    assert counts["skipped_unanswerable"] == len(impossible) - len(train_impossible) > 0
    assert counts["train_examples"] == len([e for e in plain if e.split == "train"]) + len(none)
    # the answerable examples are those built without the flag, negatives included
    answered = [e for e in built if not e.unanswerable]
    assert [(e.id, [n.id for n in e.negatives]) for e in answered] == \
        [(e.id, [n.id for n in e.negatives]) for e in plain]
    by_id = {f"dev-v2.0/{e.id}": e for e in raw}
    for example in none:
        original = by_id[example.id]
        assert example.split == "train" and example.positives == [] and example.answers == []
        own, *others = example.negatives
        assert own.text == original.context and own.title == original.title
        assert len(others) == 2 and all(n.title != original.title for n in others)
        assert all(n.title not in heldout for n in others)
    # a seeded cap applies to the unanswerable examples apart
    capped = squad_examples(path, negatives=1, max_examples=30, max_heldout=5,
                            unanswerable=True)
    assert sum(e.unanswerable for e in capped) == 30
    assert sum(not e.unanswerable and e.split == "train" for e in capped) == 30
    # they round-trip through the example file format
    assert load_examples_round_trip(none[:3])


def load_examples_round_trip(examples) -> bool:
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "e.jsonl"
        save_examples(path, examples)
        return [e.to_dict() for e in load_examples(path)] == [e.to_dict() for e in examples]


def test_benchmark_unanswerable_turns(tmp_path):
    from readers.extractive.build_examples import benchmark_examples
    from readers.extractive.data import BuildReport
    from training_helpers import TURNS, make_benchmark

    turns = TURNS + [
        ("c3", 4, "who designed the eiffel tower?", "UNANSWERABLE", "E", [], "train",
         "no-switch"),
        ("c4", 3, "how many moons does jupiter have?", "UNANSWERABLE", "J", [], "dev",
         "no-switch")]
    bench = make_benchmark(tmp_path / "bench", turns)
    report = BuildReport()
    built = benchmark_examples(bench, negatives=2, report=report, unanswerable=True)
    plain = benchmark_examples(bench, negatives=2)
    counts = report.to_dict()["topiocqa-wiki:bench"]
    none = {e.id: e for e in built if e.unanswerable}
    assert counts["heldout_skipped_unanswerable"] == 1   # the dev turn stays out
    assert counts["train_unanswerable"] == len(none)
    assert "bench/c3_4" in none and "bench/c4_3" not in none
    eiffel = none["bench/c3_4"]
    assert eiffel.split == "train" and eiffel.positives == [] and eiffel.answers == []
    assert [q for q, _ in eiffel.history] == ["how long is the danube?",
                                              "what is the eiffel tower made of?",
                                              "what is a fugue?"]
    assert 1 <= len(eiffel.negatives) <= 2
    assert eiffel.negatives[0].id.startswith("E#")  # BM25's best passage: its own article
    # "tell me something" (c2_1, UNANSWERABLE, no topic): no word BM25 knows, no passage to
    # read it against, left out and counted
    assert "bench/c2_1" not in none and counts["train_unanswerable_without_passages"] == 1
    assert counts["train_examples"] == 7 + len(none)
    assert [e.to_dict() for e in built if not e.unanswerable] == [e.to_dict() for e in plain]


def test_continuing_a_reader_folder_with_unanswerable_questions(tmp_path, capsys):
    """`convqa train reader --init-model READER --unanswerable`: the reader's weights go on
    training with the option switched on, and its new folder records it."""
    from conftest import shared_file
    from convqa.front.cli.main import main
    from readers.extractive.model import META_FILE, ExtractiveReader

    squad = shared_file("squad/dev-v2.0.json")
    start = tiny_reader(seed=5)
    start.save_pretrained(tmp_path / "start")
    before = start.fingerprint()

    def arguments(out, *extra):
        return ["train", "reader", "--squad", str(squad), "--out", str(out), "--init-model",
                str(tmp_path / "start"), "--max-steps", "2", "--batch-size", "4",
                "--passages-per-question", "2", "--negatives", "1", "--max-examples", "4",
                "--max-heldout", "2", "--eval-examples", "2", "--max-length", "128",
                "--history-max-tokens", "32", "--checkpoint-every", "1", "--quiet", *extra]

    out = tmp_path / "run"
    assert main(arguments(out, "--unanswerable")) == 0
    printed = capsys.readouterr().out
    assert "data: 8 training and 2 held-out examples" in printed
    data = json.loads((out / "data" / "data.json").read_text())
    assert data["params"]["unanswerable"] is True
    assert data["counts"]["squad:dev-v2.0"]["train_unanswerable"] == 4
    trained = ExtractiveReader.from_pretrained(out / "model")
    assert trained.config.null_option and trained.fingerprint() != before
    assert json.loads((out / "model" / META_FILE).read_text())["config"]["null_option"] is True
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert sum(r.get("unanswerable", 0) for r in log if "loss" in r) > 0
    # the held-out evaluation reads only answerable questions
    scores = json.loads((out / "eval.json").read_text())["sources"]["squad:dev-v2.0"]
    assert scores["gold_passage"]["count"] == 2
    # LoRA over a reader folder would save the adapter without the reader's own training
    assert main(arguments(tmp_path / "lora", "--unanswerable", "--lora", "4")) == 2
    err = capsys.readouterr().err  # may start with a progress bar of the run above
    assert "LoRA (--lora) cannot start from a reader folder" in err.strip().splitlines()[-1]
    assert "Traceback" not in err
    assert not (tmp_path / "lora" / "data").exists()  # refused before building any data


def test_other_negative_sources_take_unanswerable_examples():
    """Dense negatives keep an unanswerable turn's best passages (no gold article, no answer to
    avoid); reranker examples leave it out."""
    from types import SimpleNamespace

    from readers.extractive.dense_negatives import filter_hits
    from retrievers.rerank.data import from_reader_examples

    turn = ReaderExample("bench/c9_1", "how long is the nile?", [], [],
                         [P["danube"]], source="topiocqa-wiki:bench", unanswerable=True)
    store = SimpleNamespace(get=lambda pid: P[pid])
    hits = [SimpleNamespace(passage_id=key, score=1.0 - i / 10)
            for i, key in enumerate(("danube", "france", "jupiter"))]
    kept, dropped = filter_hits(turn, hits, store, keep=2)
    assert [k["id"] for k in kept] == ["danube", "france"]
    assert dropped == {"gold_article": 0, "holds_answer": 0}
    converted = from_reader_examples([TOY[0], turn, TOY[5]])
    assert [e.id for e in converted] == ["a1"]
