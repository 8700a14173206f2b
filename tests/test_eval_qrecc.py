"""QReCC evaluation on the hand-made official-format fixture in tests/fixtures/qrecc_eval.

The fixture (see its README): 5 turns, gold ids from the qrels
    1_1 gold {p1}        answer "a flightless bird endemic to New Zealand"
    1_2 gold {p2, p3}    answer "about 20 percent of the female's body weight"
    1_3 no gold          answer ""  (no answer: no gold under either relevance)
    2_1 gold {p5}        answer "in Siberia, Russia"
    2_2 gold {p9}        answer "1,642 metres"   (p9 is not in the collection)
The Scripted retriever ranks (for the rewrites):
    1_1 [p1, p4, p2]   1_2 [p4, p3, p1, p2]   1_3 [p2]   2_1 [p6, p7, p8, p5]   2_2 [p5, p6]

Gold ids, ks = (1, 3, 5), worked by hand:
    1_1 first relevant at rank 1: H@1 1, H@3 1, H@5 1; R@1 1, R@3 1, R@5 1; RR 1
    1_2 p3 at 2, p2 at 4:          H 0, 1, 1;          R 0, 1/2, 2/2;       RR 1/2
    2_1 p5 at 4:                   H 0, 0, 1;          R 0, 0, 1;           RR 1/4
    2_2 p9 never retrievable:      all 0
  skip (4 turns): H@1 1/4, H@3 2/4, H@5 3/4; R@1 1/4, R@3 1.5/4 = .375, R@5 3/4; MRR 1.75/4
  miss (5 turns, 1_3 as 0): H .2 .4 .6; R .2 .3 .6; MRR 1.75/5 = .35
Span F1 >= 0.8 to the answer (normalized answer tokens in brackets):
    1_1 [flightless bird endemic to new zealand]: p1 holds it -> rank 1
    1_2 [about 20 percent of females body weight]: only p3 holds it (p4, p1, p2 share at most
        "of") -> rank 2
    2_1 [in siberia russia]: p5 holds it -> rank 4; p6, p7 share only "in" (best F1 2*1/(1+3)
        = .5), p8 "siberia is large region of russia" has both words but not together: the best
        span is one word, F1 2*(1 * 1/3)/(1 + 1/3) = .5
    2_2 [1642 metres]: p6 holds it -> rank 2 (a relevant passage although the gold id is absent)
  skip: H@1 1/4, H@3 3/4, H@5 4/4, MRR (1 + 1/2 + 1/4 + 1/2)/4 = .5625
  miss: H .2 .6 .8, MRR 2.25/5 = .45
"""
from __future__ import annotations

import json
import shutil

import pytest

from conftest import shared_file
from convqa.errors import ConfigError, ConvQAError, DataError
from convqa.front.evaluation.qrecc import (SpanJudge, answers_markdown, evaluate_qrecc_answers,
                                           evaluate_qrecc_retrieval, load_qrecc_eval,
                                           retrieval_markdown)
from convqa.types import Answer, Hit

KS = (1, 3, 5)
RANKINGS = {
    "What is a kiwi bird?": ["p1", "p4", "p2"],
    "How big are kiwi bird eggs?": ["p4", "p3", "p1", "p2"],
    "What do kiwi birds eat?": ["p2"],
    "Where is Lake Baikal?": ["p6", "p7", "p8", "p5"],
    "How deep is Lake Baikal?": ["p5", "p6"],
}


class Scripted:
    """Returns the scripted ranking of a query text, nothing for other queries."""

    def __init__(self, rankings=None, name="scripted-v1"):
        self.rankings = RANKINGS if rankings is None else rankings
        self.name = name
        self.calls = 0

    def retrieve_batch(self, queries, k=10):
        self.calls += 1
        return [[Hit(pid, 1.0 / rank, rank) for rank, pid in
                 enumerate(self.rankings.get(q, [])[:k], start=1)] for q in queries]

    def fingerprint(self) -> str:
        return self.name


@pytest.fixture(scope="module")
def fixture(fixtures_dir):
    return fixtures_dir / "qrecc_eval"


@pytest.fixture
def data(fixture, tmp_path):
    return load_qrecc_eval(fixture / "qrecc_test.json", fixture / "passages.jsonl",
                           fixture / "qrecc_test_qrels_binary.json", cache_dir=tmp_path)


