"""Plain `up` on the real cluster (SmolLM2, two loopback workers, the CLI as a real process):
it leaves a supervisor in the background, so a worker killed with SIGKILL comes back without a
command, and `status --json` is valid while it restarts; `up` on a healthy cluster leaves it (and
its pids) alone, `up --restart` reloads it, `down` leaves no process (the supervisor included);
with --no-supervise a death stays, and `status` names its cause from the logs and the command."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from helpers import pid_alive, two_worker_spec, wait_dead
from splitserve.cluster import cluster_state_dir, load_spec, lock_holder, read_state
from splitserve.cluster._supervise import read_supervision

pytestmark = [pytest.mark.engine]

CLI = [sys.executable, "-m", "splitserve"]
FAST = "\n[supervise]\nbackoff_initial = 0.5\npoll_seconds = 0.2\n"


def cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)


def spec_with_supervision(tmp_path: Path, smollm2: Path, name: str) -> Path:
    spec_file = two_worker_spec(tmp_path, smollm2, name=name)
    spec_file.write_text(spec_file.read_text() + FAST)
    return spec_file


def wait_for(what: str, check: Any, timeout: float = 180) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"never: {what}")


def pids_of(root: Path) -> dict[str, int]:
    state = read_state(root)
    assert state is not None
    return {p.node: p.pid for p in state.processes}


def chat(endpoint: str) -> bool:
    """One chat completion through the gateway is served (whatever the model says)."""
    r = httpx.post(
        f"{endpoint}/v1/chat/completions",
        timeout=120,
        json={"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 4, "temperature": 0},
    )
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["role"] == "assistant"
    return True


def status(spec_file: Path) -> tuple[int, dict[str, Any]]:
    res = cli("status", "-c", str(spec_file), "--json", timeout=120)
    return res.returncode, json.loads(res.stdout)  # valid JSON whatever the phase


def down_and_check(spec_file: Path, pids: list[int]) -> None:
    root = cluster_state_dir(load_spec(spec_file))
    res = cli("down", "-c", str(spec_file))
    assert res.returncode == 0, res.stderr
    assert wait_dead(pids) == [], "left running"
    assert lock_holder(root) is None and read_state(root) is None


def test_plain_up_brings_a_killed_worker_back_and_status_says_restarting(
    engine,
    smollm2,
    state_home,  # type: ignore[no-untyped-def]
    tmp_path: Path,
) -> None:
    spec_file = spec_with_supervision(tmp_path, smollm2, "keepup")
    root = cluster_state_dir(load_spec(spec_file))
    res = cli("up", "-c", str(spec_file), "--skip-preflight")
    assert res.returncode == 0, res.stderr
    holder = lock_holder(root)
    assert holder is not None and f"supervised by pid {holder.pid} in the background" in res.stdout
    sup_pid = holder.pid
    first = pids_of(root)
    seen = list(first.values())
    try:
        endpoint = read_state(root).endpoint  # type: ignore[union-attr]
        assert chat(endpoint)
        code, data = status(spec_file)
        assert code == 0 and data["phase"] == "ready" and data["supervisor"]["pid"] == sup_pid
        restarts_before = data["restarts"]

        os.kill(first["w2"], signal.SIGKILL)
        wait_for("the supervisor saw it", lambda: (read_supervision(root) or {}).get("phase") == "restarting")
        os.kill(sup_pid, signal.SIGSTOP)  # hold it mid-restart while status looks
        try:
            code, data = status(spec_file)
            text = cli("status", "-c", str(spec_file), timeout=120)
        finally:
            os.kill(sup_pid, signal.SIGCONT)
        assert code == 4, data
        assert data["phase"] == "restarting"
        assert data["restart"]["attempt"] == 1
        assert data["restart"]["cause"].startswith("w2 killed by signal 9"), data["restart"]
        assert text.returncode == 4
        assert text.stdout.startswith("cluster keepup: restarting (attempt 1, cause: w2 killed by signal 9"), (
            text.stdout
        )

        # serving again, with no command: new processes, the same endpoint
        def back() -> dict[str, int] | None:
            state = read_state(root)
            doing = read_supervision(root) or {}
            if state is None or state.phase != "ready" or doing.get("phase") != "serving":
                return None
            now = {p.node: p.pid for p in state.processes}
            return now if now.get("w2") not in (None, first["w2"]) else None

        second = wait_for("serving again", back)
        seen += list(second.values())
        assert chat(endpoint)
        code, data = status(spec_file)
        assert code == 0 and data["phase"] == "ready" and data["restarts"] == restarts_before + 1
        assert lock_holder(root).pid == sup_pid  # type: ignore[union-attr]  # the same supervisor
    finally:
        os.kill(sup_pid, signal.SIGCONT)
        down_and_check(spec_file, [*seen, sup_pid])


def test_up_twice_leaves_the_pids_and_up_restart_reloads(engine, smollm2, state_home, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    spec_file = spec_with_supervision(tmp_path, smollm2, "twice")
    root = cluster_state_dir(load_spec(spec_file))
    assert cli("up", "-c", str(spec_file), "--skip-preflight").returncode == 0
    first = pids_of(root)
    sup_pid = lock_holder(root).pid  # type: ignore[union-attr]
    seen = [*first.values(), sup_pid]
    try:
        res = cli("up", "-c", str(spec_file), "--skip-preflight")
        assert res.returncode == 0, res.stderr
        assert "cluster twice is already up and healthy" in res.stdout and "--restart" in res.stdout
        assert pids_of(root) == first and all(pid_alive(p) for p in first.values())
        assert lock_holder(root).pid == sup_pid  # type: ignore[union-attr]

        res = cli("up", "-c", str(spec_file), "--skip-preflight", "--restart")
        assert res.returncode == 0, res.stderr
        second = pids_of(root)
        new_sup = lock_holder(root).pid  # type: ignore[union-attr]
        seen += [*second.values(), new_sup]
        assert set(second) == set(first) and all(second[n] != first[n] for n in first), "reloaded"
        assert wait_dead([*first.values(), sup_pid]) == []  # the old ones are gone
        assert chat(read_state(root).endpoint)  # type: ignore[union-attr]
    finally:
        down_and_check(spec_file, seen)


def test_without_supervision_status_names_the_cause_and_up_cleans_up(
    engine,
    smollm2,
    state_home,  # type: ignore[no-untyped-def]
    tmp_path: Path,
) -> None:
    spec_file = spec_with_supervision(tmp_path, smollm2, "nosup")
    root = cluster_state_dir(load_spec(spec_file))
    res = cli("up", "-c", str(spec_file), "--skip-preflight", "--no-supervise")
    assert res.returncode == 0, res.stderr
    assert lock_holder(root) is None
    first = pids_of(root)
    seen = list(first.values())
    try:
        os.kill(first["w2"], signal.SIGKILL)
        # llama-server finds its worker gone at its next request, and aborts
        try:
            state = read_state(root)
            assert state is not None
            httpx.post(
                f"{state.engine_url}/completion",
                json={"prompt": "Hi", "n_predict": 1},
                timeout=60,
            )
        except httpx.HTTPError:
            pass
        wait_for("the head aborts without its worker", lambda: not pid_alive(first["head"]) or None, timeout=60)
        code, data = status(spec_file)
        assert code == 3 and data["phase"] == "degraded" and data["restart"] is None
        assert data["cause"]["node"] == "w2"
        head = next(o for o in data["cause"]["others"] if o["node"] == "head")
        assert "Remote RPC server crashed" in head["message"], data["cause"]
        assert data["next"] == f"splitserve up -c {spec_file}"
        # what the cause says to run: it stops what is left, naming it, and starts again
        res = cli("up", "-c", str(spec_file), "--skip-preflight", "--no-supervise")
        assert res.returncode == 0, res.stderr
        assert "was no longer healthy (w2, head not running): stopped what was left of it: " in res.stderr
        assert "w1 (ggml-rpc-server, pid " in res.stderr and "gateway (the gateway, pid " in res.stderr
        seen += list(pids_of(root).values())
        assert wait_dead(seen[: len(first)]) == []
    finally:
        down_and_check(spec_file, seen)
