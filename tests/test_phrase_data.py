"""Phrase-model training data: examples from reader examples, conversation batches, batch
tensors (gold token positions, turn t-1 queries, teacher alignment), on a hand-made benchmark
and on real SQuAD questions and real TopiOCQA conversations."""
from __future__ import annotations

import pytest
import torch

from conftest import shared_file
from convqa.errors import DataError
from convqa.types import Passage
from phrase_index.data import (PhraseExample, align_teacher_logits, benchmark_phrase_examples,
                               build_examples, conversation_batches, from_reader_example,
                               make_phrase_batch, squad_phrase_examples)
from phrase_model_helpers import tiny_phrase_model
from reader_helpers import tiny_reader
from readers.extractive.data import GoldSpan, ReaderExample, ReaderPassage
from training_helpers import make_benchmark
from reader_helpers import single_thread  # noqa: F401 (autouse fixture: one thread)


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    return make_benchmark(tmp_path_factory.mktemp("phrase-bench") / "bench")


def reader_example(id_: str, history, source: str, text="Ada Lovelace wrote it.",
                   answer="Ada Lovelace") -> ReaderExample:
    span = GoldSpan(answer, text.index(answer))
    return ReaderExample(id_, "who?", history, [ReaderPassage(Passage("p", text, "T"), [span])],
                         source=source)


def test_from_reader_example_takes_conversation_and_turn_from_benchmark_ids():
    e = from_reader_example(reader_example("vital/31_3", [("q1", "a1"), ("q2", None)],
                                           "topiocqa-wiki:vital"))
    assert (e.conversation, e.turn) == ("topiocqa-wiki:vital/31", 3)
    assert e.spans == [(0, 12)] and e.answers == ["Ada Lovelace"]
    assert e.previous()[0] == "q2" and [t.question for t in e.previous()[1]] == ["q1"]
    squad = from_reader_example(reader_example("dev/abc", [], "squad:dev"))
    assert (squad.conversation, squad.turn, squad.previous()) == ("dev/abc", 1, None)
    with pytest.raises(DataError, match="is turn 3 but has 1 history turns"):
        from_reader_example(reader_example("vital/31_3", [("q1", "a1")], "topiocqa-wiki:vital"))
    with pytest.raises(DataError, match="not a query key"):
        from_reader_example(reader_example("vital/x", [], "topiocqa-wiki:vital"))
    empty = reader_example("q", [], "squad:x")
    empty.positives = []
    with pytest.raises(DataError, match="no positive passage"):
        from_reader_example(empty)


def test_benchmark_examples_keep_history_and_split(bench):
    examples = {e.id: e for e in benchmark_phrase_examples(bench)}
    c1_2 = examples["bench/c1_2"]
    assert (c1_2.conversation, c1_2.turn, c1_2.split) == ("topiocqa-wiki:bench/c1", 2, "train")
    assert c1_2.passage.id == "A#1"
    assert c1_2.passage.text[slice(*c1_2.spans[0])] == "4.37 light-years"
    assert examples["bench/c4_1"].split == "heldout"
    assert len(build_examples(benchmarks=[bench])) == len(examples)
    with pytest.raises(DataError, match="occurs in two inputs"):
        build_examples(benchmarks=[bench, bench])


def _synthetic(conversations: dict[str, int], singles: int) -> list[PhraseExample]:
    passage = Passage("p", "text", "")
    examples = [PhraseExample(f"{c}_{t}", "q", [], passage, [(0, 4)], conversation=c, turn=t)
                for c, n in conversations.items() for t in range(n, 0, -1)]  # reverse order
    return examples + [PhraseExample(f"s{i}", "q", [], passage, [(0, 4)]) for i in range(singles)]


def test_conversation_batches_keep_consecutive_turns_together():
    examples = _synthetic({"A": 6, "B": 3, "C": 2}, singles=5)   # 16 examples
    batches = conversation_batches(examples, 4, seed=0, epoch=0, run_length=4)
    assert len(batches) == 4 and all(len(b) == 4 for b in batches)
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(16))
    # runs: A turns 1-4, A 5-6, B 1-3, C 1-2, and each single: each is contiguous, in turn order
    def positions(conversation, turns):
        return [flat.index(next(i for i, e in enumerate(examples)
                                if e.conversation == conversation and e.turn == t))
                for t in turns]
    for conversation, turns in (("A", [1, 2, 3, 4]), ("A", [5, 6]), ("B", [1, 2, 3]),
                                ("C", [1, 2])):
        where = positions(conversation, turns)
        assert where == list(range(where[0], where[0] + len(turns)))
    assert conversation_batches(examples, 4, 0, 0) == batches        # seeded
    assert conversation_batches(examples, 4, 0, 1) != batches        # a new order per epoch
    assert len(conversation_batches(examples, 5, 0, 0)) == 3         # ragged tail dropped


