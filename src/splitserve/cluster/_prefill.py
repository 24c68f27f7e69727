"""Fill a worker's ``ggml-rpc-server -c`` tensor cache from its own copy of the model.

How the pinned engine caches (``ggml/src/ggml-rpc/ggml-rpc.cpp``): the head hashes every
weight tensor larger than ``HASH_THRESHOLD`` (10 MiB) with 64-bit FNV-1a over the tensor's
exact bytes and sends ``SET_TENSOR_HASH``; the worker looks for the file
``<cache dir>/<hash as %016x>`` and, when it is there, loads the tensor from it, so no tensor
bytes cross the link. On a miss the head sends the bytes and the worker writes that file
("saved to '…'" in its log). The cache directory is ``$LLAMA_CACHE/rpc``, else
``$XDG_CACHE_HOME/llama.cpp/rpc``, else ``~/.cache/llama.cpp/rpc`` (``tools/rpc/rpc-server.cpp``).
An RPC device has no host buffer, so the loader sets each tensor whole from the GGUF's
mapping: the hash is over the tensor's bytes as stored in the file.

:func:`prefill_cache` writes those files on the worker itself from its local GGUF (or its
shards), for the tensors the worker will hold (its layers; the output layer's tensors when it
holds the output, with ``token_embd.weight`` when the model ties the output to it).

Hashing: FNV-1a is one multiply per byte in a chain, so one tensor is hashed by one core; the
tensors are spread over a thread pool. The hash runs in a 10-line C function compiled with
the system ``cc`` on first use into ``~/.cache/splitserve/native/`` and called through
:mod:`ctypes` (which releases the GIL, so the threads run in parallel) on the file's memory
map: no copy of a tensor into Python memory. No library does this: :mod:`hashlib` has no FNV;
the FNV packages either are pure Python (~6 MB/s), give only the 32-bit variant, or take
only a ``bytes`` object (a copy of a multi-GiB tensor per call). Without a compiler a
pure-Python loop is used (and said so), which is only fit for small models.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .._errors import ModelError, SplitserveError, UsageError
from .._node import run_command
from .._paths import cache_dir as splitserve_cache_dir
from ._prefill_node import copy_range

HASH_THRESHOLD = 10 * 1024 * 1024
"""Tensors strictly larger than this are looked up in the cache (``ggml-rpc.cpp``)."""
FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
_MASK = (1 << 64) - 1

C_SOURCE = """\
#include <stddef.h>
#include <stdint.h>

/* 64-bit FNV-1a, as ggml-rpc.cpp's fnv_hash: h ^= byte; h *= prime. */
uint64_t splitserve_fnv1a64(const unsigned char *p, size_t n, uint64_t h) {
    const uint64_t prime = 0x100000001b3ULL;
    for (size_t i = 0; i < n; ++i) {
        h ^= p[i];
        h *= prime;
    }
    return h;
}
"""

_BLOCK_RE = re.compile(r"^blk\.(\d+)\.")


def fnv1a64_py(data: bytes | memoryview, h: int = FNV_OFFSET) -> int:
    """Pure-Python FNV-1a 64 (the reference, and the fallback without a compiler)."""
    for b in bytes(data):
        h = ((h ^ b) * FNV_PRIME) & _MASK
    return h


_lib_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_lib_error: str | None = None


def _compile(target: Path) -> str | None:
    """Build the shared object at ``target``; the reason when it cannot be built."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        return "no C compiler (cc) on PATH"
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        src = Path(tmp) / "fnv1a.c"
        src.write_text(C_SOURCE)
        out = Path(tmp) / target.name
        try:
            proc = run_command([cc, "-O3", "-shared", "-fPIC", "-o", str(out), str(src)], timeout=300.0)
        except SplitserveError as exc:
            return f"{cc}: {exc}"
        if proc.returncode != 0:
            return f"{cc} failed: {(proc.stderr or proc.stdout).strip().splitlines()[-1:] or ['?']}"
        os.replace(out, target)  # atomic: a concurrent first use sees a whole file or none
    return None


def native_library() -> ctypes.CDLL | None:
    """The compiled hasher (built on first use), or None when it cannot be built."""
    global _lib, _lib_error
    with _lib_lock:
        if _lib is not None or _lib_error is not None:
            return _lib
        key = hashlib.sha256((C_SOURCE + platform.machine() + platform.system()).encode()).hexdigest()[:12]
        target = splitserve_cache_dir() / "native" / f"fnv1a-{key}.so"
        if not target.is_file():
            _lib_error = _compile(target)
            if _lib_error:
                return None
        try:
            lib = ctypes.CDLL(str(target))
        except OSError as exc:
            _lib_error = f"cannot load {target}: {exc}"
            return None
        fn = lib.splitserve_fnv1a64
        fn.restype = ctypes.c_uint64
        fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint64]
        _lib = lib
        return lib


