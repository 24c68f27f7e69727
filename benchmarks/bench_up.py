"""How much time `splitserve up` adds on top of llama-server's own load time, and
the demo's wall time and speeds.

    .venv/bin/python benchmarks/bench_up.py [--repeat 3] [--out results/bench_up.json]

For each repeat it (1) starts two RPC workers and a bare llama-server with the very
command lines `up` would use and times llama-server from exec to /health 200,
then (2) times `up()` as a whole (spec to ready, including the one-token check)
and (3) the `splitserve up` command (process start included). The overhead is
(2) - (1). Then it runs `splitserve demo -o FILE` and reports its wall time and
the pp/tg speeds it printed. Needs the CPU engine in the cache. `up` starts the gateway
too (ready = its /health 200 as well); `--no-gateway` measures without it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from helpers import two_worker_spec  # noqa: E402

from splitserve._assets import smollm2_path  # noqa: E402
from splitserve.cluster import down, launch_plan, load_spec, up  # noqa: E402
from splitserve.cluster._commands import process_env  # noqa: E402
from splitserve.cluster._edges import port_answers, port_in_use  # noqa: E402
from splitserve.engine import BuildOptions, build_engine  # noqa: E402
from _procs import died, spawn  # noqa: E402


def bare_load_seconds(spec, engine) -> float:  # type: ignore[no-untyped-def]
    """llama-server from exec to /health 200, workers already listening (same argv as `up`)."""
    plan = launch_plan(spec, {"head": engine} | {w.name: engine for w in spec.workers})
    procs = []
    try:
        for w in plan.workers:
            procs.append(spawn(w.argv, w.node, env=process_env(w), start_new_session=True))
        for w, p in zip(plan.workers, procs):
            while not port_answers(w.bind, w.port, 0.2):
                if p.poll() is not None:
                    raise SystemExit(died(p, f"ggml-rpc-server {w.node}"))
                time.sleep(0.005)
        t0 = time.monotonic()
        head = spawn(plan.head.argv, "head", env=process_env(plan.head), start_new_session=True)
        procs.append(head)
        with httpx.Client(timeout=5) as client:
            while True:
                try:
                    if client.get(f"{plan.engine_endpoint}/health").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if head.poll() is not None:
                    raise SystemExit(died(head, "bare llama-server"))
                time.sleep(0.005)
        return time.monotonic() - t0
    finally:
        for p in reversed(procs):
            p.kill()
            p.wait()
        for w in plan.workers:
            while port_in_use(w.bind, w.port):
                time.sleep(0.05)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("results/bench_up.json"))
    ap.add_argument("--no-gateway", action="store_true",
                    help="[gateway] enabled = false: llama-server's endpoint only (what the gateway adds)")
    args = ap.parse_args()
    engine, _ = build_engine(BuildOptions(backend="cpu"))
    model = smollm2_path()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["SPLITSERVE_STATE"] = str(Path(tmp) / "state")
        for i in range(args.repeat):
            spec_file = two_worker_spec(Path(tmp), model, name=f"bench{i}",
                                        gateway={"enabled": False} if args.no_gateway else None)
            spec = load_spec(spec_file)
            bare = bare_load_seconds(spec, engine)
            t0 = time.monotonic()
            state = up(spec, engine=engine)
            lib_up = time.monotonic() - t0
            down(spec)
            t0 = time.monotonic()
            res = subprocess.run([sys.executable, "-m", "splitserve", "up", "-c", str(spec_file)],
                                 capture_output=True, text=True)
            cli_up = time.monotonic() - t0
            subprocess.run([sys.executable, "-m", "splitserve", "down", "-c", str(spec_file)], capture_output=True)
            if res.returncode != 0:
                raise SystemExit(res.stderr)
            row = {"bare_server_load_s": round(bare, 3), "up_s": round(lib_up, 3),
                   "up_recorded_load_s": state.load_seconds, "cli_up_s": round(cli_up, 3),
                   "overhead_s": round(lib_up - bare, 3), "cli_overhead_s": round(cli_up - bare, 3)}
            rows.append(row)
            print(f"run {i + 1}: llama-server alone {bare:.3f} s, up() {lib_up:.3f} s "
                  f"(+{lib_up - bare:.3f} s), `splitserve up` {cli_up:.3f} s (+{cli_up - bare:.3f} s)")
        demo_json = Path(tmp) / "demo.json"
        t0 = time.monotonic()
        res = subprocess.run([sys.executable, "-m", "splitserve", "demo", "-o", str(demo_json)],
                             capture_output=True, text=True)
        demo_wall = time.monotonic() - t0
        if res.returncode != 0:
            raise SystemExit(res.stderr)
        demo = json.loads(demo_json.read_text())
    result = {
        "machine": {"host": platform.node(), "cpus": os.cpu_count(), "arch": platform.machine()},
        "engine": engine.key,
        "gateway": not args.no_gateway,
        "loadavg": list(os.getloadavg()),
        "runs": rows,
        "median_overhead_s": statistics.median(r["overhead_s"] for r in rows),
        "median_cli_overhead_s": statistics.median(r["cli_overhead_s"] for r in rows),
        "median_bare_server_load_s": statistics.median(r["bare_server_load_s"] for r in rows),
        "demo": {"wall_s": round(demo_wall, 2), "pp_tps": demo["prompt_per_second"],
                 "tg_tps": demo["predicted_per_second"], "prompt_tokens": demo["prompt_tokens"],
                 "completion_tokens": demo["completion_tokens"], "memory": demo["memory"]},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"median overhead of up(): {result['median_overhead_s']:.3f} s; of the `splitserve up` command: "
          f"{result['median_cli_overhead_s']:.3f} s (llama-server alone: {result['median_bare_server_load_s']:.3f} s)")
    print(f"demo wall {demo_wall:.1f} s (engine cached); pp {demo['prompt_per_second']:.1f} t/s, "
          f"tg {demo['predicted_per_second']:.1f} t/s")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
