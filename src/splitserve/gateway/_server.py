"""Running a gateway: uvicorn on the configured host and port, with header limits.

uvicorn itself caps nothing with httptools (its default when installed): a client may send
one header of any size, buffered until it ends, and a connection whose headers never end
stays open forever (uvicorn has no header read time-out for either implementation). The
protocols here are uvicorn's own two, each with a guard:

- the bytes of one request's head (request line and headers) are capped at
  ``max_header_bytes``: beyond it the client gets ``431`` and the connection closes, before
  the parser buffers more (h11: also its ``max_incomplete_event_size``);
- at most ``max_headers`` header lines (431 beyond; checked on the parsed request, for both);
- a connection must finish its request head within ``header_timeout`` seconds of its first
  byte (or of being opened): else ``408`` and the connection closes. Idle kept-alive
  connections close after ``keep_alive_timeout``; a body must arrive within the gateway's
  ``body_timeout`` (:meth:`Gateway.read_body`).

(`up` starts a gateway as a process; its command line is built in
:func:`splitserve.cluster.gateway_plan`.)
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ._app import create_app
from ._auth import require_auth_off_loopback
from ._config import GatewayConfig

_REASONS = {408: b"Request Timeout", 431: b"Request Header Fields Too Large"}


class _HeadTooLarge(Exception):
    pass


class _HeadGuard:
    """Mixed into a uvicorn HTTP protocol: header size, count and read time limits."""

    max_header_bytes = 64 * 1024
    header_timeout = 10.0

    transport: asyncio.Transport
    loop: asyncio.AbstractEventLoop
    cycle: Any

    def _guard_init(self) -> None:
        self._head_open = True  # reading a request head (or waiting for the next one)
        self._head_bytes = 0  # bytes received while reading the head (a bound on its size)
        self._head_parsed = 0  # bytes of the head parsed so far (its size)
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:
        self._guard_init()
        super().connection_made(transport)  # type: ignore[misc]
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)  # type: ignore[misc]

    def _arm(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.header_timeout, self._head_timed_out)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if not self._in_head() or self.transport.is_closing():
            return
        if self.cycle is None or self.cycle.response_complete:
            self._refuse(408, "the request head did not arrive in time")
        # else a response is still going out: a pipelined head waits for it

    def _refuse(self, status: int, msg: str) -> None:
        self._disarm()
        if self.transport.is_closing():
            return
        body = msg.encode()
        self.transport.write(
            b"HTTP/1.1 %d %s\r\ncontent-type: text/plain; charset=utf-8\r\n"
            b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (status, _REASONS[status], len(body), body)
        )
        self.transport.close()

    def _head_done(self) -> None:
        self._head_open = False
        self._disarm()

    def _head_next(self) -> None:
        self._head_open = True
        self._head_bytes = 0
        self._head_parsed = 0

    def _in_head(self) -> bool:
        return self._head_open

    def _over(self) -> bool:
        return self._head_bytes > self.max_header_bytes

    def data_received(self, data: bytes) -> None:
        counting = self._in_head()
        if counting:
            self._head_bytes += len(data)
            self._arm()
        try:
            super().data_received(data)  # type: ignore[misc]
        except _HeadTooLarge as exc:
            self._refuse(431, str(exc))
            return
        if self.transport.is_closing():
            self._disarm()
            return
        if not self._in_head():
            self._disarm()
        elif counting and self._over():
            self._refuse(431, f"the request head exceeds {self.max_header_bytes} bytes")


def _protocols() -> dict[str, type]:
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class GuardedH11(_HeadGuard, H11Protocol):  # type: ignore[misc]
        """h11 caps the head's size itself (``max_incomplete_event_size``: 400 beyond)."""

        def _in_head(self) -> bool:
            import h11

            return bool(self.conn.their_state is h11.IDLE)

        def _over(self) -> bool:
            return False

    out: dict[str, type] = {"h11": GuardedH11}
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # httptools not installed
        return out

    class GuardedHttpTools(_HeadGuard, HttpToolsProtocol):  # type: ignore[misc]
        def on_message_begin(self) -> None:
            self._head_next()
            super().on_message_begin()

        def on_url(self, url: bytes) -> None:
            self._head_count_bytes(len(url))
            super().on_url(url)

        def on_header(self, name: bytes, value: bytes) -> None:
            self._head_count_bytes(len(name) + len(value) + 4)
            super().on_header(name, value)

        def _head_count_bytes(self, n: int) -> None:
            self._head_parsed += n
            if self._head_parsed > self.max_header_bytes:
                raise _HeadTooLarge(f"the request head exceeds {self.max_header_bytes} bytes")

        def on_headers_complete(self) -> None:
            self._head_done()
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            super().on_message_complete()
            self._head_next()

    out["httptools"] = GuardedHttpTools
    return out


class HeaderCount:
    """ASGI wrapper: a request with more than ``max_headers`` header lines is a 431."""

    def __init__(self, app: Any, max_headers: int) -> None:
        self.app = app
        self.max_headers = max_headers

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and len(scope["headers"]) > self.max_headers:
            from ._errors import APIError

            body = APIError(
                431,
                f"the request has {len(scope['headers'])} header lines; the limit is {self.max_headers}",
                code="request_header_fields_too_large",
            ).body_bytes()
            await send(
                {
                    "type": "http.response.start",
                    "status": 431,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                        (b"connection", b"close"),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)


def guarded_protocol(http: str, config: GatewayConfig) -> type:
    """uvicorn's ``http`` implementation (``auto``: httptools when installed, else h11) with the
    head limits of ``config``."""
    protocols = _protocols()
    name = ("httptools" if "httptools" in protocols else "h11") if http == "auto" else http
    if name not in protocols:
        from .._errors import UsageError

        raise UsageError(f"--http {http}: not available here (choose from: auto, {', '.join(sorted(protocols))})")
    base = protocols[name]
    return type(
        base.__name__, (base,), {"max_header_bytes": config.max_header_bytes, "header_timeout": config.header_timeout}
    )


def serve(config: GatewayConfig, log_level: str = "warning", http: str = "auto", access_log: bool = True) -> None:
    """Serve until interrupted; refuses a non-loopback host without API keys."""
    import uvicorn

    if access_log:
        enable_access_log()
    require_auth_off_loopback(config.host, config.keys)
    app = HeaderCount(create_app(config), config.max_headers)
    uv = uvicorn.Config(
        app,
        host=config.host,
        port=config.port,
        log_level=log_level,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=5,
        http=guarded_protocol(http, config),
        h11_max_incomplete_event_size=config.max_header_bytes,
        timeout_keep_alive=max(1, round(config.keep_alive_timeout)),
    )
    logging.getLogger("uvicorn.error").propagate = False
    uvicorn.Server(uv).run()


def enable_access_log(stream: Any = None) -> None:
    """Write the ``splitserve.access`` lines (see _access) to ``stream`` (stderr by default)."""
    from ._access import ACCESS_LOG

    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(asctime)s access %(message)s"))
    ACCESS_LOG.addHandler(handler)
    ACCESS_LOG.setLevel(logging.INFO)
    ACCESS_LOG.propagate = False


__all__ = ["HeaderCount", "enable_access_log", "guarded_protocol", "serve"]
