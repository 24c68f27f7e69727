"""llama-server's streamed ``/completion`` over plain asyncio connections of our own.

This request runs once per generated token, so its reader is the gateway's hottest path. On
httpx each token's chunk went through httpx, httpcore, h11 and anyio (a cancel scope and a
few generator layers per read: about half of the gateway's CPU per token on a fast engine).
Here one :class:`asyncio.Protocol` per connection parses the answer as it arrives: the
status line and headers, the chunked (or sized, or close-delimited) body, the body's
server-sent events split on ``\\n`` with one JSON parse per ``data:`` line, and hands the
reader the events of each read as one batch.

- **Connections are reused.** An answer that ends at its ``stop`` event is handed back to
  the caller at once; the connection reads the rest of the body (the engine's end of the
  chunked body) in the background and goes back to the pool when it has, or is closed
  after :data:`DRAIN_S` seconds. A stream closed before its ``stop`` event closes its
  connection: that is what aborts the generation in llama-server.
- **Flow control.** A reader that falls behind pauses the socket after :data:`HIGH_WATER`
  unread batches, so the engine is slowed by TCP as it was through httpx, and no answer
  piles up in memory.
- **Failures** are the engine errors of :mod:`._backend`: a refused or timed-out connect is
  :class:`EngineUnavailable` (``ConnectError`` / ``ConnectTimeout``), as is a connection
  that closes before any byte of an answer (``RemoteProtocolError``, after one retry on a
  fresh connection: llama-server sometimes closes a kept-alive connection just as it is
  reused); an error status is :class:`EngineHTTPError` with the body; a body cut off is
  :class:`EngineStreamError` (``ReadError`` for a reset, ``RemoteProtocolError`` for an
  early end), as are an event that is not JSON and an error event.

Used for ``http://`` engines reached without a proxy; otherwise, and with a custom httpx
transport (the tests' mock), :class:`~._llamacpp.LlamaCppBackend` streams through httpx.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

from ._backend import CompletionStream, EngineHTTPError, EngineStreamError, EngineUnavailable

DRAIN_S = 2.0
"""Seconds a connection whose answer ended at its ``stop`` event waits for the body's end."""
IDLE_S = 3.0
"""Seconds an idle connection stays in the pool (llama-server closes them after 5)."""
HIGH_WATER = 64
"""Unread batches at which reading pauses (resumed at a quarter of it)."""
MAX_HEAD = 64 * 1024
"""Bytes of a status line and headers, or of one chunk-size line, before the answer is refused."""

# Reader states.
_HEAD, _CHUNK_SIZE, _CHUNK_DATA, _CHUNK_END, _TRAILER, _LENGTH, _UNTIL_CLOSE, _DONE = range(8)

_decode = json.JSONDecoder().decode

_END = object()
"""Queued after the last batch of a body (or at ``[DONE]``)."""


