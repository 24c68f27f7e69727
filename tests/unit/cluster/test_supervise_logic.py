"""The supervisor's loop with fakes standing in for up/down/find_dead (pure logic: order of
restarts, backoff with cap and reset, give-up, the log)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from splitserve import ClusterError
from splitserve.cluster import Supervisor, parse_spec
from splitserve.cluster import _supervise as sv
from splitserve.cluster._state import ClusterState


def make_spec(tmp_path: Path, **supervise: object):  # type: ignore[no-untyped-def]
    return parse_spec({"name": "s", "model": "/m.gguf", "state_dir": str(tmp_path / "st"),
                       "workers": [{"name": "w1"}], "supervise": {"backoff_initial": 1, "backoff_max": 4, **supervise}})


class Script:
    """Fakes: every `up` succeeds, each watch finds the next scripted death (None = stop)."""

    def __init__(self, deaths: list[str | None], clock_step: float = 1.0) -> None:
        self.deaths = list(deaths)
        self.calls: list[str] = []
        self.waits: list[float] = []
        self.now = 0.0
        self.clock_step = clock_step

    def install(self, monkeypatch: pytest.MonkeyPatch, sup: Supervisor) -> None:
        def fake_up(spec, **kw):  # type: ignore[no-untyped-def]
            self.calls.append(f"up(preflight={kw.get('preflight')})")
            return ClusterState(name="s", spec_file=None, model="m", endpoint="http://x", engine="e")

        def fake_down(spec, grace=10.0):  # type: ignore[no-untyped-def]
            self.calls.append(f"down({grace:g})")
            return []

        def fake_watch(poll):  # type: ignore[no-untyped-def]
            self.now += self.clock_step
            node = self.deaths.pop(0) if self.deaths else None
            if node is None:
                sup.stop()
                return None
            return sv.Death(node, "rpc", f"ggml-rpc-server was killed by signal 9 while serving", ["last line"])

        def fake_wait(timeout=None):  # type: ignore[no-untyped-def]
            self.waits.append(timeout)
            return sup._stop.is_set()

        monkeypatch.setattr(sv, "up", fake_up)
        monkeypatch.setattr(sv, "down", fake_down)
        monkeypatch.setattr(sup, "_watch", fake_watch)
        monkeypatch.setattr(sup._stop, "wait", fake_wait)
        monkeypatch.setattr(sv.time, "monotonic", lambda: self.now)


def test_restarts_in_order_with_doubling_backoff_up_to_the_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = make_spec(tmp_path)
    sup = Supervisor(spec)
    script = Script(["w1", "head", "w1", "w1", None])
    script.install(monkeypatch, sup)
    sup.run()
    assert script.waits == [1, 2, 4, 4], "doubling, capped at backoff_max"
    # Preflight only before the first start; a broken cluster is stopped with the short grace.
    assert script.calls[:3] == ["up(preflight=True)", "down(1)", "up(preflight=False)"]
    assert script.calls[-1] == "down(10)"
    log = [json.loads(ln) for ln in (tmp_path / "st" / "supervisor.log").read_text().splitlines()]
    died = [e for e in log if e["kind"] == "died"]
    assert [e["node"] for e in died] == ["w1", "head", "w1", "w1"]
    assert died[0]["tail"] == ["last line"] and "signal 9" in died[0]["message"]
    assert [e["kind"] for e in log][-1] == "stopping"
    assert sup.restarts == 4


def test_a_cluster_that_served_long_enough_resets_the_backoff(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sup = Supervisor(make_spec(tmp_path, stable_seconds=5))
    script = Script(["w1", "w1", "w1", None], clock_step=10.0)  # each run "serves" 10 s
    script.install(monkeypatch, sup)
    sup.run()
    assert script.waits == [1, 1, 1]


def test_gives_up_after_max_restarts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sup = Supervisor(make_spec(tmp_path, max_restarts=2))
    script = Script(["w1", "w1", "w1", "w1"])
    script.install(monkeypatch, sup)
    with pytest.raises(ClusterError, match=r"gave up after 2 restarts in a row"):
        sup.run()
    assert script.waits == [1, 2]
    assert script.calls[-1].startswith("down(")  # everything stopped on the way out
