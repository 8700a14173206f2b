import pytest

from convqa.types import Answer, Conversation, Hit, Passage, QueryId, Turn


def make_conversation():
    return Conversation("c7", [Turn("who wrote hamlet?", "Shakespeare"),
                               Turn("when was he born?", "1564", rewrite="when was Shakespeare born?"),
                               Turn("where?")])


def test_query_ids_are_conversation_and_one_based_turn():
    conv = make_conversation()
    assert list(conv.query_ids()) == [QueryId("c7", 1), QueryId("c7", 2), QueryId("c7", 3)]
    assert str(QueryId("31", 2)) == "31_2"
    # conversation ids may themselves contain underscores (OR-QuAC dialog ids do)
    assert QueryId.parse("C_2d21_0_4") == QueryId("C_2d21_0", 4)
    with pytest.raises(ValueError):
        QueryId.parse("no-turn")


def test_duplicate_question_text_stays_distinct_queries():
    a = Conversation("a", [Turn("what is it?")])
    b = Conversation("b", [Turn("what is it?")])
    assert set(a.query_ids()) | set(b.query_ids()) == {QueryId("a", 1), QueryId("b", 1)}


def test_history_is_the_turns_before():
    conv = make_conversation()
    assert conv.history(1) == []
    assert [t.question for t in conv.history(3)] == ["who wrote hamlet?", "when was he born?"]
    assert conv.turn(2).rewrite == "when was Shakespeare born?"
    with pytest.raises(IndexError):
        conv.turn(4)


def test_round_trips():
    conv = make_conversation()
    assert Conversation.from_dict(conv.to_dict()) == conv
    passage = Passage("12#0", "Hamlet is a tragedy.", "Hamlet")
    answer = Answer("a tragedy", 3.5, "12#0", 10, 19, passage)
    assert passage.text[answer.start:answer.end] == answer.text
    assert Answer.from_dict(answer.to_dict()) == answer
    assert Hit.from_dict(Hit("12#0", 1.25, 1).to_dict()) == Hit("12#0", 1.25, 1)