def _all(result, relevance="gold-ids"):
    return result["levels"][relevance]["groups"]["all"]


# -- loading -------------------------------------------------------------------------------------

def test_load_reads_turns_gold_answers_and_collection(data, fixture, tmp_path):
    assert data.queries == ["1_1", "1_2", "1_3", "2_1", "2_2"]
    assert data.gold == {"1_1": ["p1"], "1_2": ["p2", "p3"], "1_3": [], "2_1": ["p5"],
                         "2_2": ["p9"]}
    assert data.answers["1_3"] == "" and data.answers["2_2"] == "1,642 metres"
    assert data.sources["qrels_unmatched"] == 1  # 7_1
    conversation, number = data.turn_of("1_2")
    assert conversation.turn(number).rewrite == "How big are kiwi bird eggs?"
    assert [t.answer for t in conversation.history(number)] == [
        "a flightless bird endemic to New Zealand"]
    # the JSONL collection became a store in the cache, reused by the next load
    assert data.store.parent == tmp_path / "passages"
    again = load_qrecc_eval(fixture / "qrecc_test.json", fixture / "passages.jsonl",
                            fixture / "qrecc_test_qrels_binary.json", cache_dir=tmp_path)
    assert again.store == data.store and again.digest() == data.digest()


def test_trec_qrels_give_the_same_gold(data, fixture, tmp_path):
    trec = load_qrecc_eval(fixture / "qrecc_test.json", fixture / "passages.jsonl",
                           fixture / "qrels.trec", cache_dir=tmp_path)
    assert trec.gold == data.gold  # p4 judged 0 for 1_2 is not gold


def test_store_folder_is_used_as_is(data, fixture, tmp_path):
    other = load_qrecc_eval(fixture / "qrecc_test.json", data.store,
                            fixture / "qrecc_test_qrels_binary.json", cache_dir=tmp_path / "x")
    assert other.store == data.store and not (tmp_path / "x").exists()


def test_gold_from_the_passages_field_matches_the_official_qrels(tmp_path, fixture):
    """The real 8 official-format turns of test conversation 1 carry `Passages`; without qrels
    those are the gold, and they agree with the official test qrels."""
    turns = shared_file("qrecc/qrecc_test_conv1_turns1-8.jsonl")
    qrels = shared_file("qrecc/qrecc_test_qrels_binary.json")
    from_field = load_qrecc_eval(turns, fixture / "passages.jsonl", cache_dir=tmp_path)
    from_qrels = load_qrecc_eval(turns, fixture / "passages.jsonl", qrels, cache_dir=tmp_path)
    assert from_field.gold == from_qrels.gold
    assert [q for q in from_field.queries if from_field.has_gold(q)] == ["1_2", "1_3", "1_7",
                                                                          "1_8"]
    assert from_qrels.sources["qrels_unmatched"] == 8088 - 4


def test_no_gold_source_means_span_relevance_only(fixture, tmp_path):
    data = load_qrecc_eval(fixture / "qrecc_test.json", fixture / "passages.jsonl",
                           cache_dir=tmp_path)
    assert data.gold is None  # the fixture has no `Passages` field and no qrels were given
    with pytest.raises(ConfigError, match="no gold passage ids"):
        evaluate_qrecc_retrieval(data, Scripted(), "rewrite", ks=KS, cache_dir=tmp_path,
                                 progress=False)
    result = evaluate_qrecc_retrieval(data, Scripted(), "rewrite", ks=KS, relevance="span-f1",
                                      cache_dir=tmp_path, progress=False)
    assert _all(result, "span-f1")["hits@3"] == pytest.approx(3 / 4)


# -- retrieval metrics, by hand ------------------------------------------------------------------

