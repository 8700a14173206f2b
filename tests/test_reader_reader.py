"""The `extractive` reader component: registry build, read(), options, and use in a pipeline."""
from __future__ import annotations

import pytest

import readers.extractive.reader  # noqa: F401 - registers "extractive" (see the report)
from convqa.errors import ConfigError
from convqa.registry import READERS
from convqa.types import Passage, Turn
from readers.extractive.reader import SpanReader
from reader_helpers import save_tiny_qa_checkpoint, tiny_reader
from reader_helpers import single_thread  # noqa: F401 (autouse fixture: one thread)

PASSAGES = [Passage("e#0", "The Eiffel Tower is a wrought-iron lattice tower in Paris.", "Eiffel"),
            Passage("e#1", "It was completed in 1889 as the entrance to the World's Fair. " * 9,
                    "Eiffel Tower"),
            Passage("d#0", "The Danube is 2850 kilometres long.", "Danube")]
HISTORY = [Turn("what is the eiffel tower?", "a wrought-iron lattice tower")]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    folder = tmp_path_factory.mktemp("reader") / "model"
    reader = tiny_reader(seed=2)
    reader.config.history = {"name": "oldest_first", "max_tokens": 40}
    reader.save_pretrained(folder)
    return folder


def test_build_from_the_registry_and_read(saved):
    reader = READERS.build({"name": "extractive", "model": str(saved)})
    assert isinstance(reader, SpanReader) and not reader.model.training
    assert reader.history.to_dict()["name"] == "oldest_first"  # the model's own strategy
    assert reader.read("when was it completed?", HISTORY, []) is None
    # fp32 for the batching comparison below: `auto` may time int8 faster, and dynamic int8
    # scales activations per batch, so a batch of one would not be the same computation
    reader = READERS.build({"name": "extractive", "model": str(saved), "precision": "fp32"})
    answer = reader.read("when was it completed?", HISTORY, PASSAGES)
    passage = next(p for p in PASSAGES if p.id == answer.passage_id)
    assert answer.evidence is passage and passage.text[answer.start:answer.end] == answer.text
    assert answer.text and len(reader.model.tokenizer.tokenize(answer.text)) <= 30
    # windows read one at a time give the same answer (up to float summation order)
    one_by_one = READERS.build({"name": "extractive", "model": str(saved), "batch_size": 1,
                                "precision": "fp32"})
    alone = one_by_one.read("when was it completed?", HISTORY, PASSAGES)
    assert (alone.passage_id, alone.start, alone.end) == (answer.passage_id, answer.start,
                                                          answer.end)
    assert alone.score == pytest.approx(answer.score, abs=1e-5)
    other = READERS.build({"name": "extractive", "model": str(saved), "strategy": "global",
                           "history": "question_only", "max_answer_length": 3})
    assert other.history.to_dict()["name"] == "question_only"
    short = other.read("when was it completed?", HISTORY, PASSAGES)
    assert len(other.model.tokenizer.tokenize(short.text)) <= 3
    bf16 = READERS.build({"name": "extractive", "model": str(saved), "precision": "bf16"})
    assert bf16.read("when?", [], PASSAGES) is not None


def test_a_trained_in_memory_model_reads_in_eval_mode():
    model = tiny_reader(dropout=0.5).train()
    reader = SpanReader.from_model(model)
    first = reader.read("when?", [], PASSAGES)
    assert first == reader.read("when?", [], PASSAGES)  # no dropout while reading
    assert model.training  # and the caller's mode is restored


def test_question_answering_checkpoint_without_selection_head(tmp_path):
    save_tiny_qa_checkpoint(tmp_path / "qa")
    with pytest.warns(UserWarning, match="ranked by their best span score"):
        reader = READERS.build({"name": "extractive", "model": str(tmp_path / "qa")})
    answer = reader.read("where is it?", [], PASSAGES)
    assert answer is not None and answer.evidence.text[answer.start:answer.end] == answer.text


@pytest.mark.parametrize("spec, message", [
    ({"name": "extractive"}, "option 'model'"),
    ({"name": "extractive", "model": "m", "strategy": "vote"}, "strategy must be one of"),
    ({"name": "extractive", "model": "m", "precision": "int4"}, "unknown precision .int4."),
    ({"name": "extractive", "model": "m", "batch_size": 0}, "batch_size must be a positive"),
    ({"name": "extractive", "model": "m", "colour": 1}, "unknown option 'colour'"),
])
def test_bad_options(spec, message):
    with pytest.raises(ConfigError, match=message):
        READERS.build(spec)


def test_window_settings_are_checked(saved):
    with pytest.raises(ConfigError, match="leaves .* tokens for the passage"):
        READERS.build({"name": "extractive", "model": str(saved), "max_length": 40})


def test_in_a_pipeline(saved, tmp_path):
    from convqa.corpus import PassageStore
    from convqa.history import build_history_strategy
    from convqa.pipeline import Pipeline
    from retrievers.bm25 import BM25Retriever

    store = PassageStore.build(PASSAGES, tmp_path / "store", progress=False)
    pipeline = Pipeline(BM25Retriever.build(PASSAGES), build_history_strategy("current_first"),
                        store, READERS.build({"name": "extractive", "model": str(saved)}),
                        top_k=2)
    result = pipeline.answer("how long is the danube?", [])
    assert [p.id for p in result.passages] == ["d#0"]  # the only passage naming the Danube
    answer = result.answer
    assert answer.passage_id == "d#0" and answer.text == PASSAGES[2].text[answer.start:answer.end]
    assert "read" in result.timings_ms
    assert pipeline.reader.read("anything", [], []) is None


def test_fingerprint_follows_weights_and_settings():
    from reader_helpers import tiny_reader

    from readers.extractive.reader import SpanReader

    one = SpanReader.from_model(tiny_reader(seed=0))
    assert one.fingerprint() == SpanReader.from_model(tiny_reader(seed=0)).fingerprint()
    assert one.fingerprint() != SpanReader.from_model(tiny_reader(seed=1)).fingerprint()
    assert one.fingerprint() != SpanReader.from_model(tiny_reader(seed=0),
                                                      strategy="global").fingerprint()
