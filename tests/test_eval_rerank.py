"""A reranker in an evaluation row: the retriever's run rescored turn by turn as the tiny random
cross-encoder scores it, cached next to the retriever's run, scored and read in the reranked
order; a bad reranker spec fails before anything runs.

The benchmark is tests/training_helpers.py's (10 articles, 17 passages); every test reads all
its turns (split "all"): 10 retrieval-evaluable turns, 9 of them answer-evaluable. The
retriever returns every passage of the store in id order, so each turn's first TOP_N hits are
the same four passages and only the conversation decides how the reranker orders them.
"""
from __future__ import annotations

import json

import pytest
import torch

from convqa.benchmark import load_labelled_turns
from convqa.errors import ConfigError
from convqa.front.evaluation.answers import evaluate_answers
from convqa.front.evaluation.retrieval import evaluate_retrieval, score_run, select_turns
from convqa.front.evaluation.systems import check_components, load_systems
from convqa.registry import RERANKERS
from convqa.runs import read_run
from convqa.types import Answer, Hit
from reader_helpers import single_thread  # noqa: F401 (autouse fixture)
from reranker_helpers import tiny_cross_encoder
from retrievers.base import Retriever
from retrievers.rerank.reranker import CrossEncoderReranker
from training_helpers import make_benchmark, passages

TOP_N = 4
IDS = sorted(p.id for p in passages())


class Everything(Retriever):
    """Every passage of the store, in id order (scores 100, 99, ...)."""

    def retrieve_batch(self, queries, k=10):
        return [[Hit(pid, 100.0 - i, i + 1) for i, pid in enumerate(IDS[:k])] for _ in queries]

    def fingerprint(self) -> str:
        return "everything-v1"


class Recording:
    """Answers with the first passage it is given and remembers the passage ids of each read."""

    spec = {"name": "recording"}

    def __init__(self):
        self.read_ids: dict[tuple[str, int], list[str]] = {}

    def read(self, question, history, passages):
        self.read_ids[(question, len(history))] = [p.id for p in passages]
        return Answer(passages[0].text, 1.0, passages[0].id) if passages else None

    def fingerprint(self) -> str:
        return "recording-v1"


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    return make_benchmark(tmp_path_factory.mktemp("bench") / "tiny")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("reranker") / "model"
    tiny_cross_encoder(seed=11).save_pretrained(path)  # orders by the question
    return path


def spec(model_dir, top_n=TOP_N):
    return {"name": "cross_encoder", "model": str(model_dir), "top_n": top_n,
            "precision": "fp32", "device": "cpu"}


def expected_run(bench, model_dir, top_n=TOP_N):
    """The reranked run worked out from the reranker's own scores of each conversation."""
    reranker = RERANKERS.build(spec(model_dir, top_n))
    data = load_labelled_turns(bench)
    by_id = {p.id: p for p in passages()}
    run = {}
    for turn in select_turns(data.turns, "all"):
        query = reranker.query_text(turn.question,
                                    data.conversations[turn.conversation_id].history(turn.turn))
        scores = reranker.score(query, [by_id[pid] for pid in IDS[:top_n]])
        order = sorted(range(top_n), key=lambda i: (-scores[i], i))
        run[turn.qid] = [IDS[i] for i in order] + IDS[top_n:]
    return run


def test_a_reranked_row_is_scored_on_the_rerankers_order(bench, model_dir, tmp_path):
    expected = expected_run(bench, model_dir)
    assert len({tuple(ids[:TOP_N]) for ids in expected.values()}) > 1  # the conversation counts
    result = evaluate_retrieval(bench, Everything(), split="all", cache_dir=tmp_path,
                                progress=False, reranker=spec(model_dir))
    run = read_run(result["run_file"]).hits
    assert {qid: [h.passage_id for h in hits] for qid, hits in run.items()} == expected
    assert all([h.rank for h in hits] == list(range(1, len(IDS) + 1)) for hits in run.values())
    assert all(hits[i].score > hits[i + 1].score for hits in run.values()
               for i in range(len(hits) - 1))  # score order is rank order, tail included
    # the metrics are the reranked run's, and differ from the retriever's own
    turns = select_turns(load_labelled_turns(bench).turns, "all")
    assert result["levels"] == score_run(run, turns, result["ks"])
    plain = evaluate_retrieval(bench, Everything(), split="all", cache_dir=tmp_path,
                               progress=False)
    assert plain["run_file"] == result["retriever_run_file"] and "rerank" not in plain
    assert plain["levels"] != result["levels"]
    assert result["top_n"] == TOP_N and result["reranker"]["model"] == str(model_dir)
    rerank = result["rerank"]
    assert rerank["turns"] == len(turns) and rerank["cached"] is False
    assert rerank["cpu"] == str(torch.backends.cpu.get_cpu_capability())
    assert rerank["precision"] == "fp32" and rerank["ms_per_turn"]["p50"] > 0


