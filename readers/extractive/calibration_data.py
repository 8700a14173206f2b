"""The questions the reader's decoding is calibrated and checked on, each read once.

- Benchmark turns (`convqa data topiocqa-wiki` folders) of one split: the answer-evaluable ones
  (a gold answer occurs in the collection) and the unanswerable ones (TopiOCQA's gold answer
  is UNANSWERABLE), a seeded sample of each; their top k passages come from a retriever spec
  run here or from a run file (`convqa eval`'s cache, `convqa retrieve`).
- SQuAD v2.0 questions of one side of the article split the reader was trained with
  (`data.heldout_keys` over the titles: "train" articles to calibrate on, "heldout" to report
  on), answerable and unanswerable, each read against its own paragraph alone.

Reading is the slow part (every passage through the reader), so each set of reads is kept in a
cache file keyed by everything the spans depend on (the reader's weights, window settings and
history strategy, the questions, the passages and their scores): choosing again, or checking
after choosing, reads nothing twice.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from convqa.errors import ConfigError, DataError
from convqa.types import Hit, Passage

from .data import is_unanswerable
from .decode import PassageSpan
from .fusion_tuning import ReadTurn, read_turns

CACHE_VERSION = 1


@dataclass
class Source:
    """The read questions of one collection or file: with an answer and without."""

    name: str
    convention: str                 # how answers are scored (convqa.metrics.answer)
    answerable: list[ReadTurn]
    unanswerable: list[ReadTurn]
    # share of unanswerable questions in the whole population the two samples were drawn
    # from (e.g. 8% of TopiOCQA's turns); None when not known
    unanswerable_share: float | None = None


def seeded_sample(items: Sequence[Any], count: int | None, seed: int, key=lambda x: x.qid
                  ) -> list[Any]:
    """At most `count` items: the first in sha256("{seed}:{key}") order, kept in input order."""
    if count is None or len(items) <= count:
        return list(items)
    order = sorted(range(len(items)), key=lambda i: hashlib.sha256(
        f"{seed}:{key(items[i])}".encode()).hexdigest())
    return [items[i] for i in sorted(order[:count])]


# ---------------------------------------------------------------------------------------------
# Benchmark turns


def unanswerable_share(answerable: int, unanswerable: int) -> float | None:
    """Share of the unanswerable questions among both kinds (None without questions)."""
    total = answerable + unanswerable
    return unanswerable / total if total else None


def benchmark_share(turns: Sequence[Any], split: str) -> float | None:
    """Natural share of UNANSWERABLE turns among the turns of `split` that have a gold answer
    (before any sampling). Answerable turns whose answer the collection lacks count as
    answerable: a user asking them expects an answer, not "no answer"."""
    labelled = [t for t in turns if t.split == split and t.answers]
    unanswerable = sum(is_unanswerable(t.answers) for t in labelled)
    return unanswerable_share(len(labelled) - unanswerable, unanswerable)


def benchmark_turns(turns: Sequence[Any], split: str, answerable_count: int | None,
                    unanswerable_count: int | None, seed: int) -> tuple[list[Any], list[Any]]:
    """(answer-evaluable, unanswerable) turns of `split`, at most the counts (None: all)."""
    answerable = [t for t in turns if t.split == split and t.answer_evaluable]
    unanswerable = [t for t in turns if t.split == split and t.answers
                    and is_unanswerable(t.answers)]
    return (seeded_sample(answerable, answerable_count, seed),
            seeded_sample(unanswerable, unanswerable_count, seed))


def without_topic_article(turn: Any, hits: Sequence[Hit], store: Any,
                          keep: int | None = None) -> list[Hit]:
    """`hits` less the passages of the turn's topic article (`gold_article_id`) and any other
    passage that holds one of its gold answers (benchmark rules: convqa.benchmark), in their
    order and renumbered, at most `keep` of them (None: all; the passages after are not
    fetched): what the retriever returns from a collection that lacks the answer, the case of
    "What is the capital of Australia?" against a collection without Canberra."""
    from convqa.benchmark.labelled_turns import article_id_of, evaluable_answers, occurs
    from convqa.metrics.answer import normalize_answer

    answers = evaluable_answers(turn.answers)
    kept: list[Hit] = []
    for hit in hits:
        if keep is not None and len(kept) >= keep:
            break
        if turn.gold_article_id and article_id_of(hit.passage_id) == turn.gold_article_id:
            continue
        text = normalize_answer(store.get(hit.passage_id).text)
        if any(occurs(answer, text) for answer in answers):
            continue
        kept.append(Hit(hit.passage_id, float(hit.score), len(kept) + 1))
    return kept


def retrieve(turns: Sequence[Any], conversations: Mapping[str, Any], retriever: Any,
             history: Any, k: int, batch_size: int = 32, progress: bool = False
             ) -> dict[str, list[Hit]]:
    """{qid: top-k hits} of a retriever spec, the query of each turn made by `history`."""
    from tqdm.auto import tqdm

    from convqa.history import build_history_strategy
    from convqa.registry import RETRIEVERS

    model = RETRIEVERS.build(retriever)
    strategy = build_history_strategy(history)
    queries = [(t.qid, strategy.format_turn(conversations[t.conversation_id], t.turn))
               for t in turns]
    run: dict[str, list[Hit]] = {qid: [] for qid, _ in queries}
    todo = [(qid, text) for qid, text in queries if text.strip()]
    for begin in tqdm(range(0, len(todo), batch_size), desc="retrieve", unit=" batch",
                      disable=not progress):
        batch = todo[begin:begin + batch_size]
        for (qid, _), hits in zip(batch, model.retrieve_batch([q for _, q in batch], k)):
            run[qid] = list(hits)[:k]
    return run


def run_file_hits(path: str | os.PathLike, turns: Sequence[Any]) -> dict[str, list[Hit]]:
    """The hits of `turns` in a run file (JSONL or TREC, convqa/runs.py)."""
    from convqa.runs import read_run

    hits = read_run(path).hits
    missing = [t.qid for t in turns if t.qid not in hits]
    if missing:
        raise DataError(f"the run has no ranking for query {missing[0]!r} (and "
                        f"{len(missing) - 1} more)", path)
    return {t.qid: list(hits[t.qid]) for t in turns}


# ---------------------------------------------------------------------------------------------
# SQuAD v2.0


@dataclass
class SquadQuestion:
    qid: str
    title: str
    question: str
    context: str
    answers: list[str]


def squad_questions(path: str | os.PathLike, side: str, fraction: float = 0.1, seed: int = 0,
                    count: int | None = None, sample_seed: int = 0, with_share: bool = False
                    ) -> tuple:
    """(answerable, unanswerable) questions of the "train" or "heldout" articles of a SQuAD
    file, split as `build_examples.squad_examples` splits them (`fraction`, `seed`: the reader run's
    held-out fraction and seed); at most `count` of each, a seeded sample. `with_share` adds
    the share of unanswerable questions on that side before sampling."""
    from convqa.loaders.squad import read_squad

    from .data import heldout_keys

    if side not in ("train", "heldout"):
        raise ConfigError(f"SQuAD side must be train or heldout, got {side!r}")
    examples = read_squad(path, strict=False).examples
    heldout = heldout_keys({e.title for e in examples}, fraction, seed)
    chosen = [e for e in examples if (e.title in heldout) == (side == "heldout")]
    answerable = [SquadQuestion(e.id, e.title, e.question, e.context,
                                list(dict.fromkeys(a.text for a in e.answers)))
                  for e in chosen if not e.is_impossible and e.answers]
    unanswerable = [SquadQuestion(e.id, e.title, e.question, e.context, [])
                    for e in chosen if e.is_impossible]
    chosen_pair = (seeded_sample(answerable, count, sample_seed),
                   seeded_sample(unanswerable, count, sample_seed))
    if with_share:
        return chosen_pair + (unanswerable_share(len(answerable), len(unanswerable)),)
    return chosen_pair


def read_squad_questions(reader: Any, questions: Sequence[SquadQuestion],
                         progress: bool = False) -> list[ReadTurn]:
    """Each question read against its own paragraph alone (no history, no retriever)."""
    from tqdm.auto import tqdm

    paragraphs: dict[tuple[str, str], Passage] = {}
    read = []
    for q in tqdm(questions, desc="reading SQuAD", unit=" q", disable=not progress):
        key = (q.title, q.context)
        if key not in paragraphs:
            paragraphs[key] = Passage(f"{q.title}#{len(paragraphs)}", q.context, q.title)
        passage = paragraphs[key]
        query = reader.history.format(q.question, [])
        read.append(ReadTurn(q.qid, q.title, list(q.answers), [passage], [0.0],
                             reader.passage_spans(query, [passage])))
    return read


# ---------------------------------------------------------------------------------------------
# Reading once


def reader_key(reader: Any) -> dict[str, Any]:
    """What a reader's spans depend on (not its decoding: that is what gets chosen)."""
    return {"model": reader.model.fingerprint(), "config": reader.config.record(),
            "history": reader.history.to_dict(), "precision": reader.options.precision}


