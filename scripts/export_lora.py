"""Export a fully fine-tuned dual encoder as a small LoRA adapter over its base model.

    python scripts/export_lora.py --tuned runs/dpr-ihn-full/iter3/model --rank 32 \
        --out convqa/assets/retriever-dpr-ihn

Writes the adapter folder (loads with `DualEncoder.from_pretrained`) and prints how faithful it
is (kept SVD energy; relative change of the embedding tables it leaves at the base).
"""
from __future__ import annotations

import argparse
import json
import sys

from convqa.errors import ConvQAError
from convqa.io import write_json
from retrievers.dense.lora_export import lora_from_finetuned
from retrievers.dense.model import DualEncoder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tuned", required=True, help="fully fine-tuned dual encoder folder")
    parser.add_argument("--base", default=None,
                        help="its initial checkpoint (default: the tuned model's config.model)")
    parser.add_argument("--rank", type=int, default=32)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    try:
        tuned = DualEncoder.from_pretrained(args.tuned)
        base = DualEncoder.from_pretrained(args.base or tuned.config.model)
        base.config = tuned.config  # same pooling / lengths as the model that was trained
        adapted, report = lora_from_finetuned(base, tuned, r=args.rank)
        adapted.save_adapter(args.out)
        write_json(f"{args.out}/export_report.json",
                   {"tuned": args.tuned, "tuned_fingerprint": tuned.fingerprint(),
                    **report.to_dict()})
    except ConvQAError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(report.to_dict(), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