def test_gold_id_metrics_both_ways(data, tmp_path):
    skip = evaluate_qrecc_retrieval(data, Scripted(), "rewrite", ks=KS, cache_dir=tmp_path,
                                    progress=False)
    level = skip["levels"]["gold-ids"]
    assert skip["relevance"] == "gold-ids" and skip["no_gold"] == level["no_gold"] == "skip"
    assert level["num_no_gold"] == 1 and level["num_gold_outside_collection"] == 1
    assert level["num_queries"] == 4 and skip["turns"] == 5
    assert _all(skip) == pytest.approx({
        "count": 4, "hits@1": 1 / 4, "hits@3": 2 / 4, "hits@5": 3 / 4, "recall@1": 1 / 4,
        "recall@3": 0.375, "recall@5": 3 / 4, "mrr": 1.75 / 4})
    miss = evaluate_qrecc_retrieval(data, Scripted(), "rewrite", ks=KS, no_gold="miss",
                                    cache_dir=tmp_path, progress=False)
    assert miss["cached"] and _all(miss) == pytest.approx({
        "count": 5, "hits@1": 0.2, "hits@3": 0.4, "hits@5": 0.6, "recall@1": 0.2,
        "recall@3": 0.3, "recall@5": 0.6, "mrr": 0.35})
    # both ways are in every result, and the counts add up
    both = level["both"]
    assert both["miss"]["all"] == pytest.approx(_all(miss))
    assert both["skip"]["num_queries"] + level["num_no_gold"] == both["miss"]["num_queries"]


def test_groups_by_position_and_source(data, tmp_path):
    groups = evaluate_qrecc_retrieval(data, Scripted(), "rewrite", ks=KS, cache_dir=tmp_path,
                                      progress=False)["levels"]["gold-ids"]["groups"]
    assert list(groups) == ["all", "first", "follow-up", "source:nq", "source:quac"]
    # first = 1_1, 2_1; follow-up (skip) = 1_2, 2_2; quac = 1_1, 1_2; nq = 2_1, 2_2
    assert groups["first"]["count"] == 2 and groups["first"]["mrr"] == pytest.approx(1.25 / 2)
    assert groups["first"]["hits@5"] == 1.0 and groups["first"]["hits@1"] == 0.5
    assert groups["follow-up"]["recall@3"] == pytest.approx(0.25)
    assert groups["follow-up"]["mrr"] == pytest.approx(0.25)
    assert groups["source:quac"]["mrr"] == pytest.approx(0.75)
    assert groups["source:nq"]["hits@5"] == pytest.approx(0.5)


def test_span_f1_metrics_both_ways(data, tmp_path):
    skip = evaluate_qrecc_retrieval(data, Scripted(), "rewrite", ks=KS, relevance="span-f1",
                                    cache_dir=tmp_path, progress=False)
    level = skip["levels"]["span-f1"]
    assert skip["span"] == {"method": "qrecc", "threshold": 0.8}
    assert level["num_no_gold"] == 1  # 1_3: empty answer
    assert "num_gold_outside_collection" not in level
    assert _all(skip, "span-f1") == pytest.approx({
        "count": 4, "hits@1": 0.25, "hits@3": 0.75, "hits@5": 1.0, "mrr": 0.5625})
    assert level["both"]["miss"]["all"] == pytest.approx({
        "count": 5, "hits@1": 0.2, "hits@3": 0.6, "hits@5": 0.8, "mrr": 0.45})
    exact = evaluate_qrecc_retrieval(data, Scripted(), "rewrite", ks=KS, relevance="span-f1",
                                     span_method="exact", cache_dir=tmp_path, progress=False)
    assert _all(exact, "span-f1") == _all(skip, "span-f1")  # no substring-only match here


def test_span_judge_agrees_with_span_relevance(data):
    from convqa.corpus import PassageStore
    from convqa.metrics.relevance import span_relevance

    with PassageStore.open(data.store) as store:
        for method in ("qrecc", "exact"):
            judge = SpanJudge(store, method=method)
            for passage in store:
                for answer in list(data.answers.values()) + ["ake Baikal", "The", "Russia!"]:
                    assert judge.relevant(passage.id, answer) == span_relevance(
                        passage.text, answer, method=method), (method, passage.id, answer)
        # the official rule 1 is a character substring: "ake baikal" is inside "lake baikal";
        # as tokens the best span is "baikal", F1 2 * 1/(1 + 2) = .67
        assert SpanJudge(store).relevant("p5", "ake Baikal")
        assert not SpanJudge(store, method="exact").relevant("p5", "ake Baikal")


def test_history_changes_the_queries(data, tmp_path):
    """question_only asks "How big are its eggs?", which the script does not know: no hits."""
    result = evaluate_qrecc_retrieval(data, Scripted(), "question_only", ks=KS,
                                      cache_dir=tmp_path, progress=False)
    level = result["levels"]["gold-ids"]
    assert result["history"]["name"] == "question_only"
    assert level["num_no_hits"] == 3  # 1_2, 1_3, 2_2; 1_1 and 2_1 ask their rewrite
    assert _all(result)["mrr"] == pytest.approx((1 + 0.25) / 4)


