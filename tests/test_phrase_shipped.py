"""The shipped phrase model (`convqa-phrase`, convqa/assets/phrase-model): loads offline by its
alias and answers from a small phrase index built with it."""
from __future__ import annotations

import json

import pytest

from convqa.corpus import PassageStore
from convqa.models import shipped_model_path
from convqa.types import Passage, Turn

PASSAGES = [
    Passage("kubrick#0", "2001: A Space Odyssey is a 1968 epic science fiction film produced and "
            "directed by Stanley Kubrick. The screenplay was written by Kubrick and science "
            "fiction author Arthur C. Clarke.", "2001: A Space Odyssey (film)"),
    Passage("everest#0", "Mount Everest is Earth's highest mountain above sea level, located in "
            "the Mahalangur Himal sub-range of the Himalayas. Its elevation of 8,849 metres was "
            "most recently established in 2020 by Chinese and Nepali authorities.",
            "Mount Everest"),
    Passage("curie#0", "Marie Curie was a Polish and naturalised-French physicist and chemist who "
            "conducted pioneering research on radioactivity. She was born in Warsaw in 1867.",
            "Marie Curie"),
]


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    from phrase_index.answerer import PhrasePipeline
    from phrase_index.index import build_phrase_index
    from phrase_index.model import PhraseModel

    root = tmp_path_factory.mktemp("shipped-phrase")
    store = PassageStore.build(PASSAGES, root / "passages", progress=False)
    model = PhraseModel.load("convqa-phrase")
    build_phrase_index(model, store, root / "index", start_threshold=None, end_threshold=None,
                       progress=False)
    return PhrasePipeline.from_folder(root / "index")


def test_alias_loads_the_adapter_with_its_recorded_fingerprint():
    from phrase_index.model import PhraseModel

    model = PhraseModel.load("convqa-phrase")
    meta = json.loads((shipped_model_path("convqa-phrase") / "convqa_phrase_model.json")
                      .read_text(encoding="utf-8"))
    assert model.has_adapters and model.source == "convqa-phrase"
    assert model.fingerprint() == meta["fingerprint"]
    assert model.full_fingerprint() == meta["full_fingerprint"]
    # merging the adapters (what index building and answering do) keeps both fingerprints:
    # the LayerNorms the adapter stores whole are hashed as the merged model's
    model.merge_adapters()
    assert not model.has_adapters
    assert (model.fingerprint(), model.full_fingerprint()) == (meta["fingerprint"],
                                                              meta["full_fingerprint"])


def test_answers_from_the_right_passage_and_follows_the_conversation(pipeline):
    result = pipeline.answer("Who directed 2001: A Space Odyssey?")
    assert result.answer.passage_id == "kubrick#0"
    assert "Kubrick" in result.answer.text
    text = PASSAGES[0].text
    assert text[result.answer.start:result.answer.end] == result.answer.text
    history = [Turn("Where was Marie Curie born?", "Warsaw")]
    follow_up = pipeline.answer("When was she born?", history)
    assert follow_up.answer.passage_id == "curie#0" and "1867" in follow_up.answer.text
