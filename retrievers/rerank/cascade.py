"""When a cascade may skip its slow second stage: the first stage is sure enough of its best
passage when that passage leads the runner-up by at least a margin of the first stage's final
score (its logit, fused with the retriever's score). Such a turn keeps the first stage's order
and costs the first stage alone; the others go on to the second stage.

    first stage's lead = score(best) - score(second best)      (inf with one passage)
    skip the second stage  <=>  lead >= skip_margin

On full-collection training turns the fast reranker's confident leads are right at least as
often as the large reranker's reordering, so a margin buys time without costing ranking.

The margin is chosen on *training* turns (`convqa train reranker-cascade`, `choose_margin`
here): for each margin of `MARGINS`, its answer-passage Hits@1 gain over never skipping on each
collection; the margin whose worst gain is largest (on a tie the smallest, which skips most),
so that no collection the margin serves ranks worse for it, and never skipping when every
margin loses somewhere. (The best *mean* Hits@1 lets a collection where the second stage is of
little use decide for the others: on the vital and full training turns it chose 0.5, which cost
the full collection's dev turns 2.7 F1.)

The margin is recorded in the **first** stage's folder (`convqa_reranker.json`,
"cascade_margins"; its scores are the ones compared), keyed by `cascade_key`: the retriever the
first stage follows (its score is in the fused one) and the second stage's fingerprint.
"""
from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Sequence

from convqa.errors import ConfigError
from convqa.types import Hit, RerankedHit

from .fusion import is_weight as is_margin  # the same test: a finite number >= 0, not a bool
from .fusion import numbers_from_block

MARGINS_KEY = "cascade_margins"
# the margins `choose_margin` tries, in the first stage's score (logits: a few units apart)
MARGINS = tuple(m / 4 for m in range(0, 25))
NEVER = "never"      # skip_margin: always run the second stage
AUTO = "auto"        # skip_margin: the margin recorded in the first stage's folder, else never


def cascade_key(retriever: str | None, second_fingerprint: str) -> str:
    """The folder key of a margin: the first stage's retriever key (fusion.retriever_key; "-"
    for none) and the second stage's model fingerprint."""
    return f"{retriever or '-'} > {second_fingerprint}"


def lead(hits: Sequence[Hit]) -> float:
    """How far the first hit's score is ahead of the second's (inf with fewer than two)."""
    if len(hits) < 2:
        return math.inf
    return float(hits[0].score) - float(hits[1].score)


def skips(hits: Sequence[Hit], margin: float | None) -> bool:
    """Whether a turn whose first stage ranked `hits` skips the second stage (None: never)."""
    return margin is not None and lead(hits) >= margin


def continue_below(head: Sequence[RerankedHit], first: Sequence[RerankedHit]
                   ) -> list[RerankedHit]:
    """The first stage's hits (`first`, best first) after the ones `head` reorders (its first
    len(head), now in the second stage's order and on its scale): each keeps its gap to the
    first stage's score of the last reordered hit, counted down from head's lowest score, so a
    reader that weighs the scores sees them below the reordered ones and apart as the first
    stage had them."""
    rest = list(first)[len(head):]
    if not head:
        return rest
    floor, last = min(float(hit.score) for hit in head), float(first[len(head) - 1].score)
    return [RerankedHit(hit.passage_id, floor - (last - float(hit.score)), len(head) + i,
                        hit.retriever_score, hit.retriever_rank)
            for i, hit in enumerate(rest, start=1)]


def check_skip_margin(value: Any) -> float | str:
    """The `skip_margin` option: "auto", "never" or a margin >= 0; ValueError otherwise."""
    if value in (AUTO, NEVER):
        return value
    if not is_margin(value):
        raise ValueError(f"skip_margin must be 'auto', 'never' or a number >= 0, got {value!r}")
    return float(value)


def margin_scores(turns: Iterable[tuple[Sequence[Hit], Sequence[Hit], set[str]]],
                  margins: Sequence[float] = MARGINS) -> dict[float | None, dict[str, float]]:
    """For never skipping (key None) and each margin: the answer passages' Hits@1 and the share
    of turns that skip. `turns`: each turn's first-stage hits (best first, final scores), the
    second stage's order of them, and the turn's answer passage ids."""
    turns = [(list(first), list(second), relevant) for first, second, relevant in turns]
    if not turns:
        raise ConfigError("no turns to choose the cascade's skip margin on")
    out: dict[float | None, dict[str, float]] = {}
    for margin in (None, *margins):
        hit = skipped = 0
        for first, second, relevant in turns:
            skip = skips(first, margin)
            skipped += skip
            best = first if skip or not second else second
            hit += bool(best) and best[0].passage_id in relevant
        out[margin] = {"hits@1": hit / len(turns), "skipped": skipped / len(turns)}
    return out


def choose_margin(benchmarks: Sequence[Mapping[float | None, Mapping[str, float]]]
                  ) -> float | None:
    """The margin whose smallest Hits@1 gain over never skipping, across `benchmarks` (each
    `margin_scores`), is largest and not negative; on a tie the smallest margin. None (never
    skip) when every margin loses on some benchmark."""
    if not benchmarks:
        raise ConfigError("no benchmarks to choose the cascade's skip margin on")
    worst = {m: min(round(b[m]["hits@1"] - b[None]["hits@1"], 9) for b in benchmarks)
             for m in benchmarks[0] if m is not None}
    fine = [m for m, gain in worst.items() if gain >= 0]
    if not fine:
        return None
    best = max(worst[m] for m in fine)
    return min(m for m in fine if worst[m] == best)


def margins_from_block(block: Any, where: Any) -> dict[str, float]:
    """{cascade key: margin} of a folder's block, checked (a bad entry names the file)."""
    return numbers_from_block(block, where, MARGINS_KEY, "skip_margin")
