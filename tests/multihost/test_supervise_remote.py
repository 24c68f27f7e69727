"""Supervision across hosts: `splitserve run` keeps the cluster serving when a remote worker is
killed with SIGKILL in the middle of a generation."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from netns_hosts import Hosts, remote_spec

from helpers import free_ports, wait_dead
from splitserve.cluster import cluster_state_dir, load_spec, read_state, read_supervisor_log

pytestmark = [pytest.mark.engine, pytest.mark.multihost]


def wait_ready(root: Path, proc: subprocess.Popen[str], timeout: float = 180) -> dict:  # type: ignore[type-arg]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"`splitserve run` exited: {proc.stderr.read() if proc.stderr else ''}"
        state = read_state(root)
        if state is not None and state.phase == "ready":
            return {p.node: p.pid for p in state.processes} | {"_endpoint": state.engine_url}  # type: ignore[dict-item]
        time.sleep(0.1)
    raise AssertionError("cluster not ready in time")


def stream_until_error(endpoint: str, started: threading.Event, result: dict) -> None:  # type: ignore[type-arg]
    body = {
        "prompt": "Write a very long story about a lighthouse keeper.",
        "n_predict": 2000,
        "stream": True,
        "temperature": 0.0,
        "cache_prompt": False,
        "ignore_eos": True,
    }
    chunks = 0
    try:
        with httpx.stream("POST", f"{endpoint}/completion", json=body, timeout=60) as resp:
            for line in resp.iter_lines():
                if line.startswith("data: "):
                    chunks += 1
                    started.set()
                    if json.loads(line[6:]).get("stop"):
                        result["finished"] = True
        result["outcome"] = "ended"
    except httpx.HTTPError as exc:
        result["outcome"] = f"error: {type(exc).__name__}"
    finally:
        result["chunks"] = chunks
        started.set()


def test_sigkill_worker_mid_generation_cluster_comes_back(
    engine,
    smollm2,
    state_home,
    hosts: Hosts,  # type: ignore[no-untyped-def]
    tmp_path: Path,
) -> None:
    (head_port,) = free_ports(1)
    spec_file = remote_spec(
        tmp_path / "sup.toml",
        smollm2,
        hosts,
        "sup",
        head_port=head_port,
        extra="[supervise]\nbackoff_initial = 0.5\nbackoff_max = 4\npoll_seconds = 0.2",
    )
    spec = load_spec(spec_file)
    root = cluster_state_dir(spec)
    run = subprocess.Popen(
        [sys.executable, "-m", "splitserve", "run", "-c", str(spec_file)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        first = wait_ready(root, run)
        endpoint = str(first["_endpoint"])
        started, result = threading.Event(), dict[str, Any]()
        client = threading.Thread(target=stream_until_error, args=(endpoint, started, result))
        client.start()
        assert started.wait(60)
        t_kill = time.monotonic()
        assert hosts.boxes[1].exec("kill", "-9", str(first["w2"])).returncode == 0
        client.join(60)
        assert not client.is_alive(), "the client hung instead of getting an error"
        assert result["chunks"] >= 1 and not result.get("finished"), result

        # The supervisor restarts everything; the next request succeeds.
        deadline = time.monotonic() + 180
        while True:
            assert run.poll() is None and time.monotonic() < deadline
            try:
                r = httpx.post(
                    f"{endpoint}/completion",
                    timeout=30,
                    json={"prompt": "Hello", "n_predict": 4, "cache_prompt": False},
                )
                if r.status_code == 200 and r.json().get("content") is not None:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        recovery = time.monotonic() - t_kill
        print(f"recovery after SIGKILL of w2: {recovery:.2f} s")
        second = {p.node: p.pid for p in read_state(root).processes}  # type: ignore[union-attr]
        assert set(second) == {"w1", "w2", "head", "gateway"}
        assert all(second[n] != first[n] for n in second), "every process was restarted"

        log = read_supervisor_log(spec)
        died = [e for e in log if e["kind"] == "died"]
        assert died and died[0]["node"] == "w2"
        assert "ggml-rpc-server was killed by signal 9 while serving" in str(died[0]["message"])
        assert died[0]["tail"], "the last log lines are recorded"
        assert any(e["kind"] == "restarting" for e in log)
    finally:
        if run.poll() is None:
            os.kill(run.pid, signal.SIGTERM)
        try:
            rc = run.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(run.pid, signal.SIGKILL)
            rc = run.wait()
    assert rc == 0, run.stderr.read() if run.stderr else ""
    assert read_state(root) is None
    assert wait_dead([int(v) for k, v in second.items()]) == []
    assert hosts.user_pids() == {"box1": [], "box2": []}
