"""Fetch throughput against a per-connection bandwidth cap, and memory during a big download.

Starts the local hub server (``tests/hubserver.py``) in its own process with a cap on every
connection's bandwidth, then runs ``splitserve fetch`` as a subprocess with 1, 4 and 16
connections on files sized so each run lasts about ``--seconds``.  Two throughputs per run,
both from ``fetch --json``: *transfer* (bytes received over first-to-last byte) and *end to
end* (the file over the whole fetch: URL resolve, transfer, SHA-256 tail, fsync, rename); the
target is at least 0.9 × connections × cap, up to what the machine can move.  Last, an
uncapped 16-connection download of a large sparse file gives the machine's own limit and
the client's peak RSS (from ``wait4``), next to its peak on a 256 MiB file (all 16
connections busy there too, so the difference is what grows with the file: nothing).

    .venv/bin/python benchmarks/bench_fetch.py --cap-mib 4 --seconds 10 --big-mib 4096 \\
        --out benchmarks/results/fetch.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-c", "from splitserve.cli import main; main()"]
REPO = "bench/Fetch-GGUF"
MiB = 1 << 20


def _run_fetch(endpoint: str, name: str, out: Path, connections: int) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env |= {"HF_ENDPOINT": endpoint, "HF_HOME": str(out.parent / "hf"),
            "HF_HUB_DISABLE_TELEMETRY": "1"}
    proc = subprocess.Popen([*CLI, "fetch", REPO, "--include", name, "--dir", str(out),
                             "--connections", str(connections), "--json", "--quiet"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    stdout = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    stderr = proc.stderr.read()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"fetch failed: {stderr.decode(errors='replace')[-2000:]}")
    result = json.loads(stdout)
    size = (out / name).stat().st_size
    shutil.rmtree(out, ignore_errors=True)
    return {"bytes": size, "seconds": result["seconds"],
            "mib_per_s": size / MiB / result["seconds"],
            "transfer_seconds": result["transfer_seconds"],
            "transfer_mib_per_s": result["moved_bytes"] / MiB / result["transfer_seconds"],
            "peak_rss_mib": usage.ru_maxrss / 1024, "cpu_s": usage.ru_utime + usage.ru_stime}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cap-mib", type=float, default=4.0, help="per-connection cap, MiB/s")
    ap.add_argument("--seconds", type=float, default=10.0, help="target duration of each capped run")
    ap.add_argument("--connections", default="1,4,16")
    ap.add_argument("--big-mib", type=int, default=4096, help="size of the uncapped memory run")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "fetch.json")
    args = ap.parse_args()
    counts = [int(c) for c in args.connections.split(",")]
    cap = args.cap_mib

    tmp = Path(tempfile.mkdtemp(prefix="bench-fetch-"))
    results: dict[str, object] = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version(),
                    "loadavg_at_start": os.getloadavg()},
        "cap_mib_per_s_per_connection": cap, "runs": [],
    }
    servers = []
    try:
        # capped server: one file per connection count, sized for ~--seconds at full speed
        sparse = [f"--sparse=c{n}.gguf:{int(cap * n * args.seconds)}" for n in counts]
        capped = subprocess.Popen([sys.executable, str(ROOT / "tests" / "hubserver.py"),
                                   "--repo", REPO, "--root", str(tmp / "srv-capped"),
                                   "--cap-mib", str(cap), *sparse], stdout=subprocess.PIPE)
        servers.append(capped)
        free = subprocess.Popen([sys.executable, str(ROOT / "tests" / "hubserver.py"),
                                 "--repo", REPO, "--root", str(tmp / "srv-free"),
                                 f"--sparse=big.gguf:{args.big_mib}", "--sparse=small.gguf:256"],
                                stdout=subprocess.PIPE)
        servers.append(free)
        assert capped.stdout is not None and free.stdout is not None
        ep_capped = json.loads(capped.stdout.readline())["endpoint"]
        ep_free = json.loads(free.stdout.readline())["endpoint"]

        runs = []
        for n in counts:
            r = _run_fetch(ep_capped, f"c{n}.gguf", tmp / f"out-c{n}", n)
            r |= {"connections": n, "ideal_mib_per_s": cap * n,
                  "transfer_ratio_to_n_x_cap": r["transfer_mib_per_s"] / (cap * n),
                  "end_to_end_ratio_to_n_x_cap": r["mib_per_s"] / (cap * n)}
            runs.append(r)
            print(f"{n:>3} connections: transfer {r['transfer_mib_per_s']:7.1f} MiB/s = "
                  f"{r['transfer_ratio_to_n_x_cap']:.3f} x ({n} x {cap:g} MiB/s cap); end to end "
                  f"(listing, URL, hash, rename) {r['mib_per_s']:.1f} MiB/s = "
                  f"{r['end_to_end_ratio_to_n_x_cap']:.3f} x; peak RSS "
                  f"{r['peak_rss_mib']:.0f} MiB", flush=True)
        results["runs"] = runs

        small = _run_fetch(ep_free, "small.gguf", tmp / "out-small", 16)
        t0 = time.monotonic()
        big = _run_fetch(ep_free, "big.gguf", tmp / "out-big", 16)
        big["wall_s"] = time.monotonic() - t0
        results["uncapped"] = {"big": big, "small": small,
                               "rss_growth_mib": big["peak_rss_mib"] - small["peak_rss_mib"]}
        print(f"uncapped, 16 connections, {args.big_mib} MiB file: transfer "
              f"{big['transfer_mib_per_s']:.1f} MiB/s, end to end {big['mib_per_s']:.1f} MiB/s "
              f"(this machine's limit), peak RSS {big['peak_rss_mib']:.0f} MiB vs "
              f"{small['peak_rss_mib']:.0f} MiB for a 256 MiB file", flush=True)
    finally:
        for s in servers:
            s.terminate()
            s.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)
    results["machine"]["loadavg_at_end"] = os.getloadavg()  # type: ignore[index]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
