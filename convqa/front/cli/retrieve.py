"""`convqa retrieve`: run any retriever with any history strategy over conversations.

    convqa retrieve --retriever SPEC [--index DIR] [--passages STORE] [--history NAME]
                    (--turns BENCH_DIR [--split dev] [--evaluable-only] | --question Q
                     [--history-file F]) [--k 100] [--out run.jsonl]

SPEC is a retriever name (`bm25`), inline YAML (`'{name: bm25, index: idx, preset: qrecc}'`),
a YAML file with such a mapping, or a pipeline config (`convqa answer --config`) whose
retriever, history and passages become the defaults. `--index DIR` sets the spec's `index`.

`--history` picks the query text, e.g. the shortcut inputs of DPR-IHN's analysis:
question_only (q_t), last_answer (a_{t-1}), history_only (X_t without q_t), full (X_t),
or current_first / oldest_first / questions_only; inline YAML sets options
(`'{name: full, max_tokens: 512}'`).

With --turns, every turn of the split is a query and the run file (docs/run_format.md) is
written to --out; with --question, the top hits are printed (and written if --out is given).
"""
from __future__ import annotations

import argparse
import textwrap
import time
from pathlib import Path

from convqa.front.cli.answer import passage_snippet
from convqa.errors import ConvQAError
from convqa.quiet import add_verbose_argument

SNIPPET_CHARS = 240


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "retrieve", help="retrieve passages for conversational queries with any retriever",
        description="Retrieve the top-k passages for every turn of a benchmark split (a run "
                    "file) or for one question, with any retriever and history strategy.")
    p.add_argument("--retriever", required=True, metavar="SPEC",
                   help="name, inline YAML '{name: bm25, index: DIR}', or a YAML file")
    p.add_argument("--index", metavar="DIR", help="set the retriever's 'index' option")
    p.add_argument("--passages", metavar="STORE",
                   help="passage store (checked against the index; shows passages for "
                        "--question)")
    p.add_argument("--history", default=None, metavar="NAME",
                   help="history strategy: question_only, last_answer, history_only, full, "
                        "oldest_first, current_first, questions_only, or inline YAML "
                        "(default: the config's, else current_first)")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--turns", metavar="BENCH_DIR",
                        help="benchmark folder (turns.jsonl + conversations.jsonl)")
    source.add_argument("--question", metavar="Q", help="one question to retrieve for")
    p.add_argument("--split", default="dev", choices=("train", "dev", "all"),
                   help="with --turns: which split (default: dev)")
    p.add_argument("--evaluable-only", action="store_true",
                   help="with --turns: only the retrieval-evaluable turns")
    p.add_argument("--history-file", metavar="FILE",
                   help="with --question: earlier turns (JSON/JSONL, as `convqa answer`)")
    p.add_argument("--k", type=int, default=100, help="passages per query (default: 100)")
    p.add_argument("--out", metavar="FILE",
                   help="run file to write (.jsonl, or .trec for TREC format)")
    p.add_argument("--batch-size", type=int, default=64, help="queries per retriever call")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    add_verbose_argument(p)
    p.set_defaults(func=run)


def _setup(args: argparse.Namespace):
    """(retriever, history strategy, store or None) from the flags."""
    from convqa.corpus import PassageStore
    from convqa.specs import build_retriever, parse_spec, with_options
    from convqa.history import build_history_strategy

    if args.k < 1:
        raise ConvQAError("--k must be at least 1")
    if args.batch_size < 1:
        raise ConvQAError("--batch-size must be at least 1")
    spec, defaults = parse_spec(args.retriever, "retriever")
    if args.index:
        spec = with_options(spec, index=args.index)
    history_text = args.history
    history = parse_spec(history_text, "history")[0] if history_text else (
        defaults.get("history") or "current_first")
    strategy = build_history_strategy(history)
    passages = args.passages or defaults.get("passages")
    store = PassageStore.open(Path(passages)) if passages else None
    retriever = build_retriever(spec)
    if store is not None and hasattr(retriever, "check_store"):
        retriever.check_store(store)
    return retriever, strategy, store


def run(args: argparse.Namespace) -> int:
    if args.question is not None:
        if args.evaluable_only:
            raise ConvQAError("--evaluable-only goes with --turns, not --question")
        return run_question(args)
    if args.history_file:
        raise ConvQAError("--history-file goes with --question; with --turns the history "
                          "comes from the benchmark's conversations")
    if not args.out:
        raise ConvQAError("--turns needs --out FILE for the run file")
    return run_turns(args)


def run_turns(args: argparse.Namespace) -> int:
    from convqa.benchmark import load_labelled_turns
    from convqa.front.evaluation.retrieval import query_texts
    from convqa.runs import retrieve_all, run_format, write_run

    retriever, strategy, _ = _setup(args)
    data = load_labelled_turns(args.turns)
    turns = [t for t in data.turns
             if (args.split == "all" or t.split == args.split)
             and (t.retrieval_evaluable or not args.evaluable_only)]
    if not turns:
        raise ConvQAError(f"{args.turns}: no turns in split '{args.split}'")
    started = time.perf_counter()
    queries = query_texts(turns, data.conversations, strategy)
    run = retrieve_all(retriever, queries, args.k, args.batch_size, progress=not args.quiet)
    seconds = time.perf_counter() - started
    write_run(args.out, run, queries)
    empty = sum(1 for hits in run.values() if not hits)
    print(f"{len(run)} queries ({args.split}, history {strategy.registered_name}) -> "
          f"{args.out} [{run_format(args.out)}] in {seconds:.1f} s; "
          f"{empty} with no hits")
    return 0


def run_question(args: argparse.Namespace) -> int:
    from convqa.runs import write_run
    from convqa.history_file import load_history

    if not args.question.strip():
        raise ConvQAError("the question is empty")
    history = load_history(args.history_file) if args.history_file else []
    retriever, strategy, store = _setup(args)
    query = strategy.format(args.question, history)
    hits = retriever.retrieve_batch([query], args.k)[0] if query.strip() else []
    print(render(query, hits, store))
    if args.out:
        write_run(args.out, {"question": hits}, {"question": query})
    return 0


def render(query: str, hits, store) -> str:
    """The query text, then each hit: rank, title, score, id and the start of its text."""
    lines = [f"query ({len(query.split())} words): {query}" if query else
             "query: (empty: this history strategy has nothing to retrieve with)"]
    for hit in hits:
        try:
            passage = store.get(hit.passage_id) if store is not None else None
        except KeyError:
            raise ConvQAError(f"passage {hit.passage_id!r} is not in {store.path}: the index "
                              "and the passage store do not belong together") from None
        title = passage.title if passage is not None and passage.title else hit.passage_id
        lines.append(f"  [{hit.rank}] {title}  (score {hit.score:.3f}, id {hit.passage_id})")
        if passage is not None:
            text = passage_snippet(passage, chars=SNIPPET_CHARS)
            lines.append(textwrap.indent(textwrap.fill(text, 96), "      "))
    if query and not hits:
        lines.append("  (nothing matched)")
    return "\n".join(lines)
