"""The OR-QuAC blocks benchmark: built from the real sample files (reranker labels marked as
such), read back with checks, and scored with the three query inputs."""
from __future__ import annotations

import json

import pytest

from convqa.errors import DataError
from convqa.types import Hit
from retrievers.convdr.orquac_bench import (benchmark_conversations, block_id,
                                            build_orquac_benchmark, load_benchmark, main,
                                            score_benchmark)

from conftest import shared_file


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    folder = shared_file("orquac/canard_convir_sample_quadruples_top3.jsonl").parent
    out = tmp_path_factory.mktemp("orquac_bench") / "bench"
    return folder, out, build_orquac_benchmark(folder, out)


def test_built_from_the_real_files(bench):
    folder, out, meta = bench
    counts = meta["counts"]
    assert counts["quadruple_rows"] == 1000 and counts["ambiguous"] == 10
    assert counts["unmatched"] == 0 and counts["queries"] == {"reranker": 973, "gold": 100}
    assert "NOT gold" in meta["labels"]
    queries, _ = load_benchmark(out)
    first_row = json.loads((folder / "canard_convir_sample_quadruples_top3.jsonl")
                           .open(encoding="utf-8").readline())
    # the first quadruple row: "What interesting fact ...", context "What is Rising popularity
    # about?"; in orquac_train.question.tsv that is turn q#1 of dialog C_49801ec...
    query = next(q for q in queries if q.qid == "C_49801ec35b494288bfa0169cde8bd97f_0_2")
    assert query.label_set == "reranker" and query.question == first_row["utterance"]
    assert [t.question for t in query.history] == [first_row["context"]]
    assert query.rewrite.startswith("What interesting fact about the article \"Shinee")
    assert query.relevant == {block_id(first_row["pos_passage"]): 1}
    assert query.reranker_negatives == [block_id(first_row["neg_passage"])]
    gold = [q for q in queries if q.label_set == "gold"]
    assert gold[0].question == "Where is Malayali located?" and gold[0].turn == 1
    assert gold[0].conversation_id == "C_69758fcdfc1f46baba0e92c0f3b0919c_1"
    assert len(benchmark_conversations(out)) == meta["counts"]["conversations"]
    from convqa.corpus import PassageStore

    store = PassageStore.open(out / "passages")
    assert len(store) == counts["passages"] == 1998
    assert store.get(block_id(first_row["pos_passage"])).text == first_row["pos_passage"]


class Echo:
    """A fake retriever: ranks `p-good` first for queries containing 'good', else third."""

    def __init__(self):
        self.seen = []

    def retrieve_batch(self, queries, k=10):
        self.seen.extend(queries)
        out = []
        for text in queries:
            ids = ["p-good", "x", "y"] if "good" in text else ["x", "y", "p-good"]
            out.append([Hit(pid, 1.0 / r, r) for r, pid in enumerate(ids, 1)])
        return out


def _tiny_bench(folder, lines=None):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "meta.json").write_text(json.dumps({"format": "convqa-orquac-bench",
                                                  "labels": "test labels"}))
    rows = lines if lines is not None else [
        {"qid": "d_2", "label_set": "reranker", "conversation_id": "d", "turn": 2,
         "question": "and it?", "rewrite": "is it good?",
         "history": [{"question": "first", "answer": None}], "relevant": {"p-good": 1}},
        {"qid": "d_2", "label_set": "gold", "conversation_id": "d", "turn": 2,
         "question": "and it?", "rewrite": "is it good?",
         "history": [{"question": "first", "answer": None}], "relevant": {"p-good": 1}},
        {"qid": "e_1", "label_set": "reranker", "conversation_id": "e", "turn": 1,
         "question": "good question", "rewrite": "plain", "history": [],
         "relevant": {"p-good": 1}}]
    (folder / "queries.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_scoring_uses_the_chosen_input(tmp_path):
    folder = _tiny_bench(tmp_path / "b")
    retriever = Echo()
    rewrite = score_benchmark(folder, retriever, "rewrite", k=3, ks=(1, 3))
    assert retriever.seen == ["is it good?", "plain"]  # distinct texts retrieved once
    # reranker set: d_2 rank 1 (RR 1), e_1 rank 3 (RR 1/3) -> MRR 2/3; gold: d_2 only
    assert rewrite["sets"]["reranker"]["metrics"]["mrr"] == pytest.approx(2 / 3)
    assert rewrite["sets"]["reranker"]["metrics"]["hits@1"] == pytest.approx(0.5)
    assert rewrite["sets"]["gold"]["metrics"]["mrr"] == 1.0
    assert rewrite["labels"] == "test labels"
    question = score_benchmark(folder, Echo(), "question", k=3, ks=(1, 3))
    assert question["sets"]["reranker"]["metrics"]["mrr"] == pytest.approx((1 / 3 + 1) / 2)
    retriever = Echo()
    score_benchmark(folder, retriever, "conversation", k=3, ks=(1, 3))
    assert retriever.seen == ["first [SEP] and it?", "good question"]  # questions_only


@pytest.mark.parametrize("change, field", [
    (lambda r: r.pop("qid"), "qid"),
    (lambda r: r.update(label_set="silver"), "label_set"),
    (lambda r: r.update(relevant={}), "relevant"),
    (lambda r: r.update(relevant={"p": True}), "relevant"),
    (lambda r: r.update(history=[{"question": 1}]), "history[0]"),
    (lambda r: r.update(turn="2"), "turn"),
])
def test_bad_query_lines_name_line_and_field(tmp_path, change, field):
    row = {"qid": "d_1", "label_set": "gold", "conversation_id": "d", "turn": 1,
           "question": "q", "rewrite": "q", "history": [], "relevant": {"p": 1}}
    bad = dict(row)
    change(bad)
    folder = _tiny_bench(tmp_path / "b", [row | {"qid": "ok"}, bad])
    with pytest.raises(DataError) as err:
        load_benchmark(folder)
    assert err.value.line == 2 and err.value.field == field


def test_command_line_reports_errors_in_one_line(tmp_path, capsys):
    assert main(["score", "--bench", str(tmp_path), "--retriever", "bm25"]) == 2
    error = capsys.readouterr().err
    assert "not an OR-QuAC benchmark folder" in error and error.count("\n") == 1
