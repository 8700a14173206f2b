"""Choosing the fusion weights of the extractive reader (decode.py `Fusion`) on held-out turns,
so that reading more passages does not make the answers worse.

Each turn's top passages are read once (`read_turns`): a passage's best span and scores do not
depend on the other passages read with it, so the answer at every k and under every weighting
is recombined from that one reading (`answer_at`). The turns are split by conversation into a
half the weights are chosen on and a half they are reported on (`split_conversations`), so the
reported scores are not those the weights were fitted to.

The choice (`tune`): among a grid of weights, those whose F1 at every k > 1 is at least F1@1 on
the tuning turns (a large retriever weight always qualifies: it answers from the retriever's
best passage, as reading the top 1 does), the one with the best mean F1 over those k.
"""
from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from convqa.metrics.answer import score_answer
from convqa.types import Passage

from .decode import Fusion, PassageSpan, span_answer

SELECTION_WEIGHTS = (0.0, 1.0)
SPAN_WEIGHTS = (0.0, 0.05, 0.1, 0.2, 0.5, 1.0)
RETRIEVER_WEIGHTS = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 1000.0)


@dataclass
class ReadTurn:
    """One turn read against its top passages: what every k and weighting is scored from."""

    qid: str
    conversation_id: str
    answers: list[str]
    passages: list[Passage]
    scores: list[float]                  # the retriever's, one per passage
    spans: list[PassageSpan | None]      # the reader's best span of each passage


def split_conversations(turns: Sequence[Any], fraction: float = 0.5,
                        seed: int = 0) -> tuple[list[Any], list[Any]]:
    """(tuning turns, reporting turns): conversations in sha256("{seed}:{id}") order, the first
    round(n * fraction) tune, the others report; a conversation is never in both."""
    ids = sorted({t.conversation_id for t in turns},
                 key=lambda cid: hashlib.sha256(f"{seed}:{cid}".encode()).hexdigest())
    tuning = set(ids[:round(len(ids) * fraction)])
    return ([t for t in turns if t.conversation_id in tuning],
            [t for t in turns if t.conversation_id not in tuning])


def read_turns(reader: Any, turns: Sequence[Any], conversations: Mapping[str, Any],
               run: Mapping[str, Sequence[Any]], store: Any, k: int,
               progress: bool = False) -> list[ReadTurn]:
    """Read each turn's top `k` passages of `run` once with `reader` (a SpanReader)."""
    from tqdm.auto import tqdm

    read: list[ReadTurn] = []
    for turn in tqdm(turns, desc=f"reading top-{k}", unit=" q", disable=not progress):
        hits = list(run.get(turn.qid, []))[:k]
        passages = [store.get(hit.passage_id) for hit in hits]
        history = conversations[turn.conversation_id].history(turn.turn)
        query = reader.history.format(turn.question, list(history))
        read.append(ReadTurn(turn.qid, turn.conversation_id, list(turn.answers), passages,
                             [float(hit.score) for hit in hits],
                             reader.passage_spans(query, passages)))
    return read


def answer_at(turn: ReadTurn, k: int, fusion: Fusion | None,
              strategy: str = "best_passage") -> str:
    """The answer text when the top `k` passages are read, under `fusion` (or `strategy`)."""
    answer = span_answer(turn.spans[:k], turn.passages[:k], strategy, fusion, turn.scores[:k])
    return answer.text if answer is not None else ""


def scores_at(turns: Sequence[ReadTurn], k: int, fusion: Fusion | None,
              strategy: str = "best_passage", convention: str = "topiocqa") -> dict[str, float]:
    """EM/F1 (percent) over `turns` when reading the top `k`."""
    if not turns:
        return {"em": 0.0, "f1": 0.0, "count": 0}
    em = f1 = 0.0
    for turn in turns:
        scores = score_answer(answer_at(turn, k, fusion, strategy), turn.answers, convention)
        em += scores["em"]
        f1 += scores["f1"]
    return {"em": round(100.0 * em / len(turns), 2), "f1": round(100.0 * f1 / len(turns), 2),
            "count": len(turns)}


def weight_grid(selection: Sequence[float] = SELECTION_WEIGHTS,
                span: Sequence[float] = SPAN_WEIGHTS,
                retriever: Sequence[float] = RETRIEVER_WEIGHTS) -> list[Fusion]:
    """Every combination but all zeros."""
    return [Fusion(a, b, c) for a, b, c in itertools.product(selection, span, retriever)
            if (a, b, c) != (0.0, 0.0, 0.0)]


def tune(turns: Sequence[ReadTurn], ks: Sequence[int],
         grid: Sequence[Fusion] | None = None) -> dict[str, Any]:
    """The weights chosen on `turns` (see the module docstring), with every candidate's F1."""
    larger = sorted(k for k in set(ks) if k > 1)
    if not larger:
        raise ValueError("tuning needs at least one k > 1")
    top1 = scores_at(turns, 1, None)["f1"]
    rows = []
    for fusion in grid or weight_grid():
        f1 = {k: scores_at(turns, k, fusion)["f1"] for k in larger}
        rows.append({"fusion": fusion.to_dict(), "f1": {str(k): v for k, v in f1.items()},
                     "mean_f1": round(sum(f1.values()) / len(f1), 3),
                     "not_below_top1": all(v >= top1 for v in f1.values())})
    eligible = [row for row in rows if row["not_below_top1"]]
    best = max(eligible or rows, key=lambda row: row["mean_f1"])  # first of equals
    return {"fusion": best["fusion"], "f1_at_1": top1, "candidates": rows,
            "eligible": len(eligible)}


def report(turns: Sequence[ReadTurn], ks: Sequence[int], fusion: Fusion) -> dict[str, Any]:
    """EM/F1 at each k: the reader's own choice (best_passage, global) and under `fusion`."""
    return {name: {str(k): scores_at(turns, k, weights, strategy) for k in ks}
            for name, weights, strategy in (("best_passage", None, "best_passage"),
                                            ("global", None, "global"),
                                            ("fusion", fusion, "best_passage"))}
