"""Building llama.cpp with RPC into the engine cache.

The build is a value first (:func:`plan_build`: source, cmake arguments, cache
key, folder) and an action second (:func:`build_engine`). The cache key is a
digest of the source identity and the flags, so a second build with the same
inputs finds ``engine.json`` and does nothing.
"""

from __future__ import annotations

import datetime as _dt
import fcntl
import hashlib
import json
import os
import platform
import pty
import re
import select
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._errors import BuildError, UsageError
from .._paths import cache_dir, engines_dir
from ._engine import PROVENANCE, Engine, find_binaries, load_engine
from ._source import SourceTree, resolve_source

TARGETS = ("llama-server", "ggml-rpc-server", "llama-bench")
BACKENDS = ("cpu", "cuda")

Progress = Callable[[int, int, str], None]
"""Called with (steps done, steps in all, the current line) while compiling."""


@dataclass
class BuildOptions:
    """What the user asked for."""

    backend: str = "cpu"
    cuda_arch: str | None = None
    source: str | None = None
    prs: list[int] = field(default_factory=list)
    jobs: int | None = None
    cmake_args: list[str] = field(default_factory=list)
    force: bool = False


@dataclass
class BuildPlan:
    """What a build will do, computed before anything is compiled."""

    source: SourceTree
    backend: str
    cmake_args: list[str]
    targets: list[str]
    key: str
    root: Path
    jobs: int

    @property
    def build_dir(self) -> Path:
        return self.root / "build"

    @property
    def log_path(self) -> Path:
        return self.root / "build.log"

    def configure_command(self) -> list[str]:
        return ["cmake", "-S", str(self.source.path), "-B", str(self.build_dir), *self.cmake_args]

    def build_command(self) -> list[str]:
        return ["cmake", "--build", str(self.build_dir), "--target", *self.targets, "-j", str(self.jobs)]


def cmake_arguments(backend: str, cuda_arch: str | None, extra: list[str]) -> list[str]:
    """The cmake flags of a build; these (with the source) make the cache key."""
    if backend not in BACKENDS:
        raise UsageError(f"--backend {backend!r}: choose one of {', '.join(BACKENDS)}")
    args = [
        "-DCMAKE_BUILD_TYPE=Release",
        "-DGGML_RPC=ON",
        "-DBUILD_SHARED_LIBS=ON",
        "-DLLAMA_BUILD_TESTS=OFF",
        "-DLLAMA_BUILD_EXAMPLES=OFF",
        "-DLLAMA_BUILD_UI=OFF",
        "-DLLAMA_USE_PREBUILT_UI=OFF",
        "-DLLAMA_OPENSSL=OFF",
        # Binaries find their libraries next to themselves: no LD_LIBRARY_PATH.
        "-DCMAKE_INSTALL_RPATH=$ORIGIN",
        "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON",
    ]
    if backend == "cuda":
        args += ["-DGGML_CUDA=ON", f"-DCMAKE_CUDA_ARCHITECTURES={cuda_arch or 'native'}"]
    elif cuda_arch:
        raise UsageError("--cuda-arch only applies to --backend cuda")
    return args + list(extra)


def plan_build(options: BuildOptions, log: Callable[[str], None] = lambda _m: None) -> BuildPlan:
    """Resolve the source and compute the flags, key and folder of a build."""
    source = resolve_source(options.source, options.prs, log)
    args = cmake_arguments(options.backend, options.cuda_arch, options.cmake_args)
    ident = {"source": source.identity, "cmake_args": args, "targets": list(TARGETS)}
    digest = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:12]
    key = f"{source.slug}-{options.backend}-{digest}"
    return BuildPlan(source=source, backend=options.backend, cmake_args=args, targets=list(TARGETS),
                     key=key, root=engines_dir() / key, jobs=options.jobs or os.cpu_count() or 2)


_STEP = re.compile(r"^\[(\d+)/(\d+)\]")


def _run_logged(cmd: list[str], log_fh: Any, env: dict[str, str], progress: Progress | None,
                what: str) -> None:
    log_fh.write(f"$ {' '.join(cmd)}\n")
    log_fh.flush()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            bufsize=1)
    assert proc.stdout is not None
    tail: list[str] = []
    try:
        for line in proc.stdout:
            log_fh.write(line)
            tail = (tail + [line.rstrip()])[-30:]
            m = _STEP.match(line)
            if m and progress:
                progress(int(m.group(1)), int(m.group(2)), line.rstrip())
        rc = proc.wait()
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    log_fh.flush()
    if rc != 0:
        errors = [ln for ln in tail if "error" in ln.lower()] or tail
        raise BuildError(f"{what} failed (exit {rc}): {errors[-1] if errors else 'no output'} "
                         f"(full log: {log_fh.name})")


def _rpath(binary: Path) -> str | None:
    try:
        out = subprocess.run(["readelf", "-d", str(binary)], capture_output=True, text=True).stdout
    except FileNotFoundError:
        return None
    m = re.search(r"\((?:RUNPATH|RPATH)\)\s+Library (?:runpath|rpath): \[([^\]]*)\]", out)
    return m.group(1) if m else ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def probe_rpc_protocol(rpc_server: Path, timeout: float = 20.0) -> str | None:
    """Start the RPC server on a loopback port and read the protocol version it prints."""
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    # A pseudo-terminal: the server's printf output is line-buffered there, block-buffered in a pipe.
    master, slave = pty.openpty()
    proc = subprocess.Popen([str(rpc_server), "-H", "127.0.0.1", "-p", str(port)], stdout=slave,
                            stderr=slave, stdin=subprocess.DEVNULL, env=env, start_new_session=True)
    os.close(slave)
    fd = master
    buf = b""
    pattern = re.compile(rb"RPC server v(\d+\.\d+\.\d+)")
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:
                    chunk = b""
                if not chunk:
                    break
                buf += chunk
                m = pattern.search(buf)
                if m:
                    return m.group(1).decode()
            elif proc.poll() is not None:
                break
        m = pattern.search(buf)
        return m.group(1).decode() if m else None
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        os.close(master)