def test_runs_are_cached_by_config(data, tmp_path):
    retriever = Scripted()
    first = evaluate_qrecc_retrieval(data, retriever, "rewrite", ks=KS, cache_dir=tmp_path,
                                     progress=False)
    again = evaluate_qrecc_retrieval(data, retriever, "rewrite", ks=KS, relevance="span-f1",
                                     cache_dir=tmp_path, progress=False)
    assert not first["cached"] and again["cached"] and retriever.calls == 1
    assert again["run_key"] == first["run_key"]
    other = evaluate_qrecc_retrieval(data, Scripted(name="scripted-v2"), "rewrite", ks=KS,
                                     cache_dir=tmp_path, progress=False)
    assert other["run_key"] != first["run_key"] and not other["cached"]
    deeper = evaluate_qrecc_retrieval(data, retriever, "rewrite", ks=KS, k=10,
                                      cache_dir=tmp_path, progress=False)
    assert not deeper["cached"] and retriever.calls == 2


def test_bm25_spec_without_index_is_built_over_the_collection(data, tmp_path):
    result = evaluate_qrecc_retrieval(data, "bm25", "rewrite", ks=KS, cache_dir=tmp_path,
                                      progress=False)
    spec = result["retriever"]
    assert spec["name"] == "bm25" and spec["preset"] == "qrecc"
    assert spec["index"].startswith(str(tmp_path / "indexes" / "bm25-"))
    assert "k1=0.82-b=0.68" in spec["index"]
    with open(result["run_file"], encoding="utf-8") as handle:
        run = json.loads(handle.readline())
    assert run["qid"] == "1_1" and run["query"] == "What is a kiwi bird?"
    ids = [hit["passage_id"] for hit in run["hits"]]
    assert set(ids) <= {"p1", "p2", "p3", "p4"}  # the passages with "kiwi" or "bird"
    again = evaluate_qrecc_retrieval(data, {"name": "bm25"}, "rewrite", ks=KS,
                                     cache_dir=tmp_path, progress=False)
    assert again["cached"] and again["retriever"]["index"] == spec["index"]
    # every rewrite names its topic, so BM25 finds the gold of 1_1 and 2_1 in the top 5
    assert result["levels"]["gold-ids"]["groups"]["first"]["hits@5"] == 1.0


def test_tables_label_both_recalls(data, tmp_path):
    results = [evaluate_qrecc_retrieval(data, Scripted(), "rewrite", ks=KS, relevance=rel,
                                        no_gold="miss", cache_dir=tmp_path, progress=False,
                                        label=f"scripted {rel}")
               for rel in ("gold-ids", "span-f1")]
    table = retrieval_markdown(results)
    lines = table.splitlines()
    assert lines[0].split(" | ")[4:7] == ["H@1", "H@3", "H@5"]
    assert "| scripted gold-ids | gold-ids | miss (1) | 5 | 20.0 | 40.0 | 60.0 | 20.0 | 30.0 |" \
        in table
    assert "| scripted span-f1 | span-f1 | miss (1) | 5 | 20.0 | 60.0 | 80.0 | - | - | - |" in table
    assert "QReCC's script calls it Recall@k" in table


# -- end to end ----------------------------------------------------------------------------------

class Oracle:
    """Answers with the gold answer when it is given a gold passage, else abstains ("")."""

    def __init__(self, data):
        self.gold = {}
        for qid in data.queries:
            conversation, number = data.turn_of(qid)
            self.gold[conversation.turn(number).question] = (data.answers[qid], set(data.gold[qid]))
        self.calls = []

    def read(self, question, history, passages):
        self.calls.append((question, len(history), len(passages)))
        answer, gold = self.gold[question]
        for passage in passages:
            if passage.id in gold:
                return Answer(answer, 1.0, passage.id)
        return None

    def fingerprint(self):
        return "oracle-v1"