def test_the_reranked_run_is_cached_and_no_cache_recomputes(bench, model_dir, tmp_path,
                                                            monkeypatch):
    first = evaluate_retrieval(bench, Everything(), split="all", cache_dir=tmp_path,
                               progress=False, reranker=spec(model_dir))
    calls = []
    original = CrossEncoderReranker.rerank_turn
    monkeypatch.setattr(CrossEncoderReranker, "rerank_turn",
                        lambda self, *a: calls.append(1) or original(self, *a))
    again = evaluate_retrieval(bench, Everything(), split="all", cache_dir=tmp_path,
                               progress=False, reranker=spec(model_dir))
    assert calls == [] and again["cached"] and again["rerank"]["cached"]
    assert again["run_file"] == first["run_file"] and again["levels"] == first["levels"]
    assert again["rerank"]["ms_per_turn"] == first["rerank"]["ms_per_turn"]
    # another top_n is another run next to the same retriever run
    other = evaluate_retrieval(bench, Everything(), split="all", cache_dir=tmp_path,
                               progress=False, reranker=spec(model_dir, top_n=2))
    turns = first["rerank"]["turns"]
    assert other["run_file"] != first["run_file"] and len(calls) == turns == 10
    assert other["retriever_run_file"] == first["retriever_run_file"]
    fresh = evaluate_retrieval(bench, Everything(), split="all", cache_dir=tmp_path,
                               progress=False, reranker=spec(model_dir), use_cache=False)
    assert len(calls) == 2 * turns and fresh["run_file"] is None and not fresh["rerank"]["cached"]
    assert fresh["levels"] == first["levels"]


def test_an_answer_table_reranks_only_its_turns_and_shares_a_whole_run(bench, model_dir, tmp_path,
                                                                      monkeypatch):
    """Answer tables rerank their answer-evaluable turns alone (on the full collection 405 of
    the 1,295 dev turns); a retrieval table is never served that part, and an answer table
    after a retrieval table reads its whole run without reranking again."""
    answerable = {t.qid for t in load_labelled_turns(bench).turns if t.answer_evaluable}
    calls = []
    original = CrossEncoderReranker.rerank_turn
    monkeypatch.setattr(CrossEncoderReranker, "rerank_turn",
                        lambda self, *a: calls.append(1) or original(self, *a))
    expected = expected_run(bench, model_dir)
    reader = Recording()
    first = evaluate_answers(bench, Everything(), reader, split="all", top_ks=(1,),
                             cache_dir=tmp_path / "a", progress=False, reranker=spec(model_dir))
    assert len(calls) == len(answerable) == 9
    part = read_run(first["retrieval_run"]).hits
    assert set(part) == answerable
    assert {q: [h.passage_id for h in hits] for q, hits in part.items()} == \
        {q: expected[q] for q in answerable}
    again = evaluate_answers(bench, Everything(), reader, split="all", top_ks=(1,),
                             cache_dir=tmp_path / "a", progress=False, reranker=spec(model_dir))
    assert len(calls) == 9 and again["rerank"]["cached"]
    whole = evaluate_retrieval(bench, Everything(), split="all", cache_dir=tmp_path / "a",
                               progress=False, reranker=spec(model_dir))
    assert len(calls) == 9 + 10 and whole["run_file"] != first["retrieval_run"]
    assert set(read_run(whole["run_file"]).hits) == set(expected)
    # the other order: the retrieval table first, then the answer table reranks nothing
    calls.clear()
    evaluate_retrieval(bench, Everything(), split="all", cache_dir=tmp_path / "b",
                       progress=False, reranker=spec(model_dir))
    after = evaluate_answers(bench, Everything(), reader, split="all", top_ks=(1,),
                             cache_dir=tmp_path / "b", progress=False, reranker=spec(model_dir))
    assert len(calls) == 10 and after["rerank"]["cached"]
    assert after["by_k"]["1"]["groups"] == first["by_k"]["1"]["groups"]


