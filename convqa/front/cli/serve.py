"""`convqa serve`: the HTTP API (FastAPI + uvicorn) on 127.0.0.1 unless told otherwise."""
from __future__ import annotations

import argparse

from convqa.errors import ConvQAError
from convqa.front.embedded import RETRIEVER_CHOICES
from convqa.front.families import add_family_argument
from convqa.quiet import add_verbose_argument


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "serve", help="serve the JSON API (POST /v1/answer) on 127.0.0.1",
        description="Serve conversational QA over HTTP: POST /v1/answer, DELETE "
                    "/v1/conversations/{id}, GET /v1/pipelines, GET /health, OpenAPI at /docs. "
                    "Models and indexes load in the background after the port is bound; "
                    "/health answers 200 once they are loaded. Binds 127.0.0.1 unless --host "
                    "says otherwise; sends no telemetry. See docs/serve.md.")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1; 0.0.0.0 exposes the API to your "
                        "network)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0: any free one)")
    p.add_argument("--config", metavar="PIPELINE.yaml",
                   help="serve this pipeline (see `convqa answer --config`) instead of the "
                        "embedded collection")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a value of --config, e.g. --set top_k=10")
    p.add_argument("--retriever", action="append", choices=RETRIEVER_CHOICES, default=None,
                   help="embedded retriever to serve, with and without the shipped reader; "
                        "repeatable (default: dense, unless --config or --phrase-index is "
                        "given); the first is the default pipeline")
    p.add_argument("--no-reader", action="store_true",
                   help="embedded retrievers answer with passages only (no reader loaded)")
    p.add_argument("--phrase-index", action="append", default=[], metavar="DIR",
                   help="also serve this phrase index (`convqa index --phrase`); repeatable")
    p.add_argument("--cache-dir", help="where the embedded indexes live (default ~/.cache/convqa)")
    add_family_argument(p)
    p.add_argument("--workers", type=int,
                   help="answering threads (default 1); they take turns on each model copy")
    p.add_argument("--replicas", type=int,
                   help="model copies shared by the workers (default 1; at most --workers)")
    p.add_argument("--queue-size", type=int,
                   help="requests that may wait for a worker; beyond, 503 (default 32)")
    p.add_argument("--max-question-chars", type=int, help="longest question (default 1000)")
    p.add_argument("--serve-config", metavar="SERVE.yaml",
                   help="server settings (limits, pool, conversations; docs/serve.md); the "
                        "flags above override it")
    p.add_argument("--log-level", default="info",
                   choices=("critical", "error", "warning", "info", "debug"))
    add_verbose_argument(p)
    p.set_defaults(func=run)


def pipeline_source(args: argparse.Namespace):
    """The answering paths of the command line, nothing loaded yet."""
    from convqa.front.serve.pipelines import combine, config_source, embedded_source, phrase_source

    from convqa.front.families import family_named

    if args.overrides and not args.config:
        raise ConvQAError("--set needs --config")
    family = family_named(args.model_family)
    sources = []
    if args.config:
        sources.append(config_source(args.config, args.overrides, family))
    retrievers = args.retriever or ([] if args.config or args.phrase_index else ["dense"])
    sources += [embedded_source(name, not args.no_reader, args.cache_dir, family)
                for name in dict.fromkeys(retrievers)]
    sources += [phrase_source(folder) for folder in args.phrase_index]
    return combine(sources)


def run(args: argparse.Namespace) -> int:
    if not 0 <= args.port < 65536:
        raise ConvQAError(f"--port must be between 0 and 65535, got {args.port}")
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise ConvQAError(f'convqa serve needs fastapi and uvicorn: pip install -e . ({exc})'
                          ) from None
    from convqa.front.serve import create_app, load_serve_config
    from convqa.front.serve.server import bind, serve, setup_logging

    config = load_serve_config(args.serve_config, workers=args.workers, replicas=args.replicas,
                               queue_size=args.queue_size,
                               max_question_chars=args.max_question_chars)
    app = create_app(pipeline_source(args), config)
    sock = bind(args.host, args.port)
    setup_logging(args.log_level)
    serve(app, sock, config.shutdown_grace_s, args.log_level)
    return 0
