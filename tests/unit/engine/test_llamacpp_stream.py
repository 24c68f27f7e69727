"""LlamaCppBackend's own reader of streamed completions (engine/_llamacpp_stream.py), against a
scripted HTTP/1.1 server on loopback: events and batches, the answer's framings, connection
reuse (also after an answer that ends at its stop event), aborting by closing, errors, and the
reader's parsing of answers split anywhere and its flow control."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import pytest

from splitserve.engine import CompletionRequest, EngineHTTPError, EngineStreamError, EngineUnavailable, LlamaCppBackend
from splitserve.engine._llamacpp_stream import HIGH_WATER, Connection, RawStream

Writer = asyncio.StreamWriter
Script = Callable[[dict[str, Any], Writer], Awaitable[None]]


def sse(*events: dict[str, Any]) -> bytes:
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)


def chunk(data: bytes) -> bytes:
    return b"%x\r\n" % len(data) + data + b"\r\n"


HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
END = b"0\r\n\r\n"


class Server:
    """Answers each request with the next script; records connections, requests and closes."""

    def __init__(self, scripts: list[Script]) -> None:
        self.scripts = scripts
        self.connections = 0
        self.requests: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        self.closed = asyncio.Event()
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()

    async def handle(self, reader: asyncio.StreamReader, writer: Writer) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                line, *lines = head.decode().split("\r\n")
                headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in lines if h)}
                body = json.loads(await reader.readexactly(int(headers["content-length"])))
                self.requests.append((line, headers, body))
                await self.scripts[min(len(self.requests), len(self.scripts)) - 1](body, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            self.closed.set()
        finally:
            writer.close()


def stream(*events: dict[str, Any], end: bool = True) -> Script:
    async def script(body: dict[str, Any], writer: Writer) -> None:
        writer.write(HEAD)
        for e in events:
            writer.write(chunk(sse(e)))
            await writer.drain()
        if end:
            writer.write(END)
            await writer.drain()

    return script


def run(fn: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    return asyncio.run(fn())


async def read(be: LlamaCppBackend, body: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    async with be.stream(CompletionRequest.of(body or {"prompt": "x"})) as events:
        assert isinstance(events, RawStream)
        return [e async for e in events.events()]


def test_events_and_reuse_of_the_connection() -> None:
    server = Server([stream({"content": "a"}, {"content": "b"}, {"content": "", "stop": True})])

    async def go() -> tuple[list[Any], list[Any]]:
        async with server as url:
            be = LlamaCppBackend(url, api_key="k")
            try:
                return await read(be, {"prompt": "é", "n_predict": 3}), await read(be)
            finally:
                await be.aclose()

    first, second = run(go)
    assert [e["content"] for e in first] == ["a", "b", ""] and first == second
    assert server.connections == 1 and len(server.requests) == 2
    line, headers, body = server.requests[0]
    assert line == "POST /completion HTTP/1.1" and headers["authorization"] == "Bearer k"
    assert body == {"prompt": "é", "n_predict": 3, "cache_prompt": True, "stream": True}


def test_an_answer_ended_at_its_stop_event_hands_its_connection_back_after_the_body_end() -> None:
    async def slow_end(body: dict[str, Any], writer: Writer) -> None:
        writer.write(HEAD + chunk(sse({"content": "a"}, {"content": "", "stop": True})))
        await writer.drain()
        await asyncio.sleep(0.05)  # llama-server ends its body a little after the stop event
        writer.write(END)

    server = Server([slow_end])

    async def go() -> int:
        async with server as url:
            be = LlamaCppBackend(url)
            for _ in range(2):
                async with be.stream(CompletionRequest("x")) as events:
                    async for batch in events:
                        if batch[-1].get("stop"):
                            break  # as the gateway does: the answer is over
                await asyncio.sleep(0.1)
            await be.aclose()
            return server.connections

    assert run(go) == 1


def test_leaving_before_the_stop_event_closes_the_connection() -> None:
    async def endless(body: dict[str, Any], writer: Writer) -> None:
        writer.write(HEAD)
        for i in range(1000):
            writer.write(chunk(sse({"content": str(i)})))
            await writer.drain()
            await asyncio.sleep(0.001)

    server = Server([endless])

    async def go() -> None:
        async with server as url:
            be = LlamaCppBackend(url)
            async with be.stream(CompletionRequest("x")) as events:
                async for _ in events:
                    break  # the client left
            await asyncio.wait_for(server.closed.wait(), 5)  # the engine sees the connection close
            await be.aclose()

    run(go)


@pytest.mark.parametrize(
    ("head", "body"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", sse({"content": "a"}, {"content": "", "stop": True})),
        (b"HTTP/1.0 200 OK\r\n\r\n", sse({"content": "a"}) + b'data: {"content": "", "stop": true}'),
    ],
)
def test_sized_and_close_delimited_bodies(head: bytes, body: bytes) -> None:
    async def script(_: dict[str, Any], writer: Writer) -> None:
        writer.write((head % len(body) if b"%d" in head else head) + body)
        await writer.drain()
        if b"HTTP/1.0" in head:
            writer.close()

    async def go() -> list[Any]:
        async with Server([script]) as url:
            be = LlamaCppBackend(url)
            try:
                return await read(be)
            finally:
                await be.aclose()

    assert run(go) == [{"content": "a"}, {"content": "", "stop": True}]


def test_an_error_status_is_an_http_error_and_the_connection_is_reused() -> None:
    async def refuse(body: dict[str, Any], writer: Writer) -> None:
        text = b'{"error": {"message": "the prompt is too long"}}'
        writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: %d\r\n\r\n" % len(text) + text)

    server = Server([refuse, stream({"content": "", "stop": True})])

    async def go() -> EngineHTTPError:
        async with server as url:
            be = LlamaCppBackend(url)
            with pytest.raises(EngineHTTPError) as err:
                await read(be)
            assert await read(be) == [{"content": "", "stop": True}]
            await be.aclose()
            return err.value

    err = run(go)
    assert err.status == 400 and "the prompt is too long" in err.body and server.connections == 1


async def _cut(body: dict[str, Any], writer: Writer) -> None:
    writer.write(HEAD + chunk(sse({"content": "a"})))
    await writer.drain()
    writer.close()


async def _reset(body: dict[str, Any], writer: Writer) -> None:
    writer.write(HEAD + chunk(sse({"content": "a"})))
    await writer.drain()
    await asyncio.sleep(0.05)
    writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def _bad_json(body: dict[str, Any], writer: Writer) -> None:
    writer.write(HEAD + chunk(sse({"content": "a"})) + chunk(b"data: {nope\n\n") + END)


@pytest.mark.parametrize(
    ("script", "message"),
    [
        (stream({"content": "a"}, {"error": {"message": "boom"}}), "the engine failed mid-stream: boom"),
        (_bad_json, "the engine sent an event that is not JSON: b'{nope'"),
        (_cut, "the engine connection broke mid-stream: RemoteProtocolError"),
        (_reset, "the engine connection broke mid-stream: ReadError"),
    ],
)
def test_stream_failures_after_the_start_are_stream_errors(script: Script, message: str) -> None:
    got: list[Any] = []

    async def go() -> None:
        async with Server([script]) as url:
            be = LlamaCppBackend(url)
            try:
                async with be.stream(CompletionRequest("x")) as events:
                    async for e in events.events():
                        got.append(e)
            finally:
                await be.aclose()

    with pytest.raises(EngineStreamError) as err:
        run(go)
    assert err.value.message == message and got == [{"content": "a"}]


def test_refused_and_dropped_connections_are_unavailable() -> None:
    async def refused() -> EngineUnavailable:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        be = LlamaCppBackend(f"http://127.0.0.1:{port}/")
        with pytest.raises(EngineUnavailable) as err:
            await read(be)
        await be.aclose()
        return err.value

    down = run(refused)
    assert (down.path, down.reason) == ("/completion", "ConnectError")
    assert str(down).startswith(f"{down.url}/completion: ConnectError: ")

    async def hang_up(body: dict[str, Any], writer: Writer) -> None:
        writer.close()

    server = Server([hang_up, hang_up, stream({"content": "", "stop": True})])

    async def dropped() -> None:
        async with server as url:
            be = LlamaCppBackend(url)
            with pytest.raises(EngineUnavailable) as err:
                await read(be)  # dropped twice: one retry, then unavailable
            assert err.value.reason == "RemoteProtocolError"
            assert await read(be) == [{"content": "", "stop": True}]
            await be.aclose()

    run(dropped)
    assert server.connections == 3


def test_a_pooled_connection_closed_by_the_engine_is_retried_fresh() -> None:
    async def once(body: dict[str, Any], writer: Writer) -> None:
        await stream({"content": "", "stop": True})(body, writer)
        writer.close()  # the engine drops the kept-alive connection (its keep-alive ran out)

    server = Server([once])

    async def go() -> None:
        async with server as url:
            be = LlamaCppBackend(url)
            for _ in range(3):
                assert await read(be) == [{"content": "", "stop": True}]
            await be.aclose()

    run(go)
    assert server.connections == 3


# -- the reader alone ---------------------------------------------------------------------------


class Transport:
    def __init__(self) -> None:
        self.paused = 0
        self.resumed = 0
        self.closed = False

    def pause_reading(self) -> None:
        self.paused += 1

    def resume_reading(self) -> None:
        self.resumed += 1

    def close(self) -> None:
        self.closed = True


def _reader() -> tuple[Connection, Transport]:
    conn = Connection(asyncio.get_running_loop())
    transport = Transport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    return conn, transport


async def _drain(conn: Connection) -> list[Any]:
    out: list[Any] = []
    while True:
        item = await conn.next(None)
        if not isinstance(item, list):
            return out
        out += item


def test_an_answer_split_anywhere_reads_the_same() -> None:
    events: list[dict[str, Any]] = [{"content": "é\u2028x"}, {"content": "", "stop": True}]
    answer = HEAD + chunk(sse(events[0])) + chunk(sse(events[1])[:9]) + chunk(sse(events[1])[9:]) + END

    async def go(step: int) -> tuple[list[Any], bool]:
        conn, _ = _reader()
        for i in range(0, len(answer), step):
            conn.data_received(answer[i : i + step])
        await conn.head()
        return await _drain(conn), conn.done and conn.keep_alive

    for step in (1, 2, 3, 7, len(answer)):
        assert asyncio.run(go(step)) == (events, True)


def test_a_reader_that_falls_behind_pauses_the_socket() -> None:
    async def go() -> tuple[int, int, int]:
        conn, transport = _reader()
        conn.data_received(HEAD)
        for i in range(HIGH_WATER + 10):
            conn.data_received(chunk(sse({"content": str(i)})))
        paused = transport.paused
        got = 0
        while transport.resumed == 0:
            got += len(await conn.next(None))
        return paused, transport.resumed, got

    paused, resumed, got = asyncio.run(go())
    assert paused == 1 and resumed == 1 and got == HIGH_WATER + 10 - HIGH_WATER // 4
