"""Reader inputs: windows, truncation, and token offsets that are exact character offsets into
the passage text (checked on real SQuAD paragraphs)."""
from __future__ import annotations

import pytest

from conftest import shared_file
from convqa.types import Passage
from readers.extractive.inputs import (build_features, char_span_to_tokens, first_segments,
                                       token_span_to_chars, truncate_texts)
from readers.extractive.model import ExtractiveReaderConfig
from reader_helpers import reader_config


@pytest.fixture(scope="module")
def squad_dev():
    from convqa.loaders.squad import load_squad

    return [e for e in load_squad(shared_file("squad/dev-v2.0.json")) if e.answers]


def test_offsets_are_character_offsets_on_real_squad(squad_dev, minilm_tokenizer):
    config = ExtractiveReaderConfig()  # the real settings: 256 tokens, stride 64
    examples = squad_dev[:400:2]
    passages = [Passage(e.id, e.context, e.title) for e in examples]
    features = build_features(minilm_tokenizer, [e.question for e in examples], passages, config)
    normalize = minilm_tokenizer.backend_tokenizer.normalizer.normalize_str
    checked_tokens = aligned = answers = 0
    for w in range(len(features)):
        passage = passages[int(features.window_passage[w])]
        ids = features.tensors["input_ids"][w]
        for t in range(features.length):
            if not features.context[w, t]:
                continue
            token = minilm_tokenizer.convert_ids_to_tokens(int(ids[t]))
            a, b = (int(x) for x in features.offsets[w, t])
            if token != minilm_tokenizer.unk_token:
                assert normalize(passage.text[a:b]) == token.removeprefix("##"), (token, a, b)
                checked_tokens += 1
    assert checked_tokens > 20000
    for index, example in enumerate(examples):
        for answer in example.answers:
            end = answer.start + len(answer.text)
            found = [char_span_to_tokens(features, w, answer.start, end)
                     for w in features.windows_of(index)]
            spans = [(w, s) for w, s in zip(features.windows_of(index), found) if s]
            assert spans, (example.id, answer)  # every SQuAD answer fits some window
            answers += 1
            w, (first, last) = spans[0]
            a, b = token_span_to_chars(features, w, first, last)
            assert a <= answer.start and b >= end  # the tokens cover the answer ...
            if (a, b) == (answer.start, end):
                aligned += 1
            else:  # ... and differ only where an answer edge falls inside a token
                inside = [(int(x), int(y)) for (x, y), keep in zip(features.offsets[w],
                                                                   features.context[w])
                          if keep and (x < answer.start < y or x < end < y)]
                assert inside, (example.id, answer, a, b)
    assert answers > 500 and aligned / answers > 0.97, (aligned, answers)


def test_long_passage_windows_overlap_and_cover_it(squad_dev, minilm_tokenizer):
    example = max(squad_dev[:300], key=lambda e: len(e.context))
    passage = Passage("p", example.context, example.title)
    config = reader_config(max_length=96, doc_stride=24)
    features = build_features(minilm_tokenizer, [example.question], [passage], config)
    whole = minilm_tokenizer(passage.text, add_special_tokens=False,
                             return_offsets_mapping=True)["offset_mapping"]
    assert len(features) >= 3
    assert int(features.tensors["attention_mask"].sum(1).max()) <= 96
    seen = []
    title_ids = minilm_tokenizer(example.title, add_special_tokens=False)["input_ids"]
    for w in range(len(features)):
        text_tokens = [tuple(int(x) for x in features.offsets[w, t])
                       for t in range(features.length) if features.context[w, t]]
        ids = features.tensors["input_ids"][w].tolist()
        assert any(ids[i:i + len(title_ids)] == title_ids for i in range(len(ids)))  # title
        if seen:
            overlap = len(set(seen[-1]) & set(text_tokens))
            assert overlap == 24  # doc_stride tokens shared with the previous window
        seen.append(text_tokens)
    union = sorted({o for window in seen for o in window})
    assert union == [tuple(o) for o in whole]  # every token of the passage is read


def test_truncation_keeps_the_start_of_query_and_title(minilm_tokenizer):
    assert truncate_texts(minilm_tokenizer, ["one two three four", "uno"], 2) == ["one two", "uno"]
    # "Alpha Centauri" is alpha / cent / ##aur / ##i: words are kept whole, except a first
    # word longer than the budget
    assert truncate_texts(minilm_tokenizer, ["Alpha Centauri"], 2) == ["Alpha"]
    assert truncate_texts(minilm_tokenizer, ["Centauri"], 1) == ["Cent"]
    config = reader_config(max_query_length=3, max_title_length=4)
    passages = [Passage("a", "text", "Alpha Centauri system"), Passage("b", "text")]
    firsts = first_segments(minilm_tokenizer, ["how far away is it", "why?"], passages, config)
    assert firsts == ["how far away [SEP] Alpha Centauri", "why?"]
    no_title = first_segments(minilm_tokenizer, ["why?"], passages[:1],
                              reader_config(use_title=False))
    assert no_title == ["why?"]


def test_span_outside_a_window_is_none(minilm_tokenizer):
    text = "Alpha beta gamma delta. " * 30
    features = build_features(minilm_tokenizer, ["q"], [Passage("p", text)],
                              reader_config(max_length=48, doc_stride=8, max_query_length=8,
                                            max_title_length=0))
    assert len(features) > 2
    first = char_span_to_tokens(features, 0, 0, 5)
    assert first is not None and token_span_to_chars(features, 0, *first) == (0, 5)
    late = len(text) - 6  # "delta." of the last sentence is not in the first window
    assert char_span_to_tokens(features, 0, late, late + 5) is None
    assert char_span_to_tokens(features, len(features) - 1, late, late + 5) is not None
    assert char_span_to_tokens(features, 0, 3, 3) is None  # empty span


def test_other_tokenizer_other_special_token_ids():
    """Nothing is hard-coded: a WordPiece vocabulary with the special tokens elsewhere."""
    from transformers import BertTokenizer

    words = ["alpha", "beta", "gamma", "what", "is", "?", ".", "##s",
             "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokenizer = BertTokenizer(vocab={word: i for i, word in enumerate(words)})
    assert tokenizer.is_fast and tokenizer.sep_token_id == 11
    text = "Alpha betas gamma."
    features = build_features(tokenizer, ["what is alpha?"], [Passage("p", text, "Beta")],
                              reader_config())
    ids = features.tensors["input_ids"][0].tolist()
    assert ids[0] == tokenizer.cls_token_id and ids.count(tokenizer.sep_token_id) == 3
    spans = [text[int(a):int(b)] for (a, b), keep in zip(features.offsets[0].tolist(),
                                                        features.context[0]) if keep]
    assert spans == ["Alpha", "beta", "s", "gamma", "."]


def test_bad_settings(minilm_tokenizer):
    with pytest.raises(ValueError, match="leaves 13 tokens for the passage"):
        ExtractiveReaderConfig(max_length=48, max_query_length=23, max_title_length=8)
    with pytest.raises(ValueError, match="doc_stride must be an int >= 0"):
        ExtractiveReaderConfig(doc_stride=-1)
    with pytest.raises(ValueError, match="3 queries for 1 passages"):
        build_features(minilm_tokenizer, ["a", "b", "c"], [Passage("p", "x")], reader_config())
    assert len(build_features(minilm_tokenizer, [], [], reader_config())) == 0
