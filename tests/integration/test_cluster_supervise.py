"""The supervisor on the real cluster (SmolLM2, two local workers, `up --foreground` as a real
process): it holds a lock on the state folder, so a second `up` finds the cluster healthy and
leaves it untouched, and `down` asks it to stop; and when the head dies, its report names the
head first."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from helpers import pid_alive, two_worker_spec, wait_dead
from splitserve.cluster import cluster_state_dir, load_spec, read_state, read_supervisor_log

pytestmark = [pytest.mark.engine]

CLI = [sys.executable, "-m", "splitserve"]


def start_supervisor(spec_file: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*CLI, "up", "-c", str(spec_file), "--foreground", "--skip-preflight"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def wait_ready(root: Path, proc: subprocess.Popen[str], after: float = 0.0, timeout: float = 180) -> dict[str, int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the supervisor exited: {proc.stderr.read() if proc.stderr else ''}"
        state = read_state(root)
        if state is not None and state.phase == "ready" and (state.ready_at or 0) > after:
            return {p.node: p.pid for p in state.processes}
        time.sleep(0.1)
    raise AssertionError("cluster not ready in time")


def finish(proc: subprocess.Popen[str]) -> int:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
    try:
        return proc.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        return proc.wait()


def test_a_second_up_leaves_it_alone_and_down_stops_the_supervisor(engine, smollm2, state_home, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    spec_file = two_worker_spec(tmp_path, smollm2, name="held")
    root = cluster_state_dir(load_spec(spec_file))
    sup = start_supervisor(spec_file)
    pids: dict[str, int] = {}
    try:
        pids = wait_ready(root, sup)
        before = (root / "state.json").read_text()
        for extra in ([], ["--foreground"]):
            res = subprocess.run(
                [*CLI, "up", "-c", str(spec_file), "--skip-preflight", *extra],
                capture_output=True,
                text=True,
                timeout=120,
            )
            # healthy: said so, exit 0, nothing restarted (`--restart` would reload it)
            assert res.returncode == 0, res.stderr
            assert "cluster held is already up and healthy" in res.stdout
            assert f"supervised by pid {sup.pid}" in res.stdout and "--restart" in res.stdout
            # nothing touched: the same processes, alive, and the same state
            assert all(pid_alive(p) for p in pids.values())
            assert (root / "state.json").read_text() == before
        res = subprocess.run(
            [*CLI, "status", "-c", str(spec_file), "--json"], capture_output=True, text=True, timeout=120
        )
        assert res.returncode == 0 and f'"pid": {sup.pid}' in res.stdout.split('"supervisor"', 1)[1]
        t0 = time.monotonic()
        res = subprocess.run([*CLI, "down", "-c", str(spec_file)], capture_output=True, text=True, timeout=180)
        assert res.returncode == 0, res.stderr
        assert res.stdout.startswith("stopped: ") and set(res.stdout.split(": ", 1)[1].strip().split(", ")) == set(pids)
        assert sup.wait(10) == 0  # the supervisor stopped its processes and exited by itself
        print(f"down of a supervised cluster: {time.monotonic() - t0:.2f} s")
        assert wait_dead(list(pids.values())) == []
        assert read_state(root) is None
        kinds = [e["kind"] for e in read_supervisor_log(load_spec(spec_file))]
        assert kinds[-1] == "stopping" and "died" not in kinds and "stale" not in kinds
    finally:
        finish(sup)
        wait_dead(list(pids.values()))


def _generate(endpoint: str, started: threading.Event) -> None:
    body = {
        "prompt": "Write a very long story about a lighthouse keeper.",
        "n_predict": 2000,
        "stream": True,
        "temperature": 0.0,
        "cache_prompt": False,
        "ignore_eos": True,
    }
    try:
        with httpx.stream("POST", f"{endpoint}/completion", json=body, timeout=60) as resp:
            for line in resp.iter_lines():
                if line.startswith("data: "):
                    started.set()
    except httpx.HTTPError:
        pass
    finally:
        started.set()


def test_head_killed_mid_generation_the_report_names_the_head_first(
    engine,
    smollm2,
    state_home,  # type: ignore[no-untyped-def]
    tmp_path: Path,
) -> None:
    spec_file = two_worker_spec(tmp_path, smollm2, name="headdies")
    spec = load_spec(spec_file)
    root = cluster_state_dir(spec)
    sup = start_supervisor(spec_file)
    second: dict[str, int] = {}
    try:
        first = wait_ready(root, sup)
        started = threading.Event()
        client = threading.Thread(target=_generate, args=(read_state(root).engine_url, started))  # type: ignore[union-attr]
        client.start()
        assert started.wait(60)
        time.sleep(0.3)  # the workers are busy computing for the head
        t_kill = time.time()
        os.kill(first["head"], signal.SIGKILL)
        client.join(60)
        second = wait_ready(root, sup, after=t_kill)
        print(f"recovery after SIGKILL of the head: {time.time() - t_kill:.2f} s")
        died = [e for e in read_supervisor_log(spec) if e["kind"] == "died"]
        print("\n".join(f"died: {e['node']}: {e['message']}" for e in died))
        assert died and died[0]["node"] == "head" and died[0]["root_cause"] is True, died
        assert "llama-server was killed by signal 9 while serving" in str(died[0]["message"])
        for later in died[1:]:
            assert later["root_cause"] is False and later["after"] == "head"
            if later["node"] in ("w1", "w2") and "signal 13" in str(later["message"]):
                assert "because its head went away" in str(later["message"])
        assert all(second[n] != first[n] for n in second), "every process was restarted"
    finally:
        rc = finish(sup)
    assert rc == 0
    assert wait_dead(list(second.values())) == []


def test_asked_to_stop_while_loading_up_stops_what_it_started(engine, smollm2, state_home, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # What a supervisor's SIGTERM does during a (long) model load: no waiting for the load to end.
    from splitserve import ClusterError
    from splitserve.cluster import Event, up

    spec = load_spec(two_worker_spec(tmp_path, smollm2, name="stopload"))
    root = cluster_state_dir(spec)
    asked = threading.Event()
    pids: list[int] = []

    def on_event(e: Event) -> None:
        state = read_state(root)
        if state is not None:
            pids[:] = [p.pid for p in state.processes]
        if e.kind == "head_started":
            asked.set()

    with pytest.raises(ClusterError, match="stopped during load"):
        up(spec, engine=engine, on_event=on_event, preflight=False, should_stop=asked.is_set)
    assert len(pids) == 4 and wait_dead(pids) == []
    assert read_state(root) is None
