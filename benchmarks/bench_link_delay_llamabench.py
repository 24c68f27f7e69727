"""Decode speed against link delay with llama-bench alone (Python standard library only, so it
runs on a bare machine: only the engine's binaries, a GGUF and this repository's
tests/multihost/delay_proxy.py are needed).

    python3 benchmarks/bench_link_delay_llamabench.py --bin DIR --model FILE.gguf
        [--delays 0,0.5,1,2,5] [--tokens 64] [--repeat 5] [--out link_delay_llamabench.json]

Two ggml-rpc-server workers on loopback; between llama-bench (the head) and each worker a
TCP proxy that delays every chunk by the one-way delay, both directions. For each delay
``llama-bench --rpc P1,P2 -ngl 99 -p 0 -n TOKENS -r REPEAT`` reports decode t/s (mean and
stddev over the repeats). Prints a Markdown table and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "multihost"))

from delay_proxy import DelayProxy  # noqa: E402
from _procs import died, spawn  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", type=Path, required=True, help="folder with ggml-rpc-server and llama-bench")
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--delays", default="0,0.5,1,2,5")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", type=int, default=None, help="llama-bench -t and ggml-rpc-server -t")
    ap.add_argument("--out", type=Path, default=Path("link_delay_llamabench.json"))
    args = ap.parse_args()
    env = dict(os.environ, LD_LIBRARY_PATH=str(args.bin))
    ports = [free_port(), free_port()]
    workers = []
    proxies: list[DelayProxy] = []
    rows = []
    try:
        for p in ports:
            argv = [str(args.bin / "ggml-rpc-server"), "-H", "127.0.0.1", "-p", str(p)]
            if args.threads:
                argv += ["-t", str(args.threads)]
            workers.append(spawn(argv, f"rpc-{p}", env=env))
        for p, w in zip(ports, workers):
            deadline = time.monotonic() + 30
            while True:
                try:
                    socket.create_connection(("127.0.0.1", p), timeout=0.2).close()
                    break
                except OSError:
                    assert w.poll() is None, died(w, f"ggml-rpc-server on {p}")
                    assert time.monotonic() < deadline, f"ggml-rpc-server on {p} did not listen in 30 s"
                    time.sleep(0.05)
        proxies = [DelayProxy(("127.0.0.1", p)) for p in ports]
        rpc = ",".join(f"127.0.0.1:{px.port}" for px in proxies)
        for d in [float(x) for x in args.delays.split(",")]:
            for px in proxies:
                px.delay = d / 1000.0
            before = sum(px.chunks["to_target"] for px in proxies)
            argv = [str(args.bin / "llama-bench"), "-m", str(args.model), "--rpc", rpc, "-ngl", "99",
                    "-ts", "1/1", "-p", "0", "-n", str(args.tokens), "-r", str(args.repeat), "-o", "json"]
            if args.threads:
                argv += ["-t", str(args.threads)]
            res = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1800, check=False)
            if res.returncode != 0:
                raise SystemExit(f"llama-bench failed: {res.stderr[-2000:]}")
            data = json.loads(res.stdout)[0]
            sent = sum(px.chunks["to_target"] for px in proxies) - before
            tps, sd = float(data["avg_ts"]), float(data["stddev_ts"])
            rows.append({"one_way_delay_ms": d, "decode_tps": round(tps, 2), "stddev_tps": round(sd, 2),
                         "ms_per_token": round(1000 / tps, 3),
                         "head_to_worker_chunks_per_token_incl_load": round(sent / (args.tokens * (args.repeat + 1)), 1)})
            print(f"delay {d:4} ms: {tps:8.2f} ± {sd:.2f} t/s", flush=True)
    finally:
        for px in proxies:
            px.close()
        for w in workers:
            w.kill()
            w.wait()
    base = rows[0]["ms_per_token"]
    for r in rows:
        r["added_ms_per_token"] = round(r["ms_per_token"] - base, 3)
        r["added_ms_per_ms_rtt"] = round(r["added_ms_per_token"] / (2 * r["one_way_delay_ms"]), 2) if r["one_way_delay_ms"] else None
    print("\n| one-way delay (ms) | decode t/s | ms/token | added ms/token | added ms per ms of RTT |")
    print("|---|---|---|---|---|")
    for r in rows:
        rtt = r["added_ms_per_ms_rtt"]
        print(f"| {r['one_way_delay_ms']:g} | {r['decode_tps']:.2f} ± {r['stddev_tps']:.2f} | {r['ms_per_token']:.2f} | "
              f"{r['added_ms_per_token']:.2f} | {rtt if rtt is not None else '-'} |")
    out = {"benchmark": "link_delay_llamabench", "model": args.model.name, "tokens": args.tokens,
           "repeat": args.repeat, "cpus": os.cpu_count(), "command": " ".join(sys.argv), "rows": rows}
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
