"""Reranker training examples built from their sources (their format and loader: data.py).

- `benchmark_examples`: the answer-evaluable turns of a TopiOCQA x Wikipedia benchmark folder
  (`convqa data topiocqa-wiki`; train turns -> "train", dev turns -> "heldout"); positives are
  the turn's answer passages (the benchmark's own rule); article negatives the other passages
  of its gold article, those the mining ranks highest first, then in a seeded order; mined
  negatives the top passages of other articles in a run file (`convqa retrieve`, one line per
  turn keyed "{conversation}_{turn}") or, without one, of BM25 for the conversation.
- `squad_examples`: the answerable questions of a SQuAD-format file; the positive is the gold
  paragraph, article negatives the other paragraphs of its article (a title) without any of
  its answers, mined negatives BM25's top paragraphs of other articles without them. Whole
  articles are held out (`heldout_fraction`); a file with one title for everything (SQuADShifts
  reddit, COVID-QA) has no articles: each paragraph is its own, and only mined negatives exist.
"""
from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from convqa.errors import DataError
from convqa.seeded import seeded_rng, seeded_sample
from convqa.types import Passage

from .data import RerankExample, save_examples

SEARCH_DEPTH = 100  # hits per question searched for mined (and ranked article) negatives


# ---------------------------------------------------------------------------------------------
# Choosing negatives


def pick_negatives(ranking: Sequence[str], article: Sequence[str], is_clean: Callable[[str], bool],
                   in_article: Callable[[str], bool], counts: tuple[int, int],
                   rng: np.random.Generator) -> tuple[list[str], list[str]]:
    """(article negatives, mined negatives), as passage ids. `ranking`: a retriever's ids for
    the question, best first; `article`: the candidates of the positive's own article (the
    positives already removed). Article negatives are the candidates in ranking order, then the
    rest in a seeded order; mined ones the ranked ids outside the article. Either kind keeps
    only ids `is_clean` accepts (holding no answer), at most `counts` of each."""
    want_article, want_mined = counts
    candidates = set(article)
    ranked = [pid for pid in dict.fromkeys(ranking) if pid in candidates]
    rest = sorted(candidates - set(ranked))
    ranked += [rest[int(i)] for i in rng.permutation(len(rest))]
    chosen_article = _take(ranked, is_clean, want_article)
    mined = [pid for pid in dict.fromkeys(ranking) if pid not in candidates and not
             in_article(pid)]
    return chosen_article, _take(mined, is_clean, want_mined)


def _take(ids: Iterable[str], keep: Callable[[str], bool], count: int) -> list[str]:
    taken: list[str] = []
    for pid in ids:
        if len(taken) == count:
            break
        if keep(pid):
            taken.append(pid)
    return taken


# ---------------------------------------------------------------------------------------------
# The TopiOCQA x Wikipedia benchmark


def benchmark_examples(folder: str | os.PathLike, article_negatives: int = 16,
                       mined_negatives: int = 16, run: str | os.PathLike | None = None,
                       history: Any = None, max_examples: int | None = None,
                       max_heldout: int | None = None, seed: int = 0,
                       report: Any = None, weak: Any = None) -> list[RerankExample]:
    """Examples of a benchmark folder (module docstring); `run` mines from a run file, else
    BM25 (FOLDER/indexes/bm25, or built in memory) over the `history`-formatted turn. With a
    `weak` rule (weak_positives.WeakPositiveRule) the train turns without an answer passage
    join too, where the rule finds one (source "topiocqa-wiki:CORPUS:weak")."""
    from convqa.benchmark.labelled_turns import article_id_of, open_benchmark_source
    from convqa.benchmark.weak_positives import weak_labels
    from readers.extractive.data import BuildReport

    folder = Path(folder)
    report = report if report is not None else BuildReport()
    data, corpus, source, store = open_benchmark_source(folder)
    splits: dict[str, list[Any]] = {"train": [], "heldout": []}
    for turn in data.turns:
        if turn.answer_evaluable:
            splits["train" if turn.split == "train" else "heldout"].append(turn)
    turns = (seeded_sample(splits["train"], max_examples, seed, f"{corpus}:train")
             + seeded_sample(splits["heldout"], max_heldout, seed, f"{corpus}:heldout"))
    weak_positive = ({qid: label.passage for qid, label in weak_labels(data, store, weak).items()}
                     if weak is not None else {})
    turns += seeded_sample([t for t in data.turns if t.qid in weak_positive], max_examples,
                           seed, f"{corpus}:weak")
    rankings = _benchmark_rankings(turns, data, folder, store, run, history)
    examples = []

    def text_of(pid: str) -> str:
        return _get(store, pid, run).text

    for turn, ranking in zip(turns, rankings):
        split = "train" if turn.split == "train" else "heldout"
        if turn.answer_evaluable:
            positive_ids, turn_source = list(turn.answer_passage_ids), source
            holds_answer = _exact_answer_test(turn, text_of)
        else:
            positive_ids, turn_source = [weak_positive[turn.qid]], f"{source}:weak"
            holds_answer = _weak_answer_test(turn, text_of, weak)
        positives = set(positive_ids)
        article = [pid for pid in turn.gold_passage_ids() if pid not in positives]

        def clean(pid: str, positives=positives, holds_answer=holds_answer) -> bool:
            return pid not in positives and not holds_answer(pid)

        gold = turn.gold_article_id
        chosen_article, mined = pick_negatives(
            ranking, article, clean, lambda pid, gold=gold: article_id_of(pid) == gold,
            (article_negatives, mined_negatives), seeded_rng(seed, turn.qid))
        conversation = data.conversations[turn.conversation_id]
        examples.append(RerankExample(
            f"{corpus}/{turn.qid}", turn.question,
            [(t.question, t.answer) for t in conversation.history(turn.turn)],
            [store.get(pid) for pid in positive_ids],
            [store.get(pid) for pid in chosen_article], [_get(store, pid, run) for pid in mined],
            split, turn_source))
        report.add(turn_source, f"{split}_examples")
        report.add(turn_source, f"{split}_article_negatives", len(chosen_article))
        report.add(turn_source, f"{split}_mined_negatives", len(mined))
    return examples


