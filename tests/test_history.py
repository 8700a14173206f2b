"""History strategies: hand-computed strings, real TopiOCQA conversations, config handling."""
from __future__ import annotations

import gzip
import json
from collections import defaultdict

import pytest
import yaml

from conftest import shared_file
from convqa.errors import ConfigError, DataError
from convqa.history import HistoryStrategy, OldestFirst, build_history_strategy, clean_text
from convqa.history.text import tokenize_texts
from convqa.registry import HISTORY_STRATEGIES
from convqa.types import Conversation, Turn

SEP = " [SEP] "
ALL_NAMES = ["current_first", "full", "history_only", "last_answer", "oldest_first",
             "question_only", "questions_only"]


def build(name: str, **options) -> HistoryStrategy:
    return build_history_strategy({"name": name, **options})


# -- a tiny conversation, expected strings worked out by hand ------------------------------------
# MiniLM word pieces (checked in test_hand_conversation_token_counts):
#   "who wrote hamlet?" 4 | "William Shakespeare" 2 | "when was he born?" 5 | "in 1564" 3
#   (in, 156, ##4) | "where?" 2 | "UNANSWERABLE" 4 | "did he have children?" 5 | " [SEP] " 1
HAND = Conversation("hand", [
    Turn("who wrote \n hamlet?", "William  Shakespeare"),
    Turn("when was he born?", "in 1564"),
    Turn("where?", "UNANSWERABLE"),
    Turn("did he have children?", "yes"),
])
Q1, A1, Q2, A2, Q3, A3, QT = ("who wrote hamlet?", "William Shakespeare", "when was he born?",
                              "in 1564", "where?", "UNANSWERABLE", "did he have children?")


def test_hand_conversation_token_counts(minilm_tokenizer):
    strategy = build("oldest_first")
    counts = [strategy.count_tokens(text) for text in (Q1, A1, Q2, A2, Q3, A3, QT, SEP)]
    assert counts == [4, 2, 5, 3, 2, 4, 5, 1]
    assert strategy.separator == SEP and strategy.separator_tokens == 1


@pytest.mark.parametrize("name, options, expected", [
    # everything fits: 31 tokens; whitespace inside utterances collapsed
    ("oldest_first", {}, SEP.join([Q1, A1, Q2, A2, Q3, A3, QT])),
    ("full", {}, SEP.join([Q1, A1, Q2, A2, Q3, A3, QT])),
    # 20: q_t 5, q1 1+4, a3 1+4, q3 1+2 -> 2 left: a2 would need a split word ("##4"): dropped
    ("oldest_first", {"max_tokens": 20}, SEP.join([Q1, Q3, A3, QT])),
    # 21: 3 left for a2 -> its last whole word "1564" (2 pieces) fits
    ("oldest_first", {"max_tokens": 21}, SEP.join([Q1, "1564", Q3, A3, QT])),
    # 8: q_t 5 + sep, q1 cut to its last 2 tokens
    ("oldest_first", {"max_tokens": 8}, SEP.join(["hamlet?", QT])),
    # 3: q_t alone over the budget keeps its start
    ("oldest_first", {"max_tokens": 3}, "did he have"),
    # 20 without q1: q_t 5, a3 1+4, q3 1+2, a2 1+3 -> 3 left: "born?" from q2
    ("oldest_first", {"keep_first": False, "max_tokens": 20}, SEP.join(["born?", A2, Q3, A3, QT])),
    ("oldest_first", {"drop_unanswerable": True}, SEP.join([Q1, A1, Q2, A2, Q3, QT])),
    ("oldest_first", {"separator": " | "}, " | ".join([Q1, A1, Q2, A2, Q3, A3, QT])),
    ("questions_only", {}, SEP.join([Q1, Q2, Q3, QT])),
    # 11: q_t 5, q3 1+2, then 2 tokens of q2's end: "born?"
    ("questions_only", {"max_tokens": 11}, SEP.join(["born?", Q3, QT])),
    ("current_first", {}, SEP.join([QT, A3, Q3, A2, Q2, A1, Q1])),
    ("current_first", {"window": 3}, SEP.join([QT, A3, Q3, A2])),
    ("current_first", {"window": 0}, QT),
    ("current_first", {"window": 3, "drop_unanswerable": True}, SEP.join([QT, Q3, A2, Q2])),
    # 12: q_t 5, a3 1+4, then 1 token of q3's start: "where"
    ("current_first", {"max_tokens": 12}, SEP.join([QT, A3, "where"])),
    ("current_first", {"max_tokens": 4}, "did he have children"),
    ("question_only", {}, QT),
    ("last_answer", {}, A3),
    ("last_answer", {"drop_unanswerable": True}, ""),
    ("history_only", {}, SEP.join([Q1, A1, Q2, A2, Q3, A3])),
    # 12: a3 4, q1 1+4, q3 1+2
    ("history_only", {"max_tokens": 12}, SEP.join([Q1, Q3, A3])),
])
def test_hand_conversation(name, options, expected):
    strategy = build(name, **options)
    assert strategy.format_turn(HAND, 4) == expected
    assert strategy.format(HAND.turns[3].question, HAND.history(4)) == expected
    assert strategy.count_tokens(expected) <= strategy.config.max_tokens


