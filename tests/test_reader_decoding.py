"""The decoding defaults a reader folder carries (readers/extractive/decoding.py): read from
convqa_reader.json, applied by the registry component when the spec gives none, overridden by
explicit options; and the "no answer in the collection" result below a calibrated confidence."""
from __future__ import annotations

import json

import pytest

import readers.extractive.reader  # noqa: F401 - registers "extractive"
from convqa.errors import ConfigError, DataError
from convqa.pipeline import read_passages
from convqa.registry import READERS
from convqa.types import Answer, Hit, RerankedHit
from readers.extractive.decode import Fusion
from readers.extractive.decoding import Decoding, NoAnswer
from readers.extractive.model import META_FILE, ExtractiveReader, write_decoding
from reader_helpers import FOUR_PASSAGES, REVERSE_SCORES, TOWER_QUESTION, tiny_reader
from reader_helpers import single_thread  # noqa: F401 (autouse fixture: one thread)

PASSAGES, QUESTION = FOUR_PASSAGES, TOWER_QUESTION
SCORES = REVERSE_SCORES
HITS = [Hit(p.id, s, i + 1) for i, (p, s) in enumerate(zip(PASSAGES, SCORES))]


def _save(folder, decoding: Decoding | None = None, seed: int = 4):
    model = tiny_reader(seed=seed)
    model.decoding = decoding
    model.save_pretrained(folder)
    return folder


def _read(spec: dict, **options):
    reader = READERS.build({"name": "extractive", "precision": "fp32", **spec})
    return reader, reader.read(QUESTION, [], PASSAGES, scores=SCORES, **options)


def test_folder_without_block_reads_as_before(tmp_path):
    folder = _save(tmp_path / "old")
    assert "decoding" not in json.loads((folder / META_FILE).read_text())
    assert ExtractiveReader.from_pretrained(folder).decoding is None
    reader, plain = _read({"model": str(folder)})
    assert reader.fusion is None and reader.strategy == "best_passage"
    assert reader.no_answer is None
    _, explicit = _read({"model": str(folder), "strategy": "best_passage"})
    assert (plain.passage_id, plain.text, plain.score) == (explicit.passage_id, explicit.text,
                                                           explicit.score)
    assert not plain.no_answer and plain.confidence is None


def test_fusion_from_the_folder_is_applied_without_options(tmp_path):
    """A spec naming only the model reads exactly as one giving the folder's weights."""
    weights = {"selection": 0.0, "span": 0.1, "retriever": 1000.0}
    folder = _save(tmp_path / "fused", Decoding(fusion=Fusion.from_value(weights),
                                                max_answer_length=4))
    meta = json.loads((folder / META_FILE).read_text())
    assert meta["decoding"] == {"fusion": weights, "max_answer_length": 4}
    reader, answer = _read({"model": str(folder)})
    assert reader.fusion == Fusion(0.0, 0.1, 1000.0) and reader.config.max_answer_length == 4
    _, explicit = _read({"model": str(folder), "fusion": weights})
    assert answer.passage_id == "c#0"  # the retriever's best, as the weight makes it
    assert (answer.passage_id, answer.text, answer.score) == (explicit.passage_id,
                                                              explicit.text, explicit.score)
    assert len(reader.model.tokenizer.tokenize(answer.text)) <= 4
    # an explicit strategy decides alone; explicit weights replace the folder's
    other, by_strategy = _read({"model": str(folder), "strategy": "best_passage"})
    assert other.fusion is None
    _, own = _read({"model": str(_save(tmp_path / "plain"))})
    assert (by_strategy.passage_id, by_strategy.score) == (own.passage_id, own.score)
    first = {"selection": 0.0, "span": 0.0, "retriever": 1000.0}
    _, flipped = _read({"model": str(folder), "fusion": first})
    assert flipped.passage_id == "c#0"
    longer, _ = _read({"model": str(folder), "max_answer_length": 9})
    assert longer.config.max_answer_length == 9
    assert reader.fingerprint() != other.fingerprint()


def test_pipeline_and_eval_spec_get_the_folder_fusion(tmp_path):
    """The pipeline passes the retriever's scores; the folder's fusion then decides."""
    folder = _save(tmp_path / "fused", Decoding(fusion=Fusion(0.0, 0.0, 1000.0)))
    reader = READERS.build({"name": "extractive", "model": str(folder), "precision": "fp32"})
    for best in range(len(PASSAGES)):
        scores = [1.0] * len(PASSAGES)
        scores[best] = 9.0
        hits = [Hit(p.id, s, i + 1) for i, (p, s) in enumerate(zip(PASSAGES, scores))]
        assert read_passages(reader, QUESTION, [], PASSAGES, hits).passage_id == PASSAGES[best].id


