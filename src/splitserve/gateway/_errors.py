"""Errors the gateway answers with, in OpenAI's error JSON shape.

Every failure a client can meet is an :class:`APIError`: an HTTP status, a one-line
message, OpenAI's ``type`` and, where one field is at fault, its ``param``::

    {"error": {"message": "...", "type": "invalid_request_error", "param": "messages.1.content",
               "code": null}}

The engine's failures are converted at the boundary (:mod:`._engine_errors`): not reachable or
still loading -> 503 with ``Retry-After``; a request the engine refuses (context too long)
-> 400 with the engine's message; anything else from the engine -> 502.
"""

from __future__ import annotations

import json
from typing import Any

from .._errors import SplitserveError


class APIError(SplitserveError):
    """An error response: status, OpenAI error body and extra headers (``Retry-After``)."""

    def __init__(
        self,
        status: int,
        message: str,
        type_: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def body_bytes(self) -> bytes:
        return json.dumps(self.body(), ensure_ascii=False).encode()


def bad_request(message: str, param: str | None = None) -> APIError:
    return APIError(400, message, param=param)


def engine_unavailable(message: str, retry_after: int = 5) -> APIError:
    return APIError(
        503, message, type_="service_unavailable", code="engine_unavailable", headers={"Retry-After": str(retry_after)}
    )


__all__ = ["APIError", "bad_request", "engine_unavailable"]