@pytest.mark.parametrize("name, expected", [
    ("oldest_first", Q1), ("full", Q1), ("questions_only", Q1), ("current_first", Q1),
    ("question_only", Q1), ("last_answer", ""), ("history_only", ""),
])
def test_first_turn_has_no_history(name, expected):
    assert build(name).format_turn(HAND, 1) == expected
    assert build(name).format(" who wrote hamlet? ", []) == expected


def test_missing_and_empty_answers_leave_no_empty_slot():
    history = [Turn("who wrote hamlet?", None), Turn("when was he born?", "  ")]
    assert build("oldest_first").format(QT, history) == SEP.join([Q1, Q2, QT])
    assert build("current_first", window=1).format(QT, history) == SEP.join([QT, Q2])
    assert build("last_answer").format(QT, history) == ""
    assert build("history_only").format(QT, history) == SEP.join([Q1, Q2])


def test_unanswerable_markers_are_configurable():
    history = [Turn("who wrote hamlet?", "unknown"), Turn("where?", "UNANSWERABLE")]
    strategy = build("oldest_first", drop_unanswerable=True, unanswerable=["Unknown"])
    assert strategy.format(QT, history) == SEP.join([Q1, Q3, A3, QT])


def test_cuts_are_substrings_without_word_pieces(minilm_tokenizer):
    [unit] = tokenize_texts(minilm_tokenizer, ["unbelievableness is Stratford-upon-Avon"])
    # pieces: unbelievable ##ness is stratford - upon - avon
    assert len(unit) == 8
    assert unit.tail(3).text == "upon-Avon"
    assert unit.tail(4).text == "-upon-Avon"
    assert unit.head(3).text == "unbelievableness is"
    assert unit.head(2).text == "unbelievableness"
    assert unit.head(1).text == ""  # the first word needs 2 pieces
    assert unit.head(1, split_words=True).text == "unbelievable"
    assert unit.tail(7).text == "is Stratford-upon-Avon"  # would start inside a word
    assert unit.tail(0).text == "" and unit.head(100) is unit
    assert len(unit.head(3)) == 3 and len(unit.tail(4)) == 4
    assert clean_text(" a\u00a0 b\n\tc ") == "a b c"


# -- real conversations ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def longest_conversations() -> list[Conversation]:
    """The 6 TopiOCQA conversations with the longest history (by characters)."""
    with gzip.open(shared_file("topiocqa/topiocqa_train.json.gz"), "rt", encoding="utf-8") as f:
        rows = json.load(f)
    by_conversation = defaultdict(list)
    for row in rows:
        by_conversation[row["Conversation_no"]].append(row)
    longest = sorted(by_conversation.values(),
                     key=lambda turns: -sum(len(r["Question"]) + len(r["Answer"]) for r in turns))
    conversations = []
    for turns in longest[:6]:
        turns.sort(key=lambda r: r["Turn_no"])
        assert [r["Turn_no"] for r in turns] == list(range(1, len(turns) + 1))
        conversation = Conversation(str(turns[0]["Conversation_no"]),
                                    [Turn(r["Question"], r["Answer"]) for r in turns])
        # the official Context of the last turn is exactly the earlier questions and answers
        flat = [text for t in conversation.turns[:-1] for text in (t.question, t.answer)]
        assert turns[-1]["Context"] == flat
        conversations.append(conversation)
    return conversations


def _cases(conversations):
    for conversation in conversations:
        for number in range(1, len(conversation) + 1):
            history = conversation.history(number)
            utterances = [clean_text(text) for t in history for text in (t.question, t.answer)]
            assert all(utterances) and not any("[SEP]" in u for u in utterances)
            yield conversation, number, utterances, clean_text(conversation.turn(number).question)


def _words(pretokenizer, text: str) -> list[str]:
    return [word for word, _ in pretokenizer.pre_tokenize_str(text)]


