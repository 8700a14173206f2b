"""Reader training examples built from their sources (their format and loader: data.py).

- `squad_examples`: SQuAD-format files (convqa/loaders/squad.py). The held-out split is by
  whole article (`dev_conversation_ids` over article keys: sha256 order, the first
  round(n * fraction)), so no held-out question shares a paragraph, or an article, with
  training. The article is the title; a file with a single title for everything (SQuADShifts
  reddit, COVID-QA) is split by paragraph instead. Gold spans: the annotated offsets plus every
  other whole-word occurrence of any annotated answer text in the paragraph. Negatives are
  paragraphs of OTHER articles of the same file and split, the BM25 top ones for the question
  (harder than random, as a retriever's would be), filled up with random ones. SQuAD v2.0
  unanswerable questions are skipped and counted, unless `unanswerable=True`: then each one of
  a training article is an unanswerable example whose first negative is its own paragraph (the
  passage that looks as if it answered), followed by the usual negatives of other articles;
  those of held-out articles are still skipped (the held-out scores read a gold passage).
- `benchmark_examples`: the TopiOCQA x Wikipedia benchmark (`convqa data topiocqa-wiki`):
  answer-evaluable turns (train split -> "train", dev -> "heldout"), history from
  conversations.jsonl, positives = the turn's answer passages in which an answer (not
  yes/no/unanswerable) occurs as a case-insensitive, whole-word exact string, or failing that
  without its surrounding punctuation or leading article (`answer_variants`; the benchmark's
  own rule compares normalized text, and a passage matching only after more normalization than
  that has no exact span and is dropped), negatives = the top BM25 passages, for the
  history-formatted query, of articles other than the gold article. With `unanswerable=True`
  the train turns whose gold answer is TopiOCQA's UNANSWERABLE become unanswerable examples,
  their negatives the top BM25 passages of the history-formatted query (dev turns: skipped).
  With a weak-positive rule (`--weak-positives`, convqa/benchmark/weak_positives.py) the train
  turns whose free-form answer occurs in no passage word for word join too: the span of the
  passage the rule names that reads most like the answer (weak_spans.py, SQuAD F1 at least
  MIN_WEAK_SPAN_F1) is their gold span (source "topiocqa-wiki:CORPUS:weak").
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

from convqa.seeded import seeded_rng, seeded_sample
from convqa.types import Passage
from readers.extractive.data import (BuildReport, GoldSpan, ReaderExample, ReaderPassage,
                                     find_answer_spans, find_spans, heldout_keys,
                                     is_unanswerable, merge_spans, source_name)


def _bm25_negatives(retriever, queries: Sequence[str], exclude: Sequence[set[str]],
                    count: int) -> list[list[str]]:
    """For each query, the ids of its top `count` BM25 passages not in `exclude[i]`."""
    if count == 0 or not queries:
        return [[] for _ in queries]
    hits = retriever.retrieve_batch(list(queries), k=3 * count + 20)
    return [[h.passage_id for h in row if h.passage_id not in banned][:count]
            for row, banned in zip(hits, exclude)]


# ---------------------------------------------------------------------------------------------
# SQuAD


def squad_examples(path: str | os.PathLike, heldout_fraction: float = 0.1, seed: int = 0,
                   negatives: int = 7, max_examples: int | None = None,
                   max_heldout: int | None = None, report: BuildReport | None = None,
                   strict: bool = False, unanswerable: bool = False) -> list[ReaderExample]:
    """Examples of one SQuAD-format file (train and held-out; see the module docstring).
    `max_examples` / `max_heldout` cap each split with a seeded sample (with `unanswerable`,
    the unanswerable training examples are capped by `max_examples` apart, so the answerable
    sample is the same with or without them)."""
    from convqa.loaders.squad import read_squad
    from retrievers.bm25 import BM25Retriever

    name = source_name(path)
    source = f"squad:{name}"
    report = report if report is not None else BuildReport()
    data = read_squad(path, strict=strict)
    if data.report.repaired or data.report.dropped_answers:
        report.add(source, "answer_offsets_repaired", data.report.repaired)
        report.add(source, "answers_dropped", data.report.dropped_answers)
    titles = {e.title for e in data.examples}
    by_title = len(titles) > 1
    paragraphs: dict[tuple[str, str], Passage] = {}
    article_of: dict[str, str] = {}
    for e in data.examples:
        key = (e.title, e.context)
        if key not in paragraphs:
            pid = f"{name}#{len(paragraphs)}"
            paragraphs[key] = Passage(pid, e.context, e.title)
            article_of[pid] = e.title if by_title else pid
    heldout = heldout_keys(set(article_of.values()), heldout_fraction, seed)
    splits: dict[str, list[ReaderExample]] = {"train": [], "heldout": []}
    impossible: list[ReaderExample] = []
    home: dict[str, Passage] = {}  # each example's own paragraph
    for e in data.examples:
        passage = paragraphs[(e.title, e.context)]
        split = "heldout" if article_of[passage.id] in heldout else "train"
        example_id = f"{name}/{e.id}"
        if unanswerable and e.is_impossible and split == "train":
            impossible.append(ReaderExample(example_id, e.question, [], [], [], [], split,
                                            source, unanswerable=True))
            home[example_id] = passage
            continue
        if e.is_impossible or not e.answers:
            report.add(source, "skipped_unanswerable")
            continue
        spans = [GoldSpan(a.text, a.start) for a in e.answers]
        for text in dict.fromkeys(a.text for a in e.answers):
            spans.extend(find_spans(e.context, text, ignore_case=False))
        answers = [a.text for a in e.answers]
        splits[split].append(ReaderExample(example_id, e.question, [],
                                           [ReaderPassage(passage, merge_spans(spans))], [],
                                           answers, split, source))
        home[example_id] = passage
    splits["train"] = seeded_sample(splits["train"], max_examples, seed, f"{name}:train")
    splits["heldout"] = seeded_sample(splits["heldout"], max_heldout, seed, f"{name}:heldout")
    if unanswerable:
        splits["train"] += seeded_sample(impossible, max_examples, seed,
                                         f"{name}:train-unanswerable")
    for split, examples in splits.items():
        pool = [p for p in paragraphs.values()
                if (article_of[p.id] in heldout) == (split == "heldout")]
        homes = [home[e.id] for e in examples]
        _add_squad_negatives(examples, homes, pool, article_of, negatives, seed, BM25Retriever)
        for example, own in zip(examples, homes):
            if example.unanswerable:  # its own paragraph first: the one that seems to answer
                example.negatives = [own] + example.negatives
        report.add(source, f"{split}_examples", len(examples))
        report.add(source, f"{split}_articles", len({article_of[p.id] for p in homes}))
        if unanswerable:
            report.add(source, f"{split}_unanswerable", sum(e.unanswerable for e in examples))
    return splits["train"] + splits["heldout"]


def _add_squad_negatives(examples: list[ReaderExample], homes: list[Passage],
                         pool: list[Passage], article_of: dict[str, str], count: int, seed: int,
                         bm25_class) -> None:
    """`count` paragraphs of other articles (of `pool`) than each example's own paragraph
    `homes[i]`: BM25's best for the question, filled up with random ones."""
    if not examples or count == 0 or len(pool) < 2:
        return
    by_id = {p.id: p for p in pool}
    retriever = bm25_class.build(pool)
    articles = [article_of[p.id] for p in homes]
    banned = [{pid for pid in by_id if article_of[pid] == a} for a in _distinct(articles)]
    banned_of = dict(zip(_distinct(articles), banned))
    chosen = _bm25_negatives(retriever, [e.question for e in examples],
                             [banned_of[a] for a in articles], count)
    for example, article, ids in zip(examples, articles, chosen):
        if len(ids) < count:  # fill with random paragraphs of other articles
            others = [pid for pid in by_id if article_of[pid] != article and pid not in ids]
            rng = seeded_rng(seed, example.id)
            extra = rng.permutation(len(others))[:count - len(ids)]
            ids = ids + [others[i] for i in extra]
        example.negatives = [by_id[pid] for pid in ids]


