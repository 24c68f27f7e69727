"""`up` across two network-namespace hosts over real SSH: the engine is copied and verified,
chat works, `status` and `logs` reach the remote nodes, `down` leaves nothing running."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from netns_hosts import Hosts, remote_spec

from helpers import free_ports, wait_dead
from splitserve.cluster import Event, cluster_state_dir, cluster_status, down, load_spec, up

pytestmark = [pytest.mark.engine, pytest.mark.multihost]

CLI = [sys.executable, "-m", "splitserve"]


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=600)


def test_up_chat_status_logs_down_across_hosts(engine, smollm2, state_home, hosts: Hosts, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (head_port,) = free_ports(1)
    spec_file = remote_spec(
        tmp_path / "mh.toml", smollm2, hosts, "mh", head_port=head_port, server="tensor_split = [1, 1]"
    )
    spec = load_spec(spec_file)
    events: list[Event] = []
    state = up(spec, engine=engine, on_event=events.append)
    try:
        kinds = [(e.kind, e.node) for e in events]
        # The engine was copied to each box (empty work folders) and verified.
        copied = [e for e in events if e.kind == "engine" and "copied" in e.message]
        assert {e.node for e in copied} == {"w1", "w2"}, kinds
        assert all("sha256 verified" in e.message for e in copied)
        for box in hosts.boxes:
            assert (box.workdir / "engines" / engine.key / "ggml-rpc-server").is_file()
        assert {e.node for e in events if e.kind == "protocol"} == {"w1", "w2"}

        # Each worker really runs inside its box's network namespace, bound to the box's address.
        user = hosts.user_pids()
        recs = {p.node: p for p in state.processes}
        assert recs["w1"].pid in user["box1"] and recs["w2"].pid in user["box2"]
        assert recs["w1"].host == "box1" and recs["w1"].bind == hosts.boxes[0].address

        chat = httpx.post(
            f"{state.endpoint}/v1/chat/completions",
            timeout=120,
            json={"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8, "temperature": 0},
        )
        assert chat.status_code == 200 and chat.json()["choices"][0]["message"]["content"]

        status = json.loads(run_cli("status", "-c", str(spec_file), "--json").stdout)
        procs = {p["node"]: p for p in status["processes"]}
        assert set(procs) == {"w1", "w2", "head", "gateway"}
        assert all(p["alive"] and p["rss_bytes"] > 0 for p in procs.values())
        assert procs["w2"]["host"] == "box2"
        rpc = {d["node"]: d for d in status["memory"] if d["endpoint"]}
        assert set(rpc) == {"w1", "w2"} and all(d["model_bytes"] > 0 for d in rpc.values())

        # The worker's log lives on its box and is fetched over ssh.
        assert (hosts.boxes[1].workdir / "clusters" / "mh" / "logs" / "w2.log").is_file()
        logs = run_cli("logs", "w2", "-c", str(spec_file), "-n", "200")
        assert logs.returncode == 0, logs.stderr
        assert "RPC server" in logs.stdout and "Accepted client connection" in logs.stdout
    finally:
        stopped = down(spec)
    assert set(stopped) == {"w1", "w2", "head", "gateway"}
    assert wait_dead([p.pid for p in state.processes]) == []
    assert hosts.user_pids() == {"box1": [], "box2": []}
    assert not (cluster_state_dir(spec) / "state.json").exists()


def test_second_up_reuses_the_copied_engine(engine, smollm2, state_home, hosts: Hosts, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (head_port,) = free_ports(1)
    spec = load_spec(remote_spec(tmp_path / "again.toml", smollm2, hosts, "again", head_port=head_port))
    for _ in range(2):
        events: list[Event] = []
        up(spec, engine=engine, on_event=events.append)
        down(spec)
    engine_events = [e.message for e in events if e.kind == "engine"]
    assert len(engine_events) == 2 and all("present" in m and "match" in m for m in engine_events), engine_events
    assert hosts.user_pids() == {"box1": [], "box2": []}


def test_status_of_cluster_with_a_dead_remote_worker(engine, smollm2, state_home, hosts: Hosts, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (head_port,) = free_ports(1)
    spec = load_spec(remote_spec(tmp_path / "dead.toml", smollm2, hosts, "dead", head_port=head_port))
    state = up(spec, engine=engine)
    try:
        w1 = next(p for p in state.processes if p.node == "w1")
        hosts.boxes[0].exec("kill", "-9", str(w1.pid))
        assert wait_dead([w1.pid]) == []
        procs = {p["node"]: p for p in cluster_status(cluster_state_dir(spec), with_slots=False)["processes"]}
        assert procs["w1"]["alive"] is False and procs["w2"]["alive"] is True
    finally:
        down(spec)
    assert hosts.user_pids() == {"box1": [], "box2": []}


def test_worker_with_its_own_build_is_used_in_place(engine, smollm2, state_home, hosts: Hosts, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    b1, b2 = hosts.boxes
    (head_port,) = free_ports(1)
    # box1 "built its own": a folder of binaries on that node (here the head's build folder itself).
    workers = (
        f'[[workers]]\nname = "w1"\nhost = "box1"\nbind = "{b1.address}"\nport = 50102\n'
        f'engine = "{engine.bin_dir}"\nworkdir = "{tmp_path / "box1-own"}"\n'
        f'[[workers]]\nname = "w2"\nhost = "box2"\nbind = "{b2.address}"\nport = 50103\nworkdir = "{b2.workdir}"\n'
    )
    spec = load_spec(remote_spec(tmp_path / "own.toml", smollm2, hosts, "own", head_port=head_port, workers=workers))
    events: list[Event] = []
    state = up(spec, engine=engine, on_event=events.append)
    try:
        msgs = {e.node: e.message for e in events if e.kind == "engine"}
        assert msgs["w1"].startswith("own engine: ggml-rpc-server in") and "RPC protocol 7.0.0" in msgs["w1"]
        assert not (tmp_path / "box1-own" / "engines").exists(), "nothing is copied to a node with its own build"
        w1 = next(p for p in state.processes if p.node == "w1")
        assert w1.argv[0] == str(engine.bin_dir / "ggml-rpc-server")
        r = httpx.post(f"{state.engine_url}/completion", timeout=120, json={"prompt": "Hi", "n_predict": 4})
        assert r.status_code == 200
    finally:
        down(spec)
    assert hosts.user_pids() == {"box1": [], "box2": []}