class _NoAnswer(Exception):
    """The connection closed before any byte of an answer; ``reason`` as httpx names it."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


class _BadAnswer(Exception):
    """An answer that is not HTTP/1.1 as this reader knows it."""


def _one_chunk(data: bytes) -> bytes | None:
    """The data of ``data`` if it is exactly one whole non-empty chunk of a chunked body,
    else None."""
    end = data.find(b"\r\n", 0, 18)
    if end <= 0 or not data.endswith(b"\r\n"):
        return None
    try:
        size = int(data[:end], 16)
    except ValueError:
        return None  # an extension (or junk): the general path
    if not size or len(data) != end + size + 4:
        return None
    return data[end + 2 : -2]


def _broke(exc: BaseException | None) -> EngineStreamError:
    reason = "ReadError" if exc is not None else "RemoteProtocolError"
    return EngineStreamError(f"the engine connection broke mid-stream: {reason}")


class Connection(asyncio.Protocol):
    """One connection to the engine, one answer at a time (see the module)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self._drained: Callable[[Connection], None] | None = None
        self._drain_timer: asyncio.TimerHandle | None = None
        self.reset()

    # -- one answer's state -----------------------------------------------------------------
    def reset(self) -> None:
        self.status = 0
        self.keep_alive = True
        self.done = False
        """The whole body was read."""
        self.stopped = False
        """The answer's ``stop`` event (or ``[DONE]``) was read: the generation is over."""
        self.failed = False
        self._ended = False
        """No more events are read: ``[DONE]``, an error, or the body's end."""
        self._state = _HEAD
        self._buf = b""
        self._left = 0
        self._lines = b""
        self._sse = True
        self._raw: list[bytes] = []
        self._queue: deque[Any] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._head: asyncio.Future[None] = self.loop.create_future()
        self._got_bytes = False
        self._paused = False

    # -- asyncio.Protocol -----------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self._got_bytes = True
        if self._state == _DONE:
            if not self.failed:  # bytes after an answer, unasked: the connection is not reused
                self.keep_alive = False
                self.close()
            return
        body = _one_chunk(data) if self._state == _CHUNK_SIZE and not self._buf else None
        if body is None:  # anything but one whole chunk (the usual read: one event)
            buf = self._buf + data if self._buf else data
            self._buf = b""
            try:
                body = self._parse(buf)
            except (_BadAnswer, ValueError) as exc:
                self._fail(EngineStreamError(f"the engine sent a malformed answer: {exc}"))
                return
        if body:
            if not self._sse:
                self._raw.append(body)
            elif self._drained is None and not self._ended:  # nobody reads a drained answer's events
                self._events(body)
        if self._state == _DONE and not self.failed:
            self._finish()

    def eof_received(self) -> bool | None:
        return None  # close the transport; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._drain_timer is not None:
            self._drain_timer.cancel()
        self._drained = None
        if self._state == _DONE:
            return
        if self._state == _HEAD:
            if not self._head.done():
                if self._got_bytes:
                    self._head_failed(_BadAnswer("the engine closed the connection in the middle of its headers"))
                else:
                    reason = "ReadError" if exc is not None else "RemoteProtocolError"
                    detail = str(exc) if exc is not None else "Server disconnected without sending a response."
                    self._head_failed(_NoAnswer(reason, detail))
            return
        if self._state == _UNTIL_CLOSE:
            self._state = _DONE
            self.keep_alive = False
            self._finish()
            return
        self._fail(_broke(exc))

    def pause_writing(self) -> None:
        pass  # one small request per answer

    def resume_writing(self) -> None:
        pass

    # -- parsing ------------------------------------------------------------------------------
    def _parse(self, buf: bytes) -> bytes:
        """Advance through ``buf``; returns the body bytes it held (chunk framing removed) and
        keeps an incomplete head or chunk-size line for the next read."""
        pos, n = 0, len(buf)
        parts: list[bytes] = []
        while pos < n:
            state = self._state
            if state == _CHUNK_SIZE:
                end = buf.find(b"\r\n", pos)
                if end < 0:
                    self._keep(buf[pos:])
                    break
                size = int(buf[pos:end].split(b";", 1)[0], 16)
                pos = end + 2
                if size:
                    self._left, self._state = size, _CHUNK_DATA
                else:
                    self._state = _TRAILER
            elif state == _CHUNK_DATA:
                take = min(self._left, n - pos)
                parts.append(buf[pos : pos + take])
                pos += take
                self._left -= take
                if not self._left:
                    self._state = _CHUNK_END
            elif state == _CHUNK_END:
                if n - pos < 2:
                    self._keep(buf[pos:])
                    break
                if buf[pos : pos + 2] != b"\r\n":
                    raise _BadAnswer("a chunk does not end with CRLF")
                pos += 2
                self._state = _CHUNK_SIZE
            elif state == _TRAILER:
                end = buf.find(b"\r\n", pos)
                if end < 0:
                    self._keep(buf[pos:])
                    break
                if end == pos:  # the empty line after the last chunk (and any trailers)
                    self._state = _DONE
                    if end + 2 < n:
                        self.keep_alive = False  # more than one answer's bytes: never reused
                    break
                pos = end + 2
            elif state == _LENGTH:
                take = min(self._left, n - pos)
                parts.append(buf[pos : pos + take])
                pos += take
                self._left -= take
                if not self._left:
                    self._state = _DONE
                    if pos < n:
                        self.keep_alive = False
                    break
            elif state == _UNTIL_CLOSE:
                parts.append(buf[pos:] if pos else buf)
                break
            elif state == _HEAD:
                pos = self._parse_head(buf, pos)
                if pos < 0:
                    break
            else:  # _DONE
                break
        if not parts:
            return b""
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _keep(self, rest: bytes) -> None:
        if len(rest) > MAX_HEAD:
            raise _BadAnswer("a line of the answer's framing is too long")
        self._buf = rest

    def _parse_head(self, buf: bytes, pos: int) -> int:
        """The status line and headers at ``pos``; the position after them, -1 if incomplete."""
        end = buf.find(b"\r\n\r\n", pos)
        if end < 0:
            self._keep(buf[pos:])
            return -1
        lines = buf[pos:end].decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise _BadAnswer(f"not an HTTP/1 status line: {lines[0][:80]!r}")
        status = int(parts[1])
        if 100 <= status < 200:
            return end + 4  # an interim answer (100 Continue): the real one follows
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        connection = headers.get("connection", "").lower()
        self.keep_alive = ("close" not in connection) if parts[0] == "HTTP/1.1" else ("keep-alive" in connection)
        self.status = status
        self._sse = status == 200
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self._state = _CHUNK_SIZE
        elif status in (204, 304):
            self._state = _DONE
        elif "content-length" in headers:
            self._left = int(headers["content-length"])
            self._state = _LENGTH if self._left else _DONE
        else:
            self._state = _UNTIL_CLOSE
            self.keep_alive = False
        if not self._head.done():
            self._head.set_result(None)
        return end + 4

    def _head_failed(self, exc: Exception) -> None:
        if not self._head.done():
            self._head.set_exception(exc)
            self._head.exception()  # retrieved: an idle pooled connection has no reader to raise it to

    def _events(self, body: bytes) -> None:
        """The server-sent events of these body bytes, queued as one batch."""
        if self._lines:
            body = self._lines + body
        if b"\n" not in body:
            self._lines = body
            return
        lines = body.split(b"\n")
        self._lines = lines.pop()
        batch: list[dict[str, Any]] = []
        for line in lines:
            if not line.startswith(b"data: "):
                continue
            if not self._event(line, batch):
                break
        if batch:
            self._push(batch)

    def _event(self, line: bytes, batch: list[dict[str, Any]]) -> bool:
        """One ``data:`` line into ``batch``; False when the events end here (``[DONE]``, or
        an error: queued after the batch)."""
        payload = line[6:]
        if payload.endswith(b"\r"):
            payload = payload[:-1]
        if payload == b"[DONE]":
            self.stopped = self._ended = True
            if batch:
                self._push(list(batch))
                batch.clear()
            self._push(_END)
            return False
        try:
            data = _decode(payload.decode())  # json.loads without its encoding sniffing
        except ValueError:
            self._fail_after(batch, EngineStreamError(f"the engine sent an event that is not JSON: {payload[:120]!r}"))
            return False
        if not isinstance(data, dict):
            return True
        if "error" in data and "content" not in data:
            err = data["error"]
            msg = err.get("message", err) if isinstance(err, dict) else err
            self._fail_after(batch, EngineStreamError(f"the engine failed mid-stream: {msg}"))
            return False
        if data.get("stop"):
            self.stopped = True
        batch.append(data)
        return True

    def _fail_after(self, batch: list[dict[str, Any]], exc: EngineStreamError) -> None:
        if batch:
            self._push(list(batch))
            batch.clear()
        self._fail(exc)

    def _finish(self) -> None:
        """The body is whole: the last line without its newline, then the end."""
        self.done = True
        if not self._ended:
            rest, self._lines = self._lines, b""
            if self._sse and self._drained is None and rest.startswith(b"data: "):
                batch: list[dict[str, Any]] = []
                self._event(rest, batch)
                if batch:
                    self._push(batch)
            if not self._ended:
                self._ended = True
                self._push(_END)
        if self._drained is not None:
            drained, self._drained = self._drained, None
            if self._drain_timer is not None:
                self._drain_timer.cancel()
            drained(self)

    def _fail(self, exc: BaseException) -> None:
        if self.failed:
            return
        self.failed = self._ended = True
        self.keep_alive = False
        self._state = _DONE
        self._head_failed(_BadAnswer(str(exc)))
        self._push(exc)
        if self._drained is not None:
            self.close()

    def _push(self, item: Any) -> None:
        if self._drained is not None:
            return
        self._queue.append(item)
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)
        if not self._paused and len(self._queue) >= HIGH_WATER and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()

    # -- the reader's side -------------------------------------------------------------
    async def head(self) -> None:
        """Wait for the status line and headers (raises :class:`_NoAnswer` / :class:`_BadAnswer`)."""
        await self._head

    async def next(self, timeout: float | None) -> Any:
        """The next batch, an exception, or :data:`_END`."""
        while not self._queue:
            waiter = self._waiter = self.loop.create_future()
            if timeout is None:
                await waiter
            else:
                try:
                    await asyncio.wait_for(waiter, timeout)
                except TimeoutError:
                    self.close()
                    raise EngineStreamError("the engine connection broke mid-stream: ReadTimeout") from None
        item = self._queue.popleft()
        if self._paused and len(self._queue) <= HIGH_WATER // 4 and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return item

    async def body(self, timeout: float | None) -> bytes:
        """The whole body of a non-200 answer."""
        while (item := await self.next(timeout)) is not _END:
            if isinstance(item, BaseException):
                raise item
        return b"".join(self._raw)

    def drain(self, then: Callable[[Connection], None]) -> None:
        """Read the rest of this answer in the background, then ``then(self)``; close the
        connection if that takes longer than :data:`DRAIN_S`."""
        self._queue.clear()
        self._drained = then
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        self._drain_timer = self.loop.call_later(DRAIN_S, self.close)

    def close(self) -> None:
        self.closed = True
        self._drained = None
        if self.transport is not None:
            self.transport.close()