def test_end_to_end_em_f1(data, tmp_path):
    """EM at k=1: 1_1 (gold p1 at rank 1) and 1_3 (no answer, oracle abstains: SQuAD counts
    "" against "" as right) -> 2/5; at k=3 1_2 (p3 at rank 2) too -> 3/5; 2_1 (rank 4) and 2_2
    (gold not in the collection) stay wrong. F1 = EM: an answer is all right or empty."""
    oracle = Oracle(data)
    result = evaluate_qrecc_answers(data, Scripted(), oracle, "rewrite", top_ks=(1, 3),
                                    cache_dir=tmp_path, progress=False)
    assert result["convention"] == "squad" and result["num_no_answer"] == 1
    by_k = {k: v["groups"]["all"] for k, v in result["by_k"].items()}
    assert by_k["1"] == pytest.approx({"count": 5, "em": 40.0, "f1": 40.0})
    assert by_k["3"] == pytest.approx({"count": 5, "em": 60.0, "f1": 60.0})
    # the reader gets the raw question, the turns before it, and at most k passages
    assert ("How big are its eggs?", 1, 3) in oracle.calls
    assert ("What do they eat?", 2, 1) in oracle.calls
    # predictions are cached: a rerun does not read again
    rerun = evaluate_qrecc_answers(data, Scripted(), oracle, "rewrite", top_ks=(1, 3),
                                   cache_dir=tmp_path, progress=False)
    assert len(oracle.calls) == 10 and rerun["by_k"]["3"]["cached"]
    table = answers_markdown([result])
    assert "| Scripted, rewrite | Oracle | 3 | 5 | 60.0 | 60.0 |" in table


def test_partial_answer_f1(data, tmp_path):
    """A reader answering "Siberia" to 2_1: EM 0, F1 2*(1 * 1/3)/(1 + 1/3) = 0.5."""

    class Siberia:
        def read(self, question, history, passages):
            return Answer("Siberia", 1.0, passages[0].id) if passages else None

    result = evaluate_qrecc_answers(data, Scripted(), Siberia(), "rewrite", top_ks=(1,),
                                    cache_dir=tmp_path, progress=False)
    groups = result["by_k"]["1"]["groups"]
    assert groups["source:nq"] == pytest.approx({"count": 2, "em": 0.0, "f1": 25.0})
    assert result["by_k"]["1"]["predictions"] is None  # no fingerprint: not cached


# -- bad input -----------------------------------------------------------------------------------

def _copy(fixture, tmp_path, name, text):
    folder = tmp_path / "data"
    if not folder.exists():
        shutil.copytree(fixture, folder)
    (folder / name).write_text(text, encoding="utf-8")
    return folder


def _one_line(error) -> str:
    message = str(error.value)
    assert "\n" not in message
    return message


def test_malformed_qrecc_file_names_file_and_field(fixture, tmp_path):
    turns = json.loads((fixture / "qrecc_test.json").read_text())
    del turns[3]["Question"]
    folder = _copy(fixture, tmp_path, "qrecc_test.json", json.dumps(turns, indent=1))
    with pytest.raises(DataError) as error:
        load_qrecc_eval(folder / "qrecc_test.json", folder / "passages.jsonl", cache_dir=tmp_path)
    message = _one_line(error)
    assert "qrecc_test.json" in message and "'Question'" in message and "missing" in message


def test_malformed_passages_name_file_and_line(fixture, tmp_path):
    text = (fixture / "passages.jsonl").read_text().splitlines()
    text[2] = '{"id": "p3", "title": "Kiwi"}'
    folder = _copy(fixture, tmp_path, "passages.jsonl", "\n".join(text) + "\n")
    with pytest.raises(DataError) as error:
        load_qrecc_eval(folder / "qrecc_test.json", folder / "passages.jsonl", cache_dir=tmp_path)
    assert "passages.jsonl:3" in _one_line(error) and "'text'" in str(error.value)
    built = tmp_path / "passages"
    assert not built.exists() or not any(built.iterdir())  # no half-built store


@pytest.mark.parametrize("name, text, where", [
    ("qrecc_test_qrels_binary.json", '{"1_1": {"p1": "yes"}}', "field '1_1'"),
    ("qrecc_test_qrels_binary.json", '{"1_1": {"p1": 1},\n "1_2": {"p2": 1}', ":2"),
    ("qrels.trec", "1_1 Q0 p1 1\n1_2 p2 1\n", "qrels.trec:2"),
])
def test_malformed_qrels_name_file_and_place(fixture, tmp_path, name, text, where):
    folder = _copy(fixture, tmp_path, name, text)
    with pytest.raises(DataError) as error:
        load_qrecc_eval(folder / "qrecc_test.json", folder / "passages.jsonl", folder / name,
                        cache_dir=tmp_path)
    assert name in _one_line(error) and where in str(error.value)


