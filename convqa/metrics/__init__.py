"""Evaluation metrics that match the official TopiOCQA, QReCC, SQuAD and CAsT (trec_eval) scripts.

Everything is keyed by query id (`str(QueryId)`), never by question text.
"""
from convqa.metrics.answer import (
    CONVENTIONS,
    UNANSWERABLE,
    answer_tokens,
    exact_match,
    f1,
    leave_one_out,
    max_over_golds,
    normalize_answer,
    score_answer,
    score_answers,
    squad_golds,
)
from convqa.metrics.breakdown import (
    FIRST,
    NO_SWITCH,
    QUESTION_TYPES,
    SWITCH,
    UNKNOWN,
    group_means,
    similarity_switch_types,
    topic_switch_types,
)
from convqa.metrics.relevance import best_span, qrels_from_spans, span_relevance
from convqa.metrics.retrieval import (
    RetrievalReport,
    evaluate_run,
    hits_at_k,
    ndcg_at_k,
    ranked_ids,
    recall_at_k,
    reciprocal_rank,
)

__all__ = [
    "CONVENTIONS", "UNANSWERABLE", "answer_tokens", "exact_match", "f1", "leave_one_out",
    "max_over_golds", "normalize_answer", "score_answer", "score_answers", "squad_golds",
    "FIRST", "NO_SWITCH", "QUESTION_TYPES", "SWITCH", "UNKNOWN", "group_means",
    "similarity_switch_types", "topic_switch_types",
    "best_span", "qrels_from_spans", "span_relevance",
    "RetrievalReport", "evaluate_run", "hits_at_k", "ndcg_at_k", "ranked_ids", "recall_at_k",
    "reciprocal_rank",
]