def test_batch_gold_positions_previous_turns_and_groups(bench):
    model = tiny_phrase_model()
    examples = [e for e in benchmark_phrase_examples(bench) if e.split == "train"]
    order = {e.id: i for i, e in enumerate(examples)}
    chosen = [order[q] for q in ("bench/c1_1", "bench/c1_2", "bench/c1_3", "bench/c3_2")]
    batch = make_phrase_batch(examples, chosen, model)
    ids = batch.passages["input_ids"]
    for row, index in enumerate(chosen):
        example = examples[index]
        first, last = int(batch.start_positions[row]), int(batch.end_positions[row])
        assert batch.mask[row, first] and batch.mask[row, last]
        start, end = int(batch.offsets[row, first, 0]), int(batch.offsets[row, last, 1])
        assert (start, end) == example.spans[0]
        decoded = model.tokenizer.decode(ids[row, first:last + 1])  # "4. 37 light - years"
        assert decoded.replace(" ", "") == example.passage.text[start:end].lower().replace(" ", "")
    # queries: c1_1, c1_2, c1_3 share rows (c1_2's previous turn is c1_1's own query); c3_2
    # needs its turn 1 (c3_1, not in the batch) encoded as well
    assert batch.current.tolist() == [0, 1, 2, 3] and batch.previous.tolist() == [-1, 0, 1, 4]
    assert batch.queries["input_ids"].shape[0] == 5
    texts = model.tokenizer.batch_decode(batch.queries["input_ids"], skip_special_tokens=True)
    assert texts[4] == "how long is the danube?"
    assert texts[3].startswith("what is the eiffel tower made of?")
    exclude = batch.turn_exclude()
    assert exclude.sum() == 4 and exclude[3, 3] and not exclude[3, 4]
    assert batch.groups.tolist() == [0, 1, 2, 3]
    twice = make_phrase_batch(examples, [chosen[0], chosen[0]], model)
    assert twice.groups.tolist() == [0, 0]  # the same gold phrase: not each other's negative
    # passage groups: which rows hold the same passage (the batch-wide span loss masks them)
    passages = [examples[i].passage.id for i in chosen]
    assert batch.passage_groups.tolist() == [passages.index(p) for p in passages]
    assert twice.passage_groups.tolist() == [0, 0]


def test_hard_negatives_come_from_other_articles_and_join_the_batch_once(bench):
    from convqa.benchmark.labelled_turns import article_id_of

    model = tiny_phrase_model()
    plain = [e for e in benchmark_phrase_examples(bench) if e.split == "train"]
    assert all(e.negatives == [] for e in plain)
    examples = [e for e in benchmark_phrase_examples(bench, negatives=2) if e.split == "train"]
    assert [e.id for e in examples] == [e.id for e in plain]
    # (BM25 returns only passages sharing a term with the question: some get fewer)
    assert all(len(e.negatives) <= 2 for e in examples)
    assert sum(len(e.negatives) == 2 for e in examples) >= 3
    for example in examples:  # BM25 passages of other articles than the gold passage's
        gold = article_id_of(example.passage.id)
        assert all(article_id_of(p.id) != gold for p in example.negatives)
    without = make_phrase_batch(examples, [0, 1, 2], model)
    assert without.negatives is None and without.negative_mask is None
    batch = make_phrase_batch(examples, [0, 1, 2], model, negatives=2)
    golds = {examples[i].passage.id for i in range(3)}
    expected = []
    for i in range(3):
        for passage in examples[i].negatives[:2]:
            if passage.id not in golds and passage.id not in {p.id for p in expected}:
                expected.append(passage)
    assert expected, "the tiny benchmark should give this batch some negatives"
    ids, mask = batch.negatives["input_ids"], batch.negative_mask
    assert ids.shape == (len(expected), batch.passages["input_ids"].shape[1])
    assert mask.shape == ids.shape and bool(mask.any(dim=1).all())
    for row, passage in enumerate(expected):  # each negative's text, in order, in its row
        text = model.tokenizer.decode(ids[row][mask[row]]).replace(" ", "")
        assert text == passage.text.lower().replace(" ", "")[:len(text)] and text
    # the gold rows are what they are without negatives (only padded to the same length)
    length = without.passages["input_ids"].shape[1]
    assert torch.equal(batch.passages["input_ids"][:, :length], without.passages["input_ids"])
    assert torch.equal(batch.start_positions, without.start_positions)
    assert torch.equal(batch.mask[:, :length], without.mask)
    assert not batch.mask[:, length:].any()
    # a negative that is the gold passage of another question of the batch is left out
    twin = PhraseExample("twin", "q", [], examples[1].passage, examples[1].spans,
                         negatives=[examples[0].passage, examples[2].passage])
    mixed = make_phrase_batch(examples + [twin], [0, len(examples)], model, negatives=2)
    assert mixed.negatives["input_ids"].shape[0] == 1  # examples[2]'s passage only
    # ... and so is a negative that holds the gold answer of another question of the batch
    answer = examples[0].passage.text[slice(*examples[0].spans[0])]
    holder = Passage("other#9", f"Somewhere else: {answer.upper()} again.", "Other")
    clean = Passage("other#8", "Nothing of use here at all.", "Other")
    mined = PhraseExample("mined", "q", [], examples[1].passage, examples[1].spans,
                          negatives=[holder, clean])
    picked = make_phrase_batch(examples + [mined], [0, len(examples)], model, negatives=2)
    text = model.tokenizer.decode(picked.negatives["input_ids"][0][picked.negative_mask[0]])
    assert picked.negatives["input_ids"].shape[0] == 1 and "nothing of use" in text