def native_unavailable_reason() -> str | None:
    """Why the native hasher is not used (None when it is)."""
    native_library()
    return _lib_error


def fnv1a64(data: np.ndarray | bytes, native: bool = True) -> int:
    """FNV-1a 64 of ``data`` (a contiguous uint8 array, e.g. a slice of a memory map, or bytes)."""
    lib = native_library() if native else None
    if lib is None:
        return fnv1a64_py(data.tobytes() if isinstance(data, np.ndarray) else data)
    arr = np.frombuffer(data, dtype=np.uint8) if isinstance(data, bytes) else data
    if not arr.flags["C_CONTIGUOUS"]:
        arr = np.ascontiguousarray(arr)
    return int(lib.splitserve_fnv1a64(ctypes.c_void_p(arr.ctypes.data), arr.nbytes, FNV_OFFSET))


def rpc_cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """The directory ``ggml-rpc-server -c`` uses with the environment ``env`` (default: this
    process's): ``$LLAMA_CACHE/rpc``, else ``$XDG_CACHE_HOME/llama.cpp/rpc``, else
    ``~/.cache/llama.cpp/rpc``."""
    env = os.environ if env is None else env
    if env.get("LLAMA_CACHE"):
        return Path(env["LLAMA_CACHE"]) / "rpc"
    base = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else Path(env.get("HOME") or Path.home()) / ".cache"
    return base / "llama.cpp" / "rpc"


def parse_layers(text: str) -> tuple[int, int]:
    """``A-B`` (inclusive; layer ``n_layer`` is the output layer) or ``N``."""
    m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", text)
    if not m:
        raise UsageError(f"--layers {text!r}: give a range A-B (e.g. 12-24) or one layer number")
    lo = int(m.group(1))
    hi = int(m.group(2)) if m.group(2) is not None else lo
    if hi < lo:
        raise UsageError(f"--layers {text!r}: the range ends before it starts")
    return lo, hi


def layers_of_devices(n_layer: int, split: list[float], devices: list[int]) -> tuple[int, int]:
    """The layer range (inclusive; ``n_layer`` is the output layer) that llama.cpp gives the
    devices ``devices`` (indexes into ``--tensor-split``, in the head's device order) of a split."""
    from ..plan import layer_devices

    bad = [d for d in devices if not 0 <= d < len(split)]
    if bad:
        raise UsageError(f"--device {bad[0]}: the split {split} has devices 0-{len(split) - 1}")
    held = [il for il, d in enumerate(layer_devices(n_layer, split)) if d in devices]
    if not held:
        raise UsageError(f"device(s) {devices} get no layer of {n_layer} with the split {split}")
    if held != list(range(held[0], held[-1] + 1)):
        raise UsageError(f"devices {devices} do not hold one contiguous range of layers; give one worker's devices")
    return held[0], held[-1]


def model_layers(model: Path) -> int:
    """The model's ``n_layer`` (``<arch>.block_count``), from its header."""
    from ..model import read_gguf

    g = read_gguf(model)
    return int(g.get(f"{g.get('general.architecture')}.block_count", 0) or 0)


@dataclass(frozen=True)
class CacheEntry:
    """One tensor the engine looks up in the worker's cache."""

    name: str
    shard: Path
    offset: int
    nbytes: int
    layer: int
    """Its layer; ``n_layer`` for the output layer's tensors."""


def cached_tensors(model: Path, layers: tuple[int, int] | None = None) -> tuple[list[CacheEntry], int]:
    """The tensors over the threshold that a worker holding ``layers`` (inclusive, ``n_layer``
    is the output layer; None: every layer and the output) gets, and the model's ``n_layer``.

    ``token_embd.weight`` stays on the head (the input layer is always on the host) unless the
    model has no ``output.weight``: then the output layer uses a copy of it."""
    from ..model import read_gguf

    g = read_gguf(model)
    arch = g.get("general.architecture")
    n_layer = int(g.get(f"{arch}.block_count", 0) or 0)
    if layers is not None and layers[1] > n_layer:
        raise UsageError(
            f"--layers {layers[0]}-{layers[1]}: {model.name} has {n_layer} layers "
            f"(0-{n_layer - 1}, and {n_layer} for the output layer)"
        )
    names = {t.name for t in g.tensors}
    tied = "output.weight" not in names
    out: list[CacheEntry] = []
    for t in g.tensors:
        if t.nbytes <= HASH_THRESHOLD:
            continue
        m = _BLOCK_RE.match(t.name)
        if m:
            layer = int(m.group(1))
        elif t.name == "token_embd.weight" and not tied:
            continue  # input layer: on the head
        else:
            layer = n_layer
        if layers is None or layers[0] <= layer <= layers[1]:
            out.append(CacheEntry(t.name, g.shards[t.shard], t.offset, t.nbytes, layer))
    return out, n_layer