def test_saving_a_loaded_reader_keeps_its_block(tmp_path):
    decoding = Decoding(fusion=Fusion(1.0, 0.2, 0.5), strategy="global",
                        no_answer=NoAnswer({"span": 0.5, "evidence": 1.0}, -1.0, 0.25))
    first = _save(tmp_path / "a", decoding)
    loaded = ExtractiveReader.from_pretrained(first)
    assert loaded.decoding == decoding
    loaded.save_pretrained(tmp_path / "b")
    assert ExtractiveReader.from_pretrained(tmp_path / "b").decoding == decoding


def test_write_decoding_replaces_only_the_block(tmp_path):
    folder = _save(tmp_path / "r")
    before = json.loads((folder / META_FILE).read_text())
    write_decoding(folder, Decoding(fusion=Fusion(0.0, 0.1, 0.25)))
    after = json.loads((folder / META_FILE).read_text())
    assert after.pop("decoding") == {"fusion": {"selection": 0.0, "span": 0.1,
                                                "retriever": 0.25}}
    assert after == before
    write_decoding(folder, Decoding())
    assert json.loads((folder / META_FILE).read_text()) == before
    assert not [p.name for p in folder.iterdir() if p.name.startswith(".")]  # no temp left


def test_after_reranker_block_decides_for_a_rerankers_passages(tmp_path):
    """Passages a reranker ordered (RerankedHits in a pipeline, `reranked=True` from an eval
    row) are decoded with the folder's after_reranker fusion and no-answer; others as before."""
    span_only = Fusion(0.0, 1.0, 0.0)
    plain = _save(tmp_path / "plain", Decoding(fusion=span_only))
    reader = READERS.build({"name": "extractive", "model": str(plain), "precision": "fp32"})
    span_best = reader.read(QUESTION, [], PASSAGES).passage_id
    other = next(i for i, p in enumerate(PASSAGES) if p.id != span_best)
    scores = [1.0] * len(PASSAGES)
    scores[other] = 9.0
    always_abstain = NoAnswer({"span": 0.5}, -1.0, 1.0)
    folder = _save(tmp_path / "after", Decoding(
        fusion=span_only,
        after_reranker=Decoding(Fusion(0.0, 0.0, 1000.0), no_answer=always_abstain)))
    meta = json.loads((folder / META_FILE).read_text())
    assert meta["decoding"]["after_reranker"] == {
        "fusion": {"selection": 0.0, "span": 0.0, "retriever": 1000.0},
        "no_answer": always_abstain.to_dict()}
    reader = READERS.build({"name": "extractive", "model": str(folder), "precision": "fp32"})
    hits = [Hit(p.id, s, i + 1) for i, (p, s) in enumerate(zip(PASSAGES, scores))]
    reranked = [RerankedHit(h.passage_id, h.score, h.rank, 0.0, h.rank) for h in hits]
    retrieved = read_passages(reader, QUESTION, [], PASSAGES, hits)
    assert retrieved.passage_id == span_best and not retrieved.no_answer
    after = read_passages(reader, QUESTION, [], PASSAGES, reranked)
    assert after.no_answer and after.passage_id == PASSAGES[other].id  # evidence kept
    evaluated = read_passages(reader, QUESTION, [], PASSAGES, hits, always_answer=True,
                              reranked=True)
    assert evaluated.passage_id == PASSAGES[other].id and not evaluated.no_answer
    # explicit weights decide for both; the block changes the fingerprint (result caches)
    explicit = READERS.build({"name": "extractive", "model": str(folder), "precision": "fp32",
                              "fusion": span_only.to_dict(), "always_answer": True})
    assert read_passages(explicit, QUESTION, [], PASSAGES, reranked).passage_id == span_best
    assert reader.fingerprint() != READERS.build(
        {"name": "extractive", "model": str(plain), "precision": "fp32"}).fingerprint()
    assert ExtractiveReader.from_pretrained(folder).decoding.after_reranker == Decoding(
        Fusion(0.0, 0.0, 1000.0), no_answer=always_abstain)


def test_answers_that_always_answer_do_not_depend_on_the_confidence(tmp_path):
    """Eval rows always answer, so their cache key (the fingerprint with always_answer) is the
    same for folders that differ only in the confidence, and differs in the passage choice."""
    def fingerprints(name, decoding):
        reader = READERS.build({"name": "extractive", "model": str(_save(tmp_path / name,
                                                                         decoding))})
        return reader.fingerprint(), reader.fingerprint(always_answer=True)

    fusion = Fusion(0.0, 0.1, 0.25)
    plain = fingerprints("a", Decoding(fusion=fusion))
    confident = fingerprints("b", Decoding(fusion=fusion, no_answer=NoAnswer(
        {"span": 0.5}, -1.0, 0.3), after_reranker=Decoding(no_answer=NoAnswer(
            {"span": 0.2}, -1.0, 0.3))))
    assert plain[0] != confident[0] and plain[1] == confident[1]
    reranked = fingerprints("c", Decoding(fusion=fusion,
                                          after_reranker=Decoding(Fusion(0.0, 0.05, 2.0))))
    assert reranked[1] != plain[1]


