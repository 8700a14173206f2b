"""`convqa serve`: the HTTP API on `convqa.pipeline.Pipeline` (FastAPI + uvicorn).

    from convqa.front.serve import create_app, ServeConfig
    app = create_app({"bm25": pipeline}, ServeConfig(workers=2))

Modules, one concept each: `config` (settings), `schemas` (the JSON), `limits` (request checks
against the settings), `errors` (one-line JSON errors), `conversations` (the bounded history
the server keeps), `workers` (the bounded pool), `pipelines` (answering paths and how to build
them), `service` (loading and answering), `responses` (result -> JSON), `app` (the routes),
`server` (uvicorn, graceful shutdown).
"""
from .app import create_app
from .config import ServeConfig, load_serve_config

__all__ = ["create_app", "ServeConfig", "load_serve_config"]
