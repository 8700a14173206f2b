"""Run the app under uvicorn on a socket bound here, so a port in use is a one-line error.

Shutdown (SIGTERM or Ctrl-C): uvicorn stops accepting connections and waits up to
`grace_s` for the requests in flight (those waiting in the worker queue included) to be
answered; then the app's lifespan closes the worker pool. Nothing is written while serving,
so a kill -9 loses only the conversations held in memory.
"""
from __future__ import annotations

import logging
import socket
import sys

from convqa.errors import ConvQAError

log = logging.getLogger("convqa.front.serve")


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port (port 0: any free port)."""
    try:
        family, kind, proto, _, _ = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        # proto IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say so, and
        # without it a kept-alive connection waits ~40 ms (Nagle + delayed ACK) per response
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:  # port taken, address not available, unknown host
        raise ConvQAError(f"cannot serve on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def serve(app, sock: socket.socket, grace_s: float, log_level: str = "info") -> None:
    """Serve `app` on `sock` until SIGTERM / SIGINT, then shut down gracefully."""
    import uvicorn

    host, port = sock.getsockname()[:2]
    print(f"convqa serve: listening on http://{host}:{port} (GET /health says when the "
          f"models are loaded; API at /docs)", file=sys.stderr, flush=True)
    config = uvicorn.Config(app, log_level=log_level, timeout_graceful_shutdown=int(grace_s),
                            server_header=False, lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])


def setup_logging(level: str = "info") -> None:
    """The server's own messages (loading, ready, failures) on stderr."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("convqa serve: %(message)s"))
    log.addHandler(handler)
    log.setLevel(level.upper())
    log.propagate = False
