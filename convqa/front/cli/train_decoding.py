"""`convqa train reader-decoding`: calibrate an extractive reader's decoding defaults (passage
fusion, no-answer threshold) on training questions and write them into its folder.

    convqa train reader-decoding --reader convqa-reader \\
        --benchmark bench/full --retriever '{name: bm25, index: bench/full/indexes/bm25}' \\
        --history '{name: full, max_tokens: 128, keep_first: true}' \\
        --squad ../shared/data/squad/dev-v2.0.json --cache /tmp/reads --report report.json --write

With `--reranker convqa-reranker` the retrieved passages are rescored by that reranker before
they are read (as `convqa answer --rerank` reads them), and what is chosen is written as the
folder's `after_reranker` block (readers/extractive/decoding.py); the rest stays.
`--stop-when-sure` also chooses the one-passage confidence at which a read stops after its
first passage (readers/extractive/stop_when_sure.py), on the same reads of the benchmark turns.

The questions are read here (readers/extractive/calibration_data.py: each read once, kept in
--cache), the choice is readers/extractive/calibrate.py's. The sources helpers below are shared
with convqa/front/tools/reader_no_answer_check.py, which scores the written decoding on held-out
questions. Wired into `convqa train` by `add_decoding_parser(jobs)` from
convqa/front/cli/train.py.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

from convqa.errors import ConfigError


def add_source_arguments(p: argparse.ArgumentParser, split: str, count: int | None,
                         k: int) -> None:
    """The questions read: benchmark turns with their retriever, and SQuAD v2.0."""
    every = "default all" if count is None else f"seeded sample; default {count}"
    p.add_argument("--reader", default="convqa-reader",
                   help="reader folder (or the shipped alias; default convqa-reader)")
    p.add_argument("--benchmark", action="append", default=[], metavar="DIR",
                   help="`convqa data topiocqa-wiki` folder (repeat for several)")
    p.add_argument("--retriever", action="append", default=[], metavar="SPEC",
                   help="retriever of each --benchmark, in order: a name, inline YAML/JSON or "
                        "a YAML file")
    p.add_argument("--run", action="append", default=[], metavar="FILE",
                   help="instead of --retriever: a run file holding the turns' rankings")
    p.add_argument("--history", action="append", default=[], metavar="SPEC",
                   help="the retriever's query formatting, one per --benchmark or one for all "
                        "(default oldest_first)")
    p.add_argument("--split", default=split, help=f"benchmark turns to use (default {split})")
    p.add_argument("--turns", type=int, default=count,
                   help=f"answer-evaluable turns per benchmark ({every})")
    p.add_argument("--unanswerable", type=int, default=count,
                   help=f"UNANSWERABLE turns per benchmark ({every}; 0: none)")
    p.add_argument("--k", type=int, default=k, help=f"passages read per turn (default {k})")
    p.add_argument("--absent-article", type=int, default=0, metavar="N",
                   help="also N answer-evaluable turns per benchmark read with and without "
                        "their topic article, the second counted unanswerable (a collection "
                        "that lacks the answer; default 0: none)")
    p.add_argument("--reranker", metavar="SPEC",
                   help="a reranker (a folder, the shipped alias, or inline YAML with top_n / "
                        "retriever_weight) that rescores the retrieved passages before they "
                        "are read; the decoding is then the folder's `after_reranker` block")
    p.add_argument("--squad", metavar="FILE", help="a SQuAD v2.0 file")
    p.add_argument("--squad-questions", type=int, default=count,
                   help=f"answerable and unanswerable SQuAD questions each ({every})")
    p.add_argument("--heldout-fraction", type=float, default=0.1,
                   help="SQuAD articles the reader run held out (default 0.1)")
    p.add_argument("--heldout-seed", type=int, default=0, help="the reader run's seed")
    p.add_argument("--seed", type=int, default=0, help="sampling seed")
    p.add_argument("--cache", metavar="DIR",
                   help="keep the reads and the reranker's logits here (rerunning reads and "
                        "scores nothing, also when the retrieval scores moved in their last "
                        "digits: another thread count can pick another precision)")
    p.add_argument("--quiet", action="store_true", help="no progress")


def add_decoding_parser(jobs) -> argparse.ArgumentParser:
    """Add the `reader-decoding` subcommand to the `convqa train` subparsers `jobs`."""
    from readers.extractive.calibrate import KS, NO_ANSWER_KS, TOLERANCE
    from readers.extractive.stop_when_sure import TOLERANCE as STOP_TOLERANCE

    p = jobs.add_parser("reader-decoding",
                        help="calibrate the extractive reader's passage choice and no-answer "
                             "threshold on training questions",
                        description="Choose the extractive reader's passage fusion and "
                                    "no-answer threshold on training questions "
                                    "(readers/extractive/calibrate.py) and write them into "
                                    "its folder's decoding block.")
    add_source_arguments(p, "train", 300, 20)
    p.add_argument("--ks", type=int, nargs="+", default=list(KS),
                   help="ks the passage choice is scored at (default 1 5 20)")
    p.add_argument("--no-answer-ks", type=int, nargs="+", default=list(NO_ANSWER_KS),
                   help="ks the confidence is calibrated at (default 5, the pipeline's top k); "
                        "unanswerable turns are read this deep")
    p.add_argument("--one-passage", action="store_true",
                   help="also fit a confidence for reads of a single passage (top 1), which "
                        "the reader uses when it reads one (with --keep-no-answer: fit only "
                        "this one, beside the kept confidence)")
    p.add_argument("--tolerance", type=float, default=TOLERANCE,
                   help="F1 the second k may lose against the first (default 0.5)")
    p.add_argument("--keep-fusion", action="store_true",
                   help="keep the folder's passage choice; calibrate only the confidence")
    p.add_argument("--keep-no-answer", action="store_true",
                   help="keep the folder's confidence; calibrate only the passage choice")
    p.add_argument("--stop-when-sure", action="store_true",
                   help="also choose the one-passage confidence at which a read stops after "
                        "its first passage (needs a one-passage fit: --one-passage, or one "
                        "kept); without it a stop_when_sure is kept only with the confidence "
                        "it was chosen for (--keep-no-answer)")
    p.add_argument("--stop-tolerance", type=float, default=STOP_TOLERANCE,
                   help="F1 a benchmark may lose at any --ks by stopping early (default 0.5)")
    p.add_argument("--prevalence", choices=("natural", "balanced"), default="natural",
                   help="how each source's answerable and unanswerable questions weigh in the "
                        "confidence fit and threshold: natural (their shares in the source, "
                        "e.g. 8%% unanswerable TopiOCQA turns; default) or balanced (half each)")
    p.add_argument("--report", metavar="FILE", help="write the choice and its scores as JSON")
    p.add_argument("--write", action="store_true",
                   help="write the chosen decoding into the reader folder")
    p.set_defaults(func=run)
    return p


# ---------------------------------------------------------------------------------------------
# The questions


def reader_folder(name: str) -> Path:
    from convqa.models import shipped_model_path
    from readers.extractive.model import META_FILE

    folder = shipped_model_path(name) or Path(name)
    if not (folder / META_FILE).is_file():
        raise ConfigError(f"{name}: not a reader folder (no {META_FILE}; a folder made by "
                          "`convqa train reader`)")
    return folder


# passages retrieved past the depth read, so that one is left after a topic article is taken
# away (a full-collection article has ~78 passages on average)
ABSENT_MARGIN = 100


def _benchmarks(args: argparse.Namespace):
    """(folder, run file, retriever spec, history spec) of each --benchmark, checked."""
    from .train_args import per_benchmark

    count = len(args.benchmark)
    if args.run and args.retriever:
        raise ConfigError("give --retriever or --run, not both")
    runs = per_benchmark(args.run, count, "--run", None) if args.run else [None] * count
    retrievers = per_benchmark(args.retriever, count, "--retriever", None) \
        if args.retriever else [None] * count
    histories = per_benchmark(args.history, count, "--history", "oldest_first")
    for folder, run_file, retriever, history in zip(args.benchmark, runs, retrievers, histories):
        if run_file is None and retriever is None:
            raise ConfigError(f"{folder}: give its --retriever or --run")
        yield folder, run_file, retriever, history


def _turn_hits(args: argparse.Namespace, data: Any, turns: list, run_file: Any, retriever: Any,
               history: Any, depth: int) -> dict:
    """{qid: hits} of `turns`, `depth` deep, from the run file or the retriever."""
    from convqa.specs import parse_spec
    from readers.extractive.calibration_data import retrieve, run_file_hits

    if run_file is not None:
        return run_file_hits(run_file, turns)
    return retrieve(turns, data.conversations, parse_spec(retriever, "retriever")[0],
                    parse_spec(history, "history")[0], depth, progress=not args.quiet)


def _reranked(args: argparse.Namespace, folder: str, data: Any, turns: list, hits: dict,
              retriever: Any, reranking: Any, say) -> dict:
    """`hits` rescored by `reranking` (`open_reranking`), or as they are without one."""
    if reranking is None:
        return hits
    from convqa.front.evaluation.rerank import cached_rerank_turns
    from convqa.specs import parse_spec

    # a --run names no retriever: the reranker's own score, unless its spec sets a weight
    reranking.model.for_retriever(parse_spec(retriever, "retriever")[0] if retriever else None)
    reranked = cached_rerank_turns(reranking.model, turns, data.conversations, hits,
                                   Path(folder) / "passages", reranking.top_n, args.cache,
                                   progress=not args.quiet)
    say(f"{folder}: {len(turns)} turns reranked" + (" (cached)" if reranked.cached else ""))
    return reranked.hits


def _depth(args: argparse.Namespace, reranking: Any) -> int:
    return max(args.k, reranking.top_n) if reranking is not None else args.k


def benchmark_sources(args: argparse.Namespace, reader: Any, say,
                      unanswerable_k: int | None = None, reranking: Any = None) -> list:
    """Every --benchmark's turns of --split, read through the cache: the answer-evaluable ones
    at top --k, the unanswerable ones at top `unanswerable_k` (default --k); reranked first by
    `reranking` (`open_reranking`) when given."""
    from convqa.benchmark import load_labelled_turns
    from readers.extractive.calibration_data import (Source, benchmark_share,
                                                     benchmark_turns, read_benchmark_turns)

    depth_unanswerable = min(args.k, unanswerable_k or args.k)
    sources = []
    for folder, run_file, retriever, history in _benchmarks(args):
        data = load_labelled_turns(folder)
        answerable, unanswerable = benchmark_turns(data.turns, args.split, args.turns,
                                                   args.unanswerable, args.seed)
        if not answerable:
            raise ConfigError(f"{folder}: no answer-evaluable turns in split {args.split!r}")
        turns = answerable + unanswerable
        hits = _turn_hits(args, data, turns, run_file, retriever, history,
                          _depth(args, reranking))
        hits = _reranked(args, folder, data, turns, hits, retriever, reranking, say)
        name = f"{data.meta.get('corpus') or Path(folder).name}"
        reads = []
        for group, depth in ((answerable, args.k), (unanswerable, depth_unanswerable)):
            read, cached = read_benchmark_turns(reader, group, data.conversations, hits,
                                                Path(folder) / "passages", depth, args.cache,
                                                not args.quiet)
            reads.append(read)
            kind = "answerable" if group is answerable else "unanswerable"
            say(f"{name}: {len(group)} {kind} {args.split} turns, top {depth}"
                + (" (cached reads)" if cached else ""))
        sources.append(Source(name, "topiocqa", reads[0], reads[1],
                              benchmark_share(data.turns, args.split)))
    return sources


def absent_article_sources(args: argparse.Namespace, reader: Any, say, k: int,
                           reranking: Any = None) -> list:
    """--absent-article N: per --benchmark, N answer-evaluable turns of --split read twice at
    top `k`, as retrieved and with their topic article (and any passage holding their answer)
    taken out of the collection (`calibration_data.without_topic_article`), the second read
    counted unanswerable: the case of a collection that lacks the answer, which TopiOCQA's
    UNANSWERABLE turns do not show. The two reads of a question weigh the same (share 0.5).
    Run files (--run) must rank deep enough to leave passages once the article is out."""
    from convqa.benchmark import load_labelled_turns
    from convqa.corpus import PassageStore
    from readers.extractive.calibration_data import (Source, benchmark_turns,
                                                     read_benchmark_turns,
                                                     without_topic_article)

    if args.absent_article <= 0:
        return []
    depth = _depth(args, reranking)
    sources = []
    for folder, run_file, retriever, history in _benchmarks(args):
        data = load_labelled_turns(folder)
        turns, _ = benchmark_turns(data.turns, args.split, args.absent_article, 0, args.seed)
        hits = _turn_hits(args, data, turns, run_file, retriever, history,
                          depth + ABSENT_MARGIN)
        with PassageStore.open(Path(folder) / "passages") as store:
            absent = {t.qid: without_topic_article(t, hits[t.qid], store, depth)
                      for t in turns}
        left = [t for t in turns if absent[t.qid]]
        if len(left) < len(turns):
            say(f"{folder}: {len(turns) - len(left)} of {len(turns)} turns have no passage "
                "left once their topic article is out")
        turns = left
        if not turns:
            raise ConfigError(f"{folder}: no passage is left once the topic articles are "
                              "taken out (rank deeper)")
        present = _reranked(args, folder, data, turns, hits, retriever, reranking, say)
        absent = _reranked(args, folder, data, turns, absent, retriever, reranking, say)
        reads = [read_benchmark_turns(reader, turns, data.conversations, run,
                                      Path(folder) / "passages", k, args.cache,
                                      not args.quiet)[0] for run in (present, absent)]
        name = f"{data.meta.get('corpus') or Path(folder).name}-without-topic-article"
        say(f"{name}: {len(turns)} {args.split} turns read with and without their topic "
            f"article, top {k}")
        sources.append(Source(name, "topiocqa", reads[0], reads[1], 0.5))
    return sources


def reranker_spec(text: str) -> dict[str, Any]:
    """--reranker: a model folder or alias (the cross-encoder), or inline YAML / a YAML file
    with its options (`{model: convqa-reranker, top_n: 50}`; name defaults to cross_encoder)."""
    from convqa.config import load_yaml
    from convqa.specs import inline_yaml

    text = text.strip()
    if text.startswith("{"):
        spec = inline_yaml(text, "--reranker")
    elif text.endswith((".yaml", ".yml")) and Path(text).is_file():
        spec = load_yaml(Path(text))
    else:
        return {"name": "cross_encoder", "model": text}
    if not isinstance(spec, dict):
        raise ConfigError(f"--reranker: expected a model folder or a mapping, got {text!r}")
    return {"name": "cross_encoder", **spec}


def open_reranking(spec: dict[str, Any], k: int) -> Any:
    """--reranker (its spec, parsed once by `reranker_spec`) checked and built once
    (`rerank.open_reranker`); --k may not read past its top_n, as a pipeline reads only
    reranked passages."""
    from convqa.front.evaluation.rerank import open_reranker
    from convqa.front.paths import RerankerConfig

    top_n = RerankerConfig.from_spec(spec, "--reranker").check().top_n
    if k > top_n:
        raise ConfigError(f"--k {k} reads past the reranker's top_n {top_n}: a pipeline "
                          "reads only reranked passages")
    return open_reranker(spec)


def squad_source(args: argparse.Namespace, reader: Any, side: str, say):
    """The SQuAD v2.0 questions of the "train" or "heldout" articles, read."""
    from readers.extractive.calibration_data import (Source, read_squad_cached,
                                                     squad_questions)

    answerable, unanswerable, share = squad_questions(
        args.squad, side, args.heldout_fraction, args.heldout_seed, args.squad_questions,
        args.seed, with_share=True)
    reads, cached = read_squad_cached(reader, answerable + unanswerable, args.cache,
                                      not args.quiet)
    say(f"SQuAD {side} articles: {len(answerable)} answerable + {len(unanswerable)} "
        "unanswerable questions" + (" (cached reads)" if cached else ""))
    return Source(f"squad-{side}", "squad", reads[:len(answerable)], reads[len(answerable):],
                  share)


def after_reranker(existing: Any) -> Any:
    """What a calibration after a reranker starts from: the folder's decoding of reranked
    passages, except that a confidence it keeps (--keep-no-answer) is the after_reranker
    block's own (none: the outer one goes on applying)."""
    from readers.extractive.decoding import Decoding

    block = existing.after_reranker or Decoding()
    return dataclasses.replace(existing.reranked(), no_answer=block.no_answer,
                               after_reranker=None)


