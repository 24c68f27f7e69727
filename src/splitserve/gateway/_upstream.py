"""The engine behind the gateway: an async HTTP client for llama-server's raw endpoints.

``/completion`` is always asked with ``stream: true``, non-streamed chat answers included:
one code path, and a client that goes away can always be cancelled by closing the engine
connection (llama-server stops a slot whose connection closed). Errors are converted here:

- connection refused / reset / timed out while connecting -> 503 ``Retry-After: 5``;
- the engine's 503 (model still loading) -> 503 ``Retry-After: 2``;
- the engine's 400 (prompt longer than the context, bad grammar) -> 400 with its message;
- any other engine status -> 502.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx

from ._errors import APIError, engine_unavailable


def _engine_message(text: str) -> str:
    try:
        data = json.loads(text)
        err = data.get("error", data)
        return str(err.get("message", text)) if isinstance(err, dict) else str(err)
    except (ValueError, AttributeError):
        return text.strip()[:300]


def error_from_status(status: int, text: str) -> APIError:
    """The client-facing error for an engine response with this status and body."""
    msg = _engine_message(text)
    if status == 503:
        return engine_unavailable(f"the engine is not ready: {msg}", retry_after=2)
    if status in (400, 422):
        return APIError(400, f"the engine refused the request: {msg}")
    if status == 404:
        return APIError(502, f"the engine has no such endpoint: {msg}", type_="server_error")
    return APIError(502, f"the engine answered HTTP {status}: {msg}", type_="server_error")


class Upstream:
    """llama-server at ``base_url``; one pooled async connection set for the gateway."""

    def __init__(
        self, base_url: str, api_key: str | None = None, connect_timeout: float = 5.0, max_connections: int = 256
    ) -> None:
        self.base_url = base_url.rstrip("/")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers=headers,
            timeout=httpx.Timeout(None, connect=connect_timeout),
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    def _down(self, path: str, exc: Exception) -> APIError:
        return engine_unavailable(
            f"the engine at {self.base_url} is not reachable ({type(exc).__name__} on {path}); retry when it is up"
        )

    async def _json(self, method: str, path: str, body: Any = None, timeout: float = 5.0) -> Any:
        try:
            resp = await self._http.request(method, path, json=body, timeout=timeout)
        except httpx.HTTPError as exc:
            raise self._down(path, exc) from None
        if resp.status_code != 200:
            raise error_from_status(resp.status_code, resp.text)
        return resp.json()

    async def get_json(self, path: str, timeout: float = 5.0) -> Any:
        return await self._json("GET", path, timeout=timeout)

    async def post_json(self, path: str, body: Any, timeout: float = 5.0) -> Any:
        return await self._json("POST", path, body, timeout=timeout)

    async def open(self, method: str, path: str, body: Any, headers: dict[str, str] | None = None) -> httpx.Response:
        """Send a request and return the response with its body unread (status checked)."""
        for attempt in (1, 2):
            req = self._http.build_request(method, path, json=body, headers=headers)
            try:
                resp = await self._http.send(req, stream=True)
                break
            except httpx.RemoteProtocolError as exc:
                # llama-server sometimes closes a kept-alive connection just as it is reused
                # ("disconnected without sending a response"): nothing was processed; retry
                # once on a fresh connection.
                if attempt == 2:
                    raise self._down(path, exc) from None
            except httpx.HTTPError as exc:
                raise self._down(path, exc) from None
        if resp.status_code != 200:
            try:
                text = (await resp.aread()).decode("utf-8", "replace")
            except httpx.HTTPError:
                text = ""
            finally:
                await resp.aclose()
            raise error_from_status(resp.status_code, text)
        return resp

    async def relay(
        self, method: str, path: str, query: str, content: bytes, content_type: str | None
    ) -> httpx.Response:
        """A native llama-server request passed on as it came; any status comes back (unread)."""
        url = path + (f"?{query}" if query else "")
        headers = {"Content-Type": content_type} if content_type else {}
        req = self._http.build_request(method, url, content=content or None, headers=headers)
        try:
            return await self._http.send(req, stream=True)
        except httpx.HTTPError as exc:
            raise self._down(path, exc) from None

    async def metrics_text(self, timeout: float = 1.0) -> bytes | None:
        """llama-server's Prometheus text (``llamacpp:*``; it needs ``--metrics``, which `up`
        passes), or None when the engine does not serve it."""
        try:
            resp = await self._http.get("/metrics", timeout=timeout)
        except httpx.HTTPError:
            return None
        if resp.status_code != 200 or "text/plain" not in resp.headers.get("content-type", ""):
            return None
        return resp.content

    async def completion(self, body: dict[str, Any]) -> httpx.Response:
        """Open a streamed ``/completion``; iterate it with :func:`sse_events`."""
        return await self.open("POST", "/completion", {**body, "stream": True})


async def sse_batches(resp: httpx.Response) -> AsyncIterator[list[dict[str, Any]]]:
    """The JSON objects of an engine's server-sent events, as many at a time as one read
    brought (a gateway that falls behind then writes several tokens at once instead of
    falling further behind); an ``error`` event raises.

    Read from the body's bytes and split on line ends here, one JSON parse per ``data:`` line:
    this runs once per generated token, and httpx's own line iterator adds two generator
    layers and a text decode to each (llama-server's events are UTF-8 JSON on one line)."""
    pending = b""
    try:
        async for chunk in resp.aiter_bytes():
            pending += chunk
            if b"\n" not in chunk:
                continue
            *lines, pending = pending.split(b"\n")
            batch = []
            for line in lines:
                data = _event(line)
                if data is _DONE:
                    if batch:
                        yield batch
                    return
                if data is not None:
                    batch.append(data)
            if batch:
                yield batch
        data = _event(pending)
        if data is not None and data is not _DONE:
            yield [data]
    except httpx.HTTPError as exc:
        raise APIError(
            502, f"the engine connection broke mid-stream: {type(exc).__name__}", type_="server_error"
        ) from None


async def sse_events(resp: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """:func:`sse_batches`, one event at a time."""
    async for batch in sse_batches(resp):
        for data in batch:
            yield data


_DONE: dict[str, Any] = {}


def _event(line: bytes) -> dict[str, Any] | None:
    """One SSE line -> its JSON object, :data:`_DONE` for ``[DONE]``, None for anything else."""
    if not line.startswith(b"data: "):
        return None
    payload = line[6:].rstrip(b"\r")
    if payload == b"[DONE]":
        return _DONE
    try:
        data = json.loads(payload)
    except ValueError:
        raise APIError(
            502, f"the engine sent an event that is not JSON: {payload[:120]!r}", type_="server_error"
        ) from None
    if not isinstance(data, dict):
        return None
    if "error" in data and "content" not in data:
        err = data["error"]
        raise APIError(
            502,
            f"the engine failed mid-stream: {err.get('message', err) if isinstance(err, dict) else err}",
            type_="server_error",
        )
    return data


__all__ = ["Upstream", "error_from_status", "sse_batches", "sse_events"]
