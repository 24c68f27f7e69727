"""The gateway in front of an engine that is still loading its model: 503 with Retry-After on every
generating route and on /health, then 200 once it is ready. Deterministic: a FakeEngine holds the
loading state for as long as the test wants (the integration test against a real llama-server
has to catch the loading window in time)."""

from __future__ import annotations

from typing import Any

import anyio
import httpx

from splitserve.engine import FakeEngine
from splitserve.engine._fake import CHATML
from splitserve.gateway import GatewayConfig, create_app

CHAT = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
PROPS = {"chat_template": CHATML, "model_path": "/m/smol.gguf", "default_generation_settings": {"n_ctx": 2048}}


def _run(engine: FakeEngine, calls: list[tuple[str, str, dict[str, Any] | None]]) -> list[httpx.Response]:
    app = create_app(GatewayConfig(engine_url="http://engine"), engine)

    async def go() -> list[httpx.Response]:
        out = []
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c:
            for method, path, body in calls:
                out.append(await c.request(method, path, json=body))
        return out

    return anyio.run(go)


def test_every_route_answers_503_with_retry_after_while_the_engine_loads() -> None:
    engine = FakeEngine(["Hello"], props=PROPS, loading=True)
    calls: list[tuple[str, str, dict[str, Any] | None]] = [
        ("POST", "/v1/chat/completions", CHAT),
        ("POST", "/v1/chat/completions", {**CHAT, "stream": True}),
        ("POST", "/v1/completions", {"model": "m", "prompt": "x", "max_tokens": 2}),
        ("GET", "/health", None),
    ]
    for r in _run(engine, calls):
        assert r.status_code == 503, (r.request.url, r.text)
        assert r.headers["retry-after"] == "2", r.request.url
    chat = _run(engine, calls[:1])[0].json()["error"]
    assert "not ready" in chat["message"] and chat["code"] == "engine_unavailable"
    assert not [q for q in engine.requests if q.kind in ("stream", "complete")], "nothing generated while loading"


def test_the_same_gateway_serves_once_the_engine_is_ready() -> None:
    engine = FakeEngine([["Hel", "lo"]], props=PROPS, loading=1)  # loading for the first health look only
    first, second = _run(engine, [("POST", "/v1/chat/completions", CHAT), ("POST", "/v1/chat/completions", CHAT)])
    assert first.status_code == 503
    assert second.status_code == 200, second.text
    assert second.json()["choices"][0]["message"]["content"] == "Hello"
