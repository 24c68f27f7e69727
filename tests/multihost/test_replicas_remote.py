"""Replicas across two nodes over real SSH: ``topology = "replicas"`` with the head here and one
worker in a network namespace. `up` starts a llama-server on each node and the gateway routes
across them; a session's second request lands on the replica that holds its cache; after
``kill -9`` of one replica's llama-server, new requests keep succeeding and the supervisor brings
that replica back by itself while the other serves; `down` leaves nothing running."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from netns_hosts import Hosts

from helpers import free_ports, wait_dead
from splitserve.cluster import cluster_state_dir, load_spec, read_state, read_supervisor_log

pytestmark = [pytest.mark.engine, pytest.mark.multihost]

CLI = [sys.executable, "-m", "splitserve"]


def run_cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)


def replicas_spec(path: Path, smollm2: Path, engine_key: str, hosts: Hosts, state: Path) -> Path:
    box = hosts.boxes[0]
    head_port, gw_port, rpc_port = free_ports(3)
    path.write_text(
        "\n".join(
            [
                'name = "reps"',
                f'model = "{smollm2}"',
                f'engine = "{engine_key}"',
                f'state_dir = "{state}"',
                'topology = "replicas"',
                "[ssh]",
                f'config = "{hosts.ssh_config}"',
                "connect_timeout = 5",
                "[[workers]]",
                'name = "w1"',
                f'host = "{box.name}"',
                f'bind = "{box.address}"',
                f"port = {rpc_port}",
                f'workdir = "{box.workdir}"',
                "[server]",
                f"port = {head_port}",
                "ctx_size = 2048",
                "[gateway]",
                f"port = {gw_port}",
                "[supervise]",
                "backoff_initial = 0.5",
                "poll_seconds = 0.2",
                "",
            ]
        )
    )
    return path


@pytest.fixture(scope="module")
def cluster(engine, smollm2, hosts: Hosts, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Any]]:  # type: ignore[no-untyped-def]
    """The cluster `splitserve up` started (supervised in the background); `down` at the end."""
    root = tmp_path_factory.mktemp("reps")
    spec_file = replicas_spec(root / "reps.toml", smollm2, engine.key, hosts, root / "st")
    res = run_cli("up", "-c", str(spec_file))
    assert res.returncode == 0, res.stderr
    try:
        yield spec_file, hosts
    finally:
        run_cli("down", "-c", str(spec_file))


def chat(endpoint: str, content: str, session: str | None = None) -> httpx.Response:
    headers = {"X-Session-Id": session} if session else {}
    return httpx.post(
        f"{endpoint}/v1/chat/completions",
        headers=headers,
        timeout=120,
        json={"messages": [{"role": "user", "content": content}], "max_tokens": 4, "temperature": 0},
    )


def test_replicas_route_stick_recover_and_go_down(cluster: tuple[Path, Hosts]) -> None:
    spec_file, hosts = cluster
    spec = load_spec(spec_file)
    root = cluster_state_dir(spec)
    state = read_state(root)
    assert state is not None and state.phase == "ready"
    recs = {(p.node, p.role): p for p in state.processes}
    # A llama-server on each node: the head's here, w1's in its box (no ggml-rpc-server at all).
    assert set(recs) == {("head", "server"), ("w1", "server"), ("gateway", "gateway")}
    assert recs[("w1", "server")].pid in hosts.user_pids()["box1"]
    assert recs[("w1", "server")].bind == hosts.boxes[0].address
    gateway_argv = recs[("gateway", "gateway")].argv
    urls = gateway_argv[gateway_argv.index("--engine") + 1]
    assert urls.startswith("head=http://127.0.0.1:") and f",w1=http://{hosts.boxes[0].address}:" in urls
    status = json.loads(run_cli("status", "-c", str(spec_file), "--json").stdout)
    assert [(r["name"], r["health"]) for r in status["replicas"]] == [("head", "ready"), ("w1", "ready")]

    # A session's second request lands where its prompt is cached.
    story = " ".join(f"Line {i}: the keeper lit lamp number {i} at dusk." for i in range(16))
    first = chat(state.endpoint, story + " What happened?", session="keeper")
    assert first.status_code == 200, first.text
    second = chat(state.endpoint, story + " Who lit them?", session="keeper")
    assert second.status_code == 200, second.text
    cached = second.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached >= second.json()["usage"]["prompt_tokens"] // 2, second.json()["usage"]

    # kill -9 of w1's llama-server: every new request still succeeds, and w1 comes back by itself.
    old_pid = recs[("w1", "server")].pid
    assert hosts.boxes[0].exec("kill", "-9", str(old_pid)).returncode == 0
    codes = [chat(state.endpoint, f"Say {word}.").status_code for word in ("one", "two", "three")]
    codes.append(chat(state.endpoint, story + " Where?", session="keeper").status_code)
    assert codes == [200] * 4, codes
    w1_url = next(r["url"] for r in state.extra["replicas"] if r["name"] == "w1")
    deadline = time.monotonic() + 240
    while True:
        now = read_state(root)
        back = now is not None and next((p.pid for p in now.processes if p.node == "w1"), old_pid) != old_pid
        try:
            if back and httpx.get(f"{w1_url}/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "w1's replica did not come back"
        time.sleep(0.2)
    assert now is not None
    status = json.loads(run_cli("status", "-c", str(spec_file), "--json").stdout)
    assert [(r["name"], r["health"]) for r in status["replicas"]] == [("head", "ready"), ("w1", "ready")]
    kept = {(p.node, p.role): p.pid for p in now.processes}
    assert kept[("head", "server")] == recs[("head", "server")].pid, "the other replica was not restarted"
    assert kept[("gateway", "gateway")] == recs[("gateway", "gateway")].pid, "nor the gateway"
    log = [(e["kind"], e["node"]) for e in read_supervisor_log(spec) if e["kind"] in ("died", "restarted")]
    assert log == [("died", "w1"), ("restarted", "w1")]
    assert chat(state.endpoint, "Say five.").status_code == 200

    # down stops every replica, on every node.
    res = run_cli("down", "-c", str(spec_file))
    assert res.returncode == 0, res.stderr
    assert wait_dead([kept[("head", "server")], kept[("gateway", "gateway")]]) == []
    deadline = time.monotonic() + 10
    while hosts.user_pids()["box1"] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert hosts.user_pids() == {"box1": [], "box2": []}
    assert read_state(root) is None
