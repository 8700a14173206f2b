"""FiD training/eval examples from a benchmark and a retrieval run (what FiD reads: the top n).

    write_examples("fid-train.jsonl", examples_from_run("/tmp/bench/full", "run.jsonl", n=20,
                                                        split="train"))

Each turn of `split` with a gold answer becomes one example: its question, the conversation
before it, its gold answers and the run's top `n` passages for that turn (best first). Turns
whose answer is yes/no/unanswerable are kept by default (a generative reader can say them;
`answerable_only=True` keeps only answer-evaluable turns, those with an answer passage). A
run must come from the benchmark's own passage store: an unknown passage id is an error.
"""
from __future__ import annotations

import os
from typing import Iterator

from convqa.benchmark import load_labelled_turns
from convqa.corpus import PassageStore
from convqa.errors import ConfigError, DataError

from .data import FiDExample


def examples_from_run(benchmark: str | os.PathLike, run_file: str | os.PathLike, n: int = 20,
                      split: str = "train", answerable_only: bool = False
                      ) -> Iterator[FiDExample]:
    from convqa.runs import read_run

    if n < 1:
        raise ConfigError(f"n must be at least 1, got {n}")
    if split not in ("train", "dev", "all"):
        raise ConfigError(f"unknown split {split!r} (train, dev or all)")
    data = load_labelled_turns(benchmark)
    run = read_run(run_file).hits
    with PassageStore.open(os.path.join(benchmark, "passages")) as store:
        for turn in data.turns:
            if split != "all" and turn.split != split:
                continue
            if not turn.answers or (answerable_only and not turn.answer_evaluable):
                continue
            passages = []
            for hit in run.get(turn.qid, [])[:n]:
                try:
                    passages.append(store.get(hit.passage_id))
                except KeyError:
                    raise DataError(f"passage {hit.passage_id!r} is not in the benchmark's "
                                    "passage store", run_file, field=turn.qid) from None
            history = data.conversations[turn.conversation_id].history(turn.turn)
            yield FiDExample(turn.qid, turn.question, list(history), list(turn.answers), passages)