def test_a_long_passage_uses_the_window_holding_the_answer_and_misses_are_errors():
    model = tiny_phrase_model(max_passage_tokens=32)
    text = "Filler words come first here. " * 12 + "The answer is Zanzibar."
    start = text.index("Zanzibar")
    example = PhraseExample("x", "where?", [], Passage("p", text, "T"), [(start, start + 8)])
    batch = make_phrase_batch([example], [0], model, stride=8)
    first = int(batch.start_positions[0])
    assert int(batch.offsets[0, first, 0]) == start
    bad = PhraseExample("bad", "where?", [], Passage("p", text, "T"), [(0, len(text))])
    with pytest.raises(DataError, match="example 'bad': no gold span fits a passage window"):
        make_phrase_batch([bad], [0], model, stride=8)
    # training leaves such an example out of its batch (a batch of only such is still an error)
    both = make_phrase_batch([bad, example], [0, 1], model, stride=8, skip_unfit=True)
    assert len(both) == 1 and both.skipped == ["bad"] and both.indices == [1]
    assert int(both.offsets[0, int(both.start_positions[0]), 0]) == start
    with pytest.raises(DataError, match="example 'bad'"):
        make_phrase_batch([bad], [0], model, stride=8, skip_unfit=True)


def test_teacher_alignment_points_at_the_same_text_tokens(bench):
    model = tiny_phrase_model()
    teacher = tiny_reader()
    examples = [e for e in benchmark_phrase_examples(bench) if e.split == "train"]
    batch = make_phrase_batch(examples, [0, 1, 2, 3], model, teacher=teacher,
                              teacher_query=lambda e: e.question)
    t = batch.teacher
    ours, theirs = batch.passages["input_ids"], t.features.tensors["input_ids"]
    for row in range(4):
        aligned = torch.nonzero(t.alignment[row] >= 0).flatten()
        assert aligned.tolist() == torch.nonzero(batch.mask[row]).flatten().tolist()
        assert torch.equal(ours[row, aligned], theirs[row, t.alignment[row, aligned]])
    logits = torch.arange(theirs.shape[1], dtype=torch.float32).repeat(4, 1)
    moved, seen = align_teacher_logits(logits, t.alignment)
    assert torch.equal(seen, t.alignment >= 0)
    assert torch.equal(moved[seen], t.alignment[seen].float())
    assert (moved[~seen] == 0).all()


def test_real_squad_questions_and_real_topiocqa_conversations():
    """Real SQuAD questions, and real TopiOCQA turns whose passage is the real text of their
    conversation's answers (the benchmark's own passages are not in ../shared/data)."""
    from convqa.loaders.topiocqa import load_topiocqa

    squad = [e for e in squad_phrase_examples(shared_file("squad/dev-v2.0.json"),
                                              max_examples=30) if e.split == "train"][:6]
    conversation = next(c for c in load_topiocqa(shared_file("topiocqa/topiocqa_train.json.gz"))
                        if len(c.turns) >= 6 and all(t.answer and t.answer != "UNANSWERABLE"
                                                     for t in c.turns[:6]))
    answers = [t.answer for t in conversation.turns[:6]]
    text = " ".join(answers)
    turns = []
    for number in range(1, 7):
        start = text.index(answers[number - 1])
        turns.append(PhraseExample(
            f"{conversation.id}_{number}", conversation.turns[number - 1].question,
            [(t.question, t.answer) for t in conversation.history(number)],
            Passage("conv", text, "answers"), [(start, start + len(answers[number - 1]))],
            [answers[number - 1]], conversation.id, number))
    examples = squad + turns
    model = tiny_phrase_model(max_passage_tokens=256, max_query_tokens=64)
    batches = conversation_batches(examples, 6, seed=0, epoch=0)
    assert len(batches) == 2
    for indices in batches:
        batch = make_phrase_batch(examples, indices, model)
        for row, index in enumerate(indices):
            example = examples[index]
            first, last = int(batch.start_positions[row]), int(batch.end_positions[row])
            got = example.passage.text[int(batch.offsets[row, first, 0]):
                                       int(batch.offsets[row, last, 1])]
            assert got == example.passage.text[slice(*example.spans[0])]
            if example.turn > 1:  # turn t-1's query is the previous real question, first
                row_text = model.tokenizer.decode(
                    batch.queries["input_ids"][int(batch.previous[row])],
                    skip_special_tokens=True)
                assert row_text.startswith(model.tokenizer.decode(model.tokenizer(
                    conversation.turns[example.turn - 2].question,
                    add_special_tokens=False)["input_ids"]))
    # the six consecutive turns of the conversation came as runs of at most 4, in order
    flat = [examples[i].turn for b in batches for i in b
            if examples[i].conversation == conversation.id]
    assert flat in ([1, 2, 3, 4, 5, 6], [5, 6, 1, 2, 3, 4])
