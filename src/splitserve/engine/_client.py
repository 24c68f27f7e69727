"""The engine for blocking callers (the cluster's readiness wait, ``splitserve status``).

:class:`SyncEngine` runs any :class:`~._backend.EngineBackend` on an event loop of its own (an
anyio blocking portal, started on the first call) and offers its calls as plain functions::

    with connect("http://127.0.0.1:8080", timeout=3.0) as engine:
        engine.slots()

Connection failures and HTTP errors are :class:`EngineUnavailable` / :class:`EngineHTTPError`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, TypeVar

from anyio.from_thread import BlockingPortal, start_blocking_portal

from ._backend import EngineBackend, EngineHealth, EngineHTTPError, EngineUnavailable
from ._llamacpp import LlamaCppBackend

T = TypeVar("T")


class SyncEngine:
    """A blocking facade over ``backend``; close it (or use it as a context manager)."""

    def __init__(self, backend: EngineBackend) -> None:
        self.backend = backend
        self._portal_cm: contextlib.AbstractContextManager[BlockingPortal] | None = None
        self._portal: BlockingPortal | None = None

    @property
    def url(self) -> str:
        return self.backend.url

    def _call(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
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

    def __enter__(self) -> SyncEngine:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def health(self) -> EngineHealth:
        return self._call(self.backend.health)

    def health_status(self) -> int:
        """HTTP status of the health check: 200 ready, 503 loading; :class:`EngineUnavailable`
        when the engine does not answer."""
        health = self.health()
        if health.status == "down":
            raise EngineUnavailable(health.message, url=self.url, path="/health")
        return health.http_status

    def complete(self, prompt: str, n_predict: int = 1, **fields: Any) -> dict[str, Any]:
        """A non-streamed completion of ``prompt``; ``fields`` go into the body as they are."""
        body = {"prompt": prompt, "n_predict": n_predict, **fields}
        return self._call(self.backend.complete, body)

    def props(self) -> dict[str, Any]:
        """The server's effective settings."""
        return self._call(self.backend.props)

    def slots(self) -> list[dict[str, Any]]:
        """One entry per parallel slot."""
        return self._call(self.backend.slots)

    def tokenize(self, text: str, add_special: bool = False) -> list[int]:
        return self._call(self.backend.tokenize, text, add_special)

    def metrics(self) -> bytes | None:
        """The engine's Prometheus text, None when it has none."""
        return self._call(self.backend.metrics)


def connect(url: str, api_key: str | None = None, timeout: float = 30.0) -> SyncEngine:
    """A :class:`SyncEngine` of llama-server at ``url``; ``timeout`` bounds connecting and each
    read of a completion (the small requests have their own 5 s)."""
    return SyncEngine(LlamaCppBackend(url, api_key=api_key, connect_timeout=timeout, timeout=timeout))


__all__ = ["EngineHTTPError", "EngineUnavailable", "SyncEngine", "connect"]