def _check_left_truncated(strategy, out, units, keep_first, pretokenizer):
    """`out` is `units` (oldest first) truncated on the left as documented, and maximal: the
    next word that was left out would not have fitted."""
    count, limit = strategy.count_tokens, strategy.config.max_tokens
    if count(units[-1]) > limit:  # the anchor alone is over the budget: it keeps its start
        assert units[-1].startswith(out) and count(out) <= limit
        next_word = _words(pretokenizer, units[-1][len(out):])[0]
        assert count(out) + count(next_word) > limit
        return
    pieces = out.split(SEP)
    assert pieces[-1] == units[-1]
    middle, body = units[:-1], pieces[:-1]
    if keep_first and middle:
        if count(units[0]) + 1 + count(units[-1]) > limit:
            assert len(pieces) == 2 and units[0].endswith(pieces[0])
            return
        assert body[0] == units[0]
        middle, body = middle[1:], body[1:]
    kept = len(body)
    expected = middle[len(middle) - kept:]
    assert body[1:] == expected[1:]
    if kept and body[0] != expected[0]:  # a partial utterance, cut before a whole word
        assert expected[0].endswith(" " + body[0]) or expected[0].endswith(body[0])
        remainder = expected[0][: len(expected[0]) - len(body[0])]
        extra = count(_words(pretokenizer, remainder)[-1])
    elif kept < len(middle):
        extra = 1 + count(_words(pretokenizer, middle[len(middle) - kept - 1])[-1])
    else:
        assert out == SEP.join(units)
        return
    assert count(out) + extra > limit


def test_oldest_first_on_longest_conversations(longest_conversations, minilm_tokenizer):
    strategy, full = build("oldest_first"), build("full")
    pretokenizer = minilm_tokenizer.backend_tokenizer.pre_tokenizer
    truncated = 0
    for conversation, number, utterances, question in _cases(longest_conversations):
        out = strategy.format_turn(conversation, number)
        assert strategy.count_tokens(out) <= 128
        assert full.format_turn(conversation, number) == out
        assert out.startswith(utterances[0] if utterances else question)
        assert out.endswith(question)
        _check_left_truncated(strategy, out, utterances + [question], True, pretokenizer)
        truncated += out != SEP.join(utterances + [question])
    assert truncated > 50  # these conversations are long: most late turns need truncation


def test_questions_only_on_longest_conversations(longest_conversations, minilm_tokenizer):
    strategy = build("questions_only")
    pretokenizer = minilm_tokenizer.backend_tokenizer.pre_tokenizer
    for conversation, number, utterances, question in _cases(longest_conversations):
        out = strategy.format_turn(conversation, number)
        assert strategy.count_tokens(out) <= 256
        questions = utterances[0::2] + [question]
        _check_left_truncated(strategy, out, questions, False, pretokenizer)
        answers_only = set(utterances[1::2]) - set(questions)
        assert not answers_only & set(out.split(SEP))


def test_history_only_on_longest_conversations(longest_conversations, minilm_tokenizer):
    strategy = build("history_only")
    pretokenizer = minilm_tokenizer.backend_tokenizer.pre_tokenizer
    for conversation, number, utterances, question in _cases(longest_conversations):
        out = strategy.format_turn(conversation, number)
        assert strategy.count_tokens(out) <= 128
        if not utterances:
            assert out == ""
            continue
        # ends with a_{t-1} (its start if over the budget), never with q_t
        _check_left_truncated(strategy, out, utterances, True, pretokenizer)


@pytest.mark.parametrize("window", [6, 2])
def test_current_first_on_longest_conversations(longest_conversations, minilm_tokenizer, window):
    strategy = build("current_first", window=window)
    pretokenizer = minilm_tokenizer.backend_tokenizer.pre_tokenizer
    count = strategy.count_tokens
    full_windows = 0
    for conversation, number, utterances, question in _cases(longest_conversations):
        out = strategy.format_turn(conversation, number)
        assert count(out) <= 128
        pieces = out.split(SEP)
        assert pieces[0] == question  # first and whole
        recent = utterances[::-1][:window]  # newest first
        rest = pieces[1:]
        assert len(rest) <= min(window, len(utterances))
        assert rest[:-1] == recent[: len(rest) - 1]
        if not rest:
            extra = 1 + count(_words(pretokenizer, recent[0])[0]) if recent else None
        elif rest[-1] != recent[len(rest) - 1]:  # partial: keeps the start, whole words
            cut = recent[len(rest) - 1]
            assert cut.startswith(rest[-1])
            extra = count(_words(pretokenizer, cut[len(rest[-1]):])[0])
        elif len(rest) < len(recent):
            extra = 1 + count(_words(pretokenizer, recent[len(rest)])[0])
        else:
            extra = None
            full_windows += len(rest) == window
        if extra is not None:
            assert count(out) + extra > 128
    assert full_windows > 10


