"""Replicas seen from outside the gateway, on scripted engines: the access log's ``replica``
field and the ``replica``-labelled metrics on every generation endpoint, ``/v1/models`` unchanged."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
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


def test_ui_state_has_a_row_per_replica() -> None:
    engines = fakes()
    engines["r1"].slots_answer = [{"id": 0, "n_ctx": 4096, "is_processing": True}]
    rb = ReplicaBackend(engines, probe_interval=60)
    app = create_app(GatewayConfig(engine_url="fake://replicas"), rb)
    ask_all(app, "agent-1")
    engines["r1"].down = True

    async def go() -> Any:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c:
            return (await c.get("/ui/state")).json()

    state = run(go)
    r0, r1 = state["replicas"]
    assert (r0["name"], r0["url"], r0["health"]) == ("r0", "fake://r0", "up")
    assert r0["served"] == len(REQUESTS) and r0["load"] == 0 and r0["sessions"] == 1
    assert r0["cached_fraction"] == pytest.approx(4 / 6)  # 4 of each 6 prompt tokens were cached
    assert r0["tokens"] == {"prompt": 10.0, "cached": 20.0, "completion": 10.0}
    # the page asks each replica's health: r1 is down, served nothing, has no slots to show
    assert (r1["name"], r1["health"], r1["served"], r1["cached_fraction"]) == ("r1", "down", 0, None)
    assert [s["id"] for s in state["slots"]] == ["r0/0"]


def test_replica_tokens_per_second_is_a_rate_over_the_window() -> None:
    from splitserve.gateway._ui_state import History, Snapshot, replicas_view

    h = History()
    reps = [{"name": "a", "url": "u", "status": "loading", "running": 3, "busy_slots": 1}]

    def snap(t: float, completion: float) -> Snapshot:
        samples = [("splitserve_replica_tokens_total", {"replica": "a", "kind": "completion"}, completion)]
        return Snapshot(now=t, samples=samples, replicas=reps)  # type: ignore[arg-type]

    for t, n in ((0.0, 0.0), (1.0, 50.0), (2.0, 100.0), (4.0, 100.0)):
        s = snap(t, n)
        h.update(s)
    view = replicas_view(s, h)
    assert view is not None
    (a,) = view
    assert a["tokens_per_s"] == pytest.approx(25.0)  # 100 tokens over 4 s
    assert (a["health"], a["running"], a["queued"], a["load"]) == ("loading", 1, 2, 3)
    assert replicas_view(Snapshot(now=0.0), h) is None


def test_routing_policies_for_comparison() -> None:
    from splitserve.gateway._router import Router

    def picks(policy: str, keys: Sequence[str | None], busy: int | None = None) -> list[int]:
        r = Router(["a", "b", "c"], policy=policy)
        if busy is not None:
            r.started(busy)  # one request in flight there, for the whole run
        return [r.pick(k) for k in keys]

    same = ["s1"] * 4
    assert picks("affinity", same) == [0, 0, 0, 0]  # the default: a session sticks
    assert picks("round-robin", same) == [0, 1, 2, 0]  # sessions ignored, in turn
    assert picks("round-robin", same, busy=1) == [0, 1, 2, 0]  # load ignored too
    assert picks("least-loaded", same, busy=1) == [0, 2, 0, 2]  # never the busy one, ties in turn
    assert Router(["a"]).policy == "affinity"
    down = Router(["a", "b", "c"], policy="round-robin")
    down.set_status(1, "down")
    assert [down.pick(None) for _ in range(3)] == [0, 2, 0]
    with pytest.raises(ValueError, match="no routing policy 'random'"):
        Router(["a"], policy="random")


def test_serve_route_reaches_the_router_and_is_checked() -> None:
    from typer.testing import CliRunner

    from splitserve.cli import _gateway  # noqa: F401  (registers the commands)
    from splitserve.cli._app import app as cli
    from splitserve.gateway import Gateway

    gw = Gateway(GatewayConfig(engine_url="http://127.0.0.1:1,http://127.0.0.1:2", route="round-robin"))
    assert isinstance(gw.backend, ReplicaBackend) and gw.backend.router.policy == "round-robin"
    res = CliRunner().invoke(cli, ["serve", "--engine", "http://127.0.0.1:1,http://127.0.0.1:2", "--route", "nope"])
    assert res.exit_code == 2 and "--route nope: choose affinity, round-robin or least-loaded" in res.output