def test_a_block_without_after_reranker_decodes_reranked_passages_the_same(tmp_path):
    folder = _save(tmp_path / "r", Decoding(fusion=Fusion(0.0, 0.0, 1000.0)))
    reader = READERS.build({"name": "extractive", "model": str(folder), "precision": "fp32"})
    assert (reader.reranked_fusion, reader.reranked_strategy, reader.reranked_no_answer) == \
        (reader.fusion, reader.strategy, reader.no_answer)
    reranked = [RerankedHit(h.passage_id, h.score, h.rank, 0.0, h.rank) for h in HITS]
    assert read_passages(reader, QUESTION, [], PASSAGES, reranked).passage_id == "c#0"


@pytest.mark.parametrize("block, field", [
    ({"after_reranker": {"strategy": "global"}}, "decoding.after_reranker"),
    ({"after_reranker": [1]}, "decoding.after_reranker"),
    ({"after_reranker": {"fusion": {"ret": 1}}}, "decoding.after_reranker.fusion"),
    ({"after_reranker": {"no_answer": {"weights": {"span": 1}, "bias": 0, "threshold": 2}}},
     "decoding.after_reranker.no_answer.threshold"),
    ({"fusion": {"ret": 1}}, "decoding.fusion"),
    ({"strategy": "vote"}, "decoding.strategy"),
    ({"max_answer_length": 0}, "decoding.max_answer_length"),
    ({"beam": 3}, "decoding"),
    ({"no_answer": {"weights": {"span": 1}, "bias": 0, "threshold": 1.5}},
     "decoding.no_answer.threshold"),
    ({"no_answer": {"weights": {"logit": 1}, "bias": 0, "threshold": 0.5}},
     "decoding.no_answer.weights"),
    ({"no_answer": {"weights": {"span": 1}, "threshold": 0.5}}, "decoding.no_answer.bias"),
])
def test_a_bad_block_names_the_file_and_field(tmp_path, block, field):
    folder = _save(tmp_path / "r")
    meta = json.loads((folder / META_FILE).read_text())
    meta["decoding"] = block
    (folder / META_FILE).write_text(json.dumps(meta))
    with pytest.raises(DataError) as error:
        ExtractiveReader.from_pretrained(folder)
    assert str(folder / META_FILE) in str(error.value)
    assert f"field '{field}'" in str(error.value)


def _no_answer_reader(tmp_path, threshold: float, **options):
    """A reader whose confidence is its span score's logistic: sigmoid(span score)."""
    folder = tmp_path / f"na-{threshold}"
    if not folder.exists():
        _save(folder, Decoding(no_answer=NoAnswer({"span": 1.0}, 0.0, threshold)))
    return READERS.build({"name": "extractive", "model": str(folder), "precision": "fp32",
                          **options})


def test_no_answer_below_the_threshold_keeps_the_evidence(tmp_path):
    import math

    answering = _no_answer_reader(tmp_path, 0.0)
    answer = answering.read(QUESTION, [], PASSAGES)
    assert not answer.no_answer and answer.text
    spans = answering.passage_spans(answering.history.format(QUESTION, []), PASSAGES)
    chosen = next(s for s in spans if s is not None and PASSAGES[s.passage].id
                  == answer.passage_id)
    confidence = 1 / (1 + math.exp(-chosen.span_score))
    assert answer.confidence == pytest.approx(confidence)

    # a threshold just above that confidence: no answer, same evidence
    strict = _no_answer_reader(tmp_path, min(1.0, confidence + 1e-6))
    none = strict.read(QUESTION, [], PASSAGES)
    assert none.no_answer and none.text == "" and none.start is None and none.end is None
    assert none.passage_id == answer.passage_id and none.evidence == answer.evidence
    assert none.confidence == pytest.approx(confidence)
    # just below: the answer
    lenient = _no_answer_reader(tmp_path, max(0.0, confidence - 1e-6))
    assert lenient.read(QUESTION, [], PASSAGES).text == answer.text

    # always answering: by option, per call, or through the pipeline as evaluation does
    assert strict.read(QUESTION, [], PASSAGES, always_answer=True).text == answer.text
    always = _no_answer_reader(tmp_path, min(1.0, confidence + 1e-6), always_answer=True)
    assert always.read(QUESTION, [], PASSAGES).text == answer.text
    assert read_passages(strict, QUESTION, [], PASSAGES, HITS).no_answer
    assert read_passages(strict, QUESTION, [], PASSAGES, HITS, always_answer=True).text \
        == answer.text
    # the threshold option overrides the folder's
    overridden = _no_answer_reader(tmp_path, 0.0, no_answer_threshold=1.0)
    assert overridden.read(QUESTION, [], PASSAGES).no_answer
    assert overridden.fingerprint() != answering.fingerprint()
    assert always.fingerprint() != strict.fingerprint()


