"""The real-data check of the QReCC evaluation: the 95 human-evaluated SCAI-QReCC-21 turns with
the 326 passages of that subset (../shared/data/qrecc), conversations rebuilt from the CAsT 2019
topics (../shared/data/cast), BM25 (QReCC's k1=0.82, b=0.68) built over the 326 passages.

The gold ids of 53 turns come from the official test qrels; 42 turns have none. Of the 53, only
21 have a gold passage among the 326 (the subset pooled the systems' top passages, not the
gold), so with gold ids Hits@k can reach at most 21/53 (skip) or 21/95 (miss).
"""
from __future__ import annotations

import pytest

from conftest import shared_file
from convqa.corpus import PassageStore
from convqa.front.evaluation.qrecc import evaluate_qrecc_retrieval, load_qrecc_eval, load_scai_eval
from convqa.history import Full, OldestFirstConfig, QuestionOnly, QuestionsOnly
from convqa.metrics.answer import answer_tokens

pytestmark = pytest.mark.shared_data

KS = (1, 5, 10, 20, 100)
HISTORIES = ("question_only", "rewrite", "questions_only")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("qrecc-scai")


@pytest.fixture(scope="module")
def data(cache):
    topics = [shared_file("cast/2019_data_training_train_topics_v1.0.json"),
              shared_file("cast/2019_data_evaluation_evaluation_topics_v1.0.json")]
    return load_scai_eval(shared_file("qrecc/batch1-top1.csv").parent, topics, cache_dir=cache)


@pytest.fixture(scope="module")
def histories(minilm_tokenizer):
    """The history strategies by name, sharing one tokenizer (loading one takes seconds)."""
    return {"question_only": QuestionOnly(tokenizer=minilm_tokenizer), "rewrite": "rewrite",
            "questions_only": QuestionsOnly(tokenizer=minilm_tokenizer)}


@pytest.fixture(scope="module")
def results(data, cache, histories):
    """{(history, relevance): result} for BM25 over the 326 passages, turns without gold
    skipped (the "miss" numbers are in every result too, under `both`)."""
    return {(history, relevance): evaluate_qrecc_retrieval(
                data, {"name": "bm25"}, histories[history], KS, relevance, "skip",
                cache_dir=cache, progress=False)
            for history in HISTORIES for relevance in ("gold-ids", "span-f1")}


def test_subset_is_what_the_files_say(data):
    assert len(data.queries) == 95 and len(data.conversations) == 32
    with PassageStore.open(data.store) as store:
        assert len(store) == 326
        with_gold = [q for q in data.queries if data.has_gold(q)]
        inside = [q for q in with_gold if any(pid in store for pid in data.gold[q])]
    assert (len(with_gold), len(inside)) == (53, 21)
    assert all(data.answers[q] for q in data.queries)  # every evaluated turn has an answer


def test_conversations_rebuilt_from_cast_match_qrecc(data):
    """QReCC test conversation c is CAsT 2019 topic c: the official turns 1-8 of conversation 1
    ask CAsT's raw utterances word for word, and each raw utterance of the 95 turns shares at
    least half of its words with the turn's rewrite (the rewrite only resolves references)."""
    official = load_qrecc_eval(shared_file("qrecc/qrecc_test_conv1_turns1-8.jsonl"), data.store,
                               cache_dir=data.store.parent)
    assert [t.question for t in official.conversations["1"].turns] == [
        t.question for t in data.conversations["1"].turns[:8]]
    shares = []
    for qid in data.queries:
        conversation, number = data.turn_of(qid)
        turn = conversation.turn(number)
        raw, rewrite = set(answer_tokens(turn.question)), set(answer_tokens(turn.rewrite))
        shares.append(len(raw & rewrite) / len(raw))
        assert turn.answer is None and all(t.answer is None for t in conversation.history(number))
    assert sum(share >= 0.5 for share in shares) >= 93
    assert sum(share == 1.0 for share in shares) >= 50  # self-contained questions


def test_full_history_is_the_questions_here(data, histories, minilm_tokenizer):
    """No answers are known for the history, so `full` (X_t) reads the earlier questions only."""
    conversation, number = data.turn_of("1_9")
    full = Full(OldestFirstConfig(max_tokens=256), tokenizer=minilm_tokenizer).format_turn(
        conversation, number)
    questions = histories["questions_only"].format_turn(conversation, number)
    assert full == questions and full.startswith("What is a physician's assistant? [SEP]")
    assert full.endswith("[SEP] Do NPs or PAs make more?")