def turn_read_to_dict(turn: ReadTurn) -> dict[str, Any]:
    """One read turn as a cache line holds it (`turn_read_from_dict` reads it back)."""
    return {"qid": turn.qid, "conversation_id": turn.conversation_id, "answers": turn.answers,
            "passages": [p.to_dict() for p in turn.passages], "scores": turn.scores,
            "spans": [asdict(s) if s is not None else None for s in turn.spans]}


def turn_read_from_dict(data: dict[str, Any]) -> ReadTurn:
    return ReadTurn(data["qid"], data["conversation_id"], list(data["answers"]),
                    [Passage.from_dict(p) for p in data["passages"]],
                    [float(s) for s in data["scores"]],
                    [PassageSpan(**s) if s is not None else None for s in data["spans"]])


def _cache_file(cache_dir: str | os.PathLike, prefix: str, key: dict[str, Any]
                ) -> tuple[Path, str, list[dict[str, Any]] | None]:
    """`cache_dir/{prefix}-{hash of key}.jsonl`, the key's text (its first line), and the rows
    after that line (None: no such file, or one written under another key)."""
    from convqa.io import iter_jsonl

    text = json.dumps({"version": CACHE_VERSION, **key}, sort_keys=True, default=str)
    path = Path(cache_dir) / f"{prefix}-{hashlib.sha256(text.encode()).hexdigest()[:24]}.jsonl"
    if path.is_file():
        rows = [row for _, row in iter_jsonl(path)]
        if rows and rows[0].get("key") == text:
            return path, text, rows[1:]
    return path, text, None


