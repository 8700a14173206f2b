"""Store a LoRA reader's or reranker's adapter with int8 factors (convqa/lora_storage.py): a copy
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

from convqa.errors import ConvQAError, reports_errors
from convqa.io import load_json, write_json
from convqa.lora_storage import INT8, INT8_FILE, PEFT_FILE, round_lora, store_lora
from convqa.models import resolve_model

from .device_pack.merge import reader_or_reranker


def store_int8(model: str, out: str) -> dict:
    folder = Path(resolve_model(model))
    if not folder.is_dir():
        raise ConvQAError(f"{model}: no such model folder")
    if Path(out).exists():
        raise ConvQAError(f"{out}: exists; give a new folder")
    if not (folder / PEFT_FILE).exists():
        raise ConvQAError(f"{folder}: no {PEFT_FILE} (full weights, or int8 already); "
                          "export_lora --int8 exports full weights")
    cls, meta = reader_or_reranker(folder)
    source_fingerprint = load_json(folder / meta).get("fingerprint")
    loaded = cls.from_pretrained(str(folder))
    factors = round_lora(loaded, INT8)
    loaded.save_pretrained(out, adapter_only=True)
    store_lora(out, INT8)
    card = folder / "README.md"
    if card.exists():
        (Path(out) / "README.md").write_text(
            card.read_text(encoding="utf-8").rstrip() + f"\n\nThis copy stores the adapter's "
            f"LoRA factors as int8 (store_lora_int8 from `{model}`).\n", encoding="utf-8")
    report = {"source": model, "source_fingerprint": source_fingerprint,
              "fingerprint": loaded.fingerprint(), "factors": factors,
              "bytes": (Path(out) / INT8_FILE).stat().st_size,
              "source_bytes": (folder / PEFT_FILE).stat().st_size}
    write_json(Path(out) / "int8_report.json", report)
    return report


@reports_errors("store_lora_int8")
def main(argv: list[str] | None = None) -> int:
    from convqa.quiet import add_verbose_argument, quiet_third_party

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="reader or reranker folder, or shipped alias")
    parser.add_argument("out", help="new folder for the int8 copy")
    add_verbose_argument(parser)
    args = parser.parse_args(argv)
    with quiet_third_party(not args.verbose):
        print(json.dumps(store_int8(args.model, args.out), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