def build_reader(folder: Path, **options: Any) -> Any:
    import readers.extractive.reader  # noqa: F401 (registers "extractive")
    from convqa.registry import READERS

    return READERS.build({"name": "extractive", "model": str(folder), **options})


# ---------------------------------------------------------------------------------------------
# Calibrating


def _check_calibration_args(args: argparse.Namespace) -> None:
    if not args.benchmark and not args.squad:
        raise ConfigError("nothing to calibrate on: give --benchmark and/or --squad")
    if not 1 <= args.k <= 100 or max(args.ks + args.no_answer_ks) > args.k:
        raise ConfigError(f"--k must be in 1..100 and at least every --ks and --no-answer-ks, "
                          f"got {args.k}")
    if args.reranker and not args.benchmark:
        raise ConfigError("--reranker reranks benchmark turns: give --benchmark")
    if args.keep_fusion and args.keep_no_answer and not (args.stop_when_sure
                                                         or args.one_passage):
        raise ConfigError("--keep-fusion with --keep-no-answer leaves nothing to calibrate")
    if args.stop_when_sure and not args.benchmark:
        raise ConfigError("--stop-when-sure is chosen on benchmark turns: give --benchmark")


def _merged_decoding(existing: Any, chosen: Any, stopping: dict[str, Any] | None,
                     args: argparse.Namespace) -> Any:
    """The folder's decoding with what was calibrated put in its place: behind a reranker
    only the after_reranker block changes, else only the outer one (a calibrated
    after_reranker block stays). A stop_when_sure value chosen for the confidence it
    thresholds stays only with that confidence."""
    from readers.extractive.decoding import Decoding

    block = (existing.after_reranker or Decoding()) if args.reranker else existing
    if stopping is not None:
        stop = stopping["chosen"]
    else:
        stop = block.stop_when_sure if args.keep_no_answer else None
    if args.reranker:
        return dataclasses.replace(existing, after_reranker=Decoding(
            chosen.fusion, no_answer=chosen.no_answer, stop_when_sure=stop))
    return dataclasses.replace(chosen, stop_when_sure=stop,
                               after_reranker=existing.after_reranker)


