"""Replicas seen from outside the gateway, on scripted engines: the access log's ``replica``
field and the ``replica``-labelled metrics on every generation endpoint, ``/v1/models`` unchanged."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import httpx
import pytest

from splitserve.engine._fake import FakeEngine, FakeOutput
from splitserve.gateway import GatewayConfig, create_app
from splitserve.gateway._router import ReplicaBackend

CACHED = {"timings": {"cache_n": 4, "prompt_n": 2, "prompt_ms": 1.0, "predicted_ms": 10.0}, "tokens_evaluated": 6}
"""Each answer: a prompt of 6 tokens, 4 of them from the cache, and 2 computed."""


def run(fn: Callable[[], Awaitable[Any]]) -> Any:
    return anyio.run(fn)


def fakes(n: int = 2) -> dict[str, FakeEngine]:
    return {f"r{i}": FakeEngine([FakeOutput(["from", f" r{i}"], final=CACHED)], url=f"fake://r{i}") for i in range(n)}


REQUESTS: list[tuple[str, dict[str, Any]]] = [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "stream": True}),
    ("/v1/messages", {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}),
    ("/v1/responses", {"input": "hi", "max_output_tokens": 8}),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 8}),
]


def ask_all(app: Any, session: str) -> list[int]:
    async def go() -> list[int]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c:
            out = []
            for path, body in REQUESTS:
                r = await c.post(path, json=body, headers={"X-Session-Id": session})
                _ = r.text
                out.append(r.status_code)
            return out

    return list(run(go))


def metrics_text(app: Any) -> str:
    async def go() -> str:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c:
            return (await c.get("/metrics")).text

    return str(run(go))


def test_every_generation_endpoint_logs_and_counts_its_replica(caplog: pytest.LogCaptureFixture) -> None:
    engines = fakes()
    app = create_app(GatewayConfig(engine_url="fake://replicas"), ReplicaBackend(engines))
    with caplog.at_level(logging.INFO, logger="splitserve.access"):
        assert ask_all(app, "agent-1") == [200] * len(REQUESTS)
    lines = [r.getMessage() for r in caplog.records if r.name == "splitserve.access"]
    assert len(lines) == len(REQUESTS)
    for (path, _), line in zip(REQUESTS, lines, strict=True):
        assert f" {path} 200 " in line and line.endswith(" replica=r0"), line  # the session stays on r0
    assert len(engines["r0"].bodies) == len(REQUESTS) and not engines["r1"].bodies

    text = metrics_text(app)
    for endpoint in ("chat", "messages", "responses", "completions"):
        assert f'splitserve_replica_requests_total{{endpoint="{endpoint}",replica="r0",status="200"}}' in text
    # 5 generations, each 2 prompt tokens computed, 4 cached
    assert 'splitserve_replica_tokens_total{kind="cached",replica="r0"} 20.0' in text
    assert 'splitserve_replica_tokens_total{kind="prompt",replica="r0"} 10.0' in text
    assert 'replica="r1",status=' not in text and "splitserve_replica_errors_total{" not in text


def test_a_refused_replica_counts_an_error_and_the_answer_names_the_other() -> None:
    engines = fakes()
    engines["r0"].down = True
    rb = ReplicaBackend(engines, probe_interval=60)
    app = create_app(GatewayConfig(engine_url="fake://replicas"), rb)
    assert ask_all(app, "agent-1")[0] == 200
    text = metrics_text(app)
    assert 'splitserve_replica_errors_total{kind="down",replica="r0"} 1.0' in text
    assert 'splitserve_replica_requests_total{endpoint="chat",replica="r1",status="200"}' in text
    assert rb.state()[0]["errors"] == 1 and rb.state()[0]["url"] == "fake://r0"


def test_the_replica_field_is_dash_before_a_choice_and_absent_for_one_engine(caplog: pytest.LogCaptureFixture) -> None:
    down = fakes()
    for e in down.values():
        e.down = True
    one = create_app(GatewayConfig(engine_url="fake://one"), FakeEngine(["x"]))
    both_down = create_app(GatewayConfig(engine_url="fake://replicas"), ReplicaBackend(down, probe_interval=60))
    with caplog.at_level(logging.INFO, logger="splitserve.access"):
        ask_all(one, "s")
        statuses = ask_all(both_down, "s")
    assert all(s >= 500 for s in statuses)
    lines = [r.getMessage() for r in caplog.records if r.name == "splitserve.access"]
    assert not any("replica=" in line for line in lines[: len(REQUESTS)])
    # the model's props were asked of both and neither answered: no request reached a replica
    assert all(line.endswith(" replica=-") for line in lines[len(REQUESTS) :])
    assert len(lines) == 2 * len(REQUESTS)


def test_models_lists_one_model_over_replicas() -> None:
    app = create_app(GatewayConfig(engine_url="fake://replicas"), ReplicaBackend(fakes(3)))

    async def go() -> Any:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c:
            return (await c.get("/v1/models")).json()

    data = run(go)
    assert [m["id"] for m in data["data"]] == ["fake"]