def _exact_answer_test(turn: Any, text_of: Callable[[str], str]) -> Callable[[str], bool]:
    """Whether a passage holds one of the turn's answers by the benchmark's own rule."""
    from convqa.benchmark.labelled_turns import evaluable_answers, occurs
    from convqa.metrics.answer import normalize_answer

    answers = evaluable_answers(turn.answers)

    def holds_answer(pid: str) -> bool:
        text = normalize_answer(text_of(pid))
        return any(occurs(answer, text) for answer in answers)

    return holds_answer


def _weak_answer_test(turn: Any, text_of: Callable[[str], str], rule: Any
                      ) -> Callable[[str], bool]:
    """Whether a passage covers enough of a weakly labelled turn's answer to be a second source
    of it (never a negative)."""
    from convqa.benchmark.weak_positives import content_words, coverage, written_answer

    words = content_words(written_answer(turn))
    return lambda pid: coverage(words, Counter(content_words(text_of(pid)))) \
        >= rule.max_negative_coverage


def _get(store: Any, pid: str, run: Any) -> Passage:
    try:
        return store.get(pid)
    except KeyError:
        raise DataError(f"passage {pid!r} is not in the benchmark's passages (a run of "
                        "another collection?)", run) from None


def _benchmark_rankings(turns: Sequence[Any], data: Any, folder: Path, store: Any,
                        run: str | os.PathLike | None, history: Any) -> list[list[str]]:
    """Each turn's ranked passage ids: its line of the run file, or BM25's top ones."""
    if not turns:
        return []
    if run is not None:
        from convqa.runs import read_run

        hits = read_run(run).hits
        return [[h.passage_id for h in hits.get(turn.qid, ())][:SEARCH_DEPTH] for turn in turns]
    from convqa.history import build_history_strategy
    from readers.extractive.model import DEFAULT_HISTORY
    from retrievers.bm25 import BM25Retriever

    index = folder / "indexes" / "bm25"
    retriever = BM25Retriever.for_store(store, index)
    strategy = build_history_strategy(history or DEFAULT_HISTORY)
    queries = [strategy.format(t.question, data.conversations[t.conversation_id].history(t.turn))
               for t in turns]
    return [[h.passage_id for h in row] for row in retriever.retrieve_batch(queries,
                                                                            k=SEARCH_DEPTH)]


# ---------------------------------------------------------------------------------------------
# SQuAD-format files