@dataclass
class PrefillReport:
    cache_dir: Path
    tensors: int = 0
    written: int = 0
    present: int = 0
    bytes_hashed: int = 0
    bytes_written: int = 0
    seconds: float = 0.0
    hash_seconds: float = 0.0
    """Sum over the threads of the time spent hashing."""
    jobs: int = 1
    native: bool = True
    native_reason: str | None = None
    files: dict[str, str] = field(default_factory=dict)
    """Tensor name -> cache file name."""

    def hash_gbps_per_core(self) -> float:
        return self.bytes_hashed / self.hash_seconds / 1e9 if self.hash_seconds else 0.0

    def as_dict(self) -> dict[str, object]:
        return {
            "cache_dir": str(self.cache_dir),
            "tensors": self.tensors,
            "written": self.written,
            "present": self.present,
            "bytes_hashed": self.bytes_hashed,
            "bytes_written": self.bytes_written,
            "seconds": round(self.seconds, 3),
            "hash_gbps_per_core": round(self.hash_gbps_per_core(), 3),
            "jobs": self.jobs,
            "native": self.native,
            "native_reason": self.native_reason,
        }


def prefill_cache(
    model: Path,
    cache_dir: Path | None = None,
    layers: tuple[int, int] | None = None,
    jobs: int | None = None,
    native: bool = True,
    on_tensor: Callable[[CacheEntry, bool], None] | None = None,
) -> PrefillReport:
    """Write ``cache_dir/<fnv1a64 as %016x>`` for each tensor of ``model`` the engine looks up
    for a worker holding ``layers`` (see :func:`cached_tensors`); a file already there with
    the tensor's size is kept. ``jobs`` threads hash (default: every core). ``on_tensor(entry,
    written)`` is called as each tensor is done."""
    model = Path(model)
    if not model.exists():
        raise ModelError(f"{model}: no such file")
    cache = Path(cache_dir) if cache_dir is not None else rpc_cache_dir()
    entries, _ = cached_tensors(model, layers)
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cache directory {cache}: {exc.strerror or exc}") from None
    lib = native_library() if native else None
    report = PrefillReport(
        cache_dir=cache,
        jobs=max(1, jobs or os.cpu_count() or 1),
        native=lib is not None,
        native_reason=None if lib is not None else (_lib_error if native else "pure Python asked"),
    )
    maps = {p: np.memmap(p, dtype=np.uint8, mode="r") for p in {e.shard for e in entries}}
    lock = threading.Lock()

    def one(e: CacheEntry) -> None:
        view = maps[e.shard][e.offset : e.offset + e.nbytes]
        t0 = time.perf_counter()
        h = fnv1a64(view, native=lib is not None)
        spent = time.perf_counter() - t0
        name = f"{h:016x}"
        target = cache / name
        try:
            written = not (target.is_file() and target.stat().st_size == e.nbytes)
            if written:
                with e.shard.open("rb") as fin:
                    copy_range(fin.fileno(), e.offset, e.nbytes, cache, name)
        except OSError as exc:
            raise UsageError(f"cache directory {cache}: cannot write {name} ({exc.strerror or exc})") from None
        with lock:
            report.tensors += 1
            report.bytes_hashed += e.nbytes
            report.hash_seconds += spent
            report.files[e.name] = name
            if written:
                report.written += 1
                report.bytes_written += e.nbytes
            else:
                report.present += 1
        if on_tensor:
            on_tensor(e, written)

    started = time.perf_counter()
    # Largest first, so one big tensor does not finish alone at the end.
    order = sorted(entries, key=lambda e: -e.nbytes)
    with ThreadPoolExecutor(max_workers=report.jobs) as pool:
        for fut in [pool.submit(one, e) for e in order]:
            fut.result()
    report.seconds = time.perf_counter() - started
    return report
