"""The per-key limiter with clients that leave while queued, and the gateway's routes that
must not reach the engine (queued-and-gone, /slots paths, /health?deep=1), against a fake engine."""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import pytest

from splitserve.engine import FakeEngine
from splitserve.gateway import APIError, GatewayConfig, KeyLimiter, KeyRing, create_app

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_a_cancelled_waiter_frees_its_place_and_never_gets_the_slot() -> None:
    changes: list[tuple[int, int]] = []
    limiter = KeyLimiter(1, 1, on_change=lambda r, q: changes.append((r, q)))
    ran: list[str] = []

    async def scenario() -> None:
        release = anyio.Event()

        async def use(name: str, hold: anyio.Event | None = None) -> None:
            async with limiter.slot("k"):
                ran.append(name)
                if hold is not None:
                    await hold.wait()

        async with anyio.create_task_group() as tg:
            tg.start_soon(use, "holder", release)
            await anyio.sleep(0.01)
            with anyio.CancelScope() as gone:
                async with anyio.create_task_group() as inner:
                    inner.start_soon(use, "abandoned")
                    await anyio.sleep(0.01)
                    assert (limiter.running, limiter.queued) == (1, 1)
                    with pytest.raises(APIError) as full:  # the one queue place is taken
                        async with limiter.slot("k"):
                            pass
                    assert full.value.status == 429
                    gone.cancel()  # its client left
            assert (limiter.running, limiter.queued) == (1, 0)
            tg.start_soon(use, "next")  # the freed place is usable again
            await anyio.sleep(0.01)
            assert limiter.queued == 1
            release.set()
        assert (limiter.running, limiter.queued) == (0, 0)

    anyio.run(scenario)
    assert ran == ["holder", "next"]
    assert changes[-1] == (0, 0)


def _app(**config: Any) -> tuple[Any, FakeEngine]:
    engine = FakeEngine(
        [["Hi", " there"]],
        props={
            "chat_template": CHATML,
            "model_path": "/m/smol.gguf",
            "default_generation_settings": {"n_ctx": 2048},
            "total_slots": 1,
        },
    )
    return create_app(GatewayConfig(engine_url="http://engine", **config), engine), engine


def _reached(engine: FakeEngine) -> list[tuple[str, str, str]]:
    """The requests that reached the engine beyond health, props and tokenize."""
    return [
        (r.method, r.path, r.query) for r in engine.requests if r.kind in ("stream", "relay") and r.path != "/tokenize"
    ]


async def _asgi(app: Any, path: str, body: dict[str, Any], leave: anyio.Event) -> list[dict[str, Any]]:
    """One POST straight through the ASGI app; its client disconnects when ``leave`` is set."""
    sent: list[dict[str, Any]] = []
    raw = json.dumps(body).encode()
    first = True

    async def receive() -> dict[str, Any]:
        nonlocal first
        if first:
            first = False
            return {"type": "http.request", "body": raw, "more_body": False}
        await leave.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }
    await app(scope, receive, send)
    return sent


@pytest.mark.parametrize("path", ["/v1/completions", "/completion", "/v1/chat/completions"])
def test_a_queued_request_whose_client_left_never_reaches_the_engine(path: str) -> None:
    app, engine = _app(max_concurrent=1, max_queue=1)
    gw = app.state.gateway
    body: dict[str, Any] = (
        {"messages": [{"role": "user", "content": "x"}]} if "chat" in path else {"prompt": "x", "max_tokens": 1}
    )

    async def scenario() -> list[dict[str, Any]]:
        await gw.model()
        leave = anyio.Event()
        out: list[dict[str, Any]] = []

        async def queued() -> None:
            out.extend(await _asgi(app, path, body, leave))

        # the one running place is taken
        async with gw.limiter.slot("anonymous"), anyio.create_task_group() as tg:
            tg.start_soon(queued)
            with anyio.fail_after(5):
                while gw.limiter.queued < 1:
                    await anyio.sleep(0.005)
            leave.set()
            with anyio.fail_after(5):
                while gw.limiter.queued:
                    await anyio.sleep(0.005)
        await anyio.sleep(0.05)
        return out

    sent = anyio.run(scenario)
    assert _reached(engine) == []
    assert sent[0]["status"] == 499
    assert (gw.limiter.running, gw.limiter.queued) == (0, 0)
    assert "splitserve_client_disconnects_total 1.0" in gw.metrics.render()[0].decode()


def _run(app: Any, *calls: tuple[str, str, dict[str, str]]) -> list[httpx.Response]:
    async def scenario() -> list[httpx.Response]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c:
            return [await c.request(m, u, headers=h) for m, u, h in calls]

    return anyio.run(scenario)


