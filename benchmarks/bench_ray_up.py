"""`splitserve up` of a Ray cluster across network-namespace hosts, and its recovery from a killed raylet.

Three nodes (a head namespace and two boxes over real SSH, tests/multihost/netns_bridge.py), CPU
Ray from PyPI, ``backend = "vllm"`` with ``launcher = "ray"`` and ``ray_probe = true`` (the Ray
probe instead of vLLM). Measures, ``--runs`` times each:

- ``up_seconds``: `splitserve up` from reading the spec to every node joined (the probe's report);
- ``noticed_seconds``: from ``kill -9`` of the raylet on one box to the supervisor's ``died`` record
  (`up --foreground`, polling every 0.5 s);
- ``recovered_seconds``: from the kill to the restarted cluster ready again (every rank new).

Prints JSON and writes benchmarks/results/ray_up_netns.json. Needs root (namespaces), sshd and ray.

    sudo .venv/bin/python benchmarks/bench_ray_up.py --runs 3
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "multihost")]

from netns_bridge import BridgeHosts, make_bridge_hosts, ray_spec, unavailable  # noqa: E402

from splitserve.cluster import load_spec, read_state, read_supervisor_log  # noqa: E402

PY = sys.executable
OUT = ROOT / "benchmarks" / "results" / "ray_up_netns.json"


def cli(hosts: BridgeHosts, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(hosts.head_cmd(PY, "-m", "splitserve", *args), capture_output=True, text=True, timeout=600)


def one_up(hosts: BridgeHosts, base: Path, i: int) -> dict[str, float]:
    spec_file = ray_spec(base / f"up{i}.toml", hosts, f"benchup{i}", PY)
    t0 = time.monotonic()
    res = cli(hosts, "up", "-c", str(spec_file))
    wall = time.monotonic() - t0
    if res.returncode != 0:
        raise SystemExit(f"up failed: {res.stderr[-2000:]}")
    state = read_state(load_spec(spec_file).state_dir or Path())
    assert state is not None
    down = cli(hosts, "down", "-c", str(spec_file))
    if down.returncode != 0:
        raise SystemExit(f"down failed: {down.stderr[-2000:]}")
    return {"up_seconds": float(state.up_seconds or 0.0), "up_wall_seconds": round(wall, 3)}


def wait_ready(root: Path, run: subprocess.Popen[str], after: float, timeout: float = 300) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if run.poll() is not None:
            raise SystemExit(f"`up --foreground` exited: {run.stderr.read() if run.stderr else ''}")
        try:
            state = read_state(root)
        except Exception:  # noqa: BLE001 - a state file being replaced
            state = None
        if state is not None and state.phase == "ready" and state.started_at > after:
            return state
        time.sleep(0.05)
    raise SystemExit("the cluster was not ready in time")


def recovery(hosts: BridgeHosts, base: Path, runs: int) -> list[dict[str, Any]]:
    supervise = "[supervise]\nbackoff_initial = 0.5\nbackoff_max = 4\npoll_seconds = 0.5\n"
    spec_file = ray_spec(base / "sup.toml", hosts, "benchsup", PY, supervise=supervise)
    spec = load_spec(spec_file)
    root = spec.state_dir or Path()
    run = subprocess.Popen(
        hosts.head_cmd(PY, "-m", "splitserve", "up", "-c", str(spec_file), "--foreground"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    out = []
    try:
        wait_ready(root, run, 0.0)
        for i in range(runs):
            box = hosts.boxes[i % len(hosts.boxes)]
            t_kill = time.time()
            os.kill(hosts.pid_of(box, "raylet"), signal.SIGKILL)
            state = wait_ready(root, run, t_kill)
            died = [e for e in read_supervisor_log(spec) if e["kind"] == "died" and float(str(e["time"])) >= t_kill]
            out.append(
                {
                    "box": box.name,
                    "noticed_seconds": round(float(str(died[0]["time"])) - t_kill, 3) if died else float("nan"),
                    "recovered_seconds": round((state.ready_at or time.time()) - t_kill, 3),
                }
            )
    finally:
        if run.poll() is None:
            os.kill(run.pid, signal.SIGTERM)
        run.wait(120)
    return out


def summary(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3), "max": round(max(values), 3)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=3, help="ups and kills to time (default 3)")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args()
    why = unavailable()
    if why:
        raise SystemExit(f"bench_ray_up: {why}")
    import ray

    with tempfile.TemporaryDirectory(prefix="bench-ray-") as tmp:
        base = Path(tmp)
        (base / "hosts").mkdir()
        hosts_iter = make_bridge_hosts(base / "hosts", 2)
        hosts = next(hosts_iter)
        try:
            ups = [one_up(hosts, base, i) for i in range(args.runs)]
            kills = recovery(hosts, base, args.runs)
        finally:
            hosts_iter.close()
    result = {
        "what": "splitserve up of a CPU Ray cluster (backend vllm, launcher ray, ray_probe) over 3 nodes: "
        "a head and 2 network-namespace boxes over real SSH; then kill -9 of a box's raylet under "
        "`up --foreground` (poll 0.5 s, backoff 0.5 s)",
        "nodes": 3,
        "ray": ray.__version__,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "kernel": platform.release()},
        "up_seconds": summary([u["up_seconds"] for u in ups]),
        "noticed_seconds": summary([k["noticed_seconds"] for k in kills]),
        "recovered_seconds": summary([k["recovered_seconds"] for k in kills]),
        "runs": {"up": ups, "kill_raylet": kills},
        "command": "sudo .venv/bin/python benchmarks/bench_ray_up.py --runs " + str(args.runs),
    }
    text = json.dumps(result, indent=2)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
