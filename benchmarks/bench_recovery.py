"""Recovery time after a worker is killed: SIGKILL an RPC worker of a supervised cluster and
time until a completion succeeds again.

    .venv/bin/python benchmarks/bench_recovery.py [--runs 5] [--local] [--backoff 1.0]
        [--kill w1,w2] [--poll 0.2] [--plain-up] [--out benchmarks/results/recovery.json]

``--plain-up`` starts the cluster the way a user does, `splitserve up -c SPEC` (a real process
that leaves its supervisor in the background and exits), and stops it with `splitserve down`;
without it the supervisor runs in this process. The figure of issue 28 (median of 8 per process
kind under plain `up`):

    .venv/bin/python benchmarks/bench_recovery.py --plain-up --local --runs 32 \
        --kill w1,w2,head,gateway --poll 0.5 --out benchmarks/results/recovery_plain_up.json

``--kill w1,w2,head,gateway`` cycles through those processes (one per run; ``--local`` for the
head and the gateway, which run here); ``--poll`` is ``supervise.poll_seconds`` (0.5 is the
default of a spec). A dead gateway is restarted alone (no backoff): its breakdown is
detection and restart only.

By default the cluster spans two network-namespace hosts reached over real SSH (the
multi-host test fixture, tests/multihost/netns_hosts.py; needs root, iproute2 and
openssh-server); ``--local`` uses two loopback workers instead. SmolLM2-135M, layers split
1:1, supervised as by `splitserve run` (in-process). Each run kills w1 or w2 (alternating)
with SIGKILL, then sends a one-token completion every 50 ms until one succeeds. The
breakdown comes from the supervisor's log: detection (kill -> "died"), the backoff wait,
and the restart (stop everything, start workers, load the model, first completion).
``supervise.stable_seconds`` is set to 5 and each run waits that long first, so every run
starts from the initial backoff.
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

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "multihost")]

from helpers import free_ports, two_worker_spec

from splitserve._assets import smollm2_path
from splitserve.cluster import (
    Supervisor,
    cluster_state_dir,
    load_spec,
    read_state,
    read_supervisor_log,
)
from splitserve.engine import get_engine


def wait_ready(root: Path, after: float, timeout: float = 300) -> dict[str, int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = read_state(root)
        if state is not None and state.phase == "ready" and (state.ready_at or 0) > after:
            return {p.node: p.pid for p in state.processes}
        time.sleep(0.05)
    raise SystemExit("cluster did not become ready")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--local", action="store_true", help="loopback workers instead of namespace hosts over SSH")
    ap.add_argument("--backoff", type=float, default=1.0, help="supervise.backoff_initial (seconds)")
    ap.add_argument("--kill", default="w1,w2", help="processes to SIGKILL, cycled: w1,w2,head,gateway")
    ap.add_argument("--poll", type=float, default=0.2, help="supervise.poll_seconds")
    ap.add_argument("--engine", default=None, help="engine key or folder (default: the newest built)")
    ap.add_argument("--plain-up", action="store_true",
                    help="start with `splitserve up` (background supervisor), stop with `splitserve down`")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "recovery.json")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-recovery-"))
    os.environ["SPLITSERVE_STATE"] = str(tmp / "state")
    engine = get_engine(args.engine)
    model = smollm2_path()
    sup_toml = f"[supervise]\nbackoff_initial = {args.backoff}\nstable_seconds = 5\npoll_seconds = {args.poll}\n"
    targets = [t.strip() for t in args.kill.split(",") if t.strip()]
    hosts_gen = None
    kill: dict[str, object] = {}
    if args.local:
        spec_file = two_worker_spec(tmp, model, name="recovery")
        text = spec_file.read_text()
        if args.engine:  # the spec names it, so `up` and its supervisor use it too
            text = text.replace("model = ", f"engine = {json.dumps(args.engine)}\nmodel = ", 1)
        spec_file.write_text(text + "\n" + sup_toml)
        mode = "local loopback workers"
    else:
        from netns_hosts import make_hosts, remote_spec, unavailable

        why = unavailable()
        if why:
            raise SystemExit(f"namespace hosts unavailable ({why}); use --local")
        (tmp / "hosts").mkdir()
        hosts_gen = make_hosts(tmp / "hosts", 2)
        hosts = next(hosts_gen)
        (hp,) = free_ports(1)
        spec_file = remote_spec(tmp / "recovery.toml", model, hosts, "recovery", head_port=hp, extra=sup_toml)
        kill = {"w1": hosts.boxes[0], "w2": hosts.boxes[1]}
        mode = "2 network-namespace hosts over SSH (veth, sshd)"
    spec = load_spec(spec_file)
    root = cluster_state_dir(spec)
    sup = Supervisor(spec, engine=engine)
    thread = threading.Thread(target=sup.run, daemon=True)
    cli = [sys.executable, "-m", "splitserve"]
    runs = []
    try:
        t_start = time.time()
        if args.plain_up:
            mode += ", plain `splitserve up` (its background supervisor)"
            res = subprocess.run([*cli, "up", "-c", str(spec_file)], capture_output=True, text=True, timeout=900)
            if res.returncode != 0:
                raise SystemExit(f"splitserve up failed: {res.stderr.strip().splitlines()[-1:]}")
        else:
            thread.start()
        pids = wait_ready(root, t_start - 1)
        endpoint = read_state(root).endpoint  # type: ignore[union-attr]
        for i in range(args.runs):
            time.sleep(spec.supervise.stable_seconds + 0.5)
            node = targets[i % len(targets)]
            old_gateway = pids.get("gateway")
            t_kill = time.time()
            box = kill.get(node)
            if box is not None:
                box.exec("kill", "-9", str(pids[node]))  # type: ignore[attr-defined]
            else:
                os.kill(pids[node], signal.SIGKILL)
            t0 = time.monotonic()
            while True:
                try:
                    r = httpx.post(f"{endpoint}/completion", timeout=30,
                                   json={"prompt": "Hi", "n_predict": 1, "cache_prompt": False})
                    if r.status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() - t0 > 300:
                    raise SystemExit("no recovery within 300 s")
                time.sleep(0.05)
            recovery = time.monotonic() - t0
            if node == "gateway":  # restarted alone: the state's ready time stays
                while (st := read_state(root)) is None or st.gateway is None or st.gateway.pid == old_gateway:
                    time.sleep(0.05)
                pids = {p.node: p.pid for p in st.processes}
            else:
                pids = wait_ready(root, t_kill)
            want = "restarted" if node == "gateway" else "ready"
            for _ in range(200):  # the supervisor writes its line just after the process serves
                log = [e for e in read_supervisor_log(spec) if float(e["time"]) >= t_kill]  # type: ignore[arg-type]
                if any(e["kind"] == want for e in log):
                    break
                time.sleep(0.05)
            died = next(e for e in log if e["kind"] == "died")
            if node == "gateway":
                restarted = next(e for e in log if e["kind"] == "restarted")
                restarting, ready = died, restarted
            else:
                restarting = next(e for e in log if e["kind"] == "restarting")
                ready = next(e for e in log if e["kind"] == "ready")
            row = {"run": i + 1, "killed": node, "recovery_s": round(recovery, 3),
                   "detect_s": round(float(died["time"]) - t_kill, 3),  # type: ignore[arg-type]
                   "stop_s": round(float(restarting["time"]) - float(died["time"]), 3),  # type: ignore[arg-type]
                   "backoff_s": restarting.get("delay", 0.0),
                   "restart_s": round(float(ready["time"]) - float(restarting["time"]) - float(restarting.get("delay") or 0), 3),  # type: ignore[arg-type]
                   "cause": died["message"],
                   "deaths": [e["node"] for e in log if e["kind"] == "died"]}
            runs.append(row)
            print(f"run {i + 1}: killed {node}, recovered in {recovery:.2f} s "
                  f"(detect {row['detect_s']:.2f}, stop {row['stop_s']:.2f}, backoff {row['backoff_s']}, "
                  f"restart {row['restart_s']:.2f})",
                  flush=True)
    finally:
        if args.plain_up:
            subprocess.run([*cli, "down", "-c", str(spec_file)], capture_output=True, text=True, timeout=300)
        else:
            sup.stop()
            thread.join(120)
        if hosts_gen is not None:
            hosts_gen.close()
    rec = [r["recovery_s"] for r in runs]
    result = {"benchmark": "recovery", "mode": mode, "model": model.name, "engine": engine.key,
              "backoff_initial_s": args.backoff, "poll_seconds": args.poll, "plain_up": args.plain_up,
              "killed": targets, "runs": runs,
              "median_recovery_s_per_node": {n: round(statistics.median(r["recovery_s"] for r in runs
                                                                         if r["killed"] == n), 3)
                                             for n in targets if any(r["killed"] == n for r in runs)},
              "median_recovery_s": round(statistics.median(rec), 3), "min_recovery_s": min(rec),
              "max_recovery_s": max(rec),
              "median_restart_s": round(statistics.median(float(r["restart_s"]) for r in runs), 3),
              "machine": {"system": platform.system(), "machine": platform.machine(), "cpus": os.cpu_count()},
              "command": " ".join([Path(sys.executable).name, *sys.argv])}
    print(f"\nmedian recovery {result['median_recovery_s']:.2f} s over {len(rec)} runs "
          f"(min {min(rec):.2f}, max {max(rec):.2f}); mode: {mode}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
