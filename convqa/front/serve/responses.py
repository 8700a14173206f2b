"""A `PipelineResult` as the API's `AnswerResponse`."""
from __future__ import annotations

from convqa.evidence import evidence_passage, span_is_valid
from convqa.pipeline import PipelineResult

from .schemas import AnswerResponse, Evidence, RetrievedPassage


def answer_response(result: PipelineResult, pipeline: str, conversation_id: str | None,
                    history_turns: int, timings_ms: dict[str, float]) -> AnswerResponse:
    """The answer with its evidence passage (the span only when it fits the passage's text),
    the retrieved passages, the query text and the stage timings (rounded to 0.1 ms)."""
    answer = result.answer
    evidence = None
    if answer is not None:
        passage = evidence_passage(answer, result.passages)
        if passage is not None:
            fits = span_is_valid(passage.text, answer.start, answer.end)
            evidence = Evidence(passage_id=passage.id, title=passage.title, text=passage.text,
                                start=answer.start if fits else None,
                                end=answer.end if fits else None)
    passages = [RetrievedPassage(passage_id=p.id, title=p.title, score=hit.score)
                for hit, p in zip(result.hits, result.passages)]
    return AnswerResponse(
        answer=answer.text if answer is not None else None,
        no_answer=bool(answer is not None and answer.no_answer),
        score=answer.score if answer is not None else None,
        evidence=evidence, passages=passages, query=result.query_text,
        timings_ms={stage: round(ms, 1) for stage, ms in timings_ms.items()},
        pipeline=pipeline, conversation_id=conversation_id, history_turns=history_turns)