def cached_reads(cache_dir: str | os.PathLike | None, key: dict[str, Any], compute
                 ) -> tuple[list[ReadTurn], bool]:
    """(`compute()`'s reads, whether they came from the cache): kept in
    `cache_dir/reads-{hash of key}.jsonl` (written atomically) when `cache_dir` is set."""
    from convqa.io import write_jsonl

    if cache_dir is None:
        return compute(), False
    path, text, rows = _cache_file(cache_dir, "reads", key)
    if rows is not None:
        return [turn_read_from_dict(row) for row in rows], True
    reads = compute()
    write_jsonl(path, [{"key": text}] + [turn_read_to_dict(t) for t in reads])
    return reads, False


def read_benchmark_turns(reader: Any, turns: Sequence[Any], conversations: Mapping[str, Any],
                         run: Mapping[str, Sequence[Hit]], passages: str | os.PathLike, k: int,
                         cache_dir: str | os.PathLike | None = None, progress: bool = False
                         ) -> tuple[list[ReadTurn], bool]:
    """`fusion_tuning.read_turns` of the top `k` of `run`, through the read cache (whether
    nothing had to be read). The cache keeps turns one by one, each under its question and
    passage ids, not their scores: a reader's spans do not depend on the scores, which move in
    their last digits with the retriever's precision (`auto` chooses it per thread count), so
    a rerun reads only the turns whose passages changed and takes the scores of its run."""
    from convqa.corpus import PassageStore

    top = {t.qid: list(run.get(t.qid, []))[:k] for t in turns}
    shared = {"what": "benchmark turns", "reader": reader_key(reader), "k": k,
              "passages": str(Path(passages).resolve())}

    def turn_key(turn: Any) -> str:
        return json.dumps([turn.qid, turn.question, list(turn.answers),
                           [h.passage_id for h in top[turn.qid]]])

    def compute(missing: Sequence[Any]) -> list[ReadTurn]:
        with PassageStore.open(passages) as store:
            return read_turns(reader, missing, conversations, run, store, k, progress)

    reads, cached = cached_turn_reads(cache_dir, shared, turns, turn_key, compute)
    return [replace(r, scores=[float(h.score) for h in top[r.qid]]) for r in reads], cached


def cached_turn_reads(cache_dir: str | os.PathLike | None, shared: dict[str, Any],
                      turns: Sequence[Any], turn_key: Callable[[Any], str],
                      compute: Callable[[Sequence[Any]], list[ReadTurn]]
                      ) -> tuple[list[ReadTurn], bool]:
    """`compute(turns)`'s reads, one per turn in order, taking from
    `cache_dir/turn-reads-{hash of shared}.jsonl` every turn whose `turn_key` it holds and
    computing only the others, which join the file (rewritten atomically)."""
    from convqa.io import write_jsonl

    if cache_dir is None:
        return compute(turns), False
    path, text, rows = _cache_file(cache_dir, "turn-reads", shared)
    known = {row["turn"]: turn_read_from_dict(row) for row in rows or []}
    keys = [turn_key(t) for t in turns]
    missing = [(t, key) for t, key in zip(turns, keys) if key not in known]
    if missing:
        known.update(zip([key for _, key in missing], compute([t for t, _ in missing])))
        write_jsonl(path, [{"key": text}] + [{"turn": key, **turn_read_to_dict(read)}
                                              for key, read in known.items()])
    return [known[key] for key in keys], not missing


def read_squad_cached(reader: Any, questions: Sequence[SquadQuestion],
                      cache_dir: str | os.PathLike | None = None, progress: bool = False
                      ) -> tuple[list[ReadTurn], bool]:
    key = {"what": "squad", "reader": reader_key(reader),
           "questions": [[q.qid, q.question, q.context, q.answers] for q in questions]}
    return cached_reads(cache_dir, key,
                        lambda: read_squad_questions(reader, questions, progress))
