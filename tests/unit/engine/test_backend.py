"""The engine interface: LlamaCppBackend's HTTP layer against httpx.MockTransport (health,
streams and their batching and closing, errors, relays, metrics), the blocking facade, and
the scripted FakeEngine."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import httpx
import pytest

from splitserve.engine import (
    BlockingEngine,
    CompletionRequest,
    EngineBackend,
    EngineHTTPError,
    EngineStreamError,
    EngineUnavailable,
    FakeEngine,
    FakeOutput,
    LlamaCppBackend,
)
from splitserve.engine._fake import FakeFailure

Handler = Callable[[httpx.Request], httpx.Response]


class Chunks(httpx.AsyncByteStream):
    """A response body sent in these chunks (an exception in the list is raised there);
    records whether it was closed."""

    def __init__(self, chunks: list[bytes | Exception]) -> None:
        self.chunks = chunks
        self.sent = 0
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            if isinstance(chunk, Exception):
                raise chunk
            self.sent += 1
            yield chunk

    async def aclose(self) -> None:
        self.closed = True


def backend(handler: Handler, **kwargs: Any) -> LlamaCppBackend:
    return LlamaCppBackend("http://engine:8080/", transport=httpx.MockTransport(handler), **kwargs)


def sse(*events: dict[str, Any]) -> bytes:
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)


def run(fn: Callable[[], Any]) -> Any:
    return anyio.run(fn)


# -- LlamaCppBackend ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "body", "want"),
    [
        (200, {"status": "ok"}, ("ok", 200, "ok", None)),
        (503, {"error": {"code": 503, "message": "Loading model"}}, ("loading", 503, "Loading model", 2.0)),
        (500, {"error": {"message": "boom"}}, ("error", 500, "boom", None)),
    ],
)
def test_health_maps_the_engine_status(status: int, body: dict[str, Any], want: tuple[Any, ...]) -> None:
    be = backend(lambda r: httpx.Response(status, json=body))
    h = run(be.health)
    assert (h.status, h.http_status, h.message, h.retry_after) == want
    assert h.ok is (status == 200)


def test_health_of_an_engine_that_does_not_answer_is_down() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    h = run(backend(refuse).health)
    assert (h.status, h.http_status, h.retry_after) == ("down", 0, 5.0)
    assert (
        h.message == "the engine at http://engine:8080 is not reachable (ConnectError on /health); retry when it is up"
    )


def test_a_stream_yields_one_batch_per_read_and_sends_stream_true() -> None:
    seen: list[httpx.Request] = []
    body = Chunks(
        [
            sse({"content": "a"}, {"content": "b"}),  # two events in one read: one batch
            b'data: {"con',  # an event split across reads
            b'tent": "c"}\n\n',
            b": a comment\n\n" + sse({"content": "", "stop": True}),
        ]
    )

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, stream=body, headers={"content-type": "text/event-stream"})

    be = backend(handler, api_key="sk-e")

    async def go() -> list[list[dict[str, Any]]]:
        async with be.stream(CompletionRequest("x", n_predict=3)) as events:
            return [batch async for batch in events]

    batches = run(go)
    assert [[e["content"] for e in b] for b in batches] == [["a", "b"], ["c"], [""]]
    assert batches[-1][0]["stop"] is True
    assert json.loads(seen[0].content) == {"prompt": "x", "n_predict": 3, "cache_prompt": True, "stream": True}
    assert seen[0].url.path == "/completion" and seen[0].headers["authorization"] == "Bearer sk-e"
    assert body.closed


def test_done_ends_a_stream_and_leaving_early_closes_the_response() -> None:
    body = Chunks([sse({"content": "a"}) + b"data: [DONE]\n\n" + sse({"content": "after"}), sse({"content": "z"})])
    be = backend(lambda r: httpx.Response(200, stream=body))

    async def done() -> list[str]:
        async with be.stream(CompletionRequest("x")) as events:
            return [e["content"] async for e in events.events()]

    assert run(done) == ["a"]
    assert body.closed

    long = Chunks([sse({"content": str(i)}) for i in range(100)])
    be = backend(lambda r: httpx.Response(200, stream=long))

    async def leave() -> None:
        async with be.stream(CompletionRequest("x")) as events:
            async for _ in events:
                break  # the client left: the engine's response is closed on exit

    run(leave)
    assert long.closed and long.sent < 100


@pytest.mark.parametrize(
    ("chunks", "message"),
    [
        ([sse({"content": "a"}), sse({"error": {"message": "boom"}})], "the engine failed mid-stream: boom"),
        ([b"data: {nope\n\n"], "the engine sent an event that is not JSON: b'{nope'"),
        ([sse({"content": "a"}), httpx.ReadError("reset")], "the engine connection broke mid-stream: ReadError"),
    ],
)
def test_stream_failures_after_the_start_are_stream_errors(chunks: list[bytes | Exception], message: str) -> None:
    be = backend(lambda r: httpx.Response(200, stream=Chunks(chunks)))

    async def go() -> list[dict[str, Any]]:
        got = []
        async with be.stream(CompletionRequest("x")) as events:
            async for batch in events:
                got += batch
        return got

    with pytest.raises(EngineStreamError) as err:
        run(go)
    assert err.value.message == message


def test_an_error_status_at_open_is_an_http_error_and_a_refused_connection_unavailable() -> None:
    be = backend(lambda r: httpx.Response(400, json={"error": {"message": "the prompt is too long"}}))

    async def go(b: EngineBackend) -> None:
        async with b.stream(CompletionRequest("x")):
            pass

    with pytest.raises(EngineHTTPError) as err:
        anyio.run(go, be)
    assert err.value.status == 400 and "the prompt is too long" in err.value.body

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    with pytest.raises(EngineUnavailable) as down:
        anyio.run(go, backend(refuse))
    assert (down.value.url, down.value.path, down.value.reason) == ("http://engine:8080", "/completion", "ConnectError")
    assert str(down.value) == "http://engine:8080/completion: ConnectError: refused"


def test_a_connection_dropped_on_reuse_is_retried_once() -> None:
    calls = 0

    def flaky(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.", request=request)
        return httpx.Response(200, content=sse({"content": "", "stop": True}))

    async def go(b: EngineBackend) -> int:
        async with b.stream(CompletionRequest("x")) as events:
            return len([e async for e in events.events()])

    assert anyio.run(go, backend(flaky)) == 1 and calls == 2

    def always(request: httpx.Request) -> httpx.Response:
        raise httpx.RemoteProtocolError("Server disconnected", request=request)

    with pytest.raises(EngineUnavailable) as err:
        anyio.run(go, backend(always))
    assert err.value.reason == "RemoteProtocolError"


def test_relay_passes_any_status_through_unless_checked() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path == "/slots":
            return httpx.Response(
                200, stream=Chunks([b'[{"id"', b": 0}]"]), headers={"Content-Type": "application/json"}
            )
        return httpx.Response(404, json={"error": {"message": "File Not Found"}}, headers={"Retry-After": "3"})

    be = backend(handler)

    async def go() -> tuple[Any, ...]:
        async with await be.relay("GET", "/slots", query="fail_on_no_slot=1") as ok:
            chunks = [c async for c in ok.chunks()]
        async with await be.relay("POST", "/nope", content=b'{"a":1}', content_type="application/json") as nf:
            body = await nf.aread()
        with pytest.raises(EngineHTTPError) as err:
            await be.relay("POST", "/nope", content=b"{}", content_type="application/json", check=True)
        return ok, chunks, nf, body, err.value

    ok, chunks, nf, body, err = run(go)
    assert ok.status == 200 and chunks == [b'[{"id"', b": 0}]"] and ok.headers["content-type"] == "application/json"
    assert nf.status == 404 and nf.headers["retry-after"] == "3" and b"File Not Found" in body
    assert err.status == 404
    assert str(seen[0].url) == "http://engine:8080/slots?fail_on_no_slot=1"
    assert seen[1].content == b'{"a":1}' and seen[1].headers["content-type"] == "application/json"


def test_reply_lines_split_on_newlines_only() -> None:
    from splitserve.engine import EngineReply

    async def body() -> AsyncIterator[bytes]:
        for chunk in (b"data: a\\u2028b".replace(b"\\u2028", "\u2028".encode()), b"\r\n\r\ndata: c", b"\n"):
            yield chunk

    async def go() -> list[bytes]:
        return [line async for line in EngineReply(200, {}, body()).lines()]

    assert run(go) == ["data: a\u2028b".encode(), b"", b"data: c"]


def test_metrics_only_when_the_engine_serves_prometheus_text() -> None:
    text = b"llamacpp:prompt_tokens_total 3\n"
    served = backend(lambda r: httpx.Response(200, content=text, headers={"content-type": "text/plain; version=0.0.4"}))
    off = backend(lambda r: httpx.Response(501, json={"error": {"message": "metrics not enabled"}}))
    html = backend(lambda r: httpx.Response(200, content=b"<html>", headers={"content-type": "text/html"}))
    assert run(served.metrics) == text
    assert run(off.metrics) is None and run(html.metrics) is None


def test_info_tokenize_and_a_whole_completion_collected_from_the_stream() -> None:
    seen: list[tuple[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        seen.append((request.url.path, body))
        if request.url.path == "/completion":
            events = sse({"content": "Hi"}, {"content": "!", "stop": True, "stop_type": "eos"})
            return httpx.Response(200, content=events, headers={"content-type": "text/event-stream"})
        answers: dict[str, Any] = {
            "/props": {"total_slots": 2, "default_generation_settings": {"n_ctx": 512}},
            "/slots": [{"id": 0}, "junk", {"id": 1}],
            "/tokenize": {"tokens": [1, {"id": 7, "piece": "a"}]},
        }
        return httpx.Response(200, json=answers[request.url.path])

    be = backend(handler)

    async def go() -> tuple[Any, ...]:
        return (
            await be.info(),
            await be.tokenize("a", add_special=True),
            await be.complete(CompletionRequest("x", n_predict=2)),
        )

    info, tokens, whole = run(go)
    assert info.props["total_slots"] == 2 and info.total_slots == 2 and info.n_ctx == 512
    assert info.slots == [{"id": 0}, {"id": 1}]
    assert tokens == [1, 7]
    assert whole == {"content": "Hi!", "stop": True, "stop_type": "eos"}
    assert seen[2] == ("/tokenize", {"content": "a", "add_special": True})
    assert seen[3] == ("/completion", {"prompt": "x", "n_predict": 2, "cache_prompt": True, "stream": True})
    with pytest.raises(EngineHTTPError):
        run(backend(lambda r: httpx.Response(503, json={"error": {"message": "Loading model"}})).info)
    no_slots = backend(
        lambda r: httpx.Response(501, json={}) if r.url.path == "/slots" else httpx.Response(200, json={})
    )
    assert run(no_slots.info).slots == []  # llama-server --no-slots


def test_a_request_renders_to_llama_cpp_s_completion_body_and_back() -> None:
    req = CompletionRequest(
        [1, 2, 3],
        n_predict=4,
        temperature=0.5,
        stop=["END"],
        grammar="root ::= x",
        id_slot=1,
        extra={"samplers": ["k"]},
    )
    body = req.llamacpp()
    assert body == {
        "samplers": ["k"],
        "prompt": [1, 2, 3],
        "n_predict": 4,
        "temperature": 0.5,
        "grammar": "root ::= x",
        "id_slot": 1,
        "stop": ["END"],
        "cache_prompt": True,
    }
    assert CompletionRequest.of({**body, "stream": True}) == req
    assert CompletionRequest.of({"prompt": "p", "stop": "s"}).stop == ["s"]


# -- the blocking facade ----------------------------------------------------------------------


def test_blocking_engine_blocks_and_raises_the_engine_errors() -> None:
    state = {"status": 503}

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/health":
            return httpx.Response(state["status"], json={})
        body = json.loads(request.content)
        event = {"content": "!", "stop": True, "echo": {k: v for k, v in body.items() if k != "stream"}}
        if body.get("stream"):
            return httpx.Response(200, content=sse(event), headers={"content-type": "text/event-stream"})
        return httpx.Response(200, json=event)

    with BlockingEngine(backend(handler)) as engine:
        assert engine.health().http_status == 503 and engine.health().status == "loading"
        state["status"] = 200
        assert engine.health().http_status == 200 and engine.health().ok
        got = engine.complete(CompletionRequest("Hello", n_predict=1, cache_prompt=False))
        assert got["content"] == "!"
        assert got["echo"] == {"prompt": "Hello", "n_predict": 1, "cache_prompt": False}

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    with BlockingEngine(backend(refuse)) as down:
        health = down.health()
        assert health.status == "down" and health.http_status == 0
        with pytest.raises(EngineUnavailable) as err:
            down.complete(CompletionRequest("Hello"))
        assert str(err.value) == "http://engine:8080/completion: ConnectError: refused"


def test_a_blocking_engine_of_a_url_is_its_backend() -> None:
    with BlockingEngine("http://127.0.0.1:9/", timeout=0.5) as client:  # nothing listens on port 9
        assert isinstance(client.backend, LlamaCppBackend) and client.url == "http://127.0.0.1:9"
        assert client.health().status == "down"
        with pytest.raises(EngineUnavailable):
            client.info()
    with BlockingEngine("vllm+http://127.0.0.1:9/", timeout=0.5) as vllm:
        assert type(vllm.backend).__name__ == "VllmBackend"


# -- FakeEngine -------------------------------------------------------------------------------


def test_a_backend_implements_info_health_stream_relay_and_aclose_only() -> None:
    assert EngineBackend.__abstractmethods__ == {"info", "health", "stream", "relay", "aclose"}


def test_tokenize_metrics_and_complete_are_built_on_relay_and_stream() -> None:
    engine = FakeEngine([["a", "b"]], metrics="x 1\n")
    assert run(lambda: engine.tokenize("hi", add_special=True)) == [1, ord("h") + 3, ord("i") + 3]
    assert run(engine.metrics) == b"x 1\n"
    assert run(lambda: engine.complete(CompletionRequest("p")))["content"] == "ab"
    assert [(r.kind, r.path) for r in engine.requests] == [
        ("relay", "/tokenize"),
        ("relay", "/metrics"),
        ("stream", "/completion"),
    ]
    with pytest.raises(EngineHTTPError) as loading:
        run(lambda: FakeEngine(loading=True).tokenize("hi"))
    assert loading.value.status == 503
    with pytest.raises(EngineUnavailable):
        run(lambda: FakeEngine(down=True).tokenize("hi"))
    assert run(FakeEngine(down=True).metrics) is None and run(FakeEngine().metrics) is None


async def _stream(engine: FakeEngine, body: dict[str, Any]) -> list[list[dict[str, Any]]]:
    async with engine.stream(CompletionRequest.of(body)) as events:
        return [batch async for batch in events]


def test_fake_engine_follows_its_script_and_repeats_the_last_entry() -> None:
    engine = FakeEngine([["He", "llo"], "whole", FakeOutput(["a", "b", "c"], final={"tokens_evaluated": 99})])

    async def go() -> list[list[str]]:
        out = []
        for n in (-1, -1, 2, 5):
            batches = await _stream(engine, {"prompt": "hi", "n_predict": n})
            out.append([e["content"] for b in batches for e in b])
            final = batches[-1][-1]
            assert final["stop"] is True and final["tokens_predicted"] == len(out[-1]) - 1
        return out

    assert run(go) == [["He", "llo", ""], ["whole", ""], ["a", "b", ""], ["a", "b", "c", ""]]
    assert [b["n_predict"] for b in engine.bodies] == [-1, -1, 2, 5]
    assert all(b["stream"] is True for b in engine.bodies)

    async def last() -> dict[str, Any]:
        batches = await _stream(engine, {"prompt": "hi", "n_predict": 1})
        return batches[-1][-1]

    final = run(last)
    assert final["stop_type"] == "limit" and final["tokens_evaluated"] == 99  # cut by n_predict; final fields kept
    assert engine.started == engine.finished == 5 and engine.aborted == 0


def test_fake_engine_takes_a_callable_and_batches() -> None:
    engine = FakeEngine(lambda body: list(str(body["prompt"])), batch=2)
    batches = anyio.run(_stream, engine, {"prompt": "abc"})
    assert [[e["content"] for e in b] for b in batches] == [["a", "b"], ["c"], [""]]
    assert batches[-1][0]["tokens_evaluated"] == 4  # BOS + three bytes


def test_fake_engine_failures_and_drops() -> None:
    engine = FakeEngine(
        [FakeFailure(400, "the prompt is too long"), FakeFailure(0), FakeOutput(["a", "b", "c"], drop_after=1)]
    )
    with pytest.raises(EngineHTTPError) as http:
        anyio.run(_stream, engine, {"prompt": "x"})
    assert http.value.status == 400 and json.loads(http.value.body)["error"]["message"] == "the prompt is too long"
    with pytest.raises(EngineUnavailable):
        anyio.run(_stream, engine, {"prompt": "x"})
    got: list[str] = []

    async def dropped() -> None:
        async with engine.stream(CompletionRequest("x")) as events:
            async for e in events.events():
                got.append(e["content"])

    with pytest.raises(EngineStreamError) as drop:
        run(dropped)
    assert got == ["a"] and "broke mid-stream" in drop.value.message
    assert engine.aborted == 1 and engine.finished == 0


def test_fake_engine_loading_until_ready_or_for_n_calls() -> None:
    engine = FakeEngine(loading=True)
    h = run(engine.health)
    assert (h.status, h.http_status, h.message, h.retry_after) == ("loading", 503, "Loading model", 2.0)
    with pytest.raises(EngineHTTPError) as err:
        run(engine.info)
    assert err.value.status == 503
    assert run(engine.health).status == "loading"  # still, however often it is asked
    engine.ready()
    assert run(engine.health).ok and run(engine.info).total_slots == 1

    counted = FakeEngine(loading=2)
    assert [run(counted.health).status for _ in range(3)] == ["loading", "loading", "ok"]
    down = FakeEngine(down=True)
    assert run(down.health).status == "down"
    with pytest.raises(EngineUnavailable):
        run(down.info)
    assert run(down.metrics) is None


def test_fake_engine_delays_are_sleeps_of_the_given_length() -> None:
    engine = FakeEngine([["a", "b", "c"]], first_token_delay=0.2, token_delay=0.05)

    async def go() -> list[float]:
        start = anyio.current_time()
        stamps = []
        async with engine.stream(CompletionRequest("x")) as events:
            async for _ in events:
                stamps.append(anyio.current_time() - start)
        return stamps

    stamps = run(go)
    assert stamps[0] >= 0.2 and stamps[1] - stamps[0] >= 0.05 and stamps[2] - stamps[1] >= 0.05


def test_fake_engine_relays_native_and_openai_completions_and_records_them() -> None:
    engine = FakeEngine([["Hi", " there"]], metrics="llamacpp:x 1\n")

    async def go() -> tuple[Any, ...]:
        native = await engine.relay("POST", "/completion", content=b'{"prompt":"x","stream":true}')
        lines = [json.loads(line[6:]) async for line in native.lines() if line.startswith(b"data: ")]
        await native.aclose()
        whole = await engine.relay("POST", "/v1/completions", content=b'{"prompt":"x","max_tokens":1}')
        data = json.loads(await whole.aread())
        streamed = await engine.relay("POST", "/v1/completions", content=b'{"prompt":"x","stream":true}')
        text = (await streamed.aread()).decode()
        slot = await engine.relay("POST", "/slots/1", query="action=erase")
        missing = await engine.relay("GET", "/nope")
        with pytest.raises(EngineHTTPError):
            await engine.relay("GET", "/nope", check=True)
        return lines, data, text, slot, missing, await engine.metrics()

    lines, data, text, slot, missing, metrics = run(go)
    assert [e["content"] for e in lines] == ["Hi", " there", ""] and lines[-1]["stop"] is True
    assert data["choices"][0]["text"] == "Hi" and data["choices"][0]["finish_reason"] == "length"
    assert data["usage"]["completion_tokens"] == 1
    assert text.endswith("data: [DONE]\n\n") and '"finish_reason": "stop"' in text
    assert slot.status == 200 and missing.status == 404
    assert metrics == b"llamacpp:x 1\n"
    assert [(r.kind, r.method, r.path, r.query) for r in engine.requests][3] == (
        "relay",
        "POST",
        "/slots/1",
        "action=erase",
    )
    assert engine.bodies[0] == {"prompt": "x", "stream": True}