def test_only_the_named_slot_endpoints_reach_the_engine() -> None:
    app, engine = _app()
    bad = [
        "/slots/../v1/models",
        "/slots/%2e%2e/v1/models",
        "/slots/0%2F..%2Fv1%2Fmodels",
        "/slots/abc?action=save",
        "/slots/%30?action=save",
        "/slots/0?action=drop",
        "/slots/0?action=save&x=1",
        "/slots/0",
    ]
    got = _run(
        app,
        *[("POST", u, {}) for u in bad],
        ("GET", "/slots/0?action=save", {}),
        ("POST", "/slots/00001?action=erase", {}),
        ("GET", "/slots?fail_on_no_slot=1", {}),
    )
    for url, r in zip(bad + ["GET /slots/0"], got[:-2]):
        assert r.status_code in (400, 404, 405), (url, r.status_code)
        assert "error" in r.json()
    assert got[-2].status_code == 200 and got[-1].status_code == 200
    assert _reached(engine) == [("POST", "/slots/1", "action=erase"), ("GET", "/slots", "fail_on_no_slot=1")]


def test_deep_health_takes_a_key_and_a_place_in_its_limit() -> None:
    app, engine = _app(keys=KeyRing.build("sk-t", None), max_concurrent=1, max_queue=0)
    gw = app.state.gateway
    shallow, deep, keyed = _run(
        app,
        ("GET", "/health", {}),
        ("GET", "/health?deep=1", {}),
        ("GET", "/health?deep=1", {"Authorization": "Bearer sk-t"}),
    )
    assert shallow.status_code == 200  # open for load balancers
    assert deep.status_code == 401
    assert keyed.status_code == 200 and keyed.json()["deep"]["tokens"] == 1
    assert [r.kind for r in engine.requests].count("stream") == 1

    async def full() -> httpx.Response:
        async with (
            gw.limiter.slot("default"),
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c,
        ):
            return await c.get("/health?deep=1", headers={"Authorization": "Bearer sk-t"})

    assert anyio.run(full).status_code == 429


def test_any_model_name_is_served_unless_strict() -> None:
    app, engine = _app()
    strict, _ = _app(strict_model_names=True)
    body = {"model": "gpt-4o", "prompt": "x", "max_tokens": 1}

    async def post(a: Any, path: str, b: dict[str, Any]) -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=a), base_url="http://gw") as c:
            return await c.post(path, json=b)

    r = anyio.run(post, app, "/v1/completions", body)
    assert r.status_code == 200 and r.json()["model"] == "smol"  # the gateway's own id
    assert r.json()["choices"][0]["text"] == "Hi" and r.json()["choices"][0]["finish_reason"] == "length"
    chat = anyio.run(
        post, app, "/v1/chat/completions", {"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}]}
    )
    assert chat.status_code == 200 and chat.json()["model"] == "smol"
    assert all(b["stream"] is True for b in engine.bodies)  # whole answers are asked streamed too
    nf = anyio.run(post, strict, "/v1/completions", body)
    assert nf.status_code == 404 and nf.json()["error"]["code"] == "model_not_found"
    assert anyio.run(post, strict, "/v1/completions", {**body, "model": "smol"}).status_code == 200


def test_a_whole_native_completion_is_put_together_from_the_stream() -> None:
    app, engine = _app()

    async def post() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c:
            return await c.post("/completion", json={"prompt": "x", "n_predict": 1})

    r = anyio.run(post)
    assert r.status_code == 200
    data = r.json()
    assert data["content"] == "Hi" and data["stop"] is True and data["tokens"] == []
    assert data["stop_type"] == "limit"
    assert engine.bodies == [{"prompt": "x", "n_predict": 1, "stream": True}]  # asked streamed


def test_non_finite_numbers_in_a_completions_body_are_a_400() -> None:
    app, engine = _app()

    async def post(raw: bytes, path: str) -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c:
            return await c.post(path, content=raw, headers={"content-type": "application/json"})

    for path in ("/v1/completions", "/completion"):
        r = anyio.run(post, b'{"prompt":"x","max_tokens":NaN,"n_predict":Infinity}', path)
        assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error", r.text
    assert engine.bodies == []


def test_a_body_that_never_ends_is_a_408() -> None:
    app, _ = _app(body_timeout=0.2)

    async def scenario() -> list[dict[str, Any]]:
        sent: list[dict[str, Any]] = []
        calls = 0

        async def receive() -> dict[str, Any]:
            nonlocal calls
            calls += 1
            if calls == 1:
                return {"type": "http.request", "body": b'{"prompt":', "more_body": True}
            await anyio.sleep(30)
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": "/v1/completions",
            "raw_path": b"/v1/completions",
            "query_string": b"",
            "root_path": "",
            "headers": [],
            "client": ("127.0.0.1", 1),
            "server": ("127.0.0.1", 8000),
            "state": {},
        }
        with anyio.fail_after(5):
            await app(scope, receive, send)
        return sent

    sent = anyio.run(scenario)
    assert sent[0]["status"] == 408
