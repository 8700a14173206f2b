"""Retrieval metrics over a run and qrels, keyed by query id (`str(QueryId)`).

Definitions (trec_eval names in brackets; every value is a fraction 0-1, multiply by 100 for the
percentages TopiOCQA and QReCC print):
- `mrr` [recip_rank]: 1/rank of the first relevant passage, 0 if none; `mrr@k` counts only
  ranks <= k.
- `recall@k` [recall_k]: relevant passages in the top k / all relevant passages of the query.
- `hits@k` (TopiOCQA/DPR "top-k accuracy"; QReCC's own script calls this "Recall@k"): 1 if any
  relevant passage is in the top k.
- `ndcg@k` [ndcg_cut_k]: sum over ranks i <= k of gain/log2(i+1), divided by the same sum for the
  ideal order of the query's qrels; gain = the graded label (linear, as trec_eval), labels <= 0
  gain nothing. CAsT reports ndcg@3.
A passage is relevant when its label is > 0.

Conventions, chosen to be explicit where the official tools differ:
- The evaluated queries are the qrels' keys, or `queries` when given (then a query absent from the
  qrels has no relevant passage). Run queries outside that set are ignored (`ignored` counts them).
- A query with no relevant passage scores 0 on every metric. `RetrievalReport.metrics` drops such
  queries (DPR-IHN's QReCC numbers, trec_eval), `metrics_with_empty` keeps them as 0 (QReCC's
  paper script); both are always reported, with `num_empty`.
- An evaluated query missing from the run scores 0 and is kept (trec_eval -c); trec_eval and
  pytrec_eval without -c would drop it. `num_missing` counts them.
- Rank order is the order given (a list of `Hit` must have increasing ranks). trec_eval instead
  re-sorts by score and breaks ties by passage id, so tied scores can differ from it.
- A passage id repeated in one ranking counts at its first position only.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Collection, Iterable, Mapping, Sequence

from convqa.errors import DataError
from convqa.metrics._keys import keyed_by_query, query_key
from convqa.types import Hit

Ranking = Sequence[Hit] | Sequence[str]


def ranked_ids(ranking: Ranking, qid: str = "<query>") -> list[str]:
    """Passage ids in rank order, first occurrence kept; checks Hit ranks increase."""
    if isinstance(ranking, (str, bytes)) or not isinstance(ranking, Sequence):
        raise DataError("a ranking must be a list of Hit or passage ids, got "
                        f"{type(ranking).__name__}", path="run", field=qid)
    ids: list[str] = []
    seen: set[str] = set()
    last_rank: int | None = None
    for item in ranking:
        if isinstance(item, Hit):
            if last_rank is not None and item.rank <= last_rank:
                raise DataError(f"hits are not in rank order (rank {item.rank} after {last_rank})",
                                path="run", field=qid)
            last_rank = item.rank
            pid = item.passage_id
        elif isinstance(item, str):
            pid = item
        else:
            raise DataError(f"ranking entries must be Hit or str, got {type(item).__name__}",
                            path="run", field=qid)
        if pid not in seen:
            seen.add(pid)
            ids.append(pid)
    return ids


def reciprocal_rank(ranked: Sequence[str], relevant: Collection[str],
                    k: int | None = None) -> float:
    """1/rank of the first relevant passage within the top k (all ranks when k is None)."""
    limit = len(ranked) if k is None else min(k, len(ranked))
    for position in range(limit):
        if ranked[position] in relevant:
            return 1.0 / (position + 1)
    return 0.0


def recall_at_k(ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    """Fraction of the relevant passages found in the top k; 0 when nothing is relevant."""
    if not relevant:
        return 0.0
    return sum(1 for pid in ranked[:k] if pid in relevant) / len(relevant)


def hits_at_k(ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    """1.0 if any relevant passage is in the top k."""
    return float(any(pid in relevant for pid in ranked[:k]))


def ndcg_at_k(ranked: Sequence[str], grades: Mapping[str, float], k: int) -> float:
    """trec_eval ndcg_cut_k: linear gains, log2(rank+1) discount, ideal from the qrels."""
    dcg = sum(max(grades.get(pid, 0.0), 0.0) / math.log2(i + 2) for i, pid in enumerate(ranked[:k]))
    ideal = sorted((g for g in grades.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def query_metrics(ranked: Sequence[str], grades: Mapping[str, float], *, ks: Iterable[int],
                  ndcg_ks: Iterable[int], mrr_k: int | None) -> dict[str, float]:
    """Every metric of one query, named as in `RetrievalReport.metrics`."""
    relevant = {pid for pid, grade in grades.items() if grade > 0}
    out = {_mrr_name(mrr_k): reciprocal_rank(ranked, relevant, mrr_k)}
    for k in ks:
        out[f"recall@{k}"] = recall_at_k(ranked, relevant, k)
        out[f"hits@{k}"] = hits_at_k(ranked, relevant, k)
    for k in ndcg_ks:
        out[f"ndcg@{k}"] = ndcg_at_k(ranked, grades, k)
    return out


@dataclass
class RetrievalReport:
    """Per-query metrics plus both averages (without and with the queries lacking relevance)."""

    per_query: dict[str, dict[str, float]]
    empty: list[str] = field(default_factory=list)    # evaluated queries with no relevant passage
    missing: list[str] = field(default_factory=list)  # evaluated queries absent from the run
    ignored: int = 0                                   # run queries outside the evaluated set

    @property
    def num_queries(self) -> int:
        """Queries with at least one relevant passage (the denominator of `metrics`)."""
        return len(self.per_query) - len(self.empty)

    @property
    def num_empty(self) -> int:
        return len(self.empty)

    @property
    def num_missing(self) -> int:
        return len(self.missing)

    def summary(self, include_empty: bool = False) -> dict[str, float]:
        """Mean of each metric; `include_empty` keeps the queries without relevance as 0."""
        skip = set() if include_empty else set(self.empty)
        rows = [m for qid, m in self.per_query.items() if qid not in skip]
        if not rows:
            return {}
        return {name: sum(r[name] for r in rows) / len(rows) for name in rows[0]}

    @property
    def metrics(self) -> dict[str, float]:
        return self.summary(include_empty=False)

    @property
    def metrics_with_empty(self) -> dict[str, float]:
        return self.summary(include_empty=True)

    def to_dict(self, per_query: bool = False) -> dict[str, Any]:
        data: dict[str, Any] = {
            "metrics": self.metrics, "metrics_with_empty": self.metrics_with_empty,
            "num_queries": self.num_queries, "num_empty": self.num_empty,
            "num_missing": self.num_missing, "num_ignored": self.ignored,
        }
        if per_query:
            data["per_query"] = self.per_query
        return data


def evaluate_run(run: Mapping[Any, Ranking], qrels: Mapping[Any, Mapping[str, float]], *,
                 ks: Iterable[int] = (1, 5, 10, 20, 100), ndcg_ks: Iterable[int] = (3,),
                 mrr_k: int | None = None, queries: Iterable[Any] | None = None) -> RetrievalReport:
    """Score `run` {qid: ranking} against `qrels` {qid: {passage_id: label}}; see module doc."""
    ks, ndcg_ks = _check_cutoffs(ks, "ks"), _check_cutoffs(ndcg_ks, "ndcg_ks")
    if mrr_k is not None:
        _check_cutoffs([mrr_k], "mrr_k")
    run_map = keyed_by_query(run, "run")
    qrel_map = {qid: _check_grades(qid, grades)
                for qid, grades in keyed_by_query(qrels, "qrels").items()}
    if queries is None:
        evaluated = list(qrel_map)
    else:
        evaluated = list(dict.fromkeys(query_key(q, "queries") for q in queries))
    per_query: dict[str, dict[str, float]] = {}
    empty: list[str] = []
    missing: list[str] = []
    for qid in evaluated:
        grades = qrel_map.get(qid, {})
        if not any(g > 0 for g in grades.values()):
            empty.append(qid)
        if qid in run_map:
            ranked = ranked_ids(run_map[qid], qid)
        else:
            missing.append(qid)
            ranked = []
        per_query[qid] = query_metrics(ranked, grades, ks=ks, ndcg_ks=ndcg_ks, mrr_k=mrr_k)
    wanted = set(evaluated)
    return RetrievalReport(per_query, empty, missing,
                           ignored=sum(1 for qid in run_map if qid not in wanted))


def _mrr_name(mrr_k: int | None) -> str:
    return "mrr" if mrr_k is None else f"mrr@{mrr_k}"


def _check_cutoffs(values: Iterable[int], name: str) -> list[int]:
    out = list(values)
    for k in out:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise DataError(f"cutoffs must be positive integers, got {k!r}", field=name)
    return out


def _check_grades(qid: str, grades: Any) -> dict[str, float]:
    if not isinstance(grades, Mapping):
        raise DataError("qrels of a query must map passage id to label, got "
                        f"{type(grades).__name__}",
                        path="qrels", field=qid)
    for pid, grade in grades.items():
        number = isinstance(grade, (int, float)) and not isinstance(grade, bool)
        if not isinstance(pid, str) or not number:
            raise DataError(f"qrels entries must be passage id -> number, got {pid!r}: {grade!r}",
                            path="qrels", field=qid)
    return dict(grades)
