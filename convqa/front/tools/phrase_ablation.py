"""EM/F1 (TopiOCQA scoring) and Hits@k of the answering passage for phrase models on one phrase
index: the ablations of docs/results/phrase.md (models sharing a phrase side share its index).

    python -m convqa.front.tools.phrase_ablation --index /tmp/phrase-bench/v1-all \\
        --model "with query-side fine-tuning=runs/phrase-v1/model" \\
        --model "without query-side fine-tuning=runs/phrase-v1/phrase/model" \\
        --benchmark /tmp/bench/vital --json runs/phrase-bench/ablation-query-ft.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path



def evaluate(index: str, model: str, benchmark: str, top_k: int = 20, nprobe: int | None = None,
             candidates: int | None = None) -> dict[str, float]:
    from convqa.front.tools.bench_phrase import answer_turns, scores
    from convqa.benchmark import load_labelled_turns
    from phrase_index.answerer import PhrasePipeline

    turns = answer_turns(benchmark, 10 ** 9)
    data = load_labelled_turns(benchmark)
    labelled = [t for t in data.turns if t.split == "dev" and t.answer_evaluable]
    pipe = PhrasePipeline.from_folder(index, model=model, top_k=top_k, nprobe=nprobe,
                                      candidates=candidates)
    results = [pipe.answer(q, h, top_k=top_k) for q, h, _ in turns]
    row = {"turns": len(turns), **scores(results, turns)}
    for k in (1, 5, 20):
        hits = sum(any(h.passage_id in set(t.answer_passage_ids) for h in r.hits[:k])
                   for r, t in zip(results, labelled))
        row[f"hits@{k}"] = round(100 * hits / len(labelled), 1)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", required=True, help="phrase index folder")
    parser.add_argument("--model", action="append", required=True, metavar="LABEL=DIR")
    parser.add_argument("--benchmark", required=True, help="TopiOCQA x Wikipedia corpus folder")
    parser.add_argument("--nprobe", type=int, default=None,
                        help="IVF lists searched (default: the index's own)")
    parser.add_argument("--candidates", type=int, default=None,
                        help="FAISS hits per pass and query (default: the searcher's)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    out = {}
    for item in args.model:
        label, sep, folder = item.rpartition("=")
        if not sep:
            parser.error(f"--model {item!r}: expected LABEL=DIR")
        out[label] = evaluate(args.index, folder, args.benchmark, nprobe=args.nprobe,
                              candidates=args.candidates)
        print(label, out[label], flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
