"""What every engine spoken to over HTTP shares: :class:`HttpEngine`, one pooled ``httpx.AsyncClient``
and the conversions of its failures, under :class:`~._llamacpp.LlamaCppBackend` (llama-server) and
:class:`~._vllm.VllmBackend` (vLLM, SGLang).

Transport failures become :class:`~._backend.EngineUnavailable` (before an answer) or
:class:`~._backend.EngineStreamError` (in the middle of one), error statuses
:class:`~._backend.EngineHTTPError`. Subclasses add their API's own calls.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx

from ._backend import (
    EngineBackend,
    EngineHealth,
    EngineHTTPError,
    EngineReply,
    EngineStreamError,
    EngineUnavailable,
    health_down,
    health_of,
)

SHORT = 5.0
"""Seconds for the small requests (health, props, slots, tokenize)."""


class HttpEngine(EngineBackend):
    """An engine at ``base_url`` (e.g. ``http://127.0.0.1:8080``).

    ``connect_timeout`` bounds connecting; ``timeout`` bounds each read, write and pool wait of
    completions and relays (None: no bound, a generation may take as long as it takes; the small
    requests have their own bound of :data:`SHORT` seconds)."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        connect_timeout: float = 5.0,
        max_connections: int = 256,
        timeout: float | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.url = self.base_url = base_url.rstrip("/")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers=headers,
            timeout=httpx.Timeout(timeout, connect=connect_timeout),
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
            transport=transport,
        )
        self._timeout = timeout

    async def aclose(self) -> None:
        await self._http.aclose()

    def _down(self, path: str, exc: Exception) -> EngineUnavailable:
        return EngineUnavailable(
            f"{self.base_url}{path}: {type(exc).__name__}: {exc}",
            url=self.base_url,
            path=path,
            reason=type(exc).__name__,
        )

    async def _json(self, method: str, path: str, body: Any = None, timeout: float | None = SHORT) -> Any:
        """One small JSON request; its answer's JSON (an error status raises)."""
        extra: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
        try:
            resp = await self._http.request(method, path, json=body, **extra)
        except httpx.HTTPError as exc:
            raise self._down(path, exc) from None
        if resp.status_code != 200:
            raise EngineHTTPError(resp.status_code, resp.text)
        return resp.json()

    async def health(self) -> EngineHealth:
        try:
            resp = await self._http.get("/health", timeout=SHORT)
        except httpx.HTTPError as exc:
            return health_down(self.base_url, "/health", type(exc).__name__)
        return health_of(resp.status_code, resp.text)

    async def _send(self, request: httpx.Request, path: str, retry: bool) -> httpx.Response:
        for attempt in (1, 2):
            try:
                return await self._http.send(request, stream=True)
            except httpx.RemoteProtocolError as exc:
                # An engine sometimes closes a kept-alive connection just as it is reused
                # ("disconnected without sending a response"): nothing was processed; retry
                # once on a fresh connection.
                if not retry or attempt == 2:
                    raise self._down(path, exc) from None
            except httpx.HTTPError as exc:
                raise self._down(path, exc) from None
        raise AssertionError("unreachable")  # pragma: no cover

    async def open(self, request: httpx.Request, path: str, retry: bool = True) -> httpx.Response:
        """Send ``request`` and return the response with its body unread, status checked."""
        resp = await self._send(request, path, retry)
        if resp.status_code != 200:
            try:
                text = (await resp.aread()).decode("utf-8", "replace")
            except httpx.HTTPError:
                text = ""
            finally:
                await resp.aclose()
            raise EngineHTTPError(resp.status_code, text)
        return resp

    async def _relay_content(self, path: str, content: bytes) -> bytes:
        """The body a relayed request takes to the engine (this engine's own changes, if any)."""
        return content

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
        content = await self._relay_content(path, content)
        url = path + (f"?{query}" if query else "")
        headers = {"Content-Type": content_type} if content_type else {}
        req = self._http.build_request(method, url, content=content or None, headers=headers)
        if check:
            resp = await self.open(req, path)
        else:
            resp = await self._send(req, path, retry=False)
        return EngineReply(resp.status_code, dict(resp.headers.items()), body_of(resp), resp.aclose)


async def body_of(resp: httpx.Response) -> AsyncIterator[bytes]:
    """A response's body; a connection that breaks in it is an :class:`EngineStreamError`."""
    try:
        async for chunk in resp.aiter_bytes():
            yield chunk
    except httpx.HTTPError as exc:
        raise EngineStreamError(f"the engine connection broke mid-stream: {type(exc).__name__}") from None


DONE: dict[str, Any] = {}
"""What :func:`sse_data` returns for the ``[DONE]`` line."""


def sse_data(line: bytes, is_error: Callable[[dict[str, Any]], bool]) -> dict[str, Any] | None:
    """One server-sent-events line -> its JSON object, :data:`DONE` for ``data: [DONE]``, None for
    anything else; an object ``is_error`` calls an error raises :class:`EngineStreamError`."""
    if not line.startswith(b"data: "):
        return None
    payload = line[6:].rstrip(b"\r")
    if payload == b"[DONE]":
        return DONE
    try:
        data = json.loads(payload)
    except ValueError:
        raise EngineStreamError(f"the engine sent an event that is not JSON: {payload[:120]!r}") from None
    if not isinstance(data, dict):
        return None
    if is_error(data):
        err = data.get("error", data)
        raise EngineStreamError(
            f"the engine failed mid-stream: {err.get('message', err) if isinstance(err, dict) else err}"
        )
    return data


__all__ = ["DONE", "SHORT", "HttpEngine", "body_of", "sse_data"]
