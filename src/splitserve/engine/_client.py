"""The engine for blocking callers (the cluster's readiness wait, ``splitserve status``, tests).

:class:`BlockingEngine` runs an :class:`~._backend.EngineBackend` (given, or the one of an engine
URL) on an event loop of its own (an anyio blocking portal, started on the first call) and
offers the backend's calls as plain functions::

    with BlockingEngine("http://127.0.0.1:8080", timeout=3.0) as engine:
        engine.info().slots

Connection failures and HTTP errors are :class:`EngineUnavailable` / :class:`EngineHTTPError`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, TypeVar

from anyio.from_thread import BlockingPortal, start_blocking_portal

from ._backend import (
    CompletionRequest,
    EngineBackend,
    EngineHealth,
    EngineHTTPError,
    EngineInfo,
    EngineUnavailable,
)

T = TypeVar("T")


class BlockingEngine:
    """A blocking facade over ``engine``: an :class:`~._backend.EngineBackend`, or an engine URL
    (:func:`~._vllm.backend_for`: ``http://`` llama-server, ``vllm+http://`` vLLM) reached with
    ``api_key``, ``timeout`` bounding connecting and each read of a completion (the small
    requests have their own 5 s). Close it (or use it as a context manager)."""

    def __init__(self, engine: EngineBackend | str, *, api_key: str | None = None, timeout: float = 30.0) -> None:
        if isinstance(engine, str):
            from ._vllm import backend_for

            engine = backend_for(engine, api_key=api_key, connect_timeout=timeout, timeout=timeout)
        self.backend = engine
        self._portal_cm: contextlib.AbstractContextManager[BlockingPortal] | None = None
        self._portal: BlockingPortal | None = None

    @property
    def url(self) -> str:
        return self.backend.url

    def run(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """``await fn(*args)`` on the engine's loop (e.g. ``run(backend.relay, "GET", "/slots")``)."""
        if self._portal is None:
            self._portal_cm = start_blocking_portal()
            self._portal = self._portal_cm.__enter__()
        return self._portal.call(fn, *args)

    def close(self) -> None:
        if self._portal is None or self._portal_cm is None:
            return
        try:
            self._portal.call(self.backend.aclose)
        finally:
            cm, self._portal_cm, self._portal = self._portal_cm, None, None
            cm.__exit__(None, None, None)

    def __enter__(self) -> BlockingEngine:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def health(self) -> EngineHealth:
        """The engine's health (``down``, HTTP status 0, when it does not answer; never raises)."""
        return self.run(self.backend.health)

    def info(self) -> EngineInfo:
        """The engine's settings and slots."""
        return self.run(self.backend.info)

    def complete(self, request: CompletionRequest) -> dict[str, Any]:
        """A whole completion (the stream, collected): llama.cpp's last event, ``content`` the whole text."""
        return self.run(self.backend.complete, request)

    def metrics(self) -> bytes | None:
        """The engine's Prometheus text, None when it has none."""
        return self.run(self.backend.metrics)


__all__ = ["BlockingEngine", "EngineHTTPError", "EngineUnavailable"]
