"""Replica routing (gateway/_router.py) on scripted engines: least-loaded choice, session
affinity, failover before the first token, no request lost or sent twice."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

from splitserve.engine import CompletionRequest, EngineHTTPError, EngineUnavailable
from splitserve.engine._fake import FakeEngine, FakeOutput
from splitserve.gateway._router import SESSION_FIELD, NoReplica, ReplicaBackend, Router, label_sample, session_of


def run(fn: Callable[[], Awaitable[Any]]) -> Any:
    return anyio.run(fn)


def test_new_sessions_go_to_the_least_loaded_replica() -> None:
    r = Router(["a", "b", "c"])
    assert r.pick("s1") == 0
    r.started(0)
    assert r.pick("s2") == 1  # a has a request in flight
    r.started(1)
    assert r.pick("s3") == 2
    r.finished(0)
    assert r.pick("s4") == 0  # a is free again and holds the fewest sessions among the idle ones
    r.set_busy(0, 3)  # the engine says a is busy with requests from elsewhere
    r.finished(1)
    assert r.pick("s5") == 1


def test_a_session_sticks_to_its_replica_even_when_busier() -> None:
    r = Router(["a", "b"])
    first = r.pick("agent")
    r.started(first)
    r.started(first)
    assert r.pick("agent") == first
    assert r.holder("agent") == first
    assert r.pick(None) != first  # no affinity: least loaded


def test_a_session_whose_replica_is_down_moves_and_stays_moved() -> None:
    r = Router(["a", "b"])
    assert r.pick("agent") == 0
    r.set_status(0, "down")
    assert r.pick("agent") == 1
    r.set_status(0, "ok")
    assert r.pick("agent") == 1  # its cache is now on b
    assert [x.sessions for x in r.replicas] == [0, 1]


def test_no_replica_up_says_which_and_whether_loading() -> None:
    r = Router(["a", "b"])
    r.set_status(0, "down")
    r.set_status(1, "loading")
    with pytest.raises(NoReplica, match=r"a down, b loading") as e:
        r.pick("x")
    assert e.value.loading
    r.set_status(1, "down")
    with pytest.raises(NoReplica) as e:
        r.pick("x")
    assert not e.value.loading


def test_affinity_is_bounded() -> None:
    r = Router(["a", "b"], max_sessions=3)
    for k in "wxyz":
        r.pick(k)
    assert r.holder("w") is None and r.holder("z") is not None
    assert sum(x.sessions for x in r.replicas) == 3


def test_session_key_of_a_body() -> None:
    body = {"prompt": "SYSTEM" * 1000, SESSION_FIELD: "abc"}
    assert session_of(body) == "s:abc" and SESSION_FIELD not in body
    a = session_of({"prompt": "SYSTEM" * 1000 + "turn 1"})
    b = session_of({"prompt": "SYSTEM" * 1000 + "turn 2"})
    assert a == b and a is not None and a.startswith("p:")  # the same prefix: the same key
    assert session_of({"prompt": [1, 2]}) is None


def engines(n: int = 2, **kw: Any) -> dict[str, FakeEngine]:
    return {f"r{i}": FakeEngine([FakeOutput([f"from r{i}"])], url=f"fake://r{i}", **kw) for i in range(n)}


async def tokens(backend: ReplicaBackend, body: dict[str, Any]) -> str:
    async with backend.stream(CompletionRequest.of(body)) as events:
        return "".join([e["content"] async for e in events.events() if "content" in e])


def test_streams_follow_their_session_and_spread_new_ones() -> None:
    fakes = engines()
    rb = ReplicaBackend(fakes)

    async def go() -> None:
        assert await tokens(rb, {"prompt": "p", SESSION_FIELD: "one"}) == "from r0"
        assert await tokens(rb, {"prompt": "p", SESSION_FIELD: "two"}) == "from r1"
        assert await tokens(rb, {"prompt": "p", SESSION_FIELD: "one"}) == "from r0"
        assert await tokens(rb, {"prompt": "p", SESSION_FIELD: "two"}) == "from r1"
        await rb.aclose()

    run(go)
    assert [len(f.bodies) for f in fakes.values()] == [2, 2]
    assert all(SESSION_FIELD not in b for f in fakes.values() for b in f.bodies)
    assert [r.running for r in rb.router.replicas] == [0, 0]


def test_a_refused_request_goes_once_to_another_replica_and_is_not_sent_twice() -> None:
    fakes = engines()
    fakes["r0"].down = True
    rb = ReplicaBackend(fakes, probe_interval=0.01)

    async def go() -> None:
        assert await tokens(rb, {"prompt": "p", SESSION_FIELD: "one"}) == "from r1"
        assert rb.router.replicas[0].status == "down" and rb.router.replicas[0].retried_away == 1
        # whole completions fail over the same way
        fakes["r1"].down, fakes["r0"].down = True, False
        rb.router.set_status(0, "ok")
        out = await rb.complete(CompletionRequest("p"))
        assert out["content"] == "from r0"
        await rb.aclose()

    run(go)
    assert fakes["r0"].started == 1 and fakes["r1"].started == 1  # each generation ran once


def test_a_loading_replica_gets_nothing_and_comes_back_by_the_probe() -> None:
    fakes = engines()
    fakes["r0"] = FakeEngine(["from r0"], url="fake://r0", loading=True)
    rb = ReplicaBackend(fakes, probe_interval=0.01)

    async def go() -> None:
        for s in "abcd":
            assert await tokens(rb, {"prompt": "p", SESSION_FIELD: s}) == "from r1"
        assert rb.router.replicas[0].status == "loading"
        fakes["r0"].ready()
        with anyio.fail_after(5):
            while rb.router.replicas[0].status != "ok":
                await anyio.sleep(0.01)
        assert await tokens(rb, {"prompt": "p", SESSION_FIELD: "new"}) == "from r0"
        await rb.aclose()

    run(go)


def test_all_down_is_an_engine_error_not_a_crash() -> None:
    fakes = engines(down=True)
    rb = ReplicaBackend(fakes)

    async def go() -> None:
        with pytest.raises(EngineUnavailable):  # the first tried, then the other: both refuse
            await tokens(rb, {"prompt": "p"})
        assert [r.status for r in rb.router.replicas] == ["down", "down"]
        with pytest.raises(EngineUnavailable, match=r"no replica can take the request \(r0 down, r1 down\)"):
            await tokens(rb, {"prompt": "p"})
        loading = ReplicaBackend(engines(loading=True))
        with pytest.raises(EngineHTTPError) as e:
            await tokens(loading, {"prompt": "p"})
        assert e.value.status == 503
        await rb.aclose()

    run(go)


def test_a_stream_that_breaks_after_its_first_token_is_not_retried() -> None:
    fakes = {"r0": FakeEngine([FakeOutput(["a", "b", "c"], drop_after=1)]), "r1": FakeEngine(["x"])}
    rb = ReplicaBackend(fakes)

    async def go() -> None:
        with pytest.raises(Exception):  # noqa: B017 - the engine's stream error, whatever its class
            await tokens(rb, {"prompt": "p", SESSION_FIELD: "s"})
        await rb.aclose()

    run(go)
    assert fakes["r1"].started == 0
    assert rb.router.replicas[0].running == 0


def test_health_is_ok_while_one_replica_is() -> None:
    fakes = engines()
    fakes["r1"].down = True
    rb = ReplicaBackend(fakes)

    async def go() -> None:
        h = await rb.health()
        assert h.ok
        assert [s["status"] for s in rb.state()] == ["ok", "down"]
        fakes["r0"].down = True
        h = await rb.health()
        assert h.status == "down" and "r0:" in h.message and "r1:" in h.message

    run(go)


def test_metrics_carry_the_replica_label() -> None:
    text = '# HELP x y\n# TYPE x counter\nx 1\nllamacpp:t{a="b c"} 2\n'
    fakes = {"r0": FakeEngine(metrics=text), "r1": FakeEngine(metrics=text)}
    rb = ReplicaBackend(fakes)
    out = run(rb.metrics).decode()
    assert out.count("# HELP x y") == 1
    assert 'x{replica="r0"} 1' in out and 'x{replica="r1"} 1' in out
    assert 'llamacpp:t{a="b c",replica="r1"} 2' in out
    assert label_sample(b"m{} 3", "r") == b'm{replica="r"} 3'


def test_engine_url_list_gives_named_replicas() -> None:
    from splitserve._errors import UsageError
    from splitserve.engine import LlamaCppBackend
    from splitserve.gateway._router import engines_backend

    one = engines_backend("http://127.0.0.1:8080")
    assert isinstance(one, LlamaCppBackend)
    two = engines_backend("http://127.0.0.1:8080, http://127.0.0.1:8081")
    assert isinstance(two, ReplicaBackend) and two.names == ["r1", "r2"]
    named = engines_backend("spark1=http://127.0.0.1:8080,spark2=http://127.0.0.1:8081")
    assert isinstance(named, ReplicaBackend) and named.names == ["spark1", "spark2"]
    assert named.backends[1].url == "http://127.0.0.1:8081"
    with pytest.raises(UsageError, match="given twice"):
        engines_backend("a=http://127.0.0.1:1,a=http://127.0.0.1:2")


def test_the_gateway_sends_a_session_to_one_replica_and_new_sessions_to_the_other() -> None:
    import httpx

    from splitserve.gateway import GatewayConfig, create_app

    fakes = engines()
    rb = ReplicaBackend(fakes)
    app = create_app(GatewayConfig(engine_url="fake://replicas"), rb)

    async def ask(c: httpx.AsyncClient, session: str) -> str:
        r = await c.post(
            "/v1/chat/completions",
            headers={"X-Session-Id": session},
            json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8},
        )
        assert r.status_code == 200, r.text
        return str(r.json()["choices"][0]["message"]["content"])

    async def go() -> list[str]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c:
            return [await ask(c, s) for s in ("agent-1", "agent-2", "agent-1", "agent-1", "agent-2")]

    got = run(go)
    assert got == ["from r0", "from r1", "from r0", "from r0", "from r1"]
    assert all(SESSION_FIELD not in b for f in fakes.values() for b in f.bodies)