class Pool:
    """Idle connections to one engine, newest first, of one event loop."""

    def __init__(self, host: str, port: int, connect_timeout: float | None, max_connections: int) -> None:
        self.host = host
        self.port = port
        self.connect_timeout = connect_timeout
        self.max_connections = max_connections
        self._idle: list[Connection] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._slots: asyncio.Semaphore | None = None
        self._closed = False

    def _bind(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # a new loop (a blocking facade's): the old one's connections are gone
            self._idle = []
            self._loop = loop
            self._slots = asyncio.Semaphore(self.max_connections)
        return loop

    async def acquire(self) -> None:
        """A place among ``max_connections`` connections in use (as httpx's pool limit)."""
        self._bind()
        assert self._slots is not None
        await self._slots.acquire()

    def release(self) -> None:
        if self._slots is not None:
            self._slots.release()

    async def connect(self, url: str, path: str) -> tuple[Connection, bool]:
        """An idle connection (and True), or a new one (and False)."""
        loop = self._bind()
        now = loop.time()
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed and now - conn.idle_since < IDLE_S:
                conn.reset()
                return conn, True
            conn.close()
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, conn = await loop.create_connection(lambda: Connection(loop), self.host, self.port)
        except TimeoutError:
            raise _unavailable(url, path, "ConnectTimeout", "timed out") from None
        except OSError as exc:
            raise _unavailable(url, path, "ConnectError", str(exc)) from None
        return conn, False

    def put(self, conn: Connection) -> None:
        """Keep ``conn`` for the next answer if it may be reused, else close it."""
        if (
            self._closed
            or conn.closed
            or not conn.keep_alive
            or not conn.done
            or conn.failed
            or conn.loop is not self._loop
        ):
            conn.close()
            return
        conn.idle_since = conn.loop.time()
        self._idle.append(conn)

    def close(self) -> None:
        """Close the idle connections; a connection handed back later (one that was still
        draining) is closed too."""
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


def _unavailable(url: str, path: str, reason: str, detail: str) -> EngineUnavailable:
    return EngineUnavailable(f"{url}{path}: {reason}: {detail}", url=url, path=path, reason=reason)


class RawStream(CompletionStream):
    """One streamed ``/completion`` on a pooled connection (see the module)."""

    def __init__(
        self, pool: Pool, url: str, path: str, head: bytes, body: dict[str, Any], timeout: float | None
    ) -> None:
        self._pool = pool
        self._url = url
        self._path = path
        content = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
        self._request = head + b"Content-Length: %d\r\n\r\n" % len(content) + content
        self._timeout = timeout
        self._conn: Connection | None = None
        self._held = False

    async def open(self) -> None:
        await self._pool.acquire()
        self._held = True
        try:
            await self._open()
        except BaseException:
            self._pool.release()
            self._held = False
            raise

    async def _open(self) -> None:
        for attempt in (1, 2):
            conn, _ = await self._pool.connect(self._url, self._path)
            try:
                assert conn.transport is not None
                conn.transport.write(self._request)
                if self._timeout is None:
                    await conn.head()
                else:
                    async with asyncio.timeout(self._timeout):
                        await conn.head()
            except _NoAnswer as exc:
                conn.close()
                if attempt == 2:
                    raise _unavailable(self._url, self._path, exc.reason, str(exc)) from None
                continue  # closed as it was reused: nothing was processed; once more, fresh
            except _BadAnswer as exc:
                conn.close()
                raise _unavailable(self._url, self._path, "RemoteProtocolError", str(exc)) from None
            except TimeoutError:
                conn.close()
                raise _unavailable(self._url, self._path, "ReadTimeout", "timed out") from None
            except BaseException:
                conn.close()  # cancelled (the client left): closing aborts the generation
                raise
            break
        if conn.status != 200:
            try:
                text = (await conn.body(self._timeout)).decode("utf-8", "replace")
            except EngineStreamError:
                text = ""
            finally:
                self._pool.put(conn)
            raise EngineHTTPError(conn.status, text)
        self._conn = conn

    def batches(self) -> AsyncIterator[list[dict[str, Any]]]:
        if self._conn is None:
            raise RuntimeError("the stream is not open: use `async with backend.stream(request) as events`")
        return _batches(self._conn, self._timeout)

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            if conn.done:
                self._pool.put(conn)
            elif conn.stopped and conn.keep_alive and not conn.closed and not conn.failed:
                conn.drain(self._pool.put)  # the answer is over; the body's end is on its way
            else:
                conn.close()  # mid-answer: closing the connection stops the generation
        if self._held:
            self._held = False
            self._pool.release()


async def _batches(conn: Connection, timeout: float | None) -> AsyncIterator[list[dict[str, Any]]]:
    while True:
        item = await conn.next(timeout)
        if item is _END:
            return
        if isinstance(item, BaseException):
            raise item
        yield item


__all__ = ["DRAIN_S", "Connection", "Pool", "RawStream"]
