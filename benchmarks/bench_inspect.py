"""How long ``inspect`` (and ``plan``) take on a 6-shard ~200 GB model: the target is under 2 s.

Writes the header-true MiniMax-M3-like stand-in (``tests/gguf_factory.py``: 60 layers, 128
experts, a 200k-token vocabulary, ~210 GB on paper, a few MB on disk) into a temporary folder,
then times, over ``--repeat`` runs with a cold page cache where possible (``posix_fadvise``
DONTNEED on every shard before each run):

- ``inspect_model`` in-process (the headers of all six shards),
- ``splitserve inspect --json`` as a user runs it (interpreter start-up and imports included; its
  CPU time too, which a busy machine does not inflate the way it inflates wall time),
- ``make_plan`` for two GB10 nodes at 64k q8_0 (split search, max context per KV type, parallel).

    .venv/bin/python benchmarks/bench_inspect.py --out benchmarks/results/inspect.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from gguf_factory import minimax_m3_like

from splitserve.model import inspect_model
from splitserve.plan import PlanOptions, make_plan, parse_node


def _drop_cache(paths: list[Path]) -> None:
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "inspect.json")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-inspect-") as tmp:
        t0 = time.perf_counter()
        shards = minimax_m3_like(Path(tmp) / "m3", n_shards=6)
        build_s = time.perf_counter() - t0
        paper = sum(p.stat().st_size for p in shards)
        disk = sum(p.stat().st_blocks * 512 for p in shards)
        lib, cli, cli_cpu, plan = [], [], [], []
        for _ in range(args.repeat):
            _drop_cache(shards)
            t = time.perf_counter()
            info = inspect_model(shards[0])
            lib.append(time.perf_counter() - t)
            _drop_cache(shards)
            t = time.perf_counter()
            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            proc = subprocess.run([sys.executable, "-m", "splitserve", "inspect", str(shards[2]), "--json"],
                                  capture_output=True, text=True, check=True)
            cli.append(time.perf_counter() - t)
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            cli_cpu.append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
            assert json.loads(proc.stdout)["n_layer"] == 60
            nodes = [parse_node("spark1=121,device=gb10"), parse_node("spark2=121,device=gb10")]
            t = time.perf_counter()
            make_plan(info, nodes, PlanOptions(ctx=65536, cache_type_k="q8_0", cache_type_v="q8_0", ubatch=2048))
            plan.append(time.perf_counter() - t)
    result = {
        "benchmark": "inspect",
        "model": {"shape": "MiniMax-M3-like", "shards": len(shards), "bytes_on_paper": paper,
                  "bytes_on_disk": disk, "tensors": sum(v["tensors"] for v in info.quant_mix.values()),
                  "vocab": info.n_vocab},
        "build_seconds": round(build_s, 3),
        "inspect_seconds": {"median": round(statistics.median(lib), 4), "max": round(max(lib), 4), "runs": lib},
        "cli_inspect_seconds": {"median": round(statistics.median(cli), 4), "max": round(max(cli), 4), "runs": cli},
        "cli_inspect_cpu_seconds": {"median": round(statistics.median(cli_cpu), 4), "runs": cli_cpu},
        "load_average": os.getloadavg(),
        "plan_seconds": {"median": round(statistics.median(plan), 4), "max": round(max(plan), 4), "runs": plan},
        "target_seconds": 2.0,
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "system": platform.platform()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"stand-in: {len(shards)} shards, {paper / 1e9:.1f} GB on paper, {disk / 2**20:.1f} MiB on disk")
    print(f"inspect (library): median {result['inspect_seconds']['median']:.3f} s, max {max(lib):.3f} s")
    print(f"splitserve inspect --json (CLI, process start included): median "
          f"{result['cli_inspect_seconds']['median']:.3f} s, max {max(cli):.3f} s")
    print(f"  CPU time of that process (user + system): median {statistics.median(cli_cpu):.3f} s; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"plan (2 x GB10, 64k q8_0): median {result['plan_seconds']['median']:.3f} s")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
