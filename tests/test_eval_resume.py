"""A stopped evaluation resumes: the retriever's, the reranker's and the reader's per-turn
results go into a journal beside the file they end in (convqa/turn_journal.py), and a rerun of
the same row does only the turns the journal lacks, to the same results."""
from __future__ import annotations

import json

import pytest

from convqa.errors import DataError
from convqa.front.evaluation.answers import evaluate_answers
from convqa.front.evaluation.rerank import rerank_turns
from convqa.turn_journal import TurnJournal
from convqa.types import Hit, RerankedHit

from test_eval_answers import Oracle, Scripted
from test_eval_retrieval import bench  # noqa: F401  (the fixture)


class Stopped(Exception):
    """Stands for a Ctrl-C in the middle of a step."""


class StopsAfter(Oracle):
    """The oracle reader, stopped after `limit` reads."""

    def __init__(self, bench_dir, limit: int):
        super().__init__(bench_dir)
        self.limit = limit

    def read(self, question, history, passages):
        if self.calls == self.limit:
            raise Stopped()
        return super().read(question, history, passages)


def test_journal_keeps_records_and_drops_a_torn_last_line(tmp_path):
    journal = TurnJournal.beside(tmp_path / "answers.jsonl")
    assert journal.path.name == "answers.jsonl.part" and journal.done() == {}
    journal.add({"qid": "1_1", "prediction": "a"})
    journal.add({"qid": "1_2", "prediction": "b"})
    journal.close()
    with open(journal.path, "a", encoding="utf-8") as handle:
        handle.write('{"qid": "1_3", "predic')          # killed while writing
    assert list(TurnJournal(journal.path).done()) == ["1_1", "1_2"]
    again = TurnJournal(journal.path)
    again.add({"qid": "1_3", "prediction": "c"})        # appends after the mended file
    again.close()
    assert list(TurnJournal(journal.path).done()) == ["1_1", "1_2", "1_3"]
    again.finish()
    assert not journal.path.exists()
    nowhere = TurnJournal.beside(None)                  # a step whose result is not kept
    with nowhere:
        nowhere.add({"qid": "1_1", "prediction": "a"})
    nowhere.finish()
    assert nowhere.path is None and nowhere.done() == {} and list(tmp_path.iterdir()) == []


def test_a_damaged_journal_line_names_the_file_and_line(tmp_path):
    path = tmp_path / "run.jsonl.part"
    path.write_text('{"qid": "1_1"}\nnot json\n{"qid": "1_3"}\n')
    with pytest.raises(DataError, match=r"run.jsonl.part.*line 2: not a journal record"):
        TurnJournal(path).done()


def test_a_stopped_read_resumes_where_it_stopped(bench, tmp_path, monkeypatch):  # noqa: F811
    from convqa.registry import READERS

    spec = {"name": "oracle"}
    whole = evaluate_answers(bench, Scripted(), Oracle(bench), history="question_only",
                             top_ks=(5,), cache_dir=tmp_path / "whole", progress=False)
    readers = [StopsAfter(bench, 2), Oracle(bench)]
    monkeypatch.setattr(READERS, "build", lambda _: readers.pop(0))
    with pytest.raises(Stopped):
        evaluate_answers(bench, Scripted(), spec, history="question_only", top_ks=(5,),
                         cache_dir=tmp_path / "c", progress=False)
    [part] = (tmp_path / "c").rglob("*.answers-*.jsonl.part")
    assert len(part.read_text().splitlines()) == 2
    resumed_reader = readers[0]
    resumed = evaluate_answers(bench, Scripted(), spec, history="question_only", top_ks=(5,),
                               cache_dir=tmp_path / "c", progress=False)
    assert resumed_reader.calls == 1                    # only the turn the first run lacked
    assert resumed["by_k"]["5"]["groups"] == whole["by_k"]["5"]["groups"]
    assert not part.exists() and part.with_suffix("").is_file()


class Reverses:
    """A reranker that reverses the hits it is given, stopped after `limit` turns if set."""

    def __init__(self, limit: int | None = None):
        self.limit, self.calls = limit, 0

    def rerank_turn(self, question, history, hits, passages):
        if self.calls == self.limit:
            raise Stopped()
        self.calls += 1
        return [RerankedHit(h.passage_id, float(rank), rank, h.score, h.rank)
                for rank, h in enumerate(reversed(hits), start=1)]


def test_a_stopped_reranking_resumes_to_the_same_run(bench, tmp_path):  # noqa: F811
    from convqa.benchmark import load_labelled_turns

    labelled = load_labelled_turns(bench)
    turns, conversations = labelled.turns, labelled.conversations
    hits = {t.qid: [Hit("10#0", 3.0, 1), Hit("20#0", 2.0, 2), Hit("30#0", 1.0, 3)]
            for t in turns}
    passages = bench / "passages"
    whole, _ = rerank_turns(Reverses(), turns, conversations, hits, passages, 3, False)
    journal = TurnJournal.beside(tmp_path / "run.rerank-x.jsonl")
    with pytest.raises(Stopped):
        rerank_turns(Reverses(limit=2), turns, conversations, hits, passages, 3, False,
                     journal=journal)
    records = [json.loads(line) for line in journal.path.read_text().splitlines()]
    assert [r["qid"] for r in records] == [t.qid for t in turns[:2]]
    second = Reverses()
    resumed, ms = rerank_turns(second, turns, conversations, hits, passages, 3, False,
                               journal=TurnJournal(journal.path))
    assert second.calls == len(turns) - 2 and len(ms) == len(turns)
    assert resumed == whole and list(resumed) == [t.qid for t in turns]


class Numbered:
    """A retriever ranking passage "p{n}" first for query "q{n}", stopped after `limit`
    batches if set; counts the queries it is asked."""

    def __init__(self, limit: int | None = None):
        self.limit, self.batches, self.asked = limit, 0, 0

    def retrieve_batch(self, queries, k):
        if self.batches == self.limit:
            raise Stopped()
        self.batches += 1
        self.asked += len(queries)
        return [[Hit(f"p{q[1:]}", 2.0, 1), Hit("p0", 1.0, 2)][:k] for q in queries]


def test_a_stopped_retrieval_resumes_at_the_batch_it_stopped_on(tmp_path):
    from convqa.runs import retrieve_all

    queries = {f"c_{n}": f"q{n}" for n in range(1, 8)}
    queries["c_8"] = "  "                                    # empty: no hits, never asked
    whole = retrieve_all(Numbered(), queries, 2, batch_size=3, progress=False)
    journal = TurnJournal.beside(tmp_path / "run.jsonl")
    with pytest.raises(Stopped):
        retrieve_all(Numbered(limit=1), queries, 2, batch_size=3, progress=False,
                     journal=journal)
    assert list(journal.done()) == ["c_1", "c_2", "c_3"]
    second = Numbered()
    resumed = retrieve_all(second, queries, 2, batch_size=3, progress=False,
                           journal=TurnJournal(journal.path))
    assert second.asked == 4 and resumed == whole and resumed["c_8"] == []
