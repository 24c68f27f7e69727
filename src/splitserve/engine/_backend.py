"""The engine as the gateway and the cluster need it: one async interface, no HTTP types in it.

:class:`EngineBackend` is what sits behind the gateway (and, through :class:`~._client.SyncEngine`,
behind the cluster's readiness wait and ``status``): health, the server's settings and slots,
tokenizing, raw completions whole or streamed, the engine's Prometheus text and a pass-through
for the gateway's native routes. :class:`~._llamacpp.LlamaCppBackend` is llama-server over HTTP;
:class:`~._fake.FakeEngine` is a scripted engine for tests.

Failures are engine errors, converted by each caller at its own boundary (the gateway turns them
into its OpenAI-shaped errors, the cluster into node errors):

- :class:`EngineUnavailable`: the engine did not answer (not started, crashed, still binding);
- :class:`EngineHTTPError`: it answered with an error status (503 while loading);
- :class:`EngineStreamError`: a stream broke, or carried an error event, after it started.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal

from .._errors import EngineError

HealthStatus = Literal["ok", "loading", "error", "down"]

LOADING_RETRY_AFTER = 2.0
"""Seconds a caller is told to wait when the engine is still loading its model."""
DOWN_RETRY_AFTER = 5.0
"""Seconds a caller is told to wait when the engine does not answer at all."""


class EngineUnavailable(EngineError):
    """The engine did not answer (not started, crashed, or still binding).

    ``url`` and ``path`` say what was asked, ``reason`` the kind of failure (the name of the
    transport error, e.g. ``ConnectError``)."""

    def __init__(self, message: str, *, url: str = "", path: str = "", reason: str = "") -> None:
        super().__init__(message)
        self.url = url
        self.path = path
        self.reason = reason

    def unreachable(self) -> str:
        """The failure as one sentence for a client: :func:`unreachable_message`."""
        return unreachable_message(self.url, self.path, self.reason or "no answer")


class EngineHTTPError(EngineError):
    """The engine answered with an error status; ``body`` is its answer as text."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"engine answered HTTP {status}: {body[:300]}")
        self.status = status
        self.body = body


class EngineStreamError(EngineError):
    """A stream that had started broke off, carried an event that is not JSON, or an error event."""


def unreachable_message(url: str, path: str, reason: str) -> str:
    return f"the engine at {url} is not reachable ({reason} on {path}); retry when it is up"


def engine_message(text: str) -> str:
    """The message of an engine's error answer (llama-server's ``{"error": {"message": ...}}``),
    else the text itself, shortened."""
    try:
        data = json.loads(text)
        err = data.get("error", data)
        return str(err.get("message", text)) if isinstance(err, dict) else str(err)
    except (ValueError, AttributeError):
        return text.strip()[:300]


@dataclass(frozen=True)
class EngineHealth:
    """What the engine's health check said.

    ``status``: ``ok`` (ready), ``loading`` (HTTP 503: the model is still loading), ``error``
    (any other status) or ``down`` (no answer; ``http_status`` 0). ``message`` is the engine's
    own message (for ``down``, a sentence naming the engine and the failure); ``retry_after``
    the seconds a caller should wait before asking again (None when ready or failed)."""

    status: HealthStatus
    http_status: int
    message: str
    retry_after: float | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def health_of(status: int, text: str) -> EngineHealth:
    """The :class:`EngineHealth` of a health answer with this HTTP status and body."""
    if status == 200:
        return EngineHealth("ok", 200, "ok")
    msg = engine_message(text)
    if status == 503:
        return EngineHealth("loading", 503, msg, LOADING_RETRY_AFTER)
    return EngineHealth("error", status, msg)


def health_down(url: str, path: str, reason: str) -> EngineHealth:
    return EngineHealth("down", 0, unreachable_message(url, path, reason), DOWN_RETRY_AFTER)


async def _once(data: bytes) -> AsyncIterator[bytes]:
    if data:
        yield data


