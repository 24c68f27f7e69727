"""The engine behind the gateway, at its boundary: engine errors -> the gateway's errors.

The engine is an :class:`~splitserve.engine.EngineBackend` (llama-server over HTTP, or a
:class:`~splitserve.engine.FakeEngine` in tests). Its generations are always asked streamed,
non-streamed chat answers included: one code path, and a client that goes away can always be
cancelled by closing the engine's stream (llama-server stops a slot whose connection closed).
Its failures become :class:`~._errors.APIError` here:

- not reachable (refused, reset, timed out while connecting) -> 503 ``Retry-After: 5``;
- the engine's 503 (model still loading) -> 503 ``Retry-After: 2``;
- the engine's 400 (prompt longer than the context, bad grammar) -> 400 with its message;
- a stream that broke or carried an error event -> 502;
- any other engine status -> 502.
"""

from __future__ import annotations

import math

from .._errors import EngineError
from ..engine import DOWN_RETRY_AFTER, EngineHealth, EngineHTTPError, EngineUnavailable, engine_message
from ._errors import APIError, engine_unavailable


def error_from_message(status: int, msg: str) -> APIError:
    """The client-facing error for an engine answer with this status and message."""
    if status == 503:
        return engine_unavailable(f"the engine is not ready: {msg}", retry_after=2)
    if status in (400, 422):
        return APIError(400, f"the engine refused the request: {msg}")
    if status == 404:
        return APIError(502, f"the engine has no such endpoint: {msg}", type_="server_error")
    return APIError(502, f"the engine answered HTTP {status}: {msg}", type_="server_error")


def error_from_status(status: int, text: str) -> APIError:
    """The client-facing error for an engine response with this status and body."""
    return error_from_message(status, engine_message(text))


def api_error(exc: EngineError) -> APIError:
    """The client-facing error for an engine error."""
    if isinstance(exc, EngineHTTPError):
        return error_from_status(exc.status, exc.body)
    if isinstance(exc, EngineUnavailable):
        return engine_unavailable(exc.unreachable(), retry_after=int(DOWN_RETRY_AFTER))
    return APIError(502, exc.message, type_="server_error")


def health_error(health: EngineHealth) -> APIError | None:
    """The client-facing error for an engine that is not healthy, None when it is."""
    if health.status == "ok":
        return None
    if health.status == "down":
        return engine_unavailable(health.message, retry_after=math.ceil(health.retry_after or DOWN_RETRY_AFTER))
    return error_from_message(health.http_status, health.message)


__all__ = ["api_error", "error_from_message", "error_from_status", "health_error"]