def probe_server_version(server: Path) -> dict[str, str]:
    """``llama-server --version``: build number and commit."""
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    proc = subprocess.run([str(server), "--version"], capture_output=True, text=True, env=env, timeout=60)
    text = proc.stdout + proc.stderr
    out: dict[str, str] = {}
    # "version: 0.6.0-dev (build 0, commit unknown)" now; "version: 4567 (abc1234)" in older builds.
    m = re.search(r"version:\s*(\S+)\s*\(build (\d+), commit (\S+?)\)", text)
    if m:
        out["server_version"], out["build"], out["commit"] = m.group(1), m.group(2), m.group(3)
    else:
        m = re.search(r"version:\s*(\S+)\s*\(([0-9a-f]+|unknown)\)", text)
        if m:
            out["build"], out["commit"] = m.group(1), m.group(2)
    for key in ("build", "commit"):
        if out.get(key) in ("0", "unknown"):
            del out[key]  # a build from a tree without git: the source identity says more
    m = re.search(r"built with (.+)", text)
    if m:
        out["compiler"] = m.group(1).strip()
    return out


def build_engine(options: BuildOptions, progress: Progress | None = None,
                 log: Callable[[str], None] = lambda _m: None) -> tuple[Engine, bool]:
    """Build (or reuse) the engine for ``options``; returns (engine, built_now)."""
    plan = plan_build(options, log)
    plan.root.mkdir(parents=True, exist_ok=True)
    with open(plan.root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (plan.root / PROVENANCE).is_file() and not options.force:
            engine = load_engine(plan.root)
            if all(role in find_binaries(engine.bin_dir) for role in ("server", "rpc_server", "bench")):
                return engine, False
        return _build(plan, options, progress, log), True


def _build(plan: BuildPlan, options: BuildOptions, progress: Progress | None,
           log: Callable[[str], None]) -> Engine:
    if shutil.which("cmake") is None:
        raise BuildError("cmake is not installed (apt-get install cmake ninja-build g++)")
    env = dict(os.environ)
    launcher: list[str] = []
    generator: list[str] = ["-G", "Ninja"] if shutil.which("ninja") else []
    if shutil.which("ccache"):
        # A compiler cache shared by all engines: flags that change no object file reuse it.
        launcher = ["-DCMAKE_C_COMPILER_LAUNCHER=ccache", "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"]
        if plan.backend == "cuda":
            launcher.append("-DCMAKE_CUDA_COMPILER_LAUNCHER=ccache")
        env.setdefault("CCACHE_DIR", str(cache_dir() / "ccache"))
        env.setdefault("CCACHE_BASEDIR", str(cache_dir()))
    (plan.root / PROVENANCE).unlink(missing_ok=True)
    started = time.monotonic()
    with open(plan.log_path, "w") as log_fh:
        log(f"configuring {plan.key}")
        _run_logged(plan.configure_command() + generator + launcher, log_fh, env, None, "cmake configure")
        log(f"compiling {', '.join(plan.targets)} with {plan.jobs} jobs")
        _run_logged(plan.build_command(), log_fh, env, progress, "cmake build")
    bin_dir = plan.build_dir / "bin"
    binaries = find_binaries(bin_dir)
    missing = [r for r in ("server", "rpc_server", "bench") if r not in binaries]
    if missing:
        raise BuildError(f"build finished but {', '.join(missing)} binaries are missing in {bin_dir}")
    log("probing the binaries")
    server = bin_dir / binaries["server"]
    rpath = _rpath(server)
    versions = probe_server_version(server)
    rpc_protocol = probe_rpc_protocol(bin_dir / binaries["rpc_server"])
    provenance: dict[str, Any] = {
        "key": plan.key,
        "built_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "build_seconds": round(time.monotonic() - started, 1),
        "source": plan.source.identity,
        "source_path": str(plan.source.path),
        "version": versions.get("build") or plan.source.version,
        "server_version": versions.get("server_version"),
        "commit": versions.get("commit") or plan.source.identity.get("commit"),
        "compiler": versions.get("compiler"),
        "backend": plan.backend,
        "cuda_arch": options.cuda_arch if plan.backend == "cuda" else None,
        "cmake_args": plan.cmake_args,
        "flags": plan.cmake_args,
        "targets": plan.targets,
        "jobs": plan.jobs,
        "rpc_protocol": rpc_protocol,
        "rpath": rpath,
        "binaries": binaries,
        "bin_dir": str(bin_dir.relative_to(plan.root)),
        "log": str(plan.log_path),
        "machine": {"system": platform.system(), "arch": platform.machine(), "host": platform.node()},
    }
    tmp = plan.root / (PROVENANCE + ".tmp")
    tmp.write_text(json.dumps(provenance, indent=2) + "\n")
    tmp.rename(plan.root / PROVENANCE)
    return load_engine(plan.root)
