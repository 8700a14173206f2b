"""Span decoding on hand-made logits, and on real tokenization (offsets back to characters)."""
from __future__ import annotations

import pytest
import torch

from convqa.errors import ConfigError
from convqa.types import Passage
from readers.extractive.decode import best_window_spans, choose, decode_answer, passage_spans
from readers.extractive.inputs import ReaderFeatures, build_features
from reader_helpers import reader_config

NEG = -100.0


def hand_features(context_rows, passages_of_windows, length):
    """Features with token t of every window covering characters [10t, 10t + 5)."""
    windows = len(context_rows)
    context = torch.tensor(context_rows, dtype=torch.bool)
    offsets = torch.zeros(windows, length, 2, dtype=torch.long)
    for t in range(length):
        offsets[:, t, 0], offsets[:, t, 1] = 10 * t, 10 * t + 5
    offsets *= context.unsqueeze(-1)
    return ReaderFeatures({"input_ids": torch.zeros(windows, length, dtype=torch.long)},
                          torch.tensor(passages_of_windows), context, offsets)


def test_best_span_is_valid_and_exact():
    # tokens 0-1 are the query (huge logits there must be ignored), 2..7 passage text
    context = [[False, False, True, True, True, True, True, True]]
    start = torch.tensor([[50.0, 50.0, 1.0, 0.0, 0.0, 0.0, 4.0, 0.0]])
    end = torch.tensor([[50.0, 50.0, 0.0, 3.0, 0.0, 0.0, 0.0, 0.0]])
    # (6, 3) would score 7 but ends before it starts; the valid maxima are (2, 3) = 1 + 3 and
    # (6, 6) = 4 + 0, a tie that goes to the first in (start, end) order: (2, 3)
    scores, firsts, lasts = best_window_spans(start, end, torch.tensor(context), 30)
    assert (scores.item(), firsts.item(), lasts.item()) == (4.0, 2, 3)
    end[0, 7] = 1.0  # (6, 7) = 5 now wins ...
    scores, firsts, lasts = best_window_spans(start, end, torch.tensor(context), 30)
    assert (scores.item(), firsts.item(), lasts.item()) == (5.0, 6, 7)
    # ... unless answers may be at most 1 token long: then the best single token is (6, 6)
    scores, firsts, lasts = best_window_spans(start, end, torch.tensor(context), 1)
    assert (scores.item(), firsts.item(), lasts.item()) == (4.0, 6, 6)
    with pytest.raises(ConfigError):
        best_window_spans(start, end, torch.tensor(context), 0)


def test_window_without_text_has_no_span():
    scores, _, _ = best_window_spans(torch.zeros(1, 4), torch.zeros(1, 4),
                                     torch.zeros(1, 4, dtype=torch.bool), 30)
    assert scores.item() == float("-inf")


def test_strategies_choose_differently():
    # passage 0: weak span, high selection; passage 1: strong span, lower selection
    features = hand_features([[False, True, True], [False, True, True]], [0, 1], 3)
    start = torch.tensor([[NEG, 1.0, 0.0], [NEG, 6.0, 0.0]])
    end = torch.tensor([[NEG, 1.0, 0.0], [NEG, 0.0, 6.0]])
    selection = torch.tensor([3.0, 1.0])
    passages = [Passage("p0", "x" * 40, "T0"), Passage("p1", "y" * 40, "T1")]
    best = decode_answer(start, end, selection, features, passages, "best_passage")
    assert (best.passage_id, best.start, best.end, best.score) == ("p0", 10, 15, 3.0)
    glob = decode_answer(start, end, selection, features, passages, "global")
    # p0: 2 + 3 = 5; p1: 12 + 1 = 13 -> p1, tokens 1..2 = characters 10..25
    assert (glob.passage_id, glob.start, glob.end, glob.score) == ("p1", 10, 25, 13.0)
    assert glob.text == passages[1].text[10:25] and glob.evidence is passages[1]
    # without a selection head both rank by span score
    plain = decode_answer(start, end, None, features, passages, "best_passage")
    assert (plain.passage_id, plain.score) == ("p1", 12.0)
    with pytest.raises(ConfigError, match="unknown reader strategy"):
        decode_answer(start, end, selection, features, passages, "vote")


def test_passage_over_several_windows_keeps_its_best_window():
    features = hand_features([[False, True, True], [False, True, True], [False, True, True]],
                             [0, 0, 1], 3)
    start = torch.tensor([[NEG, 1.0, 0.0], [NEG, 0.0, 3.0], [NEG, 2.0, 0.0]])
    end = torch.tensor([[NEG, 1.0, 0.0], [NEG, 0.0, 3.0], [NEG, 2.0, 0.0]])
    selection = torch.tensor([0.5, -1.0, 0.0])
    spans = passage_spans(start, end, selection, features, 2, 30)
    assert (spans[0].window, spans[0].first, spans[0].last, spans[0].span_score) == (1, 2, 2, 6.0)
    assert spans[0].selection == 0.5  # the most relevant-looking window's
    assert (spans[1].window, spans[1].span_score, spans[1].selection) == (2, 4.0, 0.0)


def test_passages_without_text_are_passed_over_and_none_means_no_answer():
    features = hand_features([[False, False], [False, True]], [0, 1], 2)
    start = end = torch.zeros(2, 2)
    selection = torch.tensor([9.0, 0.0])  # the empty passage looks best but has no span
    passages = [Passage("empty", ""), Passage("full", "abcdefgh")]
    answer = decode_answer(start, end, selection, features, passages)
    assert answer.passage_id == "full"
    assert choose([None, None], "best_passage") is None
    only_empty = hand_features([[False, False]], [0], 2)
    assert decode_answer(torch.zeros(1, 2), torch.zeros(1, 2), None, only_empty,
                         [Passage("empty", "")]) is None


def test_decoded_text_is_the_passage_substring(minilm_tokenizer):
    """Real tokenization: put the maximum on the tokens of "Liverpool" in the second window
    of a long passage; the answer's offsets must cut exactly that word out of the text."""
    text = ("The Beatles were an English rock band. " * 12) + "They formed in Liverpool in 1960."
    passage = Passage("b", text, "The Beatles")
    config = reader_config(max_length=64, doc_stride=16)
    features = build_features(minilm_tokenizer, ["where did they form?"], [passage], config)
    assert len(features) > 1
    target = text.index("Liverpool")
    start = torch.full(features.context.shape, -10.0)
    end = torch.full(features.context.shape, -10.0)
    hits = [(w, t) for w in range(len(features)) for t in range(features.length)
            if features.context[w, t] and features.offsets[w, t, 0] == target]
    assert hits
    w, t = hits[-1]
    last = t
    while features.offsets[w, last, 1] < target + len("Liverpool"):
        last += 1
    start[w, t], end[w, last] = 5.0, 5.0
    answer = decode_answer(start, end, None, features, [passage], max_answer_length=10)
    assert answer.text == "Liverpool" == text[answer.start:answer.end]
    assert (answer.start, answer.passage_id) == (target, "b")