def _distinct(items: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(items))


# ---------------------------------------------------------------------------------------------
# The TopiOCQA x Wikipedia benchmark


def benchmark_examples(folder: str | os.PathLike, negatives: int = 7,
                       history: Any = "current_first", bm25_index: str | os.PathLike | None = None,
                       max_examples: int | None = None, max_heldout: int | None = None,
                       seed: int = 0, report: BuildReport | None = None,
                       unanswerable: bool = False, weak: Any = None) -> list[ReaderExample]:
    """Examples from a benchmark folder (see the module docstring). The BM25 index defaults to
    FOLDER/indexes/bm25 (`convqa index --bm25`); without one it is built in memory.
    `max_examples` caps the unanswerable train turns apart from the answerable ones, and the
    weakly labelled ones (`weak`, a WeakPositiveRule: source "topiocqa-wiki:CORPUS:weak")."""
    from convqa.benchmark.labelled_turns import article_id_of, open_benchmark_source
    from convqa.history import build_history_strategy

    folder = Path(folder)
    report = report if report is not None else BuildReport()
    data, corpus, source, store = open_benchmark_source(folder)
    strategy = build_history_strategy(history)
    splits: dict[str, list[ReaderExample]] = {"train": [], "heldout": []}
    gold_article: dict[str, str] = {}
    impossible: list[ReaderExample] = []

    def history_of(turn) -> list[tuple[str, str]]:
        return [(t.question, t.answer)
                for t in data.conversations[turn.conversation_id].history(turn.turn)]

    weakly_labelled = (_weak_examples(data, store, weak, history_of, corpus, source, report)
                       if weak else [])
    gold_article.update({e.id: article_id_of(e.positives[0].passage.id)
                         for e in weakly_labelled})

    for turn in data.turns:
        if unanswerable and turn.answers and is_unanswerable(turn.answers):
            if turn.split != "train":
                report.add(source, "heldout_skipped_unanswerable")
                continue
            impossible.append(ReaderExample(f"{corpus}/{turn.qid}", turn.question,
                                            history_of(turn), [], [], [], "train", source,
                                            unanswerable=True))
        elif turn.answer_evaluable:
            split = "train" if turn.split == "train" else "heldout"
            positives = _answer_passages(turn, store)
            if not positives:
                report.add(source, f"{split}_skipped_no_exact_span")
                continue
            example = ReaderExample(f"{corpus}/{turn.qid}", turn.question, history_of(turn),
                                    positives, [], list(turn.answers), split, source)
            gold_article[example.id] = turn.gold_article_id or ""
            splits[split].append(example)
    splits["train"] = seeded_sample(splits["train"], max_examples, seed, f"{corpus}:train")
    splits["heldout"] = seeded_sample(splits["heldout"], max_heldout, seed, f"{corpus}:heldout")
    if unanswerable:
        splits["train"] += seeded_sample(impossible, max_examples, seed,
                                         f"{corpus}:train-unanswerable")
    splits["train"] += seeded_sample(weakly_labelled, max_examples, seed, f"{corpus}:train-weak")
    examples = splits["train"] + splits["heldout"]
    if (negatives or unanswerable) and examples:
        _add_bm25_negatives(examples, gold_article, negatives, strategy, store,
                            Path(bm25_index) if bm25_index else folder / "indexes" / "bm25",
                            source, report)
    kept = [e for e in splits["train"] if e.negatives or not e.unanswerable]
    if len(kept) < len(splits["train"]):  # a query BM25 finds nothing for (e.g. an empty turn)
        report.add(source, "train_unanswerable_without_passages", len(splits["train"]) - len(kept))
        splits["train"] = kept
    for split, items in splits.items():
        report.add(source, f"{split}_examples", sum(e.source == source for e in items))
    if weakly_labelled:
        report.add(f"{source}:weak", "train_examples",
                   sum(e.source != source for e in splits["train"]))
    if unanswerable:
        report.add(source, "train_unanswerable", sum(e.unanswerable for e in splits["train"]))
    return splits["train"] + splits["heldout"]


