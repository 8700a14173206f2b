#!/usr/bin/env python
"""The question-overlap penalty (phrase_index/overlap.py) measured reading gold passages: for
each held-out question, the phrase model's best `POOL` phrases of its gold passage are re-ranked
with each weight, and the top one is scored (F1, the source's convention). No index is needed,
so it can choose the weight on questions the open-domain evaluation never sees.

    OMP_NUM_THREADS=1 python -m convqa.front.tools.phrase_overlap_gold --model convqa-phrase \\
        --squad ../shared/data/squad/dev-v2.0.json --benchmark BENCH/full --json out.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch



def candidates(model, examples, pool: int) -> list[list[tuple[float, str]]]:
    """Per example, its gold passage's best `pool` phrases as (score, text), best first."""
    from phrase_index.in_passage import gold_passage_token_scores, phrase_scores_in_passage

    out = []
    with torch.no_grad():
        for first in range(0, len(examples), 16):
            chunk = examples[first:first + 16]
            enc, starts, ends = gold_passage_token_scores(model, chunk)
            n = starts.shape[1]
            for row, example in enumerate(chunk):
                scores = phrase_scores_in_passage(starts[row], ends[row], enc["phrase_mask"][row],
                                                  model.config.max_answer_tokens)
                count = min(pool, int(torch.isfinite(scores).sum()))
                values, where = scores.flatten().topk(count)
                offsets = enc["offset_mapping"][row]
                found = []
                for value, flat in zip(values.tolist(), where.tolist()):
                    a, b = divmod(flat, n)
                    found.append((value, example.passage.text[int(offsets[a, 0]):
                                                              int(offsets[b, 1])]))
                out.append(found)
    return out


def dev_turns(benchmark: str) -> set[str]:
    """The query ids (`QueryId` strings) of a benchmark's answer-evaluable dev turns."""
    from convqa.benchmark import load_labelled_turns

    return {t.qid for t in load_labelled_turns(benchmark).turns
            if t.split == "dev" and t.answer_evaluable}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="convqa-phrase")
    parser.add_argument("--squad", nargs="*", default=[], help="SQuAD-format files")
    parser.add_argument("--benchmark", nargs="*", default=[], help="topiocqa-wiki folders")
    parser.add_argument("--per-source", type=int, default=500)
    parser.add_argument("--exclude-dev-of", nargs="*", default=[],
                        help="topiocqa-wiki folders whose answer-evaluable dev turns are left "
                             "out (the open-domain test turns, so the choice never sees them)")
    parser.add_argument("--weights", type=float, nargs="+", default=[0, 1, 2, 3, 4, 6, 8, 12])
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)

    from convqa.metrics.answer import score_answer
    from phrase_index.data import benchmark_phrase_examples, squad_phrase_examples
    from phrase_index.overlap import POOL, content_words, question_overlap
    from convqa.front.tools.promote_phrase import load_model
    from readers.extractive.data import scoring_convention

    model = load_model(args.model)
    sources = {Path(p).stem: [e for e in squad_phrase_examples(p, negatives=0)
                              if e.answers and e.split == "heldout"] for p in args.squad}
    excluded = set().union(*[dev_turns(b) for b in args.exclude_dev_of])
    sources |= {Path(b).name: [e for e in benchmark_phrase_examples(b) if e.split == "heldout"
                               and e.id.rpartition("/")[2] not in excluded]
                for b in args.benchmark}
    result = {}
    for name, examples in sources.items():
        examples = examples[:args.per_source]
        if not examples:
            print(f"{name}: no held-out questions (left out or none)", flush=True)
            continue
        convention = scoring_convention(examples[0].source)
        totals = dict.fromkeys(args.weights, 0.0)
        for example, found in zip(examples, candidates(model, examples, POOL)):
            asked = set(content_words(example.question))
            scored = [(s, question_overlap(t, asked),
                       score_answer(t, example.answers, convention)["f1"]) for s, t in found]
            for weight in args.weights:
                totals[weight] += max(scored, key=lambda c: c[0] - weight * c[1])[2]
        result[name] = {"count": len(examples), "convention": convention,
                        "f1": {str(w): round(100 * t / len(examples), 2)
                               for w, t in totals.items()}}
        print(name, result[name], flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"model": args.model, "pool": POOL,
                                               "excluded_dev_of": args.exclude_dev_of,
                                               **result},
                                              indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
