"""Per-query metrics broken down by question type: first / no-switch / switch.

Topic switches are where conversational retrievers fail (they lean on the history, the shortcut
DPR-IHN describes), so every table reports the three groups with their counts beside the mean.

- `group_means`: any per-query metric averaged within any grouping, with counts.
- `topic_switch_types` (TopiOCQA): turn 1 is "first"; turn t is "switch" when its `Topic`
  (case-insensitive, stripped) differs from turn t-1's, else "no-switch". TopiOCQA's first
  release leaves `Topic` empty on unanswerable turns (3,284 of 40,993 train turns): such a turn
  is "unknown", and by default (`skip_empty=True`) the next turn is compared with the last
  non-empty topic before it (an unanswerable turn does not move the conversation to another
  document); with no earlier topic it is "unknown". `skip_empty=False` compares with turn t-1
  only, so a turn after an empty topic is "unknown" too.
- `similarity_switch_types` (QReCC, DPR-IHN Appendix A): QReCC has no topic labels, so a switch is
  read off the gold passages: turn t is "switch" when the similarity (BM25 in the paper) between
  the gold passages of turns t-1 and t is below a threshold. The similarity is a callable so this
  module needs no index; the threshold is the paper's and must be passed in (it could not be
  checked offline: the DPR-IHN code ships its QReCC question types as a precomputed file). With
  several gold passages the largest pairwise similarity counts; a turn with no gold passage, or
  whose previous turn has none, is "unknown".
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from convqa.errors import DataError
from convqa.metrics._keys import keyed_by_query
from convqa.types import QueryId

FIRST = "first"
NO_SWITCH = "no-switch"
SWITCH = "switch"
UNKNOWN = "unknown"
QUESTION_TYPES = (FIRST, NO_SWITCH, SWITCH)
ALL = "all"


def group_means(per_query: Mapping[Any, float | Mapping[str, float]], groups: Mapping[Any, str],
                *, unknown: str = UNKNOWN) -> dict[str, dict[str, float]]:
    """{group: {"count": n, metric: mean, ...}} over the queries of `per_query`, plus "all".

    A float per query is named "value". Queries without a group fall in `unknown`; groups of
    queries absent from `per_query` are ignored. Groups come in the order first, no-switch,
    switch, then the others sorted, then "all".
    """
    rows = {qid: _as_metrics(qid, value)
            for qid, value in keyed_by_query(per_query, "per_query").items()}
    labels = keyed_by_query(groups, "groups")
    members: dict[str, list[str]] = {}
    for qid in rows:
        members.setdefault(str(labels.get(qid, unknown)), []).append(qid)
    order = [g for g in QUESTION_TYPES if g in members]
    order += sorted(g for g in members if g not in QUESTION_TYPES)
    out = {group: _mean(rows, members[group]) for group in order}
    out[ALL] = _mean(rows, list(rows))
    return out


def topic_switch_types(conversation_id: str, topics: Sequence[str | None], *,
                       skip_empty: bool = True, unknown: str = UNKNOWN) -> dict[str, str]:
    """Question type of each turn of one TopiOCQA conversation from its turns' topics (1-based).

    `unknown` is the label of turns that cannot be compared; the TopiOCQA x Wikipedia benchmark
    passes NO_SWITCH so every turn gets one of the three types (an unanswerable turn does not
    move the conversation)."""
    types: dict[str, str] = {}
    previous = ""
    for index, topic in enumerate(topics):
        qid = str(QueryId(str(conversation_id), index + 1))
        current = _topic_key(topic)
        if index == 0:
            types[qid] = FIRST
        elif not current or not previous:
            types[qid] = unknown
        else:
            types[qid] = SWITCH if current != previous else NO_SWITCH
        if current or not skip_empty:
            previous = current
    return types


def similarity_switch_types(conversation_id: str, gold_passages: Sequence[Sequence[str]],
                            similarity: Callable[[str, str], float],
                            threshold: float) -> dict[str, str]:
    """Question type of each turn from the gold passage texts of each turn (1-based order).

    `similarity(previous_text, current_text)`; turn t is "switch" when the best similarity
    between a gold passage of turn t-1 and one of turn t is below `threshold`.
    """
    types: dict[str, str] = {}
    for index, texts in enumerate(gold_passages):
        qid = str(QueryId(str(conversation_id), index + 1))
        if isinstance(texts, str):
            raise DataError("gold passages of a turn must be a list of texts, not one string",
                            field=qid)
        if index == 0:
            types[qid] = FIRST
            continue
        previous = gold_passages[index - 1]
        if not texts or not previous:
            types[qid] = UNKNOWN
            continue
        score = max(float(similarity(p, c)) for p in previous for c in texts)
        types[qid] = SWITCH if score < threshold else NO_SWITCH
    return types


def _topic_key(topic: str | None) -> str:
    return (topic or "").strip().casefold()


def _as_metrics(qid: str, value: Any) -> Mapping[str, float]:
    if isinstance(value, Mapping):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return {"value": float(value)}
    raise DataError(f"per-query value must be a number or a mapping of metrics, got {value!r}",
                    path="per_query", field=qid)


def _mean(rows: Mapping[str, Mapping[str, float]], qids: list[str]) -> dict[str, float]:
    out: dict[str, float] = {"count": len(qids)}
    if not qids:
        return out
    names = list(rows[qids[0]])
    for qid in qids:
        if set(rows[qid]) != set(names):
            raise DataError(f"queries have different metrics: {sorted(rows[qid])} vs "
                            f"{sorted(names)}",
                            path="per_query", field=qid)
    for name in names:
        out[name] = sum(rows[qid][name] for qid in qids) / len(qids)
    return out
