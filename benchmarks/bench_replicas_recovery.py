"""A replica's recovery: with ``topology = "replicas"`` (the head here and one network-namespace
box over real SSH, a llama-server on each, SmolLM2-135M), SIGKILL one replica's llama-server
while clients keep sending requests through the gateway, and time until that replica serves
again (its supervisor restarts it alone); count the requests that failed meanwhile.

    .venv/bin/python benchmarks/bench_replicas_recovery.py [--runs 6] [--kill w1,head] [--clients 2]
        [--poll 0.2] [--backoff 0.5] [--out benchmarks/results/replicas_recovery.json]

Started as a user does (`splitserve up -c SPEC`, which leaves its supervisor in the background;
`splitserve down` at the end). Each run waits until both replicas answer /health 200, starts
``--clients`` threads that each send one short chat completion (max_tokens 4, no session) after
another, kills the replica's llama-server with SIGKILL (``--kill`` cycles through the nodes), and
polls until the state names a new pid for that node and its /health answers 200 (the return).
Breakdown from the supervisor's log: detection (kill -> "died"), then the restart ("restarted":
the backoff, the start, the model load and a first one-token completion). Requests are counted
over [kill, return + 1 s]: failed = any answer other than 200 (5xx counted apart) or a transport
error, split into those in flight at the kill (already sent to the killed replica: their
connection drops, 502) and those sent after it (``failed_new``: the gateway should route them to
the other replica).

Needs root, iproute2 and openssh-server (the multi-host test fixture, tests/multihost/netns_hosts.py).
On this 2-core box both llama-servers, the gateway and the clients share the two cores.
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
import threading
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "multihost")]

from helpers import free_ports  # noqa: E402
from splitserve._assets import smollm2_path  # noqa: E402
from splitserve.cluster import cluster_state_dir, load_spec, read_state, read_supervisor_log  # noqa: E402

CLI = [sys.executable, "-m", "splitserve"]


def write_spec(path: Path, model: Path, hosts: Any, state: Path, poll: float, backoff: float) -> Path:
    box = hosts.boxes[0]
    head_port, gw_port, port = free_ports(3)
    path.write_text(
        f'name = "reprec"\nmodel = "{model}"\nstate_dir = "{state}"\ntopology = "replicas"\n'
        f'[ssh]\nconfig = "{hosts.ssh_config}"\nconnect_timeout = 5\n'
        f'[[workers]]\nname = "w1"\nhost = "{box.name}"\nbind = "{box.address}"\nport = {port}\n'
        f'workdir = "{box.workdir}"\n'
        f"[server]\nport = {head_port}\nctx_size = 2048\n[gateway]\nport = {gw_port}\n"
        f"[supervise]\nbackoff_initial = {backoff}\npoll_seconds = {poll}\nstable_seconds = 5\n"
    )
    return path


class Clients:
    """Threads that each send one request after another until stopped; every answer recorded."""

    def __init__(self, endpoint: str, n: int) -> None:
        self.endpoint = endpoint
        self.stop = threading.Event()
        self.records: list[tuple[float, float, str]] = []  # (start, end, "200" / "503" / error name)
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._loop, args=(i,), daemon=True) for i in range(n)]

    def _loop(self, i: int) -> None:
        k = 0
        with httpx.Client(timeout=120) as client:
            while not self.stop.is_set():
                k += 1
                body = {
                    "messages": [{"role": "user", "content": f"Client {i}, request {k}: say a color."}],
                    "max_tokens": 4,
                    "temperature": 0,
                }
                t0 = time.monotonic()
                try:
                    outcome = str(client.post(f"{self.endpoint}/v1/chat/completions", json=body).status_code)
                except httpx.HTTPError as exc:
                    outcome = type(exc).__name__
                with self.lock:
                    self.records.append((t0, time.monotonic(), outcome))

    def __enter__(self) -> Clients:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(180)


def healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def one_run(spec_file: Path, hosts: Any, node: str, clients: int) -> dict[str, Any]:
    spec = load_spec(spec_file)
    root = cluster_state_dir(spec)
    state = read_state(root)
    assert state is not None
    urls = {r["name"]: r["url"] for r in state.extra["replicas"]}
    deadline = time.monotonic() + 300
    while not all(healthy(u) for u in urls.values()):
        assert time.monotonic() < deadline, "replicas not healthy"
        time.sleep(0.2)
    time.sleep(5.5)  # past stable_seconds: the first backoff again
    state = read_state(root)
    assert state is not None
    rec = next(p for p in state.processes if p.node == node and p.role == "server")
    log_before = len(read_supervisor_log(spec))
    with Clients(state.endpoint, clients) as cl:
        time.sleep(1.0)
        t_kill = time.monotonic()
        wall_kill = time.time()
        if node == "head":
            os.kill(rec.pid, signal.SIGKILL)
        else:
            hosts.boxes[0].exec("kill", "-9", str(rec.pid))
        while True:
            now = read_state(root)
            pid = next((p.pid for p in now.processes if p.node == node), rec.pid) if now else rec.pid
            if pid != rec.pid and healthy(urls[node]):
                break
            assert time.monotonic() - t_kill < 300, f"{node} did not come back"
            time.sleep(0.05)
        t_back = time.monotonic()
        time.sleep(1.0)
    window = [r for r in cl.records if r[1] >= t_kill and r[0] <= t_back + 1.0]
    failed = [r for r in window if r[2] != "200"]
    log = read_supervisor_log(spec)[log_before:]
    died = next((e for e in log if e["kind"] == "died" and e["node"] == node), None)
    back = next((e for e in log if e["kind"] == "restarted" and e["node"] == node), None)
    return {
        "killed": node,
        "recovery_s": round(t_back - t_kill, 3),
        "detect_s": round(float(died["time"]) - wall_kill, 3) if died else None,
        "restart_s": round(float(back["time"]) - float(died["time"]), 3) if died and back else None,
        "requests": len(window),
        "failed": len(failed),
        "failed_5xx": sum(1 for r in failed if r[2].startswith("5")),
        "failures": sorted({r[2] for r in failed}),
        "in_flight_at_kill": sum(1 for r in window if r[0] < t_kill),
        "failed_in_flight": sum(1 for r in failed if r[0] < t_kill),
        "failed_new": sum(1 for r in failed if r[0] >= t_kill),
        "requests_before": sum(1 for r in cl.records if r[1] < t_kill),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("--kill", default="w1,head", help="the replicas to kill, in turn")
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--poll", type=float, default=0.2, help="supervise.poll_seconds")
    ap.add_argument("--backoff", type=float, default=0.5, help="supervise.backoff_initial")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "replicas_recovery.json")
    args = ap.parse_args()
    from netns_hosts import make_hosts, unavailable

    why = unavailable()
    if why:
        raise SystemExit(f"namespace hosts unavailable ({why})")
    nodes = args.kill.split(",")
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        (tmp / "hosts").mkdir()
        gen = make_hosts(tmp / "hosts", 1)
        hosts = next(gen)
        spec_file = write_spec(tmp / "reprec.toml", smollm2_path(), hosts, tmp / "st", args.poll, args.backoff)
        res = subprocess.run([*CLI, "up", "-c", str(spec_file)], capture_output=True, text=True, timeout=600)
        if res.returncode != 0:
            raise SystemExit(f"up failed: {res.stderr}")
        runs = []
        try:
            for i in range(args.runs):
                run = one_run(spec_file, hosts, nodes[i % len(nodes)], args.clients)
                print(json.dumps(run), flush=True)
                runs.append(run)
        finally:
            subprocess.run([*CLI, "down", "-c", str(spec_file)], capture_output=True, text=True, timeout=300)
            gen.close()
    summary: dict[str, Any] = {}
    for node in nodes:
        mine = [r for r in runs if r["killed"] == node]
        if mine:
            summary[node] = {
                "runs": len(mine),
                "recovery_median_s": statistics.median(r["recovery_s"] for r in mine),
                "recovery_max_s": max(r["recovery_s"] for r in mine),
                "requests": sum(r["requests"] for r in mine),
                "failed": sum(r["failed"] for r in mine),
                "failed_5xx": sum(r["failed_5xx"] for r in mine),
                "failed_in_flight": sum(r["failed_in_flight"] for r in mine),
                "failed_new": sum(r["failed_new"] for r in mine),
            }
    out = {
        "bench": "replicas_recovery",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "setup": "topology = replicas: the head here + 1 network-namespace box over SSH (veth, sshd), "
        "a llama-server on each, SmolLM2-135M Q4_1, ctx 2048; gateway with both replicas",
        "machine": f"{platform.machine()}, {os.cpu_count()} cores shared by both replicas, the gateway and clients; "
        f"load {os.getloadavg()[0]:.1f} at the end",
        "clients": args.clients,
        "poll_seconds": args.poll,
        "backoff_initial": args.backoff,
        "summary": summary,
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
