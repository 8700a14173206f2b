"""A trained phrase model as LoRA adapters over its base (retrievers/dense/lora_export.py): the
whole model, or only the query side of a query-only run, whose phrase side (and so every index
built with it) is the source's.
"""
from __future__ import annotations

from typing import Sequence

from convqa.errors import ConvQAError

from .model import PhraseModel


def export_adapter(base: PhraseModel, tuned: PhraseModel, rank: int = 64,
                   exact_modules: Sequence[str] | None = None) -> tuple[PhraseModel, dict]:
    """`base` (a plain model from the same checkpoint) with LoRA adapters that reproduce
    `tuned`'s towers up to rank `rank` (retrievers/dense/lora_export.py) and `tuned`'s heads;
    returns it with the export report of each tower. `exact_modules`: module names stored
    exactly (default: LayerNorms; add the position and token-type embeddings with
    `lora_export.SMALL_EMBEDDINGS`)."""
    from retrievers.dense.lora_export import EXACT_MODULES, encoder_lora_from_finetuned

    exact = tuple(EXACT_MODULES if exact_modules is None else exact_modules)
    if base.has_adapters or tuned.has_adapters:
        raise ConvQAError("LoRA export needs two plain models (merge adapters first)")
    if base.config.shared_query_encoder != tuned.config.shared_query_encoder:
        raise ConvQAError("base and tuned phrase models differ in their query tower")
    report = {}
    base.phrase_encoder, phrase_report = encoder_lora_from_finetuned(
        base.phrase_encoder, tuned.phrase_encoder, rank, exact_modules=exact)
    report["phrase"] = phrase_report.to_dict()
    if tuned.separate_query_encoder is not None:
        base.separate_query_encoder, query_report = encoder_lora_from_finetuned(
            base.separate_query_encoder, tuned.separate_query_encoder, rank, exact_modules=exact)
        report["query"] = query_report.to_dict()
    for name in ("filter_head", "query_start_head", "query_end_head"):
        getattr(base, name).load_state_dict(getattr(tuned, name).state_dict())
    base.config = tuned.config
    return base, report


def export_query_adapter(source: PhraseModel, tuned: PhraseModel, rank: int = 64,
                         exact_modules: Sequence[str] | None = None
                         ) -> tuple[PhraseModel, dict]:
    """`source` (a saved phrase model with LoRA adapters, as loaded) with its phrase tower and
    filter untouched and a rank-`rank` LoRA query tower that reproduces `tuned`'s, plus
    `tuned`'s query heads: the export of a query-only run, whose fingerprint is `source`'s, so
    every index built with `source` serves it. The position and token-type embeddings are
    stored exactly by default (0.8 MB for MiniLM); the word embeddings are left out."""
    from retrievers.dense.lora_export import (EXACT_MODULES, SMALL_EMBEDDINGS,
                                              encoder_lora_from_finetuned)

    if not source.has_adapters or tuned.has_adapters:
        raise ConvQAError("query export needs a source with LoRA adapters and a plain tuned "
                          "model")
    if tuned.separate_query_encoder is None or source.separate_query_encoder is None:
        raise ConvQAError("query export needs separate query towers (a shared one is the "
                          "phrase tower)")
    if source.fingerprint() != tuned.fingerprint():
        raise ConvQAError(f"the tuned model's phrase side ({tuned.fingerprint()}) is not the "
                          f"source's ({source.fingerprint()}): not a query-only run of it")
    exact = tuple(EXACT_MODULES + SMALL_EMBEDDINGS if exact_modules is None else exact_modules)
    plain = PhraseModel.build(source.config).separate_query_encoder
    source.separate_query_encoder, report = encoder_lora_from_finetuned(
        plain, tuned.separate_query_encoder, rank, exact_modules=exact)
    for name in ("query_start_head", "query_end_head"):
        getattr(source, name).load_state_dict(getattr(tuned, name).state_dict())
    return source, {"query": report.to_dict(), "phrase": "kept from the source adapter"}
