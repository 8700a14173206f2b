"""`convqa demo`: the Gradio chat demo, served on 127.0.0.1 (no share link, no analytics)."""
from __future__ import annotations

import argparse
import os
import sys

from convqa.errors import ConvQAError
from convqa.front.embedded import DEFAULT_RETRIEVER, RETRIEVER_CHOICES
from convqa.front.families import add_family_argument
from convqa.quiet import add_verbose_argument

INSTALL_HINT = 'the demo needs gradio, a convqa dependency missing here: pip install "gradio>=6"'


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "demo", help="run the Gradio chat demo on 127.0.0.1",
        description="Serve a chat page where each answer shows its evidence passage, the "
                    "retrieved passages and the latency of each stage. Every browser session "
                    "holds its own conversation. Binds 127.0.0.1 unless --host says otherwise; "
                    "makes no share link and sends no analytics.")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1; 0.0.0.0 exposes the demo to "
                        "your network)")
    p.add_argument("--port", type=int, default=7860, help="port (default 7860)")
    p.add_argument("--config", metavar="PIPELINE.yaml",
                   help="serve this pipeline instead of the embedded default corpus")
    p.add_argument("--phrase-index", action="append", default=[], metavar="DIR",
                   help="also offer this phrase index (`convqa index --phrase`) as an answering "
                        "path, answering without a reader; the page starts on it; repeatable")
    p.add_argument("--retriever", choices=RETRIEVER_CHOICES, default=DEFAULT_RETRIEVER,
                   help="retriever selected at start (embedded default; the others are built "
                        "when first chosen in the page); ignored with --config")
    p.add_argument("--no-reader", action="store_true",
                   help="start with retrieval only (the reader can still be chosen in the page)")
    p.add_argument("--cache-dir", help="where the embedded indexes live (default ~/.cache/convqa)")
    add_family_argument(p)
    add_verbose_argument(p)
    p.set_defaults(func=run)


def make_pipelines(args: argparse.Namespace):
    """(the answering paths the page offers, the choices to build before serving). The page
    starts on the path chosen on the command line, or on the first phrase index; the start
    path, every phrase index and a --config pipeline are built before serving, so a bad
    folder or config is a one-line error on the command line, not in the page."""
    from apps.pipelines import NO_READER, config_pipelines, embedded_pipelines, with_phrase_indexes

    from convqa.front.families import family_named

    reader = NO_READER if args.no_reader else None
    family = family_named(args.model_family)
    if args.config:
        base = config_pipelines(args.config, reader=reader, family=family)
    else:
        base = embedded_pipelines(args.cache_dir, progress=True, retriever=args.retriever,
                                  reader=reader or "extractive", family=family)
    if not args.phrase_index:
        return base, [base.default]
    pipelines = with_phrase_indexes(base, args.phrase_index)
    phrase = [p for p in pipelines.retrievers if p not in base.retrievers]
    startup = [(name, NO_READER) for name in phrase] + ([base.default] if args.config else [])
    return pipelines, startup


def run(args: argparse.Namespace) -> int:
    if not 0 < args.port < 65536:
        raise ConvQAError(f"--port must be between 1 and 65535, got {args.port}")
    os.environ["GRADIO_ANALYTICS_ENABLED"] = "False"  # read by gradio at import
    try:
        import gradio  # noqa: F401
    except ImportError as exc:
        raise ConvQAError(f"{INSTALL_HINT} ({exc})") from None
    from apps.demo import build_demo, launch

    pipelines, startup = make_pipelines(args)
    for retriever, reader in startup:  # errors in the config show here, not in the page
        print(f"convqa demo: preparing the {retriever} + {reader} pipeline", file=sys.stderr)
        pipelines.get(retriever, reader)
    demo = build_demo(pipelines)
    try:  # Gradio's own banner (with its share-link hint) only with --verbose
        launch(demo, host=args.host, port=args.port, prevent_thread_lock=True,
               quiet=not args.verbose)
    except OSError as exc:  # port taken, address not available
        raise ConvQAError(f"cannot serve on {args.host}:{args.port}: {exc}") from None
    if not args.verbose:
        url = demo.local_url or f"http://{args.host}:{args.port}/"
        print(f"convqa demo: serving on {url} (Ctrl-C stops it)", flush=True)
    demo.block_thread()
    return 0