def _answer_passages(turn: Any, store: Any) -> list[ReaderPassage]:
    """The turn's answer passages in which one of its answers occurs as an exact span (the
    yes / no / unanswerable answers left out), with every such span."""
    from convqa.benchmark.labelled_turns import EXCLUDED_ANSWERS
    from convqa.metrics.answer import normalize_answer

    answers = [a for a in turn.answers if normalize_answer(a) not in EXCLUDED_ANSWERS]
    positives = []
    for pid in turn.answer_passage_ids:
        passage = store.get(pid)
        spans = find_answer_spans(passage.text, answers)
        if spans:
            positives.append(ReaderPassage(passage, spans))
    return positives


def _add_bm25_negatives(examples: Sequence[ReaderExample], gold_article: dict[str, str],
                        negatives: int, strategy: Any, store: Any, index: Path, source: str,
                        report: BuildReport) -> None:
    """Each example's negatives: the best BM25 passages for its history-formatted question,
    outside its gold article (an unanswerable example: the best ones, at least one)."""
    from convqa.benchmark.labelled_turns import article_id_of
    from retrievers.bm25 import BM25Retriever

    retriever = BM25Retriever.for_store(store, index)
    queries = [strategy.format(e.question, e.history_turns()) for e in examples]
    hits = retriever.retrieve_batch(queries, k=3 * negatives + 20)
    for example, row in zip(examples, hits):
        if example.unanswerable:  # no passage answers it: the best ones are its negatives
            ids = [h.passage_id for h in row]
            wanted = max(negatives, 1)
        else:
            gold = gold_article[example.id]
            ids = [h.passage_id for h in row if article_id_of(h.passage_id) != gold]
            wanted = negatives
        example.negatives = [store.get(pid) for pid in ids[:wanted]]
        if len(example.negatives) < wanted:
            report.add(source, "examples_with_fewer_negatives")


# a weak turn's best span must read at least this much like its answer (SQuAD F1)
MIN_WEAK_SPAN_F1 = 0.5


def _weak_examples(data: Any, store: Any, rule: Any, history_of: Any, corpus: str,
                   source: str, report: BuildReport) -> list[ReaderExample]:
    """The train turns the weak rule labels, each with the span of its passage that reads most
    like its written answer (weak_spans.py) as the gold span; none where that span is poor."""
    from convqa.benchmark.weak_positives import weak_labels, written_answer

    from .weak_spans import best_f1_span

    examples = []
    labels = weak_labels(data, store, rule)
    for turn in data.turns:
        label = labels.get(turn.qid)
        if label is None:
            continue
        answer = written_answer(turn)
        passage = store.get(label.passage)
        found = best_f1_span(passage.text, answer)
        if found is None or found.f1 < MIN_WEAK_SPAN_F1:
            report.add(f"{source}:weak", "train_skipped_poor_span")
            continue
        examples.append(ReaderExample(f"{corpus}/{turn.qid}", turn.question, history_of(turn),
                                      [ReaderPassage(passage, [GoldSpan(found.text,
                                                                        found.start)])], [],
                                      list(turn.answers), "train", f"{source}:weak"))
    return examples