def test_threshold_option_needs_a_calibration(tmp_path):
    folder = _save(tmp_path / "plain")
    with pytest.raises(ConfigError, match="no_answer_threshold needs a reader folder"):
        READERS.build({"name": "extractive", "model": str(folder), "no_answer_threshold": 0.5})
    with pytest.raises(ConfigError, match="no_answer_threshold must be a probability"):
        READERS.build({"name": "extractive", "model": str(folder), "no_answer_threshold": 2})


def test_no_answer_round_trips_as_json():
    answer = Answer("", 1.5, "c#0", evidence=PASSAGES[3], no_answer=True, confidence=0.125)
    data = json.loads(json.dumps(answer.to_dict()))
    assert data["no_answer"] is True and data["confidence"] == 0.125
    assert Answer.from_dict(data) == answer
    assert Answer.from_dict({"text": "x"}).no_answer is False


def test_cli_prints_no_answer_then_the_best_evidence():
    from convqa.front.cli.answer import render, render_json
    from convqa.pipeline import PipelineResult

    answer = Answer("", 1.5, "c#0", evidence=PASSAGES[3], no_answer=True, confidence=0.125)
    result = PipelineResult("what is the capital of australia?", "q", HITS, PASSAGES, answer)
    text = render(result)
    lines = text.splitlines()
    assert lines[0] == "No answer in the collection."
    assert lines[1] == "best evidence: Canberra (id c#0)"
    assert "answer:" not in text
    data = json.loads(render_json(result))
    assert data["answer"]["no_answer"] is True and data["answer"]["text"] == ""
    assert data["answer"]["evidence"]["id"] == "c#0"


def test_promotion_carries_the_passage_choice_not_the_confidence(tmp_path):
    from convqa.front.tools import promote_reader as promote

    shipped = _save(tmp_path / "shipped", Decoding(
        fusion=Fusion(0.0, 0.1, 0.25), no_answer=NoAnswer({"span": 1.0}, 0.0, 0.5)))
    candidate = _save(tmp_path / "candidate", seed=5)
    promote.carry_passage_choice(shipped, candidate, say=lambda _: None)
    assert ExtractiveReader.from_pretrained(candidate).decoding == Decoding(
        fusion=Fusion(0.0, 0.1, 0.25))
    own = _save(tmp_path / "own", Decoding(strategy="global"), seed=5)
    promote.carry_passage_choice(shipped, own, say=lambda _: None)
    assert ExtractiveReader.from_pretrained(own).decoding == Decoding(strategy="global")


def test_a_one_passage_fit_is_read_back_and_checked(tmp_path):
    one = NoAnswer({"span": 2.0}, -1.0, 0.6)
    decoding = Decoding(no_answer=NoAnswer({"span": 1.0}, 0.0, 0.3, one))
    folder = _save(tmp_path / "one", decoding)
    assert ExtractiveReader.from_pretrained(folder).decoding == decoding
    meta = json.loads((folder / META_FILE).read_text())
    for bad, field in (({"weights": {"span": 1}, "bias": 0, "threshold": 2},
                        "decoding.no_answer.one_passage.threshold"),
                       ({"weights": {"span": 1}, "bias": 0, "threshold": 0.5,
                         "one_passage": {}}, "decoding.no_answer.one_passage.one_passage")):
        meta["decoding"]["no_answer"]["one_passage"] = bad
        (folder / META_FILE).write_text(json.dumps(meta))
        with pytest.raises(DataError) as error:
            ExtractiveReader.from_pretrained(folder)
        assert f"field '{field}'" in str(error.value)


def test_one_passage_read_uses_its_own_fit(tmp_path):
    """The folder's fit answers everything (threshold 0), its one-passage fit nothing
    (threshold 1): one passage read gets no answer, several get the answer."""
    folder = tmp_path / "split"
    _save(folder, Decoding(no_answer=NoAnswer({"span": 1.0}, 0.0, 0.0,
                                              NoAnswer({"span": 1.0}, 0.0, 1.0))))
    reader = READERS.build({"name": "extractive", "model": str(folder), "precision": "fp32"})
    assert not reader.read(QUESTION, [], PASSAGES).no_answer
    assert reader.read(QUESTION, [], PASSAGES[:1]).no_answer
    assert reader.read(QUESTION, [], PASSAGES[:1], always_answer=True).text
