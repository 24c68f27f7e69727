"""Portable vs native CPU engine: prefill and decode through two local RPC workers.

The portable engine (the default: every CPU variant, the best chosen at start) must not be
slower than the ``--native`` one by more than 5%. Both serve SmolLM2-135M split over two
loopback ggml-rpc-server workers (one thread each: the two cores of a small machine), measured
with llama-bench through the workers, rounds interleaved so drift hits both alike.

    .venv/bin/python benchmarks/bench_engine_portable.py --portable KEY --native KEY \\
        --rounds 3 --out benchmarks/results/engine-portable.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import time
from pathlib import Path

from splitserve._assets import smollm2_path
from splitserve.engine import get_engine
from _procs import died, spawn  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_once(key: str, model: Path, pp: int, tg: int, reps: int) -> dict[str, float]:
    engine = get_engine(key)
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    ports = [_free_port(), _free_port()]
    workers = [spawn([str(engine.rpc_server), "-H", "127.0.0.1", "-p", str(p), "-t", "1"], f"rpc-{p}", env=env)
               for p in ports]
    try:
        for p, w in zip(ports, workers):
            deadline = time.monotonic() + 20
            while socket.socket().connect_ex(("127.0.0.1", p)) != 0:
                if w.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(died(w, f"ggml-rpc-server of {key} (not listening)"))
                time.sleep(0.05)
        res = subprocess.run([str(engine.bench), "-m", str(model), "--rpc", ",".join(f"127.0.0.1:{p}" for p in ports),
                              "-ngl", "99", "-ts", "1/1", "-p", str(pp), "-n", str(tg), "-r", str(reps), "-t", "1",
                              "-o", "json"], env=env, capture_output=True, text=True, timeout=1800)
        if res.returncode != 0:
            raise SystemExit(f"llama-bench of {key} failed: {res.stderr.strip().splitlines()[-1:]}")
        rows = json.loads(res.stdout)
        out = {}
        for r in rows:
            kind = "prefill" if r["n_prompt"] else "decode"
            out[kind] = float(r["avg_ts"])
            out[f"{kind}_sd"] = float(r["stddev_ts"])
        out["cpu_variant"] = engine.provenance.get("cpu_variant_chosen")  # type: ignore[assignment]
        return out
    finally:
        for w in workers:
            w.kill()
            w.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--portable", required=True, help="engine key of the portable build")
    ap.add_argument("--native", required=True, help="engine key of the --native build")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pp", type=int, default=256)
    ap.add_argument("--tg", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3, help="llama-bench repetitions per round")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/engine-portable.json"))
    args = ap.parse_args()
    model = smollm2_path()
    runs: dict[str, list[dict[str, float]]] = {"portable": [], "native": []}
    for i in range(args.rounds):
        for name in (("portable", "native") if i % 2 == 0 else ("native", "portable")):
            r = run_once(getattr(args, name), model, args.pp, args.tg, args.reps)
            runs[name].append(r)
            print(f"round {i + 1} {name:8s} prefill {r['prefill']:8.1f} t/s  decode {r['decode']:6.1f} t/s", flush=True)
    summary = {}
    for name, rs in runs.items():
        summary[name] = {k: round(statistics.median(r[k] for r in rs), 2) for k in ("prefill", "decode")}
    ratio = {k: round(summary["portable"][k] / summary["native"][k], 3) for k in ("prefill", "decode")}
    builds = {name: get_engine(getattr(args, name)).provenance.get("build_seconds") for name in runs}
    result = {"machine": {"host": platform.node(), "cpus": os.cpu_count()}, "model": model.name,
              "pp": args.pp, "tg": args.tg, "rounds": args.rounds, "runs": runs, "median": summary,
              "portable_over_native": ratio, "build_seconds": builds,
              "within_5_percent": all(v >= 0.95 for v in ratio.values())}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    md = args.out.with_suffix(".md")
    md.write_text("| engine | build s | prefill t/s | decode t/s |\n|---|---|---|---|\n" + "".join(
        f"| {n} | {builds[n]} | {summary[n]['prefill']} | {summary[n]['decode']} |\n" for n in runs)
        + f"\nportable / native: prefill {ratio['prefill']}, decode {ratio['decode']}\n")
    print(md.read_text())


if __name__ == "__main__":
    main()
