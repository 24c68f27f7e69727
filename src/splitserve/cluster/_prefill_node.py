"""The part of `up`'s cache pre-fill that runs on the worker's own node.

Standard library only: `up` sends this file's source to the node's Python over its
:class:`~splitserve._node.Node` (``python3 -c`` reading ``{"code", "job"}`` from stdin, over SSH for a
remote worker), so the node needs no splitserve, no numpy and no copy of the model's headers: the
head reads the GGUF's tensor table and sends the byte ranges. The node checks that its copy has
the head's shard sizes, hashes each range with 64-bit FNV-1a (the pinned engine's ``fnv_hash``)
in a small C function built with the node's ``cc`` on first use (into
``~/.cache/splitserve/native/``; ``pread`` in C, so no byte passes through Python and ctypes
releases the GIL) on a pool of threads, one tensor per thread at a time, and writes
``<cache dir>/<hash as %016x>`` with ``copy_file_range`` where that file is not already there.

:func:`main` takes the job and returns a JSON-able report; ``{"status": "skipped", "reason"}``
when the node has no usable copy (no such file, another size) or no C compiler.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

FNV_OFFSET = 0xCBF29CE484222325

C_SOURCE = """\
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/types.h>
#include <unistd.h>

/* 64-bit FNV-1a over n bytes of fd from off, as ggml-rpc.cpp's fnv_hash: h ^= byte; h *= prime.
   Returns 0, or -errno (-EIO for a short file). */
int splitserve_fnv1a64_fd(int fd, int64_t off, int64_t n, uint64_t *out) {
    const uint64_t prime = 0x100000001b3ULL;
    const size_t chunk = 8u << 20;
    unsigned char *buf = malloc(chunk);
    if (!buf) return -ENOMEM;
    uint64_t h = 0xcbf29ce484222325ULL;
    while (n > 0) {
        size_t want = n < (int64_t)chunk ? (size_t)n : chunk;
        ssize_t got = pread(fd, buf, want, (off_t)off);
        if (got < 0) { if (errno == EINTR) continue; int e = errno; free(buf); return -e; }
        if (got == 0) { free(buf); return -EIO; }
        for (ssize_t i = 0; i < got; ++i) { h ^= buf[i]; h *= prime; }
        off += got;
        n -= got;
    }
    free(buf);
    *out = h;
    return 0;
}
"""

NODE_ARGV_CODE = (
    "import json,sys;d=json.load(sys.stdin);g={'__name__':'splitserve_prefill'};"
    "exec(compile(d['code'],'splitserve_prefill_node','exec'),g);"
    "print(json.dumps(g['main'](d['job'])))"
)
"""What ``python3 -c`` runs on the node: read ``{"code", "job"}`` from stdin, run ``main(job)``,
print its report as one JSON line."""


def rpc_cache_dir(env: dict[str, str]) -> Path:
    """``ggml-rpc-server -c``'s folder for the environment ``env`` (``tools/rpc/rpc-server.cpp``)."""
    if env.get("LLAMA_CACHE"):
        return Path(env["LLAMA_CACHE"]).expanduser() / "rpc"
    base = (
        Path(env["XDG_CACHE_HOME"])
        if env.get("XDG_CACHE_HOME")
        else Path(env.get("HOME") or "~").expanduser() / ".cache"
    )
    return base / "llama.cpp" / "rpc"


def _library(home: Path) -> tuple[Any, str | None]:
    key = hashlib.sha256((C_SOURCE + platform.machine() + platform.system()).encode()).hexdigest()[:12]
    target = home / ".cache" / "splitserve" / "native" / f"fnv1a-fd-{key}.so"
    if not target.is_file():
        cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
        if not cc:
            return None, "no C compiler (cc) on this node"
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            src = Path(tmp) / "fnv1a_fd.c"
            src.write_text(C_SOURCE)
            out = Path(tmp) / target.name
            proc = subprocess.run(
                [cc, "-O3", "-shared", "-fPIC", "-o", str(out), str(src)], capture_output=True, text=True
            )
            if proc.returncode != 0:
                return None, f"{cc} failed: {(proc.stderr or proc.stdout).strip()[-200:]}"
            os.replace(out, target)
    lib = ctypes.CDLL(str(target))
    fn = lib.splitserve_fnv1a64_fd
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.POINTER(ctypes.c_uint64)]
    return fn, None


