"""First load over a shaped link: cold, with the worker's cache pre-filled from its own copy, and warm.

    sudo nice -n 10 .venv/bin/python benchmarks/bench_load.py [--layers 9] [--shapings 1,10]
        [--out benchmarks/results/load.json]

One network-namespace box (tests/multihost/netns_hosts.py) runs ggml-rpc-server with ``-c`` on
the box's address; llama-server runs here and loads a synthetic F32 Llama (``--layers`` x 232 MiB,
every FFN matrix 64 MiB: over the 10 MiB threshold, each tensor with its own values so every hash
differs — a truncated, all-zero stand-in such as make_synthetic_moe.py's would make most tensors
one cache file) with every layer on the worker. `tc` tbf on the head's end of the veth shapes
what the head sends. For each shaping:

- ``cold``: an empty cache: the head reads, hashes each tensor over 10 MiB, misses, sends it; the
  worker saves it;
- ``prefilled``: an empty cache filled first on the worker's side from its local copy by `up`'s
  own pre-fill step (the node script, every core); the pre-fill's time is reported apart;
- ``warm``: the second load, on the cache the cold load left.

The disk is synced before the warm and the pre-filled loads, so neither load competes with the
write-back of the cache files just written.

Each load is timed from llama-server's start to ``/health`` 200. The worker runs with
``GGML_RPC_DEBUG=1`` and its log lines are time-stamped as they arrive, which splits the load
into the head's start (to the first tensor), the tensor phase (first to last tensor set on the
worker) and the rest (context, warm-up). Within the tensor phase: bytes sent over the link (the
worker's ``set_tensor`` sizes) at the shaped rate, and the head's single-threaded hash of its
big tensors at the measured one-thread rate of the same FNV-1a loop; the remainder is reading
and the protocol's lock-step round trips. MB/s is the worker's weights over the load time, and its
ratio to the link's rate. The model is in the page cache throughout (disk is not measured).
Writes JSON and a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "multihost"), str(ROOT / "benchmarks")]

from bench_link_check import shape  # noqa: E402
from bench_prefill import make_model  # noqa: E402
from netns_hosts import make_hosts, unavailable  # noqa: E402

from helpers import free_ports  # noqa: E402
from splitserve._node import LocalNode  # noqa: E402
from splitserve.cluster import cached_tensors, parse_cache_log, prefill_cache  # noqa: E402
from splitserve.cluster._prefill_launch import run_on_node  # noqa: E402
from splitserve.engine import get_engine  # noqa: E402
from splitserve.model import read_gguf  # noqa: E402

_SET = re.compile(r"\[set_tensor\] buffer: \S+, data: \S+, offset: \d+, size: (\d+)")
_HIT = re.compile(r"\[set_tensor_hash\] buffer: .*size: (\d+)")


class Stamped:
    """A process whose output lines are kept with the time each arrived."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.lines: list[tuple[float, str]] = []
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        self.log = log
        self._t = threading.Thread(target=self._read, daemon=True)
        self._t.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        with self.log.open("w") as fh:
            for raw in self.proc.stdout:
                line = raw.decode("utf-8", "replace")
                self.lines.append((time.monotonic(), line))
                fh.write(line)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=30)
        self._t.join(timeout=10)


