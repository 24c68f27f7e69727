"""The worker-side cache pre-fill: hashing throughput, and first-load time cold vs pre-filled vs warm.

1. Hashing: FNV-1a 64 (the engine's cache key) over the model's big tensors, three ways:
   the pre-fill's native hasher on one thread and on every core (``prefill_cache``), and a
   single-threaded pure-Python FNV-1a on a sample. GB/s per core for each.
2. First load of a multi-GiB synthetic F32 Llama (random per-tensor values, every FFN and output
   matrix over the 10 MiB threshold) by llama-server over one loopback ggml-rpc-server that
   holds every layer, timed from the head's start to /health answering 200:

   - ``no -c``: the worker has no cache (the head sends every byte, hashes nothing);
   - ``cold``: ``-c`` with an empty cache (the head hashes, misses, sends; the worker saves);
   - ``pre-filled``: ``-c`` after ``engine prefill-cache`` on the worker's copy (the pre-fill's
     own time is printed apart);
   - ``warm``: the second load on the cache the cold load left.

   The model file is in the page cache for every run (it was just written and read), so the
   figures compare the protocol and hashing work, not disk reads. On loopback the link is not
   the limit; over a real link the ``cold`` and ``no -c`` rows grow with the bytes sent.

    .venv/bin/python benchmarks/bench_prefill.py --layers 12 --out benchmarks/results/prefill.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from gguf_factory import Q, dense_llama  # noqa: E402
from splitserve.cluster import cached_tensors, prefill_cache  # noqa: E402
from splitserve.cluster._prefill import fnv1a64, fnv1a64_py  # noqa: E402
from splitserve.engine import get_engine  # noqa: E402
from splitserve.model import read_gguf  # noqa: E402

GB = 1e9


def make_model(path: Path, n_layer: int) -> Path:
    [model] = dense_llama(
        path,
        n_layer=n_layer,
        n_embd=2048,
        n_head=16,
        n_head_kv=8,
        n_ff=8192,
        n_vocab=8192,
        qtype=Q.F32,
        n_ctx_train=1024,
    )
    g = read_gguf(model)
    rng = np.random.default_rng(0)
    with open(model, "r+b") as f:
        for t in g.tensors:  # a distinct small value per tensor: distinct hashes, finite activations
            f.seek(t.offset)
            value = 1.0 if "norm" in t.name else float(rng.uniform(-1e-3, 1e-3))
            chunk = np.full(min(t.nbytes // 4, 16 << 20), value, np.float32).tobytes()
            left = t.nbytes
            while left:
                n = min(left, len(chunk))
                f.write(chunk[:n])
                left -= n
    return model


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def load_once(engine_key: str | None, model: Path, cache_root: Path | None, work: Path, tag: str) -> dict[str, float]:
    engine = get_engine(engine_key)
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    wport, hport = free_port(), free_port()
    wargv = [str(engine.rpc_server), "-H", "127.0.0.1", "-p", str(wport)]
    wenv = dict(env)
    if cache_root is not None:
        wargv.append("-c")
        wenv["LLAMA_CACHE"] = str(cache_root)
    with open(work / f"{tag}-worker.log", "wb") as wl, open(work / f"{tag}-head.log", "wb") as hl:
        worker = subprocess.Popen(wargv, stdout=wl, stderr=subprocess.STDOUT, env=wenv, start_new_session=True)
        head = None
        try:
            deadline = time.monotonic() + 30
            while True:
                with socket.socket() as s:
                    if s.connect_ex(("127.0.0.1", wport)) == 0:
                        break
                if time.monotonic() > deadline or worker.poll() is not None:
                    raise SystemExit(f"worker did not start; see {work / f'{tag}-worker.log'}")
                time.sleep(0.05)
            t0 = time.monotonic()
            head = subprocess.Popen(
                [
                    str(engine.server),
                    "-m",
                    str(model),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(hport),
                    "--rpc",
                    f"127.0.0.1:{wport}",
                    "-ngl",
                    "999",
                    "-c",
                    "512",
                    "-np",
                    "1",
                ],
                stdout=hl,
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
            seconds = time.monotonic() - t0
        finally:
            for p in (head, worker):
                if p is not None:
                    p.kill()
                    p.wait(timeout=30)
    log = (work / f"{tag}-worker.log").read_text(errors="replace")
    return {"seconds": round(seconds, 2), "saved_files": log.count("saved to")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=12, help="model layers (each ~232 MiB of F32)")
    ap.add_argument("--engine", default=None, help="engine key (default: the newest)")
    ap.add_argument("--py-sample-mib", type=int, default=4, help="bytes the pure-Python FNV-1a hashes")
    ap.add_argument("--dir", type=Path, default=None, help="scratch folder (default: a temporary one)")
    ap.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-prefill-", dir=args.dir))
    try:
        t = time.monotonic()
        model = make_model(work / "synthetic.gguf", args.layers)
        size = model.stat().st_size
        entries, _ = cached_tensors(model)
        big = sum(e.nbytes for e in entries)
        print(
            f"model: {size / 2**30:.2f} GiB, {len(entries)} tensors over 10 MiB ({big / 2**30:.2f} GiB) "
            f"written in {time.monotonic() - t:.1f} s; cores: {os.cpu_count()}"
        )

        # 1. hashing
        one = prefill_cache(model, work / "h1", jobs=1)
        allc = prefill_cache(model, work / "hN")
        shutil.rmtree(work / "h1")
        shutil.rmtree(work / "hN")
        mm = np.memmap(entries[0].shard, dtype=np.uint8, mode="r")
        sample = mm[entries[0].offset : entries[0].offset + args.py_sample_mib * 2**20]
        t = time.perf_counter()
        h_py = fnv1a64_py(sample.tobytes())
        py_s = time.perf_counter() - t
        assert h_py == fnv1a64(sample)
        py_gbps = sample.nbytes / py_s / GB
        hashing = {
            "native_1_thread_gbps": round(one.hash_gbps_per_core(), 3),
            "prefill_seconds_1_thread": round(one.seconds, 2),
            "native_all_cores_gbps_per_core": round(allc.hash_gbps_per_core(), 3),
            "prefill_seconds_all_cores": round(allc.seconds, 2),
            "prefill_jobs": allc.jobs,
            "prefill_wall_gbps": round(allc.bytes_hashed / allc.seconds / GB, 3),
            "pure_python_gbps": round(py_gbps, 5),
            "native_vs_pure_python": round(one.hash_gbps_per_core() / py_gbps, 1),
        }
        print(
            f"hashing, native, 1 thread:      {hashing['native_1_thread_gbps']:.2f} GB/s per core "
            f"(pre-fill of {big / 2**30:.2f} GiB in {one.seconds:.1f} s, hashing and writing)"
        )
        print(
            f"hashing, native, {allc.jobs} threads:     {hashing['native_all_cores_gbps_per_core']:.2f} GB/s per core, "
            f"{hashing['prefill_wall_gbps']:.2f} GB/s wall (pre-fill in {allc.seconds:.1f} s)"
        )
        print(
            f"hashing, pure Python, 1 thread: {py_gbps * 1000:.1f} MB/s ({args.py_sample_mib} MiB sample) "
            f"-> native is {hashing['native_vs_pure_python']:.0f}x"
        )

        # 2. first loads
        loads: dict[str, dict[str, float]] = {}
        loads["no -c"] = load_once(args.engine, model, None, work, "nocache")
        loads["cold"] = load_once(args.engine, model, work / "cold", work, "cold")
        t = time.monotonic()
        pre = prefill_cache(model, work / "pre" / "rpc")
        prefill_s = time.monotonic() - t
        loads["pre-filled"] = load_once(args.engine, model, work / "pre", work, "prefilled")
        loads["pre-filled"]["prefill_seconds"] = round(prefill_s, 2)
        loads["warm"] = load_once(args.engine, model, work / "cold", work, "warm")
        print(f"first load of {size / 2**30:.2f} GiB over loopback RPC (head start -> /health 200):")
        for name, r in loads.items():
            extra = (
                f" (+ pre-fill {r['prefill_seconds']:.1f} s on the worker, {pre.written} files)"
                if "prefill_seconds" in r
                else ""
            )
            print(
                f"  {name:11s} {r['seconds']:7.1f} s  {size / r['seconds'] / 1e6:8.0f} MB/s  "
                f"worker saved {int(r['saved_files'])} files{extra}"
            )
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(
                json.dumps(
                    {
                        "model_bytes": size,
                        "cached_bytes": big,
                        "cores": os.cpu_count(),
                        "hashing": hashing,
                        "loads": loads,
                    },
                    indent=2,
                )
                + "\n"
            )
            print(f"wrote {args.out}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
