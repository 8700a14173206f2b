"""Held-out EM/F1 of phrase models reading each question's gold passage only (no index): the
same check `convqa train phrase` prints at the end, for any models, e.g. a full fine-tune next to
its LoRA exports.

    python -m convqa.front.tools.phrase_heldout --benchmark /tmp/bench/full --benchmark /tmp/bench/vital \\
        --squad ../shared/data/squad/dev-v2.0.json --max-examples 2500 \\
        --model full=runs/phrase-v2/model --model r32=convqa/assets/phrase-model

The held-out examples are rebuilt from the training data options (`--max-examples`,
`--heldout-fraction`, `--seed` must be the training run's); chance = a random phrase of the same
passage.
"""
from __future__ import annotations

import argparse
import sys

from convqa.errors import reports_errors
from convqa.io import write_json


@reports_errors("phrase_heldout")
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", required=True, metavar="LABEL=DIR")
    parser.add_argument("--squad", action="append", default=[])
    parser.add_argument("--benchmark", action="append", default=[])
    parser.add_argument("--max-examples", type=int, default=None)
    parser.add_argument("--heldout-fraction", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-examples", type=int, default=200, help="per source")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    from phrase_index.data import build_examples
    from phrase_index.model import PhraseModel
    from phrase_index.in_passage import heldout_scores

    models = dict(item.split("=", 1) for item in args.model)
    examples = build_examples(args.squad, args.benchmark, [], args.max_examples,
                              args.heldout_fraction, args.seed)
    heldout = [example for example in examples if example.split != "train"]
    results: dict[str, dict] = {}
    for label, path in models.items():
        model = PhraseModel.load(path)
        if model.has_adapters:
            model.merge_adapters()
        scores = heldout_scores(model, heldout, args.eval_examples)
        if not results:
            print("| model | " + " | ".join(f"{s} EM / F1" for s in scores) + " |")
            print("|---|" + "---|" * len(scores))
            chance = scores
        results[label] = {"model": path, "fingerprint": model.fingerprint(), **scores}
        print(f"| {label} | " + " | ".join(f"{v['em']:.1f} / {v['f1']:.1f}"
                                           for v in scores.values()) + " |", flush=True)
    print("| chance | " + " | ".join(f"{v['chance_em']:.1f} / {v['chance_f1']:.1f}"
                                     for v in chance.values()) + " |")
    if args.json:
        write_json(args.json, {"models": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
