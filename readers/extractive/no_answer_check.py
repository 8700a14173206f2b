"""How a reader's decoding defaults do on questions it was not calibrated on: SQuAD v2.0's
held-out articles and a benchmark's dev turns, with and without its no-answer threshold
(`python -m convqa.front.tools.reader_no_answer_check` reads them and prints these scores).

- SQuAD v2.0, held-out articles (the reader run's article split), each question read against its
  paragraph: HasAns F1 (0 for a no-answer), NoAns F1 (the share answered "no answer"), overall
  F1 over all the questions, as SQuAD v2.0's script counts them; HasAns F1 always answering.
- Benchmark turns (the dev split), the top k of the retriever for each k: the share of
  unanswerable turns caught (answered "no answer"), the share of answer-evaluable turns lost to
  a no-answer, and their F1 with the threshold and always answering (TopiOCQA convention).
The reader answers with its folder's decoding (calibrate.py chooses it).
"""
from __future__ import annotations

from typing import Any, Sequence

from convqa.metrics.answer import score_answer

from .calibration_data import Source
from .fusion_tuning import ReadTurn


def answers_at(reader: Any, turns: Sequence[ReadTurn], k: int, reranked: bool = False
               ) -> list[tuple[Any, Any]]:
    """(the reader's answer, its always-answer answer) of each turn reading the top `k`
    (`reranked`: the turns' passages are a reranker's)."""
    out = []
    for turn in turns:
        spans, passages, scores = turn.spans[:k], turn.passages[:k], turn.scores[:k]
        out.append((reader.answer_from(spans, passages, scores, reranked=reranked),
                    reader.answer_from(spans, passages, scores, always_answer=True,
                                       reranked=reranked)))
    return out


def _f1(answer: Any, turn: ReadTurn, convention: str) -> float:
    text = answer.text if answer is not None else ""
    return score_answer(text, turn.answers, convention)["f1"]


def _abstains(answer: Any) -> bool:
    return answer is None or answer.no_answer


def source_scores(reader: Any, source: Source, k: int, reranked: bool = False
                  ) -> dict[str, Any]:
    """Percentages over the source's questions at top `k` (see the module docstring)."""
    has = answers_at(reader, source.answerable, k, reranked)
    no = answers_at(reader, source.unanswerable, k, reranked)
    has_f1 = [_f1(a, t, source.convention) for (a, _), t in zip(has, source.answerable)]
    always_f1 = [_f1(a, t, source.convention) for (_, a), t in zip(has, source.answerable)]
    caught = [float(_abstains(a)) for a, _ in no]
    lost = [float(_abstains(a)) for a, _ in has]

    def mean(values: Sequence[float]) -> float | None:
        return round(100.0 * sum(values) / len(values), 2) if values else None

    return {"k": k, "answerable": len(has), "unanswerable": len(no),
            "has_answer_f1": mean(has_f1), "has_answer_f1_always": mean(always_f1),
            "has_answer_no_answer_share": mean(lost),
            "no_answer_f1": mean(caught),   # = the share of unanswerable questions caught
            "overall_f1": mean(has_f1 + caught),
            "unanswerable_share": source.unanswerable_share,
            # the F1 a user of the collection sees per question, the two kinds weighed by
            # their natural shares, with the threshold and always answering
            "natural_f1": natural_f1(source.unanswerable_share, mean(has_f1), mean(caught)),
            "natural_f1_always": natural_f1(source.unanswerable_share, mean(always_f1), 0.0)}


def natural_f1(share: float | None, has_f1: float | None, caught: float | None
               ) -> float | None:
    """(1 - share) x answerable F1 + share x unanswerable questions caught."""
    if share is None or has_f1 is None or caught is None:
        return None
    return round((1.0 - share) * has_f1 + share * caught, 2)