def load(engine: Any, model: Path, ns: str, addr: str, port: int, cache: Path, work: Path, tag: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    wenv = env | {"LLAMA_CACHE": str(cache), "GGML_RPC_DEBUG": "1"}
    argv = ["ip", "netns", "exec", ns, "stdbuf", "-oL", str(engine.rpc_server), "-H", addr, "-p", str(port), "-c"]
    worker = Stamped(argv, wenv, work / f"{tag}-worker.log")
    head = None
    try:
        deadline = time.monotonic() + 30
        while not any("transport" in ln for _, ln in worker.lines):
            if worker.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"worker did not start; see {worker.log}")
            time.sleep(0.05)
        [hport] = free_ports(1)
        hlog = (work / f"{tag}-head.log").open("wb")
        t0 = time.monotonic()
        head = subprocess.Popen(
            [str(engine.server), "-m", str(model), "--host", "127.0.0.1", "--port", str(hport)]
            + ["--rpc", f"{addr}:{port}", "-ngl", "999", "-c", "512", "-np", "1"],
            stdout=hlog,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        while True:
            if head.poll() is not None:
                raise SystemExit(f"llama-server exited; see {work / f'{tag}-head.log'}")
            try:
                if httpx.get(f"http://127.0.0.1:{hport}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        t1 = time.monotonic()
    finally:
        if head is not None:
            head.kill()
            head.wait(timeout=30)
        worker.stop()
    tensor_times = [t for t, ln in worker.lines if t >= t0 and (_SET.search(ln) or _HIT.search(ln))]
    text = "".join(ln for t, ln in worker.lines if t >= t0)
    log = parse_cache_log(text)
    sets = [int(m.group(1)) for m in _SET.finditer(text)]
    return {
        "seconds": t1 - t0,
        "to_first_tensor_s": (tensor_times[0] - t0) if tensor_times else None,
        "tensor_phase_s": (tensor_times[-1] - tensor_times[0]) if tensor_times else None,
        "after_last_tensor_s": (t1 - tensor_times[-1]) if tensor_times else None,
        "bytes_sent": sum(sets),
        "cache_hits": log.hits,
        "hit_bytes": log.hit_bytes,
        "saved": log.saved,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=9, help="model layers (each ~232 MiB of F32)")
    ap.add_argument("--shapings", default="1,10", help="Gbit/s, comma-separated")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "load.json")
    args = ap.parse_args()
    why = unavailable("tc")
    if why:
        sys.exit(f"bench_load: {why}")
    engine = get_engine()
    work = Path(tempfile.mkdtemp(prefix="bench-load-"))
    (work / "hosts").mkdir()
    gen = make_hosts(work / "hosts", 1)
    hosts = next(gen)
    load_before = os.getloadavg()
    results: list[dict[str, Any]] = []
    dev = None
    try:
        box = hosts.boxes[0]
        t = time.monotonic()
        model = make_model(work / "synthetic.gguf", args.layers)
        size = model.stat().st_size
        entries, _ = cached_tensors(model)
        big = sum(e.nbytes for e in entries)
        weights = sum(t.nbytes for t in read_gguf(model).tensors if t.name != "token_embd.weight")
        print(
            f"model {size / 2**30:.2f} GiB ({big / 2**30:.2f} GiB in {len(entries)} tensors over 10 MiB), "
            f"made in {time.monotonic() - t:.0f} s; {os.cpu_count()} CPUs",
            flush=True,
        )
        one = prefill_cache(model, work / "h1", jobs=1)  # the head's loop: FNV-1a on one thread
        shutil.rmtree(work / "h1")
        hash_rate = one.hash_gbps_per_core() * 1e9
        t = time.monotonic()
        with model.open("rb") as f:  # reading the offloaded bytes from the page cache
            while f.read(64 << 20):
                pass
        read_rate = size / (time.monotonic() - t)
        dev = json.loads(
            subprocess.run(["ip", "-j", "route", "get", box.address], capture_output=True, text=True, check=True).stdout
        )[0]["dev"]
        for gbit in [float(x) for x in args.shapings.split(",")]:
            shape(dev, gbit)
            rate = gbit * 1e9 / 8
            cache = work / f"cache-{gbit:g}"
            runs: dict[str, Any] = {}
            runs["cold"] = load(engine, model, box.netns, box.address, 50052, cache, work, f"{gbit:g}-cold")
            os.sync()  # the cache files written back before the next load, as for the pre-filled one
            runs["warm"] = load(engine, model, box.netns, box.address, 50052, cache, work, f"{gbit:g}-warm")
            pre = work / f"pre-{gbit:g}"
            job = {
                "shards": [str(model)],
                "sizes": [size],
                "env": {"LLAMA_CACHE": str(pre)},
                "cache_dir": None,
                "jobs": None,
                "entries": [[0, e.offset, e.nbytes] for e in entries],
            }
            t = time.monotonic()
            rep = run_on_node(LocalNode(), sys.executable, job, timeout=3600)
            prefill_s = time.monotonic() - t
            os.sync()  # its 2 GiB of new files written back before the load, not during it
            assert rep["status"] == "ok", rep
            runs["prefilled"] = load(engine, model, box.netns, box.address, 50052, pre, work, f"{gbit:g}-pre")
            runs["prefilled"]["prefill_seconds"] = prefill_s
            runs["prefilled"]["prefill_threads"] = rep["jobs"]
            runs["prefilled"]["prefill_gbps_per_thread"] = rep["bytes"] / rep["hash_seconds"] / 1e9
            for name, r in runs.items():
                r["mb_per_s"] = weights / r["seconds"] / 1e6
                r["ratio_to_link"] = weights / r["seconds"] / rate
                r["send_s_at_link_rate"] = r["bytes_sent"] / rate
                r["head_hash_s_est"] = big / hash_rate  # the head hashes every big tensor in all three
                r["head_read_s_est"] = weights / read_rate
                results.append(
                    {
                        "shaping_gbit": gbit,
                        "run": name,
                        **{k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()},
                    }
                )
                print(
                    f"  {gbit:g} Gbit/s {name:9s}: {r['seconds']:6.1f} s, {r['mb_per_s']:7.1f} MB/s "
                    f"({r['ratio_to_link']:.2f} of the link), sent {r['bytes_sent'] / 2**30:.2f} GiB, "
                    f"hits {r['cache_hits']}",
                    flush=True,
                )
            shutil.rmtree(cache, ignore_errors=True)
            shutil.rmtree(pre, ignore_errors=True)
    finally:
        if dev is not None:
            shape(dev, None)
        try:
            next(gen)
        except StopIteration:
            pass
    load_after = os.getloadavg()
    lines = [
        "| link | load | seconds | MB/s | / link rate | sent GiB | cache hits | to 1st tensor s | tensor phase s "
        "| send s at link rate | head hash s (est.) | after last tensor s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['shaping_gbit']:g} Gbit/s | {r['run']} | {r['seconds']:.1f} | {r['mb_per_s']:.0f} "
            f"| {r['ratio_to_link']:.2f} | {r['bytes_sent'] / 2**30:.2f} | {r['cache_hits']} "
            f"| {r['to_first_tensor_s']:.1f} | {r['tensor_phase_s']:.1f} | {r['send_s_at_link_rate']:.1f} "
            f"| {r['head_hash_s_est']:.1f} | {r['after_last_tensor_s']:.1f} |"
        )
    pre_rows = [r for r in results if r["run"] == "prefilled"]
    notes = [
        "",
        f"Model: {args.layers}-layer synthetic F32 Llama, {size / 2**30:.2f} GiB, {weights / 2**30:.2f} GiB of "
        f"weights on the worker, {big / 2**30:.2f} GiB in {len(entries)} tensors over 10 MiB.",
        f"Head's hash (FNV-1a, one thread, the same loop): {hash_rate / 1e9:.2f} GB/s; reading the file from the "
        f"page cache: {read_rate / 1e9:.2f} GB/s.",
        *(
            f"Pre-fill at {r['shaping_gbit']:g} Gbit/s: {r['prefill_seconds']:.1f} s on {r['prefill_threads']} threads "
            f"({r['prefill_gbps_per_thread']:.2f} GB/s per thread), before the load."
            for r in pre_rows
        ),
        f"{os.cpu_count()} CPUs, load average before {load_before[0]:.1f}, after {load_after[0]:.1f}; "
        f"kernel {platform.release()}; tc tbf on the head's veth end (20 ms bucket).",
    ]
    table = "\n".join(lines + notes)
    print("\n" + table)
    doc = {
        "what": "first load over a tc-shaped namespace link: cold, pre-filled from the worker's copy, warm",
        "command": "sudo nice -n 10 .venv/bin/python benchmarks/bench_load.py " + " ".join(sys.argv[1:]),
        "model": {
            "layers": args.layers,
            "bytes": size,
            "weights_bytes": weights,
            "big_tensor_bytes": big,
            "big_tensors": len(entries),
        },
        "head_hash_gbps_one_thread": hash_rate / 1e9,
        "page_cache_read_gbps": read_rate / 1e9,
        "machine": {
            "cpus": os.cpu_count(),
            "kernel": platform.release(),
            "loadavg_before": load_before,
            "loadavg_after": load_after,
        },
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    args.out.with_suffix(".md").write_text("# First load over a shaped link\n\n" + table + "\n")
    print(f"wrote {args.out} and {args.out.with_suffix('.md')}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
