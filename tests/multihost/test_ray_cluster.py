"""A real Ray cluster (CPU, the ``ray`` package) across network-namespace hosts, brought up by
`splitserve up` with ``backend = "vllm"``, ``launcher = "ray"`` and ``ray_probe = true`` (the Ray
probe runs instead of vLLM, which needs GPUs): three nodes (the head and two boxes over real
SSH) join, the fixes' variables are in the Ray workers' processes on every node (reported from a
Ray task), `status` shows every rank and `ray status`, `down` leaves no process, and a raylet
killed with SIGKILL on a box is noticed by the supervisor (`up --foreground`), which restarts
the whole deployment in order.

Every CLI call runs inside the head's namespace (netns_bridge.py): nothing binds outside the
namespaces. Prints the figures (`up` to ready; notice and recovery after the kill).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from netns_bridge import BridgeHosts, make_bridge_hosts, ray_spec, unavailable

from splitserve.cluster import load_spec, read_state, read_supervisor_log

pytestmark = [pytest.mark.multihost, pytest.mark.slow]

PY = sys.executable


@pytest.fixture(scope="module")
def ray_hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BridgeHosts]:
    why = unavailable()
    if why:
        pytest.skip(f"multi-host tests: {why}")
    pytest.importorskip("ray", reason="the test extra installs ray (pip install -e '.[test]')")
    yield from make_bridge_hosts(tmp_path_factory.mktemp("rayhosts"), 2)


def cli(hosts: BridgeHosts, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        hosts.head_cmd(PY, "-m", "splitserve", *args), capture_output=True, text=True, timeout=timeout
    )


def nothing_left(hosts: BridgeHosts, timeout: float = 20.0) -> dict[str, list[int]]:
    deadline = time.monotonic() + timeout
    left = hosts.user_pids()
    while any(left.values()) and time.monotonic() < deadline:
        time.sleep(0.2)
        left = hosts.user_pids()
    return left


def test_up_probe_status_down_across_three_nodes(ray_hosts: BridgeHosts, tmp_path: Path) -> None:
    hosts = ray_hosts
    spec_file = ray_spec(tmp_path / "ray.toml", hosts, "rayns", PY)
    spec = load_spec(spec_file)
    root = spec.state_dir
    assert root is not None

    dry = cli(hosts, "up", "-c", str(spec_file), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "# fix: NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME, UCX_NET_DEVICES" in dry.stdout
    assert "--object-store-memory 104857600" in dry.stdout and "RAY_memory_monitor_refresh_ms=0" in dry.stdout
    assert nothing_left(hosts, 0) == {"head": [], "rbox2": [], "rbox3": []}

    pre = cli(hosts, "preflight", "-c", str(spec_file), "--json")
    rows = {(r["check"], r["node"]): r for r in json.loads(pre.stdout)}
    assert pre.returncode == 0, pre.stdout + pre.stderr
    assert all(rows[("ray", n)]["status"] == "pass" for n in ("head", "n2", "n3"))
    assert rows[("nic", "n3")]["message"].startswith("eth3 (")

    t0 = time.monotonic()
    res = cli(hosts, "up", "-c", str(spec_file))
    wall = time.monotonic() - t0
    try:
        assert res.returncode == 0, res.stdout + res.stderr
        state = read_state(root)
        assert state is not None and state.phase == "ready"
        print(f"\nup to ready, 3 Ray nodes: {state.up_seconds:.1f} s (`up` wall {wall:.1f} s)")
        assert [(p.node, p.role) for p in state.processes] == [
            ("head", "ray_head"),
            ("n2", "ray_worker"),
            ("n3", "ray_worker"),
            ("head", "ray_probe"),
        ]
        user = hosts.user_pids()
        recs = {(p.node, p.role): p for p in state.processes}
        assert recs[("n2", "ray_worker")].pid in user["rbox2"] and recs[("n3", "ray_worker")].pid in user["rbox3"]

        report: dict[str, Any] = json.loads((root / "ray-probe.json").read_text())
        assert report["ok"] and report["alive_nodes"] == 3
        by_ip = {r["ip"]: r for r in report["reports"]}
        want = {hosts.head_address: hosts.head_interface, **{b.address: b.interface for b in hosts.boxes}}
        assert set(by_ip) == set(want), by_ip
        for ip, iface in want.items():
            env = by_ip[ip]["env"]  # as a Ray task on that node sees it
            assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == env["UCX_NET_DEVICES"] == iface
            assert env["VLLM_HOST_IP"] == ip and env["RAY_memory_monitor_refresh_ms"] == "0"

        # `ray status` is the autoscaler's view, refreshed every few seconds: it may lag the joins
        deadline = time.monotonic() + 30
        while True:
            st = cli(hosts, "status", "-c", str(spec_file), "--json")
            assert st.returncode == 0, st.stdout + st.stderr
            data = json.loads(st.stdout)
            if data["engine_backend"]["ray_status"].count("node_") >= 3 or time.monotonic() > deadline:
                break
            time.sleep(2)
        assert all(p["alive"] for p in data["processes"]) and len(data["processes"]) == 4
        eb = data["engine_backend"]
        assert eb["backend"] == "vllm" and eb["launcher"] == "ray" and eb["probe"]["alive_nodes"] == 3
        assert "Active:" in eb["ray_status"] and eb["ray_status"].count("node_") >= 3, eb["ray_status"]
        text = cli(hosts, "status", "-c", str(spec_file))
        assert "ray probe: 3 of 3 nodes" in text.stdout and "ray_worker" in text.stdout
        logs = cli(hosts, "logs", "head", "-c", str(spec_file), "-n", "400")
        assert logs.returncode == 0, logs.stderr
        assert "head | " in logs.stdout and "Ray runtime started" in logs.stdout
        assert "head/ray_probe | ray probe: 3 nodes report" in logs.stdout
        remote = cli(hosts, "logs", "n3", "-c", str(spec_file), "-n", "400")  # fetched over ssh from rbox3
        assert "--address" in remote.stdout and "Ray runtime started" in remote.stdout
    finally:
        gone = cli(hosts, "down", "-c", str(spec_file))
    assert gone.returncode == 0, gone.stdout + gone.stderr
    assert "stopped: head, n2, n3, head" in gone.stdout
    assert nothing_left(hosts) == {"head": [], "rbox2": [], "rbox3": []}
    assert read_state(root) is None


def wait_state(root: Path, proc: subprocess.Popen[str], pred: Any, timeout: float = 240) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"`up --foreground` exited: {proc.stderr.read() if proc.stderr else ''}"
        try:
            state = read_state(root)
        except Exception:  # noqa: BLE001 - a state file being replaced: read again
            state = None
        if state is not None and pred(state):
            return state
        time.sleep(0.1)
    raise AssertionError("the cluster did not get there in time")


def test_a_killed_raylet_is_noticed_and_the_cluster_restarted(ray_hosts: BridgeHosts, tmp_path: Path) -> None:
    hosts = ray_hosts
    supervise = "[supervise]\nbackoff_initial = 0.5\nbackoff_max = 4\npoll_seconds = 0.5\n"
    spec_file = ray_spec(tmp_path / "sup.toml", hosts, "raysup", PY, supervise=supervise)
    spec = load_spec(spec_file)
    root = spec.state_dir
    assert root is not None
    run = subprocess.Popen(
        hosts.head_cmd(PY, "-m", "splitserve", "up", "-c", str(spec_file), "--foreground"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        first = wait_state(root, run, lambda s: s.phase == "ready")
        before = {p.node + "/" + p.role: p.pid for p in first.processes}
        box3 = hosts.boxes[1]
        raylet = hosts.pid_of(box3, "raylet")
        t_kill = time.time()
        os.kill(raylet, signal.SIGKILL)
        second = wait_state(root, run, lambda s: s.phase == "ready" and s.started_at > t_kill)
        recovered = (second.ready_at or time.time()) - t_kill
        log = read_supervisor_log(spec)
        died = [e for e in log if e["kind"] == "died"]
        assert died, log
        noticed = float(died[0]["time"]) - t_kill  # type: ignore[arg-type]
        print(f"\nkilled raylet on {box3.name}: noticed after {noticed:.2f} s, serving again after {recovered:.1f} s")
        assert died[0]["node"] == "n3", died
        assert "ray start (a worker node)" in str(died[0]["message"]), died[0]
        assert any(e["kind"] == "restarting" for e in log)
        after = {p.node + "/" + p.role: p.pid for p in second.processes}
        assert set(after) == set(before) and all(after[k] != before[k] for k in after), (before, after)
        report = json.loads((root / "ray-probe.json").read_text())
        assert report["alive_nodes"] == 3
    finally:
        if run.poll() is None:
            os.kill(run.pid, signal.SIGTERM)
        try:
            rc = run.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(run.pid, signal.SIGKILL)
            rc = run.wait()
    assert rc == 0, run.stderr.read() if run.stderr else ""
    assert read_state(root) is None
    assert nothing_left(hosts) == {"head": [], "rbox2": [], "rbox3": []}
