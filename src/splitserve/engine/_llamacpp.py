"""llama-server behind :class:`~._backend.EngineBackend`: one pooled ``httpx.AsyncClient``.

A streamed completion, which runs once per generated token, goes over connections of its own
(:mod:`._llamacpp_stream`: an asyncio protocol that parses the answer and its events as they
arrive, and reuses connections) for an ``http://`` engine reached without a proxy; else, and
with a custom httpx ``transport``, through httpx, its body's bytes split on line ends here,
one JSON parse per ``data:`` line (llama-server's events are UTF-8 JSON on one line).
Transport failures become :class:`~._backend.EngineUnavailable` (before an answer)
or :class:`~._backend.EngineStreamError` (in the middle of one), error statuses
:class:`~._backend.EngineHTTPError`.
"""

from __future__ import annotations

import urllib.request
from collections.abc import AsyncIterator
from typing import Any

import httpx

from ._backend import CompletionRequest, CompletionStream, EngineHTTPError, EngineInfo, EngineStreamError
from ._http import DONE, SHORT, HttpEngine, sse_data
from ._llamacpp_stream import Pool, RawStream


class LlamaCppBackend(HttpEngine):
    """llama-server at ``base_url`` (e.g. ``http://127.0.0.1:8080``); timeouts as
    :class:`~._http.HttpEngine`'s. A streamed ``/completion`` to a plain ``http://`` engine with no
    proxy goes through the pooled reader of :mod:`._llamacpp_stream`; the rest through httpx."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        connect_timeout: float = 5.0,
        max_connections: int = 256,
        timeout: float | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(base_url, api_key, connect_timeout, max_connections, timeout, transport)
        self._own_http = self._http
        self._raw: tuple[Pool, bytes] | None = None
        url = httpx.URL(self.base_url)
        if transport is None and url.scheme == "http" and url.host and not _proxied(url.host):
            target = url.raw_path.decode("ascii").rstrip("/") + "/completion"
            head = (
                f"POST {target} HTTP/1.1\r\nHost: {url.netloc.decode('ascii')}\r\nAccept: */*\r\n"
                "Content-Type: application/json\r\n" + (f"Authorization: Bearer {api_key}\r\n" if api_key else "")
            )
            if head.isascii() and not {"\r", "\n"} & set(api_key or ""):  # else httpx judges the key
                pool = Pool(url.host, url.port or 80, connect_timeout, max_connections)
                self._raw = (pool, head.encode("ascii"))

    async def aclose(self) -> None:
        if self._raw is not None:
            self._raw[0].close()
        await super().aclose()

    async def info(self, timeout: float | None = None) -> EngineInfo:
        """``/props`` and ``/slots`` (no slots when the server has them off: ``--no-slots``)."""
        props = await self._json("GET", "/props", timeout=timeout or SHORT)
        try:
            data = await self._json("GET", "/slots", timeout=timeout or SHORT)
        except EngineHTTPError:
            data = []
        slots = [s for s in data if isinstance(s, dict)] if isinstance(data, list) else []
        return EngineInfo(props if isinstance(props, dict) else {}, slots)

    def stream(self, request: CompletionRequest) -> CompletionStream:
        body = request.llamacpp()
        body["stream"] = True
        if self._raw is not None and self._http is self._own_http:  # (not swapped for a mock client)
            pool, head = self._raw
            return RawStream(pool, self.base_url, "/completion", head, body, self._timeout)
        return _LlamaStream(self, body)


def _proxied(host: str) -> bool:
    """Whether httpx would reach ``host`` through a proxy of the environment (``HTTP_PROXY``,
    ``ALL_PROXY``, unless ``NO_PROXY`` names it)."""
    proxies = urllib.request.getproxies()
    if not (proxies.get("http") or proxies.get("all")):
        return False
    return not urllib.request.proxy_bypass(host)


class _LlamaStream(CompletionStream):
    def __init__(self, backend: LlamaCppBackend, body: dict[str, Any]) -> None:
        self._backend = backend
        self._body = body
        self._resp: httpx.Response | None = None

    async def open(self) -> None:
        request = self._backend._http.build_request("POST", "/completion", json=self._body)
        self._resp = await self._backend.open(request, "/completion")

    def batches(self) -> AsyncIterator[list[dict[str, Any]]]:
        if self._resp is None:
            raise RuntimeError("the stream is not open: use `async with backend.stream(request) as events`")
        return sse_batches(self._resp)

    async def aclose(self) -> None:
        resp, self._resp = self._resp, None
        if resp is not None:
            await resp.aclose()


async def sse_batches(resp: httpx.Response) -> AsyncIterator[list[dict[str, Any]]]:
    """The JSON objects of an engine's server-sent events, as many at a time as one read
    brought; an ``error`` event raises (see the module for why bytes are split here)."""
    pending = b""
    try:
        async for chunk in resp.aiter_bytes():
            pending += chunk
            if b"\n" not in chunk:
                continue
            *lines, pending = pending.split(b"\n")
            batch: list[dict[str, Any]] = []
            for line in lines:
                data = _event(line)
                if data is DONE:
                    if batch:
                        yield batch
                    return
                if data is not None:
                    batch.append(data)
            if batch:
                yield batch
        data = _event(pending)
        if data is not None and data is not DONE:
            yield [data]
    except httpx.HTTPError as exc:
        raise EngineStreamError(f"the engine connection broke mid-stream: {type(exc).__name__}") from None


def _event(line: bytes) -> dict[str, Any] | None:
    """One SSE line of llama-server (:func:`~._http.sse_data`); an ``error`` object without
    ``content`` is its error event."""
    return sse_data(line, lambda d: "error" in d and "content" not in d)


__all__ = ["LlamaCppBackend", "sse_batches"]