def calibrate(args: argparse.Namespace, say=print) -> dict[str, Any]:
    """Read, choose, and (with --write) write; returns the report."""
    import torch

    from readers.extractive.calibrate import calibrated_decoding
    from readers.extractive.decoding import Decoding
    from readers.extractive.model import write_decoding
    from readers.extractive.stop_when_sure import choose_stop_when_sure

    _check_calibration_args(args)
    folder = reader_folder(args.reader)
    reader = build_reader(folder)
    existing = reader.model.decoding or Decoding()
    started = time.perf_counter()
    reranker = reranker_spec(args.reranker) if args.reranker else None
    reranking = open_reranking(reranker, args.k) if reranker else None
    sources = benchmark_sources(args, reader, say, max(args.no_answer_ks), reranking)
    squad = [squad_source(args, reader, "train", say)] if args.squad else []
    absent = absent_article_sources(args, reader, say, max(args.no_answer_ks), reranking)
    read_seconds = time.perf_counter() - started
    decoding, passage_choice, no_answer = calibrated_decoding(
        sources, squad + absent, after_reranker(existing) if args.reranker else existing, args.ks,
        args.no_answer_ks, args.tolerance, args.keep_fusion, args.prevalence,
        reader.config.null_option, args.keep_no_answer, args.one_passage)
    stopping = choose_stop_when_sure(sources, decoding, args.ks, args.stop_tolerance,
                                     reader.config.null_option) if args.stop_when_sure else None
    decoding = _merged_decoding(existing, decoding, stopping, args)
    report = {
        "reader": args.reader, "folder": str(folder),
        "reader_fingerprint": reader.model.fingerprint(),
        "questions": {s.name: {"answerable": len(s.answerable),
                               "unanswerable": len(s.unanswerable),
                               "unanswerable_share": s.unanswerable_share}
                      for s in sources + squad + absent},
        "settings": {k: v for k, v in vars(args).items()
                     if k not in ("func", "quiet", "reranker")},
        "read_seconds": round(read_seconds, 1), "threads": torch.get_num_threads(),
        "cpu": torch.backends.cpu.get_cpu_capability(),
        "reranker": reranker,
        "passage_choice": passage_choice, "no_answer": no_answer,
        "stop_when_sure": stopping, "decoding": decoding.to_dict(), "written": False}
    if args.write:
        write_decoding(folder, decoding)
        report["written"] = True
    if args.report:
        from convqa.io import write_json

        write_json(args.report, report)
    return report


