"""Every error the API returns: one line of JSON, `{"error": "...", "field": "..."}`.

FastAPI's own validation answer (a list of dicts with pydantic internals) is replaced by one
line naming the first field at fault; malformed JSON is a 400 naming where it breaks. A bug
still gives a 500, but a one-line one, with the traceback only in the server's log.
"""
from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger("convqa.front.serve")
WHERE = ("body", "path", "query", "header")  # the first part of a pydantic error location


class ApiError(Exception):
    """A refused request: HTTP `status`, the `field` at fault (None: the request as a whole)."""

    def __init__(self, status: int, message: str, field: str | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field
        self.headers = headers

    def response(self) -> JSONResponse:
        return error_response(self.status, self.message, self.field, self.headers)


def error_response(status: int, message: str, field: str | None = None,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    text = f"{field}: {message}" if field else message
    return JSONResponse({"error": " ".join(text.split()), "field": field}, status_code=status,
                        headers=headers)


def field_path(location: tuple[Any, ...]) -> str | None:
    """`("body", "history", 2, "question")` -> "history[2].question"; None for the body."""
    path = ""
    for part in location[1:] if location and location[0] in WHERE else location:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or None


def _validation_message(error: dict[str, Any]) -> str:
    kind = error.get("type", "")
    if kind == "missing":
        return "required"
    if kind == "extra_forbidden":
        return "unknown field"
    if kind == "string_pattern_mismatch" and error.get("loc", ())[-1:] == ("conversation_id",):
        return "1-128 characters: letters, digits, _ . : - (starting with a letter or digit)"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"expected a JSON object, got {_json_type(error.get('input'))}"
    if kind == "list_type":
        return f"expected a JSON array, got {_json_type(error.get('input'))}"
    message = str(error.get("msg", "invalid"))
    if kind.endswith("_type") or kind.endswith("_parsing"):
        message += f", got {_json_type(error.get('input'))}"
    return message


def _json_type(value: Any) -> str:
    """The JSON name of a parsed value's type."""
    names = {bool: "boolean", int: "number", float: "number", str: "string", list: "array",
             dict: "object", type(None): "null"}
    return names.get(type(value), type(value).__name__)


async def _on_validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    errors = exc.errors()
    first = errors[0] if errors else {}
    if first.get("type") == "json_invalid":
        position = first.get("loc", ("body", "?"))[-1]
        reason = (first.get("ctx") or {}).get("error", "invalid JSON")
        return error_response(400, f"malformed JSON at character {position}: {reason}", "body")
    field = field_path(tuple(first.get("loc", ())))
    if field is None and first.get("type") == "missing":
        return error_response(400, "the request needs a JSON object body", "body")
    if field is None:
        value = first.get("input")
        if isinstance(value, bytes):  # not parsed: no JSON content type
            return error_response(400, "send a JSON object with Content-Type: "
                                       "application/json", "body")
        return error_response(400, f"expected a JSON object, got {_json_type(value)}", "body")
    return error_response(422, _validation_message(first), field)


async def _on_http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    """Routing errors (404 unknown path, 405 wrong method) and a body over the size limit,
    in the same one-line form."""
    field = getattr(exc, "field", None)
    message = str(exc.detail)
    if field is None and exc.status_code == 404 and message == "Not Found":
        message = f"no such path {request.url.path} (the API: {_endpoints(request.app)})"
    elif field is None and exc.status_code == 405:
        message = (f"{request.method} is not allowed on {request.url.path} (the API: "
                   f"{_endpoints(request.app)})")
    cause = exc.__cause__
    if exc.status_code == 400 and cause is not None:  # FastAPI could not read the body
        field = "body"
        message = (f"not valid UTF-8 (byte {cause.start})" if isinstance(cause, UnicodeDecodeError)
                   else f"cannot read the body as JSON ({type(cause).__name__})")
    return error_response(exc.status_code, message, field, getattr(exc, "headers", None))


def _endpoints(app: FastAPI) -> str:
    """The API's routes as a caller writes them ("POST /v1/answer, ..."), from the app itself,
    so a wrong path or method is answered with the right ones."""
    from fastapi.routing import APIRoute

    routes = [f"{'/'.join(sorted(route.methods))} {route.path}" for route in app.routes
              if isinstance(route, APIRoute)]
    return ", ".join(routes + ["GET /docs"])


async def _on_api_error(request: Request, exc: ApiError) -> JSONResponse:
    return exc.response()


async def _on_bug(request: Request, exc: Exception) -> JSONResponse:
    log.exception("bug while answering %s %s", request.method, request.url.path)
    return error_response(500, f"internal error ({type(exc).__name__}); see the server log")


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _on_validation_error)
    app.add_exception_handler(StarletteHTTPException, _on_http_error)
    app.add_exception_handler(ApiError, _on_api_error)
    app.add_exception_handler(Exception, _on_bug)