def test_metrics_are_fractions_and_consistent(results):
    for (_, relevance), result in results.items():
        level = result["levels"][relevance]
        for no_gold, values in (("skip", level["groups"]["all"]),
                                ("miss", level["both"]["miss"]["all"])):
            hits = [values[f"hits@{k}"] for k in KS]
            assert all(0.0 <= values[name] <= 1.0 for name in values if name != "count")
            assert hits == sorted(hits)  # more passages, more hits
            assert values["mrr"] <= hits[-1]
            if relevance == "gold-ids":
                for k in KS:
                    assert values[f"recall@{k}"] <= values[f"hits@{k}"]
                bound = 21 / 53 if no_gold == "skip" else 21 / 95
                assert values["hits@100"] <= bound + 1e-12
            else:
                assert not any(name.startswith("recall") for name in values)
        if relevance == "gold-ids":
            assert level["num_gold_outside_collection"] == 53 - 21


def test_turns_without_gold_are_counted_both_ways(results, data, cache):
    for (_, relevance), result in results.items():
        level = result["levels"][relevance]
        no_gold = 42 if relevance == "gold-ids" else 0  # every evaluated turn has an answer
        assert level["num_no_gold"] == no_gold and level["no_gold"] == "skip"
        skip, miss = level["both"]["skip"], level["both"]["miss"]
        assert skip["num_queries"] == level["num_queries"] == 95 - no_gold
        assert miss["num_queries"] == 95 and skip["all"] == level["groups"]["all"]
        # a turn without gold adds 0 under "miss": its mean is the skip mean scaled down
        for name, value in skip["all"].items():
            if name != "count":
                assert miss["all"][name] == pytest.approx(value * (95 - no_gold) / 95)
    # asking for "miss" puts those numbers in the groups (from the cached run)
    counted = evaluate_qrecc_retrieval(data, {"name": "bm25"}, "rewrite", KS, "gold-ids", "miss",
                                       cache_dir=cache, progress=False)
    level = counted["levels"]["gold-ids"]
    assert counted["cached"] and level["no_gold"] == "miss" and level["num_queries"] == 95
    assert level["groups"]["all"] == level["both"]["miss"]["all"]
    assert level["groups"]["follow-up"]["count"] == 77


def test_rewrite_beats_the_raw_question(results):
    for relevance in ("gold-ids", "span-f1"):
        groups = {h: results[h, relevance]["levels"][relevance]["groups"] for h in HISTORIES}
        rewrite, question, history = (groups[h]["all"] for h in ("rewrite", "question_only",
                                                                 "questions_only"))
        assert rewrite["mrr"] > question["mrr"] + 0.03
        assert rewrite["hits@5"] > question["hits@5"] + 0.05
        # the earlier questions bring back the topic the raw follow-up question lost
        assert history["hits@5"] > question["hits@5"]
        # on first turns the raw question is (nearly) the rewrite: no big difference there
        first, first_q = groups["rewrite"]["first"], groups["question_only"]["first"]
        assert abs(first["hits@5"] - first_q["hits@5"]) <= 0.1


@pytest.mark.slow
def test_end_to_end_with_the_shipped_reader(data, cache):
    """BM25 (rewrite) + the shipped extractive reader on the top passage of each turn: every
    turn gets an answer from its top passage, and the scores are percentages. QReCC's answers
    are long free-form sentences, so a short extracted span rarely matches one exactly."""
    from convqa.front.evaluation.qrecc import evaluate_qrecc_answers
    from convqa.runs import read_run
    from convqa.io import iter_jsonl

    result = evaluate_qrecc_answers(data, {"name": "bm25"}, {"name": "extractive",
                                                             "model": "convqa-reader"},
                                    "rewrite", top_ks=(1,), cache_dir=cache, progress=False)
    entry = result["by_k"]["1"]
    values = entry["groups"]["all"]
    assert result["turns"] == values["count"] == 95 and result["num_no_answer"] == 0
    assert 0.0 <= values["em"] <= values["f1"] <= 100.0 and values["f1"] > 0.0
    run = read_run(result["retrieval_run"]).hits
    for _, record in iter_jsonl(entry["predictions"]):
        assert record["prediction"] and record["passage_id"] == run[record["qid"]][0].passage_id
