"""Export a fully fine-tuned dual encoder, extractive reader, cross-encoder reranker, ConvDR
student or phrase model as a small LoRA adapter over its base model.

    python -m convqa.front.tools.export_lora --tuned runs/dpr-ihn-full/iter3/model --rank 32 \\
        --out convqa/assets/retriever-dpr-ihn
    python -m convqa.front.tools.export_lora --tuned runs/reader-v1/model --rank 64 \\
        --out convqa/assets/reader-extractive
    python -m convqa.front.tools.export_lora --tuned runs/reranker-large/model --rank 32 --half \\
        --out runs/reranker-large-r32
    python -m convqa.front.tools.export_lora --tuned runs/convdr-kd-minilm/model --rank 32 \\
        --out convqa/assets/retriever-convdr
    python -m convqa.front.tools.export_lora --tuned runs/phrase-v2/model --rank 32 --exact-embeddings \\
        --out convqa/assets/phrase-model

Writes the adapter folder (a reader's keeps its heads exactly) and export_report.json: the
kept SVD energy per layer and the relative change of the embedding tables left at the base.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from convqa.errors import ConvQAError, reports_errors
from convqa.io import write_json
from convqa.lora_storage import FP16, FP32, INT8, round_lora, store_lora
from retrievers.dense.lora_export import (EXACT_MODULES, SMALL_EMBEDDINGS,
                                         encoder_lora_from_finetuned, lora_from_finetuned)

STORED_AS = {FP32: "", FP16: " in fp16", INT8: " with int8 factors"}
SAVED_KEY = {FP16: "bytes_saved_by_half", INT8: "bytes_saved_by_int8"}


def _over_base(config, base_name: str | None):
    """`config` naming `base_name` as its encoder when the adapter is taken over another
    checkpoint than the one the model was trained from: the saved folder must load the adapter
    over the base it was computed against, or it would load over the wrong weights silently."""
    return replace(config, model=base_name) if base_name else config


def store_export(out: str | Path, storage: str, report: dict) -> dict:
    """Rewrite the saved adapter files of `out` in `storage` (factors already rounded to it by
    the export) and record that in `report`: its dtype and the bytes saved."""
    report["lora_dtype"] = storage
    if storage != FP32:
        report[SAVED_KEY[storage]] = store_lora(out, storage)
    return report


def export_dual_encoder(tuned_path: str, rank: int, out: str, base_name: str | None,
                        exact: tuple[str, ...], storage: str = FP32, saved_as: str | None = None):
    from retrievers.dense.model import DualEncoder

    tuned = DualEncoder.from_pretrained(tuned_path)
    if base_name and tuned.config.passage_model:
        raise ConvQAError(f"{tuned_path}: two towers; --base applies to a shared encoder only")
    base = DualEncoder.from_pretrained(base_name or tuned.config.model)
    # same pooling / lengths as the model that was trained, over the base actually used
    base.config = _over_base(tuned.config, saved_as or base_name)
    adapted, report = lora_from_finetuned(base, tuned, r=rank, exact_modules=exact)
    round_lora(adapted, storage)
    adapted.save_adapter(out)
    return tuned.fingerprint(), report.to_dict()


def _encoder_as_adapter(tuned, tuned_path: str, noun: str, rank: int, base_name: str | None,
                        exact: tuple[str, ...]):
    """A single-encoder model's `encoder` as LoRA over its base (cut to the same layers)."""
    from convqa.towers import keep_layers, load_encoder

    if tuned.has_adapters:
        raise ConvQAError(f"{tuned_path}: already a LoRA {noun}; nothing to export")
    base = keep_layers(load_encoder(base_name or tuned.config.model), tuned.config.encoder_layers)
    return encoder_lora_from_finetuned(base, tuned.encoder, r=rank, exact_modules=exact)


def _save_adapter(adapted, out: str, storage: str) -> None:
    round_lora(adapted, storage)
    adapted.save_pretrained(out, adapter_only=True)


def export_reader(tuned_path: str, rank: int, out: str, base_name: str | None,
                  exact: tuple[str, ...], storage: str = FP32, saved_as: str | None = None):
    from readers.extractive.model import ExtractiveReader

    tuned = ExtractiveReader.from_pretrained(tuned_path)
    encoder, report = _encoder_as_adapter(tuned, tuned_path, "reader", rank, base_name, exact)
    config = _over_base(tuned.config, saved_as or base_name)
    adapted = ExtractiveReader(config, encoder, tuned.tokenizer, tuned.span_head,
                               tuned.selection_head)
    adapted.decoding = tuned.decoding  # its passage choice and confidence go with the weights
    _save_adapter(adapted, out, storage)
    return tuned.fingerprint(), report.to_dict()


