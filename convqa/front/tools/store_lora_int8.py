"""Store a LoRA reader's or reranker's adapter with int8 factors (convqa/lora_int8.py): a copy
of the folder at about half its fp16 size, which loads and scores like the original up to the
factors' rounding.

    python -m convqa.front.tools.store_lora_int8 convqa-reranker runs/reranker-int8
    python -m convqa.front.tools.reranker_heldout --examples HELDOUT convqa-reranker runs/reranker-int8

For a model that is still full weights, `export_lora --int8` does the same in one step.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from convqa.errors import ConvQAError
from convqa.io import write_json
from convqa.lora_int8 import INT8_FILE, PEFT_FILE, round_lora_to_int8, store_lora_int8
from convqa.models import resolve_model


def _model_class(folder: Path):
    if (folder / "convqa_reader.json").exists():
        from readers.extractive.model import ExtractiveReader

        return ExtractiveReader
    if (folder / "convqa_reranker.json").exists():
        from retrievers.rerank.model import CrossEncoder

        return CrossEncoder
    raise ConvQAError(f"{folder}: not a reader or reranker folder (convqa_reader.json or "
                      "convqa_reranker.json)")


def store_int8(model: str, out: str) -> dict:
    folder = Path(resolve_model(model))
    if not folder.is_dir():
        raise ConvQAError(f"{model}: no such model folder")
    if Path(out).exists():
        raise ConvQAError(f"{out}: exists; give a new folder")
    if not (folder / PEFT_FILE).exists():
        raise ConvQAError(f"{folder}: no {PEFT_FILE} (full weights, or int8 already); "
                          "export_lora --int8 exports full weights")
    loaded = _model_class(folder).from_pretrained(str(folder))
    factors = round_lora_to_int8(loaded)
    loaded.save_pretrained(out, adapter_only=True)
    store_lora_int8(out)
    card = folder / "README.md"
    if card.exists():
        (Path(out) / "README.md").write_text(
            card.read_text(encoding="utf-8").rstrip() + f"\n\nThis copy stores the adapter's "
            f"LoRA factors as int8 (store_lora_int8 from `{model}`).\n", encoding="utf-8")
    report = {"source": model, "source_fingerprint": json.loads(
                  (folder / next(folder.glob("convqa_*.json")).name).read_text()).get("fingerprint"),
              "fingerprint": loaded.fingerprint(), "factors": factors,
              "bytes": (Path(out) / INT8_FILE).stat().st_size,
              "source_bytes": (folder / PEFT_FILE).stat().st_size}
    write_json(Path(out) / "int8_report.json", report)
    return report


def main(argv: list[str] | None = None) -> int:
    from convqa.quiet import add_verbose_argument, quiet_third_party

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="reader or reranker folder, or shipped alias")
    parser.add_argument("out", help="new folder for the int8 copy")
    add_verbose_argument(parser)
    args = parser.parse_args(argv)
    try:
        with quiet_third_party(not args.verbose):
            print(json.dumps(store_int8(args.model, args.out), indent=1))
        return 0
    except ConvQAError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
