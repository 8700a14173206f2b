"""Refuse request bodies over a size limit before reading them, as a one-line JSON 413.

A declared Content-Length over the limit is answered at once; a body sent without one (chunked)
is counted as it arrives and refused when it passes the limit, so no client can make the
server buffer more than `max_bytes`.
"""
from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import error_response


class BodyTooLarge(HTTPException):
    """Raised while the body streams in; FastAPI passes HTTPExceptions from body reading on
    as they are (anything else would become a 400 "error parsing the body")."""

    field = "body"


class BodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    def _message(self) -> str:
        return f"the request body is over {self.max_bytes} bytes"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or ()).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            message = (self._message() if declared.isdigit()
                       else "the Content-Length header is not a number")
            await error_response(413 if declared.isdigit() else 400, message,
                                 "body")(scope, receive, send)
            return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise BodyTooLarge(413, self._message())
            return message

        await self.app(scope, counted, send)
