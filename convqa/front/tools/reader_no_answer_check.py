#!/usr/bin/env python
"""How an extractive reader's decoding defaults do on questions they were not calibrated on.

    python -m convqa.front.tools.reader_no_answer_check --reader convqa-reader \\
        --squad ../shared/data/squad/dev-v2.0.json \\
        --benchmark bench/full --retriever '{name: bm25, index: bench/full/indexes/bm25}' \\
        --history '{name: full, max_tokens: 128, keep_first: true}' --ks 1 5 --cache /tmp/reads

SQuAD v2.0's held-out articles (HasAns / NoAns / overall F1) and the benchmarks' dev turns (the
share of UNANSWERABLE turns answered "no answer", what the answer-evaluable turns lose), with
the reader folder's threshold or --threshold (readers/extractive/no_answer_check.py); with
--absent-article N, also N answer-evaluable dev turns read with and without their topic
article (the share of the second answered "no answer": a collection that lacks the answer).
The reads share `convqa train reader-decoding`'s cache.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from convqa.errors import ConfigError, reports_errors
from convqa.front.cli.train_decoding import (absent_article_sources, add_source_arguments,
                                             benchmark_sources, build_reader, open_reranking,
                                             reader_folder, reranker_spec, squad_source)


def check(args: argparse.Namespace, say=print) -> dict[str, Any]:
    from readers.extractive.no_answer_check import source_scores

    if not args.benchmark and not args.squad:
        raise ConfigError("nothing to check: give --benchmark and/or --squad")
    args.k = max(args.ks)
    folder = reader_folder(args.reader)
    options = {} if args.threshold is None else {"no_answer_threshold": args.threshold}
    reader = build_reader(folder, **options)
    decoding = reader.model.decoding
    result: dict[str, Any] = {
        "reader": args.reader, "decoding": decoding.to_dict() if decoding else {},
        "threshold": reader.no_answer.threshold if reader.no_answer else None,
        "threshold_after_reranker": reader.reranked_no_answer.threshold
        if reader.reranked_no_answer else None, "sources": {}}
    if args.squad:
        source = squad_source(args, reader, "heldout", say)
        result["sources"]["squad-v2-heldout-articles"] = source_scores(reader, source, 1)
    reranking = open_reranking(reranker_spec(args.reranker), args.k) if args.reranker else None
    for source in (benchmark_sources(args, reader, say, reranking=reranking)
                   + absent_article_sources(args, reader, say, args.k, reranking)):
        result["sources"][f"{source.name}-{args.split}"] = [
            source_scores(reader, source, k, bool(args.reranker))
            for k in sorted(set(args.ks))]
    if args.report:
        from convqa.io import write_json

        write_json(args.report, {**result, "settings": {k: v for k, v in vars(args).items()
                                                        if k != "quiet"}})
    return result


@reports_errors("reader_no_answer_check")
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m convqa.front.tools.reader_no_answer_check",
                                     description=__doc__.split("\n\n")[0])
    add_source_arguments(parser, "dev", None, 5)
    parser.add_argument("--ks", type=int, nargs="+", default=[5],
                        help="passages read (default 5, the pipeline's top k)")
    parser.add_argument("--threshold", type=float,
                        help="no-answer threshold to use instead of the folder's")
    parser.add_argument("--report", metavar="FILE", help="write the scores as JSON")
    args = parser.parse_args(argv)
    say = (lambda _: None) if args.quiet else (lambda text: print(text, file=sys.stderr))
    result = check(args, say)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