def summary(report: dict[str, Any]) -> str:
    lines = [f"decoding: {json.dumps(report['decoding'])}"]
    choice = report["passage_choice"]
    if choice is not None:
        lines.append(f"passage choice: {choice['eligible']} of {choice['candidates']} weightings "
                     f"meet the constraint")
        for label, row in (("chosen", choice["chosen"]), ("current", choice["current"])):
            if row is None:
                continue
            cells = "; ".join(f"{name} " + " / ".join(f"@{k} {v:.1f}" for k, v in f1.items())
                              for name, f1 in row["f1"].items())
            lines.append(f"  {label} {row['fusion']}: F1 {cells}")
    if report["no_answer"] is not None:
        na = report["no_answer"]
        if na.get("kept"):
            lines.append(f"no answer: the folder's confidence kept (threshold "
                         f"{na['no_answer']['threshold']:.3f})")
        else:
            lines.append(f"no answer under confidence {na['no_answer']['threshold']:.3f}: F1 "
                         f"{na['f1']:.1f} (always answering: {na['f1_always_answer']:.1f})")
        for title, fit in (("", None if na.get("kept") else na),
                           ("one passage: ", na.get("one_passage"))):
            if fit is None:
                continue
            if title:
                lines.append(f"{title}no answer under confidence "
                             f"{fit['no_answer']['threshold']:.3f}: F1 {fit['f1']:.1f} "
                             f"(always answering: {fit['f1_always_answer']:.1f})")
            for group, entry in fit["groups"].items():
                extra = (f", F1 {entry['f1']:.1f} (always {entry['f1_always']:.1f})"
                         if "f1" in entry else "")
                lines.append(f"  {group}: {entry['answers']} answers, no answer "
                             f"{entry['no_answer_share']:.1f}%{extra}")
    stopping = report.get("stop_when_sure")
    if stopping is not None:
        lines.extend(stop_summary(stopping))
    lines.append("written into " + report["folder"] if report["written"]
                 else "not written (--write writes it)")
    return "\n".join(lines)


def stop_summary(stopping: dict[str, Any]) -> list[str]:
    """The chosen stop_when_sure and its scores beside reading every passage."""
    chosen = stopping["chosen"]
    if chosen is None:
        return [f"stop_when_sure: none (stopping early costs more than "
                f"{stopping['tolerance']} F1 at every value)"]
    row = next(r for r in stopping["candidates"] if r["stop_when_sure"] == chosen)
    lines = [f"stop_when_sure {chosen}: a read stops after its first passage when that "
             "passage's answer is this sure"]
    for name, by_k in row["scores"].items():
        for k, got in by_k.items():
            base = stopping["read_all"][name][k]
            lines.append(f"  {name} @{k}: stops {got['stops']:.1f}% of answerable reads; F1 "
                         f"{got['f1_always']:.1f} (reading all {base['f1_always']:.1f}), "
                         f"abstaining {got['f1_abstaining']:.1f} "
                         f"({base['f1_abstaining']:.1f})")
    return lines


def run(args: argparse.Namespace) -> int:
    say = (lambda _: None) if args.quiet else (lambda text: print(text, file=sys.stderr))
    print(summary(calibrate(args, say)))
    return 0
