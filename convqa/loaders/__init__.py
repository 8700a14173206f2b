"""Loaders for the official dataset formats.

Conversational datasets load as `list[Conversation]` (ids are strings, turns follow the official
turn numbers, which must run 1..n); dataset-specific fields go to `Turn.meta` under the keys each
module documents. Other records load as small dataclasses. Bad input raises `DataError` naming the
file and the line or field. History is always the earlier turns of the conversation; the copy
that some files repeat in every row (`Context`, `History`, `history.tsv`) is only checked
(`context="check"` | "warn" | "ignore").
"""
from ._common import DataWarning
from .canard import RewritePair, load_canard, load_canard_multiple_refs
from .cast import load_cast_rewrites, load_cast_topics, load_trec_qrels
from .dpr import DprContext, DprExample, load_dpr_biencoder, save_dpr_biencoder
from .orquac import (ConvIRQuadruple, OrConvQASample, load_convir_quadruples,
                     load_orconvqa_sample, load_orquac, parse_orquac_qid)
from .qrecc import load_qrecc, load_qrecc_qrels
from .scai import (ScaiJudgedAnswer, ScaiRunTurn, ScaiSubset, ScaiSubsetTurn, ScaiTruth,
                   load_scai_ground_truth, load_scai_judged_answers, load_scai_run,
                   load_scai_subset, load_scai_top_passages)
from .squad import SquadAnswer, SquadData, SquadExample, SquadReport, load_squad, read_squad
from .topiocqa import UNANSWERABLE, load_topiocqa, topiocqa_answers

__all__ = [
    "ConvIRQuadruple", "DataWarning", "DprContext", "DprExample", "OrConvQASample", "RewritePair",
    "ScaiJudgedAnswer", "ScaiRunTurn", "ScaiSubset", "ScaiSubsetTurn", "ScaiTruth", "SquadAnswer",
    "SquadData", "SquadExample", "SquadReport", "UNANSWERABLE", "load_canard",
    "load_canard_multiple_refs", "load_cast_rewrites", "load_cast_topics", "load_convir_quadruples",
    "load_dpr_biencoder", "load_orconvqa_sample", "load_orquac", "load_qrecc", "load_qrecc_qrels",
    "load_scai_ground_truth", "load_scai_judged_answers", "load_scai_run", "load_scai_subset",
    "load_scai_top_passages", "load_topiocqa", "load_trec_qrels", "parse_orquac_qid",
    "load_squad", "read_squad", "save_dpr_biencoder", "topiocqa_answers",
]
