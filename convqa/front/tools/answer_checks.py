"""The questions a reader must answer (or decline) before it ships: held-out F1 does not see a
reader that gains F1 and answers the README's question with a clause too long, or names a city
the collection never says is the capital."""
from __future__ import annotations

from pathlib import Path

from convqa.errors import ConvQAError

README_CHECK = "Who directed 2001: A Space Odyssey?=Stanley Kubrick"
# The embedded collection names no capital of Australia: a reader must say it has no answer.
DECLINE_CHECK = "What is the capital of Australia?"


def parse_check(text: str) -> tuple[str, str]:
    """'QUESTION=ANSWER' -> (question, answer)."""
    question, sep, answer = text.rpartition("=")
    if not sep or not question.strip() or not answer.strip():
        raise ConvQAError(f"--check {text!r}: expected QUESTION=ANSWER")
    return question.strip(), answer.strip()


def parse_decline(text: str) -> tuple[str, None]:
    """'QUESTION' -> (question, None): None expects "no answer in the collection"."""
    if not text.strip():
        raise ConvQAError("--decline '': expected a question")
    return text.strip(), None


def failed_checks(folder: str | Path, checks: list[tuple[str, str | None]],
                  family: str | None = None) -> list[str]:
    """The checks whose answer by `convqa answer`'s default pipeline, with the reader of
    `folder` in place of the shipped one, is not the expected one: exactly the expected text,
    or no answer where the expected text is None (sanity checks that held-out F1 does not
    make: a reader can gain F1 and still answer the README's question with a clause too
    long, or name a city the collection never says is the capital). `family`: the pipeline
    of `convqa answer --model-family FAMILY` (its reranker before the reader), where a
    reader of that family is used and calibrated."""
    from dataclasses import replace

    from convqa.front.embedded import DEFAULT_READER
    from convqa.front.families import DEFAULT_FAMILY, family_named, with_family
    from convqa.front.paths import build, embedded_path

    if not checks:
        return []
    path = with_family(embedded_path(reader=dict(DEFAULT_READER)),
                       family_named(family or DEFAULT_FAMILY))
    pipeline = build(replace(path, reader={**path.reader, "model": str(folder)}),
                     progress=False)
    failed = []
    for question, expected in checks:
        answer = pipeline.answer(question).answer
        declined = answer is None or answer.no_answer
        if expected is None:
            if not declined:
                confidence = ("" if answer.confidence is None
                              else f", confidence {answer.confidence:.3f}")
                failed.append(f"{question!r} -> {answer.text!r}{confidence} "
                              "(expected no answer)")
        elif declined or answer.text != expected:
            got = "no answer" if declined else repr(answer.text)
            failed.append(f"{question!r} -> {got} (expected {expected!r})")
    return failed
