#!/usr/bin/env python
"""MRR / Hits@1 of cross-encoder rerankers on the held-out questions of a reranker example file,
per source, each answer passage among its stored candidates.

    python -m convqa.front.tools.reranker_heldout --examples runs/reranker.jsonl.xz \\
        --per-source 100 convqa-reranker runs/reranker-large/model --out heldout.json

The sample is the one `convqa train reranker --eval-examples N` ranks after training (the first
N of each source in a seeded order of their ids), so a trained model and a shipped one are
compared on the same questions. fp32 by default, as after training.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from convqa.errors import ConvQAError, reports_errors


def rank_models(names: list[str], examples_path: str, per_source: int | None,
                precision: str = "fp32", seed: int = 0, progress: bool = True
                ) -> dict[str, dict]:
    """{model: summarize_ranks(...) with "seconds"} on the held-out sample; a progress bar per
    model unless `progress` is false."""
    from retrievers.rerank.data import load_examples
    from retrievers.rerank.model import CrossEncoder
    from retrievers.rerank.reranker import CrossEncoderReranker
    from retrievers.rerank.train import heldout_sample, ranked_positions, summarize_ranks

    heldout = [e for e in load_examples(examples_path) if e.split == "heldout"]
    if not heldout:
        raise ConvQAError(f"{examples_path}: no held-out examples (split 'heldout')")
    sample = heldout_sample(heldout, per_source, seed)
    results = {}
    for name in names:
        model = CrossEncoder.from_pretrained(name)
        if model.has_adapters:
            model.merge_adapters()
        reranker = CrossEncoderReranker.from_model(model.eval(), precision=precision)
        started = time.perf_counter()
        scores = summarize_ranks(ranked_positions(reranker, sample,
                                                  progress=name if progress else None))
        results[name] = {**scores, "seconds": round(time.perf_counter() - started, 1)}
    return results


def table(results: dict[str, dict]) -> str:
    names = list(results)
    sources = sorted({s for r in results.values() for s in r["sources"]})
    first = results[names[0]]
    lines = ["| held-out questions (candidates each) | " + " | ".join(names) + " |",
             "|---|" + "---:|" * len(names)]
    for source in sources:
        facts = first["sources"][source]
        cells = [f"{r['sources'][source]['mrr']:.3f} / {r['sources'][source]['hits@1']:.1f}"
                 for r in results.values()]
        lines.append(f"| {source} ({facts['count']}; {facts['candidates']:.1f}) | "
                     + " | ".join(cells) + " |")
    cells = [f"{r['mrr']:.3f} / {r['hits@1']:.1f}" for r in results.values()]
    lines.append(f"| all ({first['count']}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


@reports_errors("reranker_heldout")
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", help="reranker folders or aliases")
    parser.add_argument("--examples", required=True, help="`convqa train reranker-examples` file")
    parser.add_argument("--per-source", type=int, default=100,
                        help="held-out questions per source (default 100)")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--seed", type=int, default=0, help="the training's --seed (default 0)")
    parser.add_argument("--out", default=None, help="also write the scores as JSON here")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    results = rank_models(args.models, args.examples, args.per_source, args.precision,
                          args.seed, progress=not args.quiet)
    if args.out:
        from convqa.io import write_json

        write_json(Path(args.out), {"examples": args.examples, "per_source": args.per_source,
                                    "precision": args.precision, "models": results})
    print(table(results))
    print("MRR / Hits@1 (%) of the answer passage among its candidates")
    return 0


if __name__ == "__main__":
    sys.exit(main())