def copy_range(fd_in: int, offset: int, nbytes: int, cache: Path, name: str) -> None:
    """``nbytes`` at ``offset`` of the open file ``fd_in`` to ``cache/name``, whole or not at all
    (a temporary file renamed): ``copy_file_range`` in the kernel, else ``pread`` in blocks.
    The local pre-fill (:mod:`._prefill`) writes with it too."""
    tmp = cache / f".{name}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        with tmp.open("wb") as fout:
            done = 0
            try:
                while done < nbytes:
                    n = os.copy_file_range(fd_in, fout.fileno(), nbytes - done, offset + done)
                    if n == 0:
                        break
                    done += n
            except (AttributeError, OSError):
                fout.seek(0)
                fout.truncate()
                done = 0
            while done < nbytes:
                block = os.pread(fd_in, min(64 << 20, nbytes - done), offset + done)
                if not block:
                    raise OSError(f"short read at {offset + done}")
                fout.write(block)
                done += len(block)
        os.replace(tmp, cache / name)
    finally:
        if tmp.exists():
            tmp.unlink()


def main(job: dict[str, Any]) -> dict[str, Any]:
    """Job: ``shards`` (this node's paths), ``sizes`` (the head's sizes of them), ``entries``
    (``[shard, offset, nbytes]``), ``env`` (the worker's own settings, over this process's),
    ``cache_dir`` (None: the engine's default), ``jobs`` (None: every core)."""
    env = {**os.environ, **job.get("env", {})}
    shards = [Path(p).expanduser() for p in job["shards"]]
    for path, size in zip(shards, job["sizes"], strict=True):
        if not path.is_file():
            return {"status": "skipped", "reason": f"no local copy at {path}"}
        if path.stat().st_size != size:
            return {
                "status": "skipped",
                "reason": f"{path} is {path.stat().st_size} bytes, the head's copy {size}: not the same file",
            }
    cache = Path(job["cache_dir"]).expanduser() if job.get("cache_dir") else rpc_cache_dir(env)
    fn, why = _library(Path(env.get("HOME") or "~").expanduser())
    if fn is None:
        return {"status": "skipped", "reason": f"{why}: the hash needs native code"}
    cache.mkdir(parents=True, exist_ok=True)
    jobs = max(1, int(job.get("jobs") or os.cpu_count() or 1))
    fds = [os.open(p, os.O_RDONLY) for p in shards]
    lock = threading.Lock()
    rep: dict[str, Any] = {
        "status": "ok",
        "cache_dir": str(cache),
        "jobs": jobs,
        "tensors": 0,
        "written": 0,
        "present": 0,
        "bytes": 0,
        "bytes_written": 0,
        "hash_seconds": 0.0,
        "files": [],
    }

    def one(entry: list[int]) -> None:
        shard, offset, nbytes = entry
        out = ctypes.c_uint64(0)
        t0 = time.perf_counter()
        rc = fn(fds[shard], offset, nbytes, ctypes.byref(out))
        spent = time.perf_counter() - t0
        if rc != 0:
            raise OSError(-rc, f"{shards[shard]}: cannot read {nbytes} bytes at {offset}")
        name = f"{out.value:016x}"
        target = cache / name
        written = not (target.is_file() and target.stat().st_size == nbytes)
        if written:
            copy_range(fds[shard], offset, nbytes, cache, name)
        with lock:
            rep["tensors"] += 1
            rep["bytes"] += nbytes
            rep["hash_seconds"] += spent
            rep["files"].append(name)
            if written:
                rep["written"] += 1
                rep["bytes_written"] += nbytes
            else:
                rep["present"] += 1

    started = time.perf_counter()
    try:
        order = sorted(job["entries"], key=lambda e: -e[2])  # largest first: no big one last alone
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            for fut in [pool.submit(one, e) for e in order]:
                fut.result()
    except OSError as exc:
        return {"status": "failed", "reason": f"{exc.filename or cache}: {exc.strerror or exc}"}
    finally:
        for fd in fds:
            os.close(fd)
    rep["seconds"] = time.perf_counter() - started
    return rep


def source() -> str:
    """This module's source, as sent to a node."""
    return Path(__file__).read_text()
