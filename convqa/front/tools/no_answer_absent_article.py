"""How well the reader's calibrated confidence tells "the collection lacks the answer".

Each sampled answer-evaluable turn is read twice from the retriever's run: its top k passages
as they come, and its top k once every passage of the turn's topic article is taken out (the
collection as if it lacked the answer). A confidence that separates the two reads lets the
reader say "no answer in the collection"; this prints how often each falls under the folder's
threshold and the quantiles of both.

    OMP_NUM_THREADS=1 python -m convqa.front.tools.no_answer_absent_article --benchmark /tmp/bench/vital \
        --retriever '{name: dense, index: /tmp/bench/vital/indexes/dpr-ihn}' --turns 150
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from convqa.errors import reports_errors


def article_taken_out(hits, article_id: str, k: int) -> list:
    """The first `k` hits that are not passages of `article_id`."""
    from convqa.benchmark.labelled_turns import article_id_of

    return [hit for hit in hits if article_id_of(hit.passage_id) != article_id][:k]


def confidences(reader, reads) -> np.ndarray:
    """The calibrated confidence of the answer of each read turn, as `reader.read` decides it
    (0 where no passage gives an answer)."""
    answers = [reader.answer_from(read.spans, read.passages, read.scores, always_answer=True)
               for read in reads]
    return np.array([answer.confidence if answer is not None else 0.0 for answer in answers])


@reports_errors("no_answer_absent_article")
def main(argv: list[str] | None = None) -> int:
    from convqa.quiet import add_verbose_argument, quiet_third_party

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--benchmark", required=True, help="a `convqa data topiocqa-wiki` folder")
    parser.add_argument("--retriever", required=True, help="retriever spec (inline YAML)")
    parser.add_argument("--history", default="oldest_first")
    parser.add_argument("--reader", default="convqa-reader")
    parser.add_argument("--split", default="train")
    parser.add_argument("--turns", type=int, default=150)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--depth", type=int, default=200,
                        help="passages retrieved before the topic article is taken out")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    add_verbose_argument(parser)
    args = parser.parse_args(argv)
    with quiet_third_party(not args.verbose):
        report = probe(args)
    print(json.dumps(report, indent=2))
    return 0


def probe(args: argparse.Namespace) -> dict:
    """The report of `main` for its parsed arguments."""
    from convqa.benchmark import load_labelled_turns
    from convqa.corpus.store import PassageStore
    from convqa.errors import ConvQAError
    from convqa.registry import READERS
    from convqa.specs import parse_spec
    from readers.extractive.calibration_data import benchmark_turns, retrieve
    from readers.extractive.fusion_tuning import read_turns

    reader = READERS.build({"name": "extractive", "model": args.reader})
    if reader.no_answer is None:
        raise ConvQAError(f"{args.reader}: the folder has no calibrated confidence")
    data = load_labelled_turns(args.benchmark)
    turns, _ = benchmark_turns(data.turns, args.split, args.turns, 0, args.seed)
    if not turns:
        raise ConvQAError(f"{args.benchmark}: no answer-evaluable turns in split "
                          f"{args.split!r}")
    hits = retrieve(turns, data.conversations, parse_spec(args.retriever, "retriever")[0],
                    parse_spec(args.history, "history")[0], args.depth,
                    progress=not args.quiet)
    runs = {"as retrieved": {t.qid: hits[t.qid][:args.k] for t in turns},
            "topic article taken out": {
                t.qid: article_taken_out(hits[t.qid], t.gold_article_id, args.k)
                for t in turns}}
    threshold = reader.no_answer.threshold
    report = {"benchmark": args.benchmark, "turns": len(turns), "k": args.k,
              "threshold": threshold}
    with PassageStore.open(Path(args.benchmark) / "passages") as store:
        for name, run in runs.items():
            reads = read_turns(reader, turns, data.conversations, run, store, args.k,
                               progress=not args.quiet)
            values = confidences(reader, reads)
            report[name] = {
                "below_threshold": round(100 * float((values < threshold).mean()), 1),
                "quantiles_10_25_50_75_90": np.quantile(
                    values, [.1, .25, .5, .75, .9]).round(3).tolist()}
    return report


if __name__ == "__main__":
    sys.exit(main())
