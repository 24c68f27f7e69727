"""The supervisor's loop on fakes: the real `up` and `down` over a :class:`FakeNetwork`, a
:class:`FakeEngine` and the network's fake clock (order of restarts, backoff with cap and
reset, give-up, the stop grace, supervisor.log). Deaths are scripted: each time the cluster is
ready, the next process on the list is killed a while later (None: the supervisor is stopped)."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from fake_cluster import ENGINE, HEAD, W1, W2, local_spec, role, roles
from splitserve import ClusterError
from splitserve.cluster import Event, FakeNetwork, Program, Supervisor
from splitserve.cluster import _execute as ex
from splitserve.cluster._state import lock_holder

PORTS = {"w1": W1, "w2": W2, "head": HEAD}


class Script:
    """Kills the next scripted node ``serve`` seconds after each ready; counts preflights."""

    def __init__(self, net: FakeNetwork, deaths: list[str | None], serve: float = 1.0) -> None:
        self.net = net
        self.deaths = list(deaths)
        self.serve = serve
        self.preflights = 0
        self.sup: Supervisor | None = None

    def on_ready(self, _state: object) -> None:
        assert self.sup is not None
        node = self.deaths.pop(0) if self.deaths else None
        if node is None:
            self.sup.stop()
        else:
            self.net.after(self.serve, lambda: self.net.kill(port=PORTS[node]))

    def preflight(self, spec: object, engines: object, emit: Callable[[Event], None]) -> None:
        self.preflights += 1
        emit(Event("preflight", "cluster", "12 checks passed"))


def start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, deaths: list[str | None], serve: float = 1.0, **supervise: object
) -> tuple[Supervisor, FakeNetwork, Script]:
    spec = local_spec(tmp_path, supervise={"backoff_initial": 1, "backoff_max": 4, **supervise})
    net = FakeNetwork()
    net.program("ggml-rpc-server", Program(log=["Starting RPC server v3.0.0", "last line"]))
    # llama-server waits on a lost RPC connection instead of exiting on SIGTERM: `down` needs SIGKILL.
    net.program("llama-server", Program(ignores_sigterm=True))
    script = Script(net, deaths, serve)
    # The preflight checks themselves reach real machines; here only whether `up` runs them counts.
    monkeypatch.setattr(ex, "preflight_or_raise", script.preflight)
    sup = Supervisor(spec, engine=ENGINE, preflight=True, edges=net.edges())
    script.sup = sup
    return sup, net, script


def read_log(tmp_path: Path) -> list[dict[str, object]]:
    return [json.loads(ln) for ln in (tmp_path / "st" / "supervisor.log").read_text().splitlines()]


def delays(tmp_path: Path) -> list[object]:
    return [e["delay"] for e in read_log(tmp_path) if e["kind"] == "restarting"]


def kill_grace(net: FakeNetwork) -> list[float]:
    """For each llama-server stopped: seconds between its SIGTERM and its SIGKILL."""
    out = []
    for t, proc, sig in net.signals:
        if role(proc) == "head" and sig == signal.SIGTERM:
            killed = next(t2 for t2, p2, s2 in net.signals if p2 is proc and s2 == signal.SIGKILL)
            out.append(round(killed - t, 1))
    return out


def test_restarts_in_order_with_doubling_backoff_up_to_the_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sup, net, script = start(tmp_path, monkeypatch, ["w1", "head", "w1", "w1", None])
    sup.run(on_ready=script.on_ready)

    assert delays(tmp_path) == [1, 2, 4, 4], "doubling, capped at backoff_max"
    assert roles(net) == ["gateway", "w1", "w2", "head"] * 5, "each restart starts everything, in order"
    assert script.preflights == 1, "preflight only before the first start"
    # A broken cluster is stopped with the short grace (1 s), the last one with the normal 10 s;
    # the second cluster's head was the one killed, so it got no signal.
    assert kill_grace(net) == [1.0, 1.0, 1.0, 10.0]
    assert net.running() == []

    log = read_log(tmp_path)
    died = [e for e in log if e["kind"] == "died"]
    assert [e["node"] for e in died] == ["w1", "head", "w1", "w1"]
    assert all(e["root_cause"] is True for e in died)
    tail = died[0]["tail"]
    assert isinstance(tail, list) and tail[-1] == "last line" and tail[0].startswith("# splitserve: ")
    assert "ggml-rpc-server was killed by signal 9 while serving" in str(died[0]["message"])
    assert "llama-server was killed by signal 9 while serving" in str(died[1]["message"])
    assert [e["kind"] for e in log][-1] == "stopping"
    assert [e["kind"] for e in log].count("preflight") == 1
    assert sup.restarts == 4
    assert lock_holder(tmp_path / "st") is None


def test_a_cluster_that_served_long_enough_resets_the_backoff(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sup, net, script = start(tmp_path, monkeypatch, ["w1", "w1", "w1", None], serve=10.0, stable_seconds=5)
    sup.run(on_ready=script.on_ready)
    assert delays(tmp_path) == [1, 1, 1]
    assert roles(net) == ["gateway", "w1", "w2", "head"] * 4


def test_the_backoff_keeps_doubling_when_a_run_is_shorter_than_stable_seconds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sup, _net, script = start(tmp_path, monkeypatch, ["w2", "w2", "w2", None], serve=4.0, stable_seconds=5)
    sup.run(on_ready=script.on_ready)
    assert delays(tmp_path) == [1, 2, 4]


def test_gives_up_after_max_restarts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sup, net, script = start(tmp_path, monkeypatch, ["w1", "w1", "w1", "w1"], max_restarts=2)
    with pytest.raises(ClusterError, match=r"gave up after 2 restarts in a row \(supervise.max_restarts\)"):
        sup.run(on_ready=script.on_ready)
    assert delays(tmp_path) == [1, 2]
    assert roles(net) == ["gateway", "w1", "w2", "head"] * 3
    assert net.running() == [], "everything stopped on the way out"
    kinds = [e["kind"] for e in read_log(tmp_path)]
    assert kinds[-2:] == ["gave_up", "stopping"]
    assert lock_holder(tmp_path / "st") is None


def test_a_restart_that_fails_is_retried_after_the_next_backoff(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sup, net, script = start(tmp_path, monkeypatch, ["w1", None])
    # While the first restart waits, another program takes w2's port, and lets go 3 s later.
    taken = ("127.0.0.1", W2)
    net.after(1.5, lambda: net.taken_ports.add(taken))
    net.after(4.5, lambda: net.taken_ports.discard(taken))
    sup.run(on_ready=script.on_ready)
    log = read_log(tmp_path)
    (failed,) = [e for e in log if e["kind"] == "start_failed"]
    assert failed["node"] == "w2" and "already in use" in str(failed["message"])
    assert delays(tmp_path) == [1, 2]
    assert roles(net) == ["gateway", "w1", "w2", "head"] * 2, "the failed start started nothing"
    assert sup.restarts == 2
