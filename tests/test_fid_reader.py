"""The `fid` pipeline component: built from the registry, answers with evidence and offsets."""
from __future__ import annotations

import pytest
import torch

from convqa.errors import ConfigError
from convqa.registry import READERS
from convqa.types import Answer, Passage, Turn
from fid_helpers import DISTRACTORS, QUESTION, colour_examples, tiny_reader
from readers.fid.reader import FiDAnswerReader, FiDReadConfig, locate_answer
from readers.fid.train import FiDTrainConfig, train_fid

STAR = Passage("A#1", "It lies 4.37 light-years away from the Sun.", "Alpha Centauri")
OTHER = Passage("J#0", "Jupiter is the largest planet; it lies far away.", "Jupiter")


def test_evidence_is_the_first_passage_holding_the_answer():
    answer = locate_answer("4.37 Light-Years", -0.5, [OTHER, STAR])
    # "It lies " is 8 characters, "4.37 light-years" 16
    assert (answer.passage_id, answer.start, answer.end) == ("A#1", 8, 24)
    assert STAR.text[answer.start:answer.end] == "4.37 light-years"  # the passage's own casing
    assert answer.text == "4.37 Light-Years" and answer.score == -0.5
    assert answer.evidence == STAR
    # whole words only: "far" is in "far away", not inside "farm"
    farm = Passage("F", "a farm lies here", "")
    assert locate_answer("far", 0.0, [farm, OTHER]).passage_id == "J#0"
    assert locate_answer("far", 0.0, [farm, OTHER]).start == OTHER.text.index("far")
    # newlines or double spaces in the passage still match
    spaced = Passage("S", "it lies 4.37\n light-years away", "")
    found = locate_answer("4.37 light-years", 0.0, [spaced])
    assert spaced.text[found.start:found.end] == "4.37\n light-years"


def test_evidence_falls_back_to_normalized_match_then_the_top_passage():
    # SQuAD normalization drops articles and punctuation: found in STAR, but not as a span
    answer = locate_answer("light-years away from Sun", 0.0, [OTHER, STAR])
    assert answer.passage_id == "A#1" and answer.start is None and answer.end is None
    answer = locate_answer("the red planet", 0.0, [OTHER, STAR])
    assert (answer.passage_id, answer.start, answer.evidence) == ("J#0", None, OTHER)
    assert locate_answer("", 0.0, [OTHER]).passage_id == "J#0"
    assert locate_answer("x", -1.0, []) == Answer("x", -1.0)


def test_registry_builds_a_trained_reader_that_answers(tmp_path):
    torch.set_num_threads(1)
    reader = tiny_reader(seed=0)
    train_fid(reader, colour_examples(), tmp_path, FiDTrainConfig(
        batch_size=4, epochs=100, lr=1e-2, warmup_ratio=0.0, checkpoint_every=0,
        progress=False))
    component = READERS.build({"name": "fid", "model": str(tmp_path / "model"),
                               "device": "cpu"})
    assert isinstance(component, FiDAnswerReader)
    assert component.fingerprint() == reader.fingerprint()
    box = Passage("b9", "look : the box is green", "box")
    answer = component.read(QUESTION, [Turn("which box ?", "the old one")],
                            [*DISTRACTORS, box, Passage("x", "the box is red", "box")])
    assert answer.text == "green"
    assert (answer.passage_id, answer.evidence) == ("b9", box)
    assert box.text[answer.start:answer.end] == "green"
    assert -1.0 < answer.score <= 0.0  # mean token log-probability of a confident answer
    # settings from the spec override the saved ones
    narrow = READERS.build({"name": "fid", "model": str(tmp_path / "model"), "n_passages": 1,
                            "device": "cpu"})
    assert narrow.reader.config.n_passages == 1
    assert narrow.fingerprint() != component.fingerprint()


def test_bad_specs():
    with pytest.raises(ConfigError, match="reader 'fid'.*model"):
        READERS.build({"name": "fid"})
    with pytest.raises(ConfigError, match="n_passages must be an int >= 1"):
        READERS.build({"name": "fid", "model": "x", "n_passages": 0})
    with pytest.raises(ConfigError, match="unknown option 'beams'"):
        READERS.build({"name": "fid", "model": "x", "beams": 2})
    with pytest.raises(ConfigError, match="give settings to the FiDReader itself"):
        FiDAnswerReader(FiDReadConfig(model="x", num_beams=2), reader=tiny_reader())
    with pytest.raises(ConfigError, match="cannot use device 'nodevice'"):
        FiDAnswerReader(FiDReadConfig(model="x", device="nodevice"), reader=tiny_reader())