def test_shortcut_inputs_on_longest_conversations(longest_conversations, minilm_tokenizer):
    question_only, last_answer = build("question_only"), build("last_answer")
    count = last_answer.count_tokens
    pretokenizer = minilm_tokenizer.backend_tokenizer.pre_tokenizer
    long_answers = 0
    for conversation, number, utterances, question in _cases(longest_conversations):
        assert question_only.format_turn(conversation, number) == question
        expected = clean_text(conversation.turn(number - 1).answer) if number > 1 else ""
        out = last_answer.format_turn(conversation, number)
        if count(expected) <= 128:
            assert out == expected
        else:  # an answer over the budget keeps its start, whole words
            long_answers += 1
            assert expected.startswith(out) and count(out) <= 128
            assert count(out) + count(_words(pretokenizer, expected[len(out):])[0]) > 128
    assert long_answers > 0


def test_budget_matches_the_encoder(longest_conversations, minilm_tokenizer):
    strategy = build("oldest_first")
    assert strategy.encoder_max_length == 130
    conversation = longest_conversations[0]
    out = strategy.format_turn(conversation, len(conversation))
    encoded = minilm_tokenizer(out, truncation=True, max_length=strategy.encoder_max_length)
    assert len(encoded["input_ids"]) == strategy.count_tokens(out) + 2 == 130
    tokens = minilm_tokenizer.convert_ids_to_tokens(encoded["input_ids"])
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]"
    assert tokens[-2] != "[SEP]"  # the query was not cut by the encoder


# -- configuration ---------------------------------------------------------------------------------
def test_all_strategies_registered():
    assert set(ALL_NAMES) <= set(HISTORY_STRATEGIES.names())


@pytest.mark.parametrize("name", ALL_NAMES)
def test_to_dict_round_trip(name):
    strategy = build(name, max_tokens=64, separator=" | ", unanswerable=["n/a"])
    data = strategy.to_dict()
    assert data["name"] == name and data["max_tokens"] == 64
    for text in (json.dumps(data), yaml.safe_dump(data)):
        again = HistoryStrategy.from_dict(yaml.safe_load(text))
        assert type(again) is type(strategy) and again.config == strategy.config
        assert again.format_turn(HAND, 4) == strategy.format_turn(HAND, 4)


def test_from_dict_on_a_class():
    assert OldestFirst.from_dict({"max_tokens": 32}).config.max_tokens == 32
    with pytest.raises(ConfigError, match="not a OldestFirst"):
        OldestFirst.from_dict({"name": "current_first"})


def test_options_from_flags_are_coerced():
    strategy = build("current_first", max_tokens="64", window="2", drop_unanswerable="yes")
    assert (strategy.config.max_tokens, strategy.config.window) == (64, 2)
    assert strategy.config.drop_unanswerable is True
    assert build_history_strategy(strategy) is strategy


@pytest.mark.parametrize("spec, message", [
    ("most_recent", "unknown history strategy 'most_recent'"),
    ({"max_tokens": 12}, "needs a 'name'"),
    ({"name": "oldest_first", "max_tokens": "lots"}, "option 'max_tokens': expected int"),
    ({"name": "oldest_first", "max_tokens": 12.5}, "option 'max_tokens': expected int"),
    ({"name": "oldest_first", "max_tokens": 0}, "max_tokens must be at least 1"),
    ({"name": "current_first", "window": -1}, "window must be an int >= 0"),
    ({"name": "current_first", "window": [6]}, "option 'window': expected int"),
    ({"name": "oldest_first", "drop_unanswerable": "maybe"}, "expected true/false"),
    ({"name": "oldest_first", "separator": ["|"]}, "option 'separator'"),
    ({"name": "oldest_first", "unanswerable": "UNANSWERABLE"}, "list of strings"),
    ({"name": "questions_only", "window": 3}, "unknown option 'window'"),
])
def test_bad_config(spec, message):
    with pytest.raises(ConfigError, match=message):
        build_history_strategy(spec)


def test_tokenizer_is_loaded_lazily(tmp_path):
    strategy = build("oldest_first", tokenizer=str(tmp_path))  # not a tokenizer: no error yet
    with pytest.raises(ConfigError, match="cannot load tokenizer"):
        strategy.format(QT, [])


@pytest.mark.parametrize("question, history, field", [
    (None, [], "question"),
    ("   ", [], "question"),
    (QT, "who wrote hamlet?", "history"),
    (QT, [Turn(Q1, 42)], r"history\[0\]\.answer"),
    (QT, [Turn(Q1, A1), {"question": Q2}], r"history\[1\]\.question"),
])
def test_bad_input(question, history, field):
    with pytest.raises(DataError, match=f"field '{field}'"):
        build("oldest_first").format(question, history)


def test_bad_turn_number():
    with pytest.raises(DataError, match="no turn 5"):
        build("oldest_first").format_turn(HAND, 5)
    broken = Conversation("c7", [Turn(Q1, A1), Turn("", None)])
    with pytest.raises(DataError, match="conversation c7 turn 2: the current question is empty"):
        build("current_first").format_turn(broken, 2)
    assert build("history_only").format_turn(broken, 2) == SEP.join([Q1, A1])