def export_reranker(tuned_path: str, rank: int, out: str, base_name: str | None,
                    exact: tuple[str, ...], storage: str = FP32, saved_as: str | None = None):
    """A cross-encoder's encoder as an adapter; its head, calibrated weights and margins and card
    exactly."""
    from convqa.io import load_json
    from retrievers.rerank.card import CARD_FILE, fingerprint_line
    from retrievers.rerank.model import META_FILE, CrossEncoder

    tuned = CrossEncoder.from_pretrained(tuned_path)
    tuned_fingerprint = tuned.fingerprint()
    encoder, report = _encoder_as_adapter(tuned, tuned_path, "reranker", rank, base_name, exact)
    adapted = CrossEncoder(_over_base(tuned.config, saved_as or base_name), encoder,
                           tuned.tokenizer, tuned.head)
    adapted.retriever_weights = dict(tuned.retriever_weights)
    adapted.cascade_margins = dict(tuned.cascade_margins)
    adapted.shortlist_weights = {key: dict(w) for key, w in tuned.shortlist_weights.items()}
    _save_adapter(adapted, out, storage)
    card = Path(tuned_path) / CARD_FILE
    if card.exists():  # the trained model's card, with how this folder was made from it
        # the card's fingerprint is the trained model's; a user checks the folder's own
        stored = load_json(Path(out) / META_FILE)["fingerprint"]
        text = card.read_text(encoding="utf-8").rstrip().replace(
            fingerprint_line(tuned_fingerprint), fingerprint_line(stored, tuned_fingerprint))
        kept = f" (mean SVD energy kept {report.mean_energy_kept:.3f})"
        (Path(out) / CARD_FILE).write_text(
            text + "\n\nThis folder stores the trained "
            f"encoder as a rank-{rank} LoRA adapter{STORED_AS[storage]} over "
            f"`{saved_as or base_name or tuned.config.model}`"
            f"{kept}; export_report.json has the details.\n", encoding="utf-8")
    return tuned_fingerprint, report.to_dict()


def export_convdr(tuned_path: str, rank: int, out: str, base_name: str | None,
                  exact: tuple[str, ...], storage: str = FP32, saved_as: str | None = None):
    """A ConvDR student as an adapter over its teacher's query tower (its starting point)."""
    import copy

    from retrievers.convdr.model import ConvDR

    if base_name:
        raise ConvQAError("a ConvDR student's base is its teacher; --base does not apply")
    tuned = ConvDR.from_pretrained(tuned_path)
    if tuned.has_adapters:
        raise ConvQAError(f"{tuned_path}: already a LoRA student; nothing to export")
    base_tower = copy.deepcopy(tuned.teacher.query_encoder)
    tower, report = encoder_lora_from_finetuned(base_tower, tuned.query_encoder, r=rank,
                                                exact_modules=exact)
    _save_adapter(ConvDR(tuned.config, tuned.teacher, tower,
                         teacher_fingerprint=tuned.teacher_fingerprint), out, storage)
    return tuned.fingerprint(), report.to_dict()


def export_phrase(tuned_path: str, rank: int, out: str, base_name: str | None,
                  exact: tuple[str, ...], storage: str = FP32, saved_as: str | None = None):
    """Both towers of a phrase model (phrase and query) as adapters; its heads exactly."""
    from phrase_index.model import PhraseModel
    from phrase_index.export import export_adapter

    tuned = PhraseModel.load(tuned_path)
    if tuned.has_adapters:
        raise ConvQAError(f"{tuned_path}: already a LoRA phrase model; nothing to export")
    saved = saved_as or base_name
    config = tuned.config if saved is None else replace(tuned.config, base=saved)
    adapted, reports = export_adapter(PhraseModel.build(config), tuned, rank, exact)
    round_lora(adapted, storage)
    adapted.save(out)
    return tuned.full_fingerprint(), {"towers": reports}


@reports_errors("export_lora")
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tuned", required=True, help="fully fine-tuned model folder")
    parser.add_argument("--base", default=None,
                        help="its initial checkpoint (default: the one its config names)")
    parser.add_argument("--base-name", default=None, metavar="NAME",
                        help="the base the folder names and loads over, when --base is a copy "
                             "of it (all-mpnet-base-v2 dequantized from its transport form on a "
                             "GPU machine; the default: --base itself)")
    parser.add_argument("--rank", type=int, default=32)
    parser.add_argument("--out", required=True)
    parser.add_argument("--half", action="store_true",
                        help="store the LoRA matrices in fp16 (half the bytes; the loaded "
                             "model computes with exactly the stored values)")
    parser.add_argument("--int8", action="store_true",
                        help="store the LoRA factors as int8 rows with fp32 scales (a quarter "
                             "of the fp32 bytes; the loaded model computes with exactly the "
                             "stored values)")
    parser.add_argument("--exact-embeddings", action="store_true",
                        help="also store the token-type and position embedding tables exactly "
                             "(~0.8 MB for MiniLM; the reader's fine-tuning moves them)")
    args = parser.parse_args(argv)
    exact = EXACT_MODULES + (SMALL_EMBEDDINGS if args.exact_embeddings else ())
    folder = Path(args.tuned)
    if (folder / "convqa_phrase_model.json").exists():
        export = export_phrase
    elif (folder / "convqa_reader.json").exists():
        export = export_reader
    elif (folder / "convqa_reranker.json").exists():
        export = export_reranker
    elif (folder / "convqa_convdr.json").exists():
        export = export_convdr
    else:
        export = export_dual_encoder
    if args.base_name and not args.base:
        raise ConvQAError("--base-name names what --base is a copy of; give --base too")
    if args.half and args.int8:
        raise ConvQAError("--half or --int8, not both")
    storage = FP16 if args.half else INT8 if args.int8 else FP32
    fingerprint, report = export(args.tuned, args.rank, args.out, args.base, exact,
                                 storage, saved_as=args.base_name)
    store_export(args.out, storage, report)
    write_json(Path(args.out) / "export_report.json",
               {"tuned": args.tuned, "tuned_fingerprint": fingerprint, **report})
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
