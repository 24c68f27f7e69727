"""`up` with two local RPC workers -> chat -> `down`, with the real engine and model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from helpers import bare_server, greedy, pid_alive, two_worker_spec, wait_dead
from splitserve.cluster import cluster_state_dir, cluster_status, down, load_spec, up

pytestmark = [pytest.mark.engine]

CLI = [sys.executable, "-m", "splitserve"]


def run_cli(*args: str, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=600, **kw)  # type: ignore[call-overload]


def test_up_chat_status_down_via_cli(engine, smollm2, state_home, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    spec_file = two_worker_spec(tmp_path, smollm2, name="cli")
    res = run_cli("up", "-c", str(spec_file))
    assert res.returncode == 0, res.stderr
    assert "ready: http://127.0.0.1:" in res.stdout
    spec = load_spec(spec_file)
    try:
        status = json.loads(run_cli("status", "-c", str(spec_file), "--json").stdout)
        procs = {p["node"]: p for p in status["processes"]}
        assert set(procs) == {"w1", "w2", "head", "gateway"}
        # Clients are pointed at the gateway; llama-server keeps its own port for native endpoints.
        assert status["gateway"] is True
        assert status["endpoint"].endswith(f":{procs['gateway']['port']}")
        assert status["engine_endpoint"].endswith(f":{procs['head']['port']}")
        assert all(p["alive"] and p["rss_bytes"] > 0 for p in procs.values())
        # The weights were really split: each worker got a model buffer (from the head's log).
        rpc = {d["node"]: d for d in status["memory"] if d["endpoint"]}
        assert set(rpc) == {"w1", "w2"}
        assert all(d["model_bytes"] > 0 and d["kv_bytes"] > 0 for d in rpc.values())
        assert status["slots"] and status["slots"][0]["n_ctx"] == 2048

        chat = httpx.post(
            f"{status['endpoint']}/v1/chat/completions",
            timeout=120,
            json={"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8, "temperature": 0},
        )
        assert chat.status_code == 200
        assert chat.json()["choices"][0]["message"]["content"]
        # It was the gateway that answered (it counted the request), and it passes llama.cpp's
        # timings on as llama-server does.
        assert chat.json()["timings"]["predicted_n"] >= 1
        metrics = httpx.get(f"{status['endpoint']}/metrics", timeout=10).text
        assert "splitserve_requests_total" in metrics and 'status="200"' in metrics

        logs = run_cli("logs", "w1", "-c", str(spec_file), "-n", "200")
        assert "RPC server" in logs.stdout
    finally:
        res = run_cli("down", "-c", str(spec_file))
    assert res.returncode == 0, res.stderr
    pids = [p["pid"] for p in status["processes"]]
    assert wait_dead(pids) == []
    assert not (cluster_state_dir(spec) / "state.json").exists()
    assert run_cli("status", "-c", str(spec_file)).returncode != 0


def test_split_greedy_output_equals_unsplit(engine, smollm2, state_home, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    prompt = "The capital of France is"
    spec = load_spec(two_worker_spec(tmp_path, smollm2, name="greedy"))
    state = up(spec, engine=engine)
    try:
        split_text = greedy(state.engine_url, prompt)
    finally:
        down(spec)
    with bare_server(engine, smollm2) as url:
        unsplit_text = greedy(url, prompt)
    assert split_text and split_text == unsplit_text


def test_second_up_stops_the_stale_processes_first(engine, smollm2, state_home, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    spec = load_spec(two_worker_spec(tmp_path, smollm2, name="stale"))
    first = up(spec, engine=engine)
    events: list[str] = []
    try:
        second = up(spec, engine=engine, on_event=lambda e: events.append(e.kind))
        assert "stale" in events
        assert wait_dead([p.pid for p in first.processes]) == []
        assert all(pid_alive(p.pid) for p in second.processes)
        assert cluster_status(cluster_state_dir(spec))["phase"] == "ready"
    finally:
        down(spec)
    assert wait_dead([p.pid for p in second.processes]) == []