def squad_examples(path: str | os.PathLike, article_negatives: int = 16,
                   mined_negatives: int = 16, heldout_fraction: float = 0.1, seed: int = 0,
                   max_examples: int | None = None, max_heldout: int | None = None,
                   report: Any = None, strict: bool = False) -> list[RerankExample]:
    """Examples of one SQuAD-format file (module docstring); unanswerable questions (SQuAD
    v2.0) are skipped and counted."""
    from convqa.loaders.squad import read_squad
    from readers.extractive.data import BuildReport, find_spans, heldout_keys, source_name
    from retrievers.bm25 import BM25Retriever

    name = source_name(path)
    source = f"squad:{name}"
    report = report if report is not None else BuildReport()
    data = read_squad(path, strict=strict)
    by_title = len({e.title for e in data.examples}) > 1
    paragraphs: dict[tuple[str, str], Passage] = {}
    article_of: dict[str, str] = {}
    for e in data.examples:
        if (e.title, e.context) not in paragraphs:
            passage = Passage(f"{name}#{len(paragraphs)}", e.context, e.title)
            paragraphs[(e.title, e.context)] = passage
            article_of[passage.id] = e.title if by_title else passage.id
    heldout = heldout_keys(set(article_of.values()), heldout_fraction, seed)
    splits: dict[str, list[Any]] = {"train": [], "heldout": []}
    for e in data.examples:
        if e.is_impossible or not e.answers:
            report.add(source, "skipped_unanswerable")
            continue
        passage = paragraphs[(e.title, e.context)]
        splits["heldout" if article_of[passage.id] in heldout else "train"].append((e, passage))
    splits["train"] = seeded_sample(splits["train"], max_examples, seed, f"{name}:train")
    splits["heldout"] = seeded_sample(splits["heldout"], max_heldout, seed, f"{name}:heldout")
    members: dict[str, list[str]] = {}
    for pid, article in article_of.items():
        members.setdefault(article, []).append(pid)
    by_id = {p.id: p for p in paragraphs.values()}
    examples = []
    for split, items in splits.items():
        if not items:
            continue
        pool = [p for p in paragraphs.values() if (article_of[p.id] in heldout) == (split ==
                                                                                    "heldout")]
        retriever = BM25Retriever.build(pool)
        rows = retriever.retrieve_batch([e.question for e, _ in items], k=SEARCH_DEPTH)
        for (e, passage), row in zip(items, rows):
            article = article_of[passage.id]
            texts = list(dict.fromkeys(a.text for a in e.answers))

            def clean(pid: str, texts=texts) -> bool:
                return not any(find_spans(by_id[pid].text, t) for t in texts)

            chosen_article, mined = pick_negatives(
                [h.passage_id for h in row], [p for p in members[article] if p != passage.id],
                clean, lambda pid, article=article: article_of[pid] == article,
                (article_negatives, mined_negatives), seeded_rng(seed, f"{name}/{e.id}"))
            examples.append(RerankExample(
                f"{name}/{e.id}", e.question, [], [passage],
                [by_id[pid] for pid in chosen_article], [by_id[pid] for pid in mined],
                split, source))
            report.add(source, f"{split}_examples")
            report.add(source, f"{split}_article_negatives", len(chosen_article))
            report.add(source, f"{split}_mined_negatives", len(mined))
    return examples


# ---------------------------------------------------------------------------------------------
# All sources at once


@dataclass
class ExampleSources:
    """Where examples come from and how many negatives each keeps."""

    squad: list[str] = field(default_factory=list)        # SQuAD-format files
    benchmarks: list[str] = field(default_factory=list)   # benchmark folders
    runs: dict[str, str] = field(default_factory=dict)    # benchmark folder -> run file
    article_negatives: int = 16
    mined_negatives: int = 16
    heldout_fraction: float = 0.1                         # SQuAD articles held out
    max_examples: int | None = None                       # per source, a seeded sample
    max_heldout: int | None = 1000                        # per source
    history: Any = None                                   # BM25 mining's query formatting
    seed: int = 0
    weak_positives: Any = None      # a WeakPositiveRule: also the benchmarks' weakly labelled turns

    def __post_init__(self) -> None:
        from convqa.errors import ConfigError

        unknown = sorted(set(self.runs) - set(self.benchmarks))
        if unknown:
            raise ConfigError(f"a run file is given for {unknown[0]}, which is not among the "
                              "benchmarks")
        for name in ("article_negatives", "mined_negatives"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"{name} must be an integer >= 0, got {value!r}")


def build_examples(sources: ExampleSources, say: Callable[[str], None] = lambda _: None
                   ) -> tuple[list[RerankExample], dict[str, Any]]:
    """(examples of every source, counts per source)."""
    from readers.extractive.data import BuildReport

    report = BuildReport()
    examples: list[RerankExample] = []
    for path in sources.squad:
        say(f"examples: {path}")
        examples += squad_examples(path, sources.article_negatives, sources.mined_negatives,
                                   sources.heldout_fraction, sources.seed, sources.max_examples,
                                   sources.max_heldout, report)
    for folder in sources.benchmarks:
        say(f"examples: {folder}")
        examples += benchmark_examples(folder, sources.article_negatives,
                                       sources.mined_negatives, sources.runs.get(folder),
                                       sources.history, sources.max_examples,
                                       sources.max_heldout, sources.seed, report,
                                       sources.weak_positives)
    return examples, report.to_dict()


def export_examples(sources: ExampleSources, path: str | os.PathLike,
                    say: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Build the examples of `sources` into one file (xz for a `.xz` name), for a machine that
    sees neither the benchmark folders nor the SQuAD files; returns the counts per source."""
    examples, report = build_examples(sources, say)
    if not examples:
        from convqa.errors import ConfigError

        raise ConfigError("no examples: give --squad or --benchmark sources with answerable "
                          "questions")
    save_examples(path, examples)
    return report