def test_the_reader_reads_the_reranked_order_at_most_top_n(bench, model_dir, tmp_path,
                                                          capsys):
    expected = expected_run(bench, model_dir)
    data = load_labelled_turns(bench)
    reader = Recording()
    result = evaluate_answers(bench, Everything(), reader, split="all", top_ks=(1, 3, 10),
                              cache_dir=tmp_path, progress=False, reranker=spec(model_dir))
    answerable = [t for t in data.turns if t.answer_evaluable]
    assert result["turns"] == len(answerable) and result["top_n"] == TOP_N
    assert result["rerank"]["turns"] == len(answerable) == 9  # only the turns read
    for turn in answerable:
        ids = reader.read_ids[(turn.question, turn.turn - 1)]
        assert ids == expected[turn.qid][:TOP_N]  # k=10 reads the top_n reranked, as answering
    predictions = [json.loads(line) for line in
                   open(result["by_k"]["1"]["predictions"], encoding="utf-8")]
    assert {p["qid"]: p["passage_id"] for p in predictions} == \
        {t.qid: expected[t.qid][0] for t in answerable}
    # the breakdown tool takes the reranked run file and counts what the reader read
    from convqa.front.tools.answer_passage_breakdown import main

    capsys.readouterr()
    assert main(["--benchmark", str(bench), "--run", result["retrieval_run"]]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted((r["k"], r["passages_read"]) for r in rows) == [(1, 1), (3, 3), (10, TOP_N)]
    dev = [t for t in answerable if t.split == "dev"]
    read_at_10 = sum(bool(set(t.answer_passage_ids) & set(expected[t.qid][:TOP_N])) for t in dev)
    assert next(r for r in rows if r["k"] == 10)["read"] == read_at_10


def test_a_systems_row_with_a_reranker_beside_its_retriever_row(bench, model_dir, tmp_path):
    from convqa.front.evaluation.tables import rerank_note, retrieval_table
    from convqa.front.evaluation.targets import benchmark_target

    path = tmp_path / "systems.yaml"
    path.write_text(
        "systems:\n"
        "  - label: BM25\n"
        "    retriever: {name: bm25, index: '{corpus}/indexes/bm25', backend: numpy}\n"
        "  - label: BM25 + reranker\n"
        "    retriever: {name: bm25, index: '{corpus}/indexes/bm25', backend: numpy}\n"
        f"    reranker: {{name: cross_encoder, model: {model_dir}, top_n: 3, precision: fp32}}\n",
        encoding="utf-8")
    systems = load_systems(path)
    check_components(systems)
    target = benchmark_target(f"tiny={bench}")
    results = retrieval_table([target], systems, "all", str(tmp_path / "cache"),
                              progress=False, log=lambda _: None)["tiny"]
    plain, reranked = results
    assert reranked["retriever_run_file"] == plain["run_file"]
    assert reranked["reranker"]["top_n"] == 3 and "reranker" not in plain
    run, before = read_run(reranked["run_file"]).hits, read_run(plain["run_file"]).hits
    for qid, hits in before.items():  # the first 3 reordered, the rest kept in order
        ids = [h.passage_id for h in run[qid]]
        assert sorted(ids[:3]) == sorted(h.passage_id for h in hits[:3])
        assert ids[3:] == [h.passage_id for h in hits[3:]]
    note = " ".join(rerank_note([plain, reranked]))
    assert "BM25 + reranker" in note and reranked["rerank"]["cpu"] in note
    assert "BM25 " not in note.replace("BM25 + reranker", "")


@pytest.mark.parametrize("reranker, message", [
    ("{name: cross, model: m}", r"unknown reranker 'cross' \(known: cross_encoder\)"),
    ("{name: cross_encoder}", "option 'model' .* is required"),
    ("{name: cross_encoder, model: m, top_n: 0}", "top_n must be a positive integer"),
    ("{name: cross_encoder, model: m, top_k: 5}", "unknown option 'top_k'"),
    ("[cross_encoder]", "'reranker' must name a reranker"),
])
def test_a_bad_reranker_spec_fails_before_any_run(tmp_path, reranker, message):
    path = tmp_path / "systems.yaml"
    path.write_text("systems:\n  - label: ok\n    retriever: bm25\n"
                    f"  - label: bad\n    retriever: bm25\n    reranker: {reranker}\n",
                    encoding="utf-8")
    with pytest.raises(ConfigError, match=f"^{path}: system 'bad': .*{message}") as caught:
        check_components(load_systems(path))
    assert "\n" not in str(caught.value)


def test_the_cli_names_the_file_and_row_of_a_bad_reranker(bench, tmp_path, capsys):
    from convqa.front.cli.main import main

    path = tmp_path / "systems.yaml"
    path.write_text("systems:\n  - label: bad\n    retriever: bm25\n"
                    "    reranker: {name: cross_encodr, model: m}\n", encoding="utf-8")
    capsys.readouterr()
    assert main(["eval", "retrieval", "--benchmark", str(bench), "--systems", str(path),
                 "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{path}: system 'bad': unknown reranker 'cross_encodr'" in err[0]
    assert not (tmp_path / "out.md").exists()


def test_a_phrase_row_takes_no_reranker(tmp_path):
    path = tmp_path / "systems.yaml"
    path.write_text("systems:\n  - label: p\n    phrase_index: {index: x}\n"
                    "    reranker: {name: cross_encoder, model: m}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="'phrase_index' does not go with 'reranker'"):
        load_systems(path)


def test_an_official_file_is_reranked_the_same_way(fixtures_dir, model_dir, tmp_path):
    from convqa.corpus import PassageStore, read_passages
    from convqa.front.evaluation.topiocqa import evaluate_topiocqa_retrieval, load_official_turns
    from test_eval_topiocqa import RANKINGS, Scripted

    fx = fixtures_dir / "eval"
    store = tmp_path / "passages"
    PassageStore.build(read_passages(fx / "topiocqa_collection.tsv"), store,
                       progress=False).close()
    path = fx / "topiocqa_dev_later_release.json"
    result = evaluate_topiocqa_retrieval(path, store, Scripted(), "question_only",
                                         cache_dir=tmp_path / "cache", progress=False,
                                         reranker=spec(model_dir, top_n=2))
    reranker = RERANKERS.build(spec(model_dir, top_n=2))
    turns, conversations = load_official_turns(path)
    run = read_run(result["run_file"]).hits
    with PassageStore.open(store) as opened:
        for turn in turns:
            ranked = RANKINGS[turn.question]
            query = reranker.query_text(turn.question,
                                        conversations[turn.conversation_id].history(turn.turn))
            scores = reranker.score(query, [opened.get(pid) for pid in ranked[:2]])
            order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
            assert [h.passage_id for h in run[turn.qid]] == \
                [ranked[i] for i in order] + ranked[2:]
    assert result["rerank"]["turns"] == len(turns) and result["top_n"] == 2


def test_cached_rerank_turns_keeps_one_file_per_model_and_retrieved_hits(bench, model_dir,
                                                                        tmp_path):
    """The training-turn jobs' cache (reranker fusion, reader decoding): the same reranker on
    the same hits reads its file back; other hits or another weight rerank into a file of
    their own."""
    from convqa.front.evaluation.rerank import cached_rerank_turns

    data = load_labelled_turns(bench)
    turns = select_turns(data.turns, "all")
    hits = {t.qid: Everything().retrieve_batch([""], TOP_N)[0] for t in turns}
    reranker = RERANKERS.build(spec(model_dir))
    cache = tmp_path / "cache"
    first = cached_rerank_turns(reranker, turns, data.conversations, hits, bench / "passages",
                                TOP_N, cache, progress=False)
    assert not first.cached and first.facts["turns"] == len(turns)
    assert {q: [h.passage_id for h in hs] for q, hs in first.hits.items()} == {
        q: ids[:TOP_N] for q, ids in expected_run(bench, model_dir).items()}
    again = cached_rerank_turns(reranker, turns, data.conversations, hits, bench / "passages",
                                TOP_N, cache, progress=False)
    assert again.cached and again.hits == first.hits and again.facts == first.facts
    shifted = {q: [Hit(h.passage_id, h.score + 1, h.rank) for h in hs] for q, hs in hits.items()}
    assert not cached_rerank_turns(reranker, turns, data.conversations, shifted,
                                   bench / "passages", TOP_N, cache, progress=False).cached
    weighted = RERANKERS.build({**spec(model_dir), "retriever_weight": 0.5})
    assert not cached_rerank_turns(weighted, turns, data.conversations, hits,
                                   bench / "passages", TOP_N, cache, progress=False).cached
    assert len(list(cache.glob("rerank-*.json"))) == 3
    assert cached_rerank_turns(reranker, turns, data.conversations, hits, bench / "passages",
                               TOP_N, None, progress=False).cached is False


def test_retriever_scores_that_move_rescore_no_pair(bench, model_dir, tmp_path, monkeypatch):
    """A rerun whose retriever scores moved in their last digits (another thread count picks
    another query-encoder precision) misses the reranked-turns file but scores no pair again:
    the logits come from the memo and the ranking is the one a fresh reranker gives."""
    from convqa.front.evaluation.rerank import cached_rerank_turns

    data = load_labelled_turns(bench)
    turns = select_turns(data.turns, "all")
    hits = {t.qid: Everything().retrieve_batch([""], TOP_N)[0] for t in turns}
    cache = tmp_path / "cache"
    weighted = {**spec(model_dir), "retriever_weight": 0.5}
    first = cached_rerank_turns(RERANKERS.build(weighted), turns, data.conversations, hits,
                                bench / "passages", TOP_N, cache, progress=False)
    assert first.facts["rerank_ms_per_turn_p50"] is not None
    assert len(list(cache.glob("logits-*.json"))) == 1
    moved = {q: [Hit(h.passage_id, h.score * (1 + 1e-6), h.rank) for h in hs]
             for q, hs in hits.items()}
    fresh = cached_rerank_turns(RERANKERS.build(weighted), turns, data.conversations, moved,
                                bench / "passages", TOP_N, None, progress=False)
    calls = []
    monkeypatch.setattr(CrossEncoderReranker, "score_pairs",
                        lambda self, q, p: calls.append(len(p)) or [0.0] * len(p))
    again = cached_rerank_turns(RERANKERS.build(weighted), turns, data.conversations, moved,
                                bench / "passages", TOP_N, cache, progress=False)
    assert not again.cached and calls == []
    assert again.hits == fresh.hits and again.hits != first.hits
    assert again.facts["memo_pairs"] == TOP_N * len(turns)
    assert again.facts["rerank_ms_per_turn_p50"] is None   # no model time to report
    reranker = RERANKERS.build(weighted)
    cached_rerank_turns(reranker, turns, data.conversations, moved, bench / "passages", TOP_N,
                        cache, progress=False)
    assert "score" not in vars(reranker)   # the memo leaves the reranker as it found it


def test_after_a_second_stage_the_reader_reads_only_what_it_returns(bench, model_dir, tmp_path):
    """The second stage keeps 2 of the first stage's 4: k = 3 and 10 read those 2, as
    `convqa answer --rerank-then` does."""
    second = tmp_path / "second"
    tiny_cross_encoder(seed=5).save_pretrained(second)
    cascade = {**spec(model_dir), "second_stage": {"model": str(second), "top_n": 2,
                                                   "precision": "fp32"}}
    built = RERANKERS.build(cascade)
    data = load_labelled_turns(bench)
    by_id = {p.id: p for p in passages()}
    reader = Recording()
    result = evaluate_answers(bench, Everything(), reader, split="all", top_ks=(1, 3, 10),
                              cache_dir=tmp_path, progress=False, reranker=cascade)
    assert result["top_n"] == TOP_N and result["reads"] == 2
    answerable = [t for t in data.turns if t.answer_evaluable]
    hits = [Hit(pid, 100.0 - i, i + 1) for i, pid in enumerate(IDS[:TOP_N])]
    texts = [by_id[pid] for pid in IDS[:TOP_N]]
    for turn in answerable:
        history = data.conversations[turn.conversation_id].history(turn.turn)
        kept = [h.passage_id for h in built.rerank_turn(turn.question, history, hits, texts)]
        assert len(kept) == 2
        assert reader.read_ids[(turn.question, turn.turn - 1)] == kept

    def predicted(k):
        return [json.loads(line)["passage_id"] for line in
                open(result["by_k"][k]["predictions"], encoding="utf-8")]

    assert predicted("3") == predicted("10")
    assert result["by_k"]["3"]["groups"] == result["by_k"]["10"]["groups"]