@dataclass(eq=False)
class EngineReply:
    """The engine's answer to a passed-on request: status, headers (lower-case names) and body,
    whole (``bytes``) or as it comes (an async iterator of bytes). Close it when done (``async
    with``, or :meth:`aclose`): an unread streamed body holds the engine's connection."""

    status: int
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes | AsyncIterator[bytes] = b""
    closer: Callable[[], Awaitable[None]] | None = None

    def chunks(self) -> AsyncIterator[bytes]:
        """The body's bytes as they come (no copy, no extra layer for a streamed body)."""
        return _once(self.body) if isinstance(self.body, bytes) else self.body

    async def aread(self) -> bytes:
        if isinstance(self.body, bytes):
            return self.body
        parts = [chunk async for chunk in self.body]
        self.body = b"".join(parts)
        return self.body

    async def lines(self) -> AsyncIterator[bytes]:
        """The body's lines without their ends (``\\n``, ``\\r\\n``), as bytes; split on ``\\n``
        only, so a JSON string holding U+2028 stays on its line."""
        pending = b""
        async for chunk in self.chunks():
            if b"\n" not in chunk:
                pending += chunk
                continue
            *done, rest = (pending + chunk).split(b"\n")
            pending = rest
            for line in done:
                yield line[:-1] if line.endswith(b"\r") else line
        if pending:
            yield pending[:-1] if pending.endswith(b"\r") else pending

    async def aclose(self) -> None:
        closer, self.closer = self.closer, None
        if closer is not None:
            await closer()

    async def __aenter__(self) -> EngineReply:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


class CompletionStream(ABC):
    """One streamed raw completion: ``async with backend.stream(body) as events`` sends it, and
    ``async for batch in events`` yields its server-sent events as lists of decoded JSON objects,
    as many at a time as one read of the engine brought (a reader that falls behind then handles
    several tokens at once instead of falling further behind). The ``[DONE]`` marker ends the
    iteration; an error event raises :class:`EngineStreamError`. Leaving the ``async with``
    closes the engine's response, which aborts the generation if it is still running."""

    async def __aenter__(self) -> CompletionStream:
        await self.open()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    @abstractmethod
    async def open(self) -> None:
        """Send the request; raises :class:`EngineUnavailable` / :class:`EngineHTTPError`."""

    @abstractmethod
    def batches(self) -> AsyncIterator[list[dict[str, Any]]]:
        """The events, a list per read (see the class)."""

    def __aiter__(self) -> AsyncIterator[list[dict[str, Any]]]:
        return self.batches()

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        """:meth:`batches`, one event at a time."""
        async for batch in self.batches():
            for data in batch:
                yield data

    @abstractmethod
    async def aclose(self) -> None:
        """Close the engine's response (idempotent)."""


class EngineBackend(ABC):
    """An engine that turns prompts into tokens (see the module)."""

    url: str
    """Where the engine is, for messages (``http://127.0.0.1:8080``)."""

    @abstractmethod
    async def health(self) -> EngineHealth:
        """The engine's health; never raises for an engine that is down or failing."""

    @abstractmethod
    async def props(self, timeout: float | None = None) -> dict[str, Any]:
        """The server's effective settings (llama-server's ``/props``: chat template, model path,
        default generation settings, slots). ``timeout``: seconds, None for the backend's default."""

    @abstractmethod
    async def slots(self, timeout: float | None = None) -> list[dict[str, Any]]:
        """One entry per parallel slot (llama-server's ``/slots``)."""

    @abstractmethod
    async def tokenize(self, text: str, add_special: bool = False) -> list[int]:
        """The token ids of ``text`` (with BOS and the like when ``add_special``)."""

    @abstractmethod
    async def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        """A raw, non-streamed completion (llama.cpp's ``/completion`` body and answer)."""

    @abstractmethod
    def stream(self, body: dict[str, Any]) -> CompletionStream:
        """A streamed raw completion of this ``/completion`` body (``stream`` is set for you);
        use it as ``async with backend.stream(body) as events`` (see :class:`CompletionStream`)."""

    @abstractmethod
    async def metrics(self) -> bytes | None:
        """The engine's Prometheus text, None when it has none (or does not answer)."""

    @abstractmethod
    async def relay(
        self,
        method: str,
        path: str,
        *,
        query: str = "",
        content: bytes = b"",
        content_type: str | None = None,
        check: bool = False,
    ) -> EngineReply:
        """A native request passed on as it came (the gateway's ``/completion``, ``/tokenize``,
        ``/slots``, ``/v1/completions``, ...): any status comes back, the body unread. With
        ``check``, an answer other than 200 raises :class:`EngineHTTPError` instead (its body
        read and the reply closed)."""

    @abstractmethod
    async def aclose(self) -> None:
        """Release the backend's connections."""


__all__ = [
    "DOWN_RETRY_AFTER",
    "LOADING_RETRY_AFTER",
    "CompletionStream",
    "EngineBackend",
    "EngineHTTPError",
    "EngineHealth",
    "EngineReply",
    "EngineStreamError",
    "EngineUnavailable",
    "HealthStatus",
    "engine_message",
    "health_down",
    "health_of",
    "unreachable_message",
]
