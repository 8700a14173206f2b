"""How a reader's decoding defaults do on questions it was not calibrated on: SQuAD v2.0's
held-out articles and a benchmark's dev turns, with and without its no-answer threshold.

    python -m readers.extractive.no_answer_check --reader convqa-reader \\
        --squad ../shared/data/squad/dev-v2.0.json \\
        --benchmark bench/full --retriever '{name: bm25, index: bench/full/indexes/bm25}' \\
        --history '{name: full, max_tokens: 128, keep_first: true}' --ks 5 --cache /tmp/reads

- SQuAD v2.0, held-out articles (the reader run's article split), each question read against its
  paragraph: HasAns F1 (0 for a no-answer), NoAns F1 (the share answered "no answer"), overall
  F1 over all the questions, as SQuAD v2.0's script counts them; HasAns F1 always answering.
- Benchmark turns of --split (default dev), the top k of the retriever for each k: the share of
  unanswerable turns caught (answered "no answer"), the share of answer-evaluable turns lost to
  a no-answer, and their F1 with the threshold and always answering (TopiOCQA convention).
The reader reads with its folder's decoding (calibrate.py writes it); --threshold tries another.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Sequence

from convqa.errors import ConfigError, ConvQAError
from convqa.metrics.answer import score_answer

from .calibration_data import Source
from .fusion_tuning import ReadTurn


def answers_at(reader: Any, turns: Sequence[ReadTurn], k: int) -> list[tuple[Any, Any]]:
    """(the reader's answer, its always-answer answer) of each turn reading the top `k`."""
    out = []
    for turn in turns:
        spans, passages, scores = turn.spans[:k], turn.passages[:k], turn.scores[:k]
        out.append((reader.answer_from(spans, passages, scores),
                    reader.answer_from(spans, passages, scores, always_answer=True)))
    return out


def _f1(answer: Any, turn: ReadTurn, convention: str) -> float:
    text = answer.text if answer is not None else ""
    return score_answer(text, turn.answers, convention)["f1"]


def _abstains(answer: Any) -> bool:
    return answer is None or answer.no_answer


def source_scores(reader: Any, source: Source, k: int) -> dict[str, Any]:
    """Percentages over the source's questions at top `k` (see the module docstring)."""
    has = answers_at(reader, source.answerable, k)
    no = answers_at(reader, source.unanswerable, k)
    has_f1 = [_f1(a, t, source.convention) for (a, _), t in zip(has, source.answerable)]
    always_f1 = [_f1(a, t, source.convention) for (_, a), t in zip(has, source.answerable)]
    caught = [float(_abstains(a)) for a, _ in no]
    lost = [float(_abstains(a)) for a, _ in has]

    def mean(values: Sequence[float]) -> float | None:
        return round(100.0 * sum(values) / len(values), 2) if values else None

    return {"k": k, "answerable": len(has), "unanswerable": len(no),
            "has_answer_f1": mean(has_f1), "has_answer_f1_always": mean(always_f1),
            "has_answer_no_answer_share": mean(lost),
            "no_answer_f1": mean(caught),   # = the share of unanswerable questions caught
            "overall_f1": mean(has_f1 + caught)}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--reader", default="convqa-reader", help="reader folder or alias")
    p.add_argument("--threshold", type=float,
                   help="no-answer threshold to use instead of the folder's")
    p.add_argument("--benchmark", action="append", default=[], metavar="DIR")
    p.add_argument("--retriever", action="append", default=[], metavar="SPEC")
    p.add_argument("--run", action="append", default=[], metavar="FILE")
    p.add_argument("--history", action="append", default=[], metavar="SPEC")
    p.add_argument("--split", default="dev")
    p.add_argument("--turns", type=int, default=None,
                   help="at most N answer-evaluable turns per benchmark (default all)")
    p.add_argument("--unanswerable", type=int, default=None,
                   help="at most N unanswerable turns per benchmark (default all)")
    p.add_argument("--ks", type=int, nargs="+", default=[5])
    p.add_argument("--squad", metavar="FILE", help="SQuAD v2.0 file (its held-out articles)")
    p.add_argument("--squad-questions", type=int, default=None,
                   help="at most N answerable and N unanswerable questions (default all)")
    p.add_argument("--heldout-fraction", type=float, default=0.1)
    p.add_argument("--heldout-seed", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cache", metavar="DIR", help="read cache (shared with calibrate.py)")
    p.add_argument("--report", metavar="FILE", help="write the scores as JSON")
    p.add_argument("--quiet", action="store_true")


def check(args: argparse.Namespace, say=print) -> dict[str, Any]:
    from convqa.registry import READERS

    from . import reader as _  # noqa: F401 (registers "extractive")
    from .calibrate import benchmark_sources, reader_folder, squad_source

    if not args.benchmark and not args.squad:
        raise ConfigError("nothing to check: give --benchmark and/or --squad")
    folder = reader_folder(args.reader)
    spec = {"name": "extractive", "model": str(folder)}
    if args.threshold is not None:
        spec["no_answer_threshold"] = args.threshold
    reader = READERS.build(spec)
    args.k = max(args.ks)
    result: dict[str, Any] = {"reader": args.reader, "decoding": reader.model.decoding.to_dict()
                              if reader.model.decoding else {},
                              "threshold": reader.no_answer.threshold
                              if reader.no_answer else None, "sources": {}}
    if args.squad:
        source = squad_source(args, reader, "heldout", args.squad_questions, say)
        result["sources"]["squad-v2-heldout-articles"] = source_scores(reader, source, 1)
    for source in benchmark_sources(args, reader, say):
        result["sources"][f"{source.name}-{args.split}"] = [
            source_scores(reader, source, k) for k in sorted(set(args.ks))]
    if args.report:
        from convqa.io import write_json

        write_json(args.report, {**result, "settings": {k: v for k, v in vars(args).items()
                                                        if k not in ("func", "quiet")}})
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m readers.extractive.no_answer_check",
                                     description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    say = (lambda _: None) if args.quiet else (lambda text: print(text, file=sys.stderr))
    try:
        result = check(args, say)
    except ConvQAError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