def test_qrels_of_another_split_are_an_error(fixture, tmp_path):
    folder = _copy(fixture, tmp_path, "qrels.json", '{"8_1": {"p1": 1}, "9_2": {"p2": 1}}')
    with pytest.raises(DataError, match="no qrels key matches"):
        load_qrecc_eval(folder / "qrecc_test.json", folder / "passages.jsonl",
                        folder / "qrels.json", cache_dir=tmp_path)


def test_missing_collection_is_an_error(fixture, tmp_path):
    with pytest.raises(DataError, match="passage collection not found"):
        load_qrecc_eval(fixture / "qrecc_test.json", tmp_path / "nowhere.jsonl",
                        cache_dir=tmp_path)


def test_hit_outside_the_collection_is_an_error(data, tmp_path):
    stray = dict(RANKINGS, **{"How deep is Lake Baikal?": ["p5", "p42"]})
    with pytest.raises(DataError) as error:
        evaluate_qrecc_retrieval(data, Scripted(stray, "stray"), "rewrite", ks=KS,
                                 cache_dir=tmp_path, progress=False)
    assert "turn 2_2" in _one_line(error) and "'p42'" in str(error.value)


def test_rewrite_history_needs_every_rewrite(fixture, tmp_path):
    turns = json.loads((fixture / "qrecc_test.json").read_text())
    del turns[4]["Rewrite"]
    folder = _copy(fixture, tmp_path, "qrecc_test.json", json.dumps(turns))
    data = load_qrecc_eval(folder / "qrecc_test.json", folder / "passages.jsonl",
                           folder / "qrecc_test_qrels_binary.json", cache_dir=tmp_path)
    with pytest.raises(DataError) as error:
        evaluate_qrecc_retrieval(data, Scripted(), "rewrite", ks=KS, cache_dir=tmp_path,
                                 progress=False)
    assert "conversation 2 turn 2 has no rewrite" in _one_line(error)


@pytest.mark.parametrize("options, match", [
    ({"relevance": "gold"}, "unknown relevance"),
    ({"no_gold": "drop"}, "unknown no_gold"),
    ({"span_method": "fuzzy"}, "unknown span method"),
    ({"ks": (0, 5)}, "positive integers"),
    ({"k": 3}, "smaller than the largest cutoff"),
    ({"relevance": "span-f1", "threshold": 1.5}, "threshold must be in"),
])
def test_bad_options_are_config_errors(data, tmp_path, options, match):
    options = {"ks": KS, **options}
    with pytest.raises(ConfigError, match=match):
        evaluate_qrecc_retrieval(data, Scripted(), "rewrite", cache_dir=tmp_path,
                                 progress=False, **options)


def test_bad_history_is_a_convqa_error(data, tmp_path):
    with pytest.raises(ConvQAError):
        evaluate_qrecc_retrieval(data, Scripted(), "newest_first", ks=KS, cache_dir=tmp_path,
                                 progress=False)
    with pytest.raises(ConfigError, match="takes no options"):
        evaluate_qrecc_retrieval(data, Scripted(), {"name": "rewrite", "max_tokens": 9},
                                 ks=KS, cache_dir=tmp_path, progress=False)


@pytest.mark.slow
def test_module_example_runs(monkeypatch, tmp_path, capsys):
    """The example in the module docstring, as written (it loads the shipped reader)."""
    import textwrap

    import convqa.front.evaluation.qrecc as module
    from conftest import REPO

    example = module.__doc__.split("\n\n    from ", 1)[1].split("\n\n`load_scai_eval", 1)[0]
    monkeypatch.setenv("CONVQA_CACHE", str(tmp_path))
    monkeypatch.chdir(REPO)
    exec(textwrap.dedent("    from " + example), {})
    printed = capsys.readouterr().out
    assert "| bm25, rewrite | span-f1 | miss (1) | 5 |" in printed
    assert "| bm25, question_only | extractive | 5 | 5 |" in printed


def test_bad_bm25_option_is_a_config_error(data, tmp_path):
    with pytest.raises(ConfigError, match="option 'k1'"):
        evaluate_qrecc_retrieval(data, {"name": "bm25", "k1": "high"}, "rewrite", ks=KS,
                                 cache_dir=tmp_path, progress=False)
