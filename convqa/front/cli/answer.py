"""`convqa answer`: answer a question (or hold an interactive conversation) with evidence."""
from __future__ import annotations

import argparse
import json
import textwrap

from convqa.errors import ConvQAError
from convqa.front.embedded import DEFAULT_RETRIEVER, RETRIEVER_CHOICES
from convqa.front.families import add_family_argument
from convqa.quiet import add_verbose_argument
from convqa.types import Turn

SNIPPET_CHARS = 300


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "answer", help="answer a question in a conversation, with evidence",
        description="Answer QUESTION from the embedded default collection (or a configured "
                    "pipeline). With no QUESTION, start an interactive conversation.")
    p.add_argument("question", nargs="?", help="the current question; omit for interactive mode")
    p.add_argument("--history", metavar="FILE", help="earlier turns (JSON/JSONL, see README)")
    p.add_argument("--config", metavar="FILE", help="pipeline YAML (default: embedded corpus)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value, e.g. --set retriever.preset=qrecc")
    p.add_argument("--top-k", type=int, default=None, help="passages to retrieve (default 5)")
    p.add_argument("--cache-dir", help="where the embedded index lives (default ~/.cache/convqa)")
    p.add_argument("--retriever", choices=RETRIEVER_CHOICES, default=DEFAULT_RETRIEVER,
                   help="retriever of the embedded default: dense (DPR-IHN, default), bm25, or "
                        "hybrid (reciprocal-rank fusion of both); ignored with --config")
    p.add_argument("--no-reader", action="store_true",
                   help="retrieval only: show the passages, extract no answer (embedded default)")
    p.add_argument("--phrase-index", metavar="DIR",
                   help="answer with a phrase index (`convqa index --phrase`) instead of a "
                        "retriever and a reader")
    p.add_argument("--sparse-weight", type=float, default=None, metavar="W",
                   help="with --phrase-index built with --sparse: weight of its BM25 passage "
                        "scores (default 8; 0: the phrase vectors alone)")
    p.add_argument("--dense-weight", type=float, default=None, metavar="W",
                   help="with --phrase-index built with --dense-prior: weight of its dense "
                        "retriever's passage scores (default 8; 0: not used)")
    p.add_argument("--overlap-weight", type=float, default=None, metavar="W",
                   help="with --phrase-index: how much a phrase loses for repeating the "
                        "question's words (default 4; 0: none)")
    p.add_argument("--rerank", metavar="MODEL",
                   help="a cross-encoder reranker folder (`convqa train reranker`): it rescores "
                        "the retriever's top --rerank-top-n and the reader reads its best --top-k")
    p.add_argument("--rerank-top-n", type=int, default=None, metavar="N",
                   help="retriever hits the reranker rescores (default: the model's, 20)")
    p.add_argument("--rerank-then", metavar="MODEL",
                   help="a second, slower cross-encoder that reorders the reranker's best 5 by "
                        "its own score (the reranker's `second_stage`), e.g. "
                        "convqa-reranker-large; skipped on turns where the reranker leads by "
                        "the margin its folder records for the retriever (docs/reranker.md)")
    add_family_argument(p)
    p.add_argument("--always-answer", action="store_true",
                   help="always give the reader's best answer, never 'no answer in the "
                        "collection'")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--prepare", action="store_true", help="build the embedded index and exit")
    add_verbose_argument(p)
    p.set_defaults(func=run)


def answering_path(args: argparse.Namespace):
    """The path the flags describe: a phrase index, a pipeline config, or the embedded
    default (convqa/front/paths.py)."""
    from dataclasses import replace

    from convqa.front.families import DEFAULT_FAMILY, family_named, with_family
    from convqa.front.paths import (PhraseIndexPath, RerankerConfig, configured_path,
                                    embedded_path)

    for flag, value in (("--rerank-top-n", args.rerank_top_n),
                        ("--rerank-then", args.rerank_then)):
        if value is not None and not args.rerank:
            raise ConvQAError(f"{flag} goes with --rerank")
    if args.phrase_index:
        if args.config or args.overrides or args.rerank or args.model_family != DEFAULT_FAMILY:
            raise ConvQAError("--phrase-index does not go with --config, --set, --rerank or "
                              "--model-family")
        return PhraseIndexPath(args.phrase_index, sparse_weight=args.sparse_weight,
                               overlap_weight=args.overlap_weight,
                               dense_weight=args.dense_weight)
    for flag, value in (("--sparse-weight", args.sparse_weight),
                        ("--dense-weight", args.dense_weight),
                        ("--overlap-weight", args.overlap_weight)):
        if value is not None:
            raise ConvQAError(f"{flag} goes with --phrase-index")
    if args.config:
        path = configured_path(args.config)
    else:
        path = embedded_path(args.retriever, None if args.no_reader else "default",
                             args.cache_dir)
    if args.rerank:  # before --set, so that `--set reranker.KEY=VALUE` refines it
        options = {"model": args.rerank}
        if args.rerank_top_n is not None:
            options["top_n"] = args.rerank_top_n
        if args.rerank_then:
            options["second_stage"] = {"model": args.rerank_then}
        path = replace(path, reranker=RerankerConfig("cross_encoder", options))
    path = with_family(path, family_named(args.model_family)).with_overrides(args.overrides)
    if args.always_answer and isinstance(getattr(path, "reader", None), dict):
        path = replace(path, reader={**path.reader, "always_answer": True})
    return path


def build_pipeline(args: argparse.Namespace):
    from convqa.front.paths import build

    return build(answering_path(args), progress=True)


def run(args: argparse.Namespace) -> int:
    from convqa.history_file import load_history

    if args.top_k is not None and args.top_k < 1:
        raise ConvQAError("--top-k must be at least 1")
    if args.question is not None and not args.question.strip():
        raise ConvQAError("the question is empty")
    history = load_history(args.history) if args.history else []
    if args.prepare:
        from convqa.front.embedded import ensure_embedded

        print(f"embedded index ready at {ensure_embedded(args.cache_dir, retriever=args.retriever)}")
        return 0
    pipeline = build_pipeline(args)
    if args.question is not None:
        result = pipeline.answer(args.question, history, args.top_k)
        print(render_json(result) if args.json else render(result))
        return 0
    return interactive(pipeline, history, args)


def interactive(pipeline, history: list[Turn], args: argparse.Namespace) -> int:
    """Each answer goes into the history of the next question. ':new' starts over."""
    print("convqa: ask a question (':new' starts a new conversation, ':quit' or Ctrl-D ends).")
    while True:
        try:
            line = input("you> ")
        except EOFError:
            print()
            return 0
        line = line.strip()
        if not line:
            continue
        if line in (":quit", ":q", ":exit"):
            return 0
        if line == ":new":
            history = []
            print("(new conversation)")
            continue
        result = pipeline.answer(line, history, args.top_k)
        print(render_json(result) if args.json else render(result))
        history = history + [Turn(question=line, answer=result.answer.text if result.answer else None)]


def render(result) -> str:
    lines = []
    if result.answer is not None and result.answer.no_answer:
        best = result.answer.evidence
        lines.append("No answer in the collection.")
        if best is not None:
            lines.append(f"best evidence: {best.title or best.id} (id {best.id})")
    elif result.answer is not None:
        lines.append(f"answer: {result.answer.text}")
    else:
        lines.append("answer: (no reader configured: retrieval only, top passages below)")
    lines.append(f"query: {result.query_text}")
    lines.append("evidence:")
    for hit, passage in zip(result.hits, result.passages):
        lines.append(f"  [{hit.rank}] {passage.title or passage.id}  (score {hit.score:.2f}, id {passage.id})")
        lines.append(textwrap.indent(textwrap.fill(passage_snippet(passage, result.answer), 96), "      "))
    if not result.hits:
        lines.append("  (nothing matched)")
    timing = ", ".join(f"{stage} {ms:.1f} ms" for stage, ms in result.timings_ms.items())
    lines.append(f"timing: {timing}")
    return "\n".join(lines)


def passage_snippet(passage, answer=None, chars: int = SNIPPET_CHARS) -> str:
    """Passage text around the answer span (marked with [[ ]]), else the start of the text."""
    text = passage.text
    if answer is not None and answer.passage_id == passage.id and answer.start is not None:
        lo = max(0, answer.start - chars // 2)
        hi = min(len(text), answer.end + chars // 2)
        marked = text[lo:answer.start] + "[[" + text[answer.start:answer.end] + "]]" + text[answer.end:hi]
        return ("..." if lo else "") + marked + ("..." if hi < len(text) else "")
    return text[:chars] + ("..." if len(text) > chars else "")


def render_json(result) -> str:
    return json.dumps({
        "question": result.question,
        "query": result.query_text,
        "answer": result.answer.to_dict() if result.answer else None,
        "hits": [dict(h.to_dict(), title=p.title, text=p.text)
                 for h, p in zip(result.hits, result.passages)],
        "timings_ms": result.timings_ms,
    }, ensure_ascii=False)


