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
import re
import shlex
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from .._clock import SYSTEM_CLOCK, Clock
from .._errors import BuildError, SplitserveError, UsageError
from .._node import LocalNode, Node, stop
from .._paths import cache_dir, engines_dir
from ._engine import PROVENANCE, Engine, find_binaries, load_engine
from ._patches import Patch, is_patch_file, plan_patches, prepare_patched_tree
from ._rdma import RdmaSupport, rdma_provenance, rdma_support, recorded_rdma
from ._smoke import SmokeEdges, SmokeReport, _free_port, machine_fingerprint, smoke_test
from ._source import SourceTree, resolve_source
from ._tiny import tiny_model

TARGETS = ("llama-server", "ggml-rpc-server", "llama-bench")
BACKENDS = ("cpu", "cuda")

Progress = Callable[[int, int, str], None]
"""Called with (steps done, steps in all, the current line) while compiling."""


@dataclass(frozen=True)
class BuildNote:
    """A stage of the build in words: "configuring KEY", "probing the binaries", a patch applied."""

    message: str


@dataclass(frozen=True)
class BuildStep:
    """A compile step done: ninja's ``[done/total]`` and its line."""

    done: int
    total: int
    line: str


BuildEvent = BuildNote | BuildStep
OnBuildEvent = Callable[[BuildEvent], None]
"""What :func:`build_engine` reports while it works (the CLI draws a bar and prints the notes)."""


@dataclass
class BuildOptions:
    """What the user asked for."""

    backend: str = "cpu"
    cuda_arch: str | None = None
    source: str | None = None
    prs: list[int | str] = field(default_factory=list)
    """Upstream pull requests: numbers (merged into a ``git:`` source; applied as their diff to
    any other source) or ``.patch`` / ``.diff`` files (applied), see ``_patches``."""
    jobs: int | None = None
    cmake_args: list[str] = field(default_factory=list)
    force: bool = False
    native: bool = False
    """Tie the CPU code to this machine's CPU (``-march=native``) instead of the portable
    build with every CPU variant chosen at run time."""
    skip_cpu_variants: list[str] = field(default_factory=list)
    """Portable CPU variants to leave out (moved aside after compiling), e.g. ``sapphirerapids``
    for nodes whose kernel does not grant the AMX state that variant uses."""


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
    rdma: RdmaSupport = field(default_factory=lambda: RdmaSupport(False, "not decided"))
    """The RPC RDMA transport: passed to cmake, not part of :attr:`key` (see ``_rdma``)."""
    patches: list[Patch] = field(default_factory=list)
    """Diffs applied on top of the source (checked already; part of :attr:`key`)."""
    pristine: Path | None = None
    """The unpatched tree the patched copy (``source.path``) is made from."""

    @property
    def build_dir(self) -> Path:
        return self.root / "build"

    @property
    def log_path(self) -> Path:
        return self.root / "build.log"

    def configure_command(self) -> list[str]:
        flag = self.rdma.cmake_flag()
        rdma = [flag] if flag and flag not in self.cmake_args else []
        return ["cmake", "-S", str(self.source.path), "-B", str(self.build_dir), *self.cmake_args, *rdma]

    def build_command(self) -> list[str]:
        return ["cmake", "--build", str(self.build_dir), "--target", *self.targets, "-j", str(self.jobs)]


# The portable CPU build of llama.cpp's own releases: the CPU backend compiled once per
# instruction-set level (x64, sse42, ..., haswell, skylakex, icelake, zen4, sapphirerapids on
# x86; armv8.0 ... armv9.2 on aarch64 Linux) as loadable modules next to the binaries; at start
# ggml scores each against the running CPU (cpuid / hwcaps) and loads the best.
CPU_VARIANTS = (
    "x64",
    "sse42",
    "sandybridge",
    "ivybridge",
    "piledriver",
    "haswell",
    "skylakex",
    "cannonlake",
    "cascadelake",
    "icelake",
    "cooperlake",
    "zen4",
    "alderlake",
    "sapphirerapids",
    "armv8.0_1",
    "armv8.2_1",
    "armv8.2_2",
    "armv8.2_3",
    "armv8.6_1",
    "armv8.6_2",
    "armv9.2_1",
    "armv9.2_2",
    "android_armv8.0_1",
    "android_armv8.2_1",
    "android_armv8.2_2",
    "android_armv8.6_1",
    "android_armv9.0_1",
    "android_armv9.2_1",
    "android_armv9.2_2",
    "apple_m1",
    "apple_m2_m3",
    "apple_m4",
    "power0",
    "power7_1",
    "power7_2",
    "power8_1",
    "power8_2",
    "power9",
    "power10",
    "power11",
    "z15",
    "z16",
    "riscv64_0",
    "riscv64_v",
)
"""The variants GGML_CPU_ALL_VARIANTS builds (ggml/src/CMakeLists.txt of the pinned source)."""
PORTABLE_CPU_ARGS = ("-DGGML_NATIVE=OFF", "-DGGML_BACKEND_DL=ON", "-DGGML_CPU_ALL_VARIANTS=ON")
NATIVE_CPU_ARGS = ("-DGGML_NATIVE=ON",)


def cmake_arguments(backend: str, cuda_arch: str | None, extra: list[str], native: bool = False) -> list[str]:
    """The cmake flags of a build; these (with the source) make the cache key.

    By default the CPU code is portable (:data:`PORTABLE_CPU_ARGS`), so one engine runs on every
    node it is copied to; ``native`` compiles it for this machine's CPU only."""
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
        *(NATIVE_CPU_ARGS if native else PORTABLE_CPU_ARGS),
    ]
    if backend == "cuda":
        args += ["-DGGML_CUDA=ON", f"-DCMAKE_CUDA_ARCHITECTURES={cuda_arch or 'native'}"]
    elif cuda_arch:
        raise UsageError("--cuda-arch only applies to --backend cuda")
    return args + list(extra)


def plan_build(
    options: BuildOptions, log: Callable[[str], None] = lambda _m: None, client: httpx.Client | None = None
) -> BuildPlan:
    """Resolve the source and compute the flags, key and folder of a build. Patches
    (``--pr``) are fetched if needed and checked against the source here, before anything
    is built; ``client`` is the httpx client that fetches them."""
    git = (options.source or "").startswith("git:")
    merged = [int(p) for p in options.prs if git and not is_patch_file(p)]
    to_apply = [p for p in options.prs if not (git and not is_patch_file(p))]
    source = resolve_source(options.source, merged, log)
    pristine = source.path
    source, patches = plan_patches(source, to_apply, client, log)
    args = cmake_arguments(options.backend, options.cuda_arch, options.cmake_args, options.native)
    skip = sorted(set(options.skip_cpu_variants))
    unknown = [v for v in skip if v not in CPU_VARIANTS]
    if unknown:
        raise UsageError(
            f"--skip-cpu-variant {unknown[0]!r}: not a CPU variant of llama.cpp's portable build "
            f"(one of {', '.join(CPU_VARIANTS)})"
        )
    if skip and options.native:
        raise UsageError("--skip-cpu-variant: a --native build has no CPU variants to skip")
    ident: dict[str, Any] = {"source": source.identity, "cmake_args": args, "targets": list(TARGETS)}
    if skip:
        ident["skip_cpu_variants"] = skip
    digest = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:12]
    key = f"{source.slug}-{options.backend}-{digest}"
    return BuildPlan(
        source=source,
        backend=options.backend,
        cmake_args=args,
        targets=list(TARGETS),
        key=key,
        root=engines_dir() / key,
        jobs=options.jobs or os.cpu_count() or 2,
        rdma=rdma_support(cmake_args=args),
        patches=patches,
        pristine=pristine if patches else None,
    )


_STEP = re.compile(r"^\[(\d+)/(\d+)\]")


def _log_line(log_path: Path, text: str) -> None:
    """Append a line of splitserve's own to the build log (the compilers append theirs)."""
    with open(log_path, "a") as fh:
        fh.write(text + "\n")


def _run_logged(
    node: Node,
    cmd: list[str],
    log_path: Path,
    env: dict[str, str],
    progress: Progress | None,
    what: str,
    clock: Clock = SYSTEM_CLOCK,
) -> None:
    """Run ``cmd`` on ``node`` with its output appended to the build log, reporting ninja's
    ``[N/M]`` lines to ``progress`` as the log grows; stopped (its process group) when the caller
    is interrupted."""
    _log_line(log_path, f"$ {' '.join(cmd)}")
    offset = log_path.stat().st_size
    try:
        ref = node.spawn(cmd, env, log_path)
    except SplitserveError as exc:
        raise BuildError(f"{what}: {exc}") from None
    tail: list[str] = []
    pending = ""
    try:
        while True:
            running = node.alive(ref)
            text, offset = node.read_log_since(log_path, offset)
            *lines, pending = (pending + text).split("\n")
            if not running and pending:
                lines, pending = [*lines, pending], ""
            for line in lines:
                tail = (tail + [line.rstrip()])[-30:]
                m = _STEP.match(line)
                if m and progress:
                    progress(int(m.group(1)), int(m.group(2)), line.rstrip())
            if not running:
                break
            clock.sleep(0.1)
    except BaseException:
        stop(node, ref, grace=2.0, clock=clock)
        raise
    rc = node.exit_code(ref)
    if rc != 0:
        errors = [ln for ln in tail if "error" in ln.lower()] or tail
        raise BuildError(f"{what} failed (exit {rc}): {errors[-1] if errors else 'no output'} (full log: {log_path})")


def _rpath(binary: Path, node: Node | None = None) -> str | None:
    res = (node or LocalNode()).run(f"readelf -d {shlex.quote(str(binary))}", check=False, timeout=60)
    out = res.stdout.decode("utf-8", "replace")
    m = re.search(r"\((?:RUNPATH|RPATH)\)\s+Library (?:runpath|rpath): \[([^\]]*)\]", out)
    return m.group(1) if m else ""


def probe_rpc_protocol(rpc_server: Path, timeout: float = 20.0, clock: Clock = SYSTEM_CLOCK) -> str | None:
    """Start the RPC server on a loopback port and read the protocol version it prints."""
    node = LocalNode()  # its processes' stdout is line-buffered: the banner reaches the log at once
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    pattern = re.compile(r"RPC server v(\d+\.\d+\.\d+)")
    with tempfile.TemporaryDirectory(prefix="splitserve-probe-") as tmp:
        log = Path(tmp) / "rpc.log"
        try:
            ref = node.spawn([str(rpc_server), "-H", "127.0.0.1", "-p", str(_free_port())], env, log)
        except SplitserveError:
            return None
        deadline = clock.monotonic() + timeout
        try:
            while True:
                running = node.alive(ref)
                m = pattern.search(node.read_log(log))
                if m or not running or clock.monotonic() >= deadline:
                    return m.group(1) if m else None
                clock.sleep(0.05)
        finally:
            stop(node, ref, grace=2.0, clock=clock)


def probe_server_version(server: Path, node: Node | None = None) -> dict[str, str]:
    """``llama-server --version``: build number and commit."""
    script = f"env -u LD_LIBRARY_PATH {shlex.quote(str(server))} --version 2>&1"
    try:
        res = (node or LocalNode()).run(script, check=False, timeout=60)
    except SplitserveError as exc:
        raise BuildError(f"{server} --version: {exc}") from None
    text = res.stdout.decode("utf-8", "replace")
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


def build_engine(options: BuildOptions, on_event: OnBuildEvent | None = None) -> tuple[Engine, bool]:
    """Build (or reuse) the engine for ``options``; returns (engine, built_now). ``on_event`` gets
    a :class:`BuildNote` for each stage and a :class:`BuildStep` for each compile step."""
    emit = on_event or (lambda _e: None)

    def log(message: str) -> None:
        emit(BuildNote(message))

    def progress(done: int, total: int, line: str) -> None:
        emit(BuildStep(done, total, line))

    plan = plan_build(options, log)
    plan.root.mkdir(parents=True, exist_ok=True)
    with open(plan.root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (plan.root / PROVENANCE).is_file() and not options.force:
            engine = load_engine(plan.root)
            rdma, _why = recorded_rdma(engine.provenance, plan.log_path)
            if plan.rdma.on and rdma != "on":
                log(f"rebuilding {engine.key} with the RDMA transport: it was built without it, and {plan.rdma.reason}")
            elif all(role in find_binaries(engine.bin_dir) for role in ("server", "rpc_server", "bench")):
                return resmoke_if_needed(engine, options, log), False
        return _build(plan, options, progress, log), True


def build_summary(engine: Engine, built: bool) -> list[str]:
    """What `engine build` prints when done: the engine, whether it was built now, its patches,
    its binaries."""
    what = "built" if built else "already built (cache hit, nothing to do)"
    lines = [f"engine {engine.key}: {what}"]
    applied = engine.provenance.get("patches") or []
    if applied:
        names = ", ".join(f"PR #{p['pr']}" if p.get("pr") else str(p.get("file")) for p in applied)
        lines.append(f"  patches applied: {names}")
    lines.append(f"  binaries: {engine.bin_dir}")
    return lines


def resmoke_if_needed(engine: Engine, options: BuildOptions, log: Callable[[str], None]) -> Engine:
    """A cached engine whose smoke test did not run on this machine (built before there was
    one, or a cache carried to another machine) is tested now; its provenance records the
    result. One that cannot run here is an error, not a cache hit."""
    smoke = engine.provenance.get("smoke")
    if isinstance(smoke, dict) and smoke.get("ok") and smoke.get("machine") == machine_fingerprint():
        return engine
    log(f"smoke test of the cached engine {engine.key} on this machine")
    binaries = find_binaries(engine.bin_dir)
    report, disabled = smoke_with_fallback(engine.bin_dir, binaries, log)
    if not report.ok:
        raise BuildError(
            f"the cached engine {engine.key} does not run on this machine: {report.summary()}; "
            "rebuild it with `splitserve engine build --force`"
        )
    before = engine.provenance.get("cpu_variants_disabled") or {}
    provenance = dict(engine.provenance)
    provenance.pop("flags", None)
    native = provenance.get("cpu_build") == "native" or "-DGGML_NATIVE=OFF" not in provenance.get("cmake_args", [])
    provenance.update(cpu_provenance(native, engine.bin_dir, report, before | disabled))
    provenance["smoke"] = report.as_dict() | {"machine": machine_fingerprint()}
    _write_provenance(engine.root, provenance)
    return load_engine(engine.root)


def _write_provenance(root: Path, provenance: dict[str, Any]) -> None:
    tmp = root / (PROVENANCE + ".tmp")
    tmp.write_text(json.dumps(provenance, indent=2) + "\n")
    tmp.rename(root / PROVENANCE)


def _build(plan: BuildPlan, options: BuildOptions, progress: Progress | None, log: Callable[[str], None]) -> Engine:
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
    node = LocalNode()
    plan.log_path.parent.mkdir(parents=True, exist_ok=True)
    plan.log_path.write_text("")
    if plan.patches and plan.pristine is not None:
        for line in prepare_patched_tree(plan.pristine, plan.source, plan.patches, log):
            _log_line(plan.log_path, f"splitserve: {line}")
    else:
        _log_line(plan.log_path, "splitserve: no patches applied (the source as pinned)")
    log(f"RDMA transport for RPC: {plan.rdma.text()}")
    _log_line(plan.log_path, f"splitserve: RDMA transport for RPC: {plan.rdma.text()}")
    log(f"configuring {plan.key}")
    _run_logged(node, plan.configure_command() + generator + launcher, plan.log_path, env, None, "cmake configure")
    log(f"compiling {', '.join(plan.targets)} with {plan.jobs} jobs")
    _run_logged(node, plan.build_command(), plan.log_path, env, progress, "cmake build")
    return finish_build(plan, options, started, log)


def finish_build(
    plan: BuildPlan, options: BuildOptions, started: float, log: Callable[[str], None], model: Path | None = None
) -> Engine:
    """Probe and smoke-test the compiled binaries in ``plan.build_dir/bin``; only an engine
    that passes gets its ``engine.json`` (and so counts as built)."""
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
    skipped = {v: "left out (--skip-cpu-variant)" for v in sorted(set(options.skip_cpu_variants))}
    for variant in skipped:
        disable_variant(bin_dir, variant)
    log("smoke test: one token on the local CPU, one over a local RPC server, a tiny llama-bench")
    report, disabled = smoke_with_fallback(bin_dir, binaries, log, model=model)
    disabled = skipped | disabled
    if not report.ok:
        raise BuildError(
            f"the engine built in {plan.root} does not run on this machine: {report.summary()}; "
            f"it is not cached (build log: {plan.log_path})"
        )
    provenance: dict[str, Any] = {
        "key": plan.key,
        "built_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "build_seconds": round(time.monotonic() - started, 1),
        "source": plan.source.identity,
        "source_path": str(plan.source.path),
        "patches": [p.record() for p in plan.patches],
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
        **cpu_provenance(options.native, bin_dir, report, disabled),
        **rdma_provenance(plan.rdma, _read_text(plan.log_path)),
        "smoke": report.as_dict() | {"machine": machine_fingerprint()},
    }
    _write_provenance(plan.root, provenance)
    return load_engine(plan.root)


def _read_text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


DISABLED_DIR = "cpu-disabled"


def cpu_variants(bin_dir: Path) -> list[str]:
    """The CPU backend variants an engine carries (``libggml-cpu-<variant>.so``), sorted."""
    return sorted(p.name[len("libggml-cpu-") :].split(".")[0] for p in bin_dir.glob("libggml-cpu-*.so"))


def smoke_with_fallback(
    bin_dir: Path,
    binaries: dict[str, str],
    log: Callable[[str], None],
    edges: SmokeEdges | None = None,
    model: Path | None = None,
) -> tuple[SmokeReport, dict[str, str]]:
    """Smoke-test the binaries; when they crash with a CPU variant ggml chose (say
    ``sapphirerapids``, whose AMX kernels a VM's kernel may not let run), move that variant
    aside (``bin/cpu-disabled/``) so the loader picks the next best, and test again.
    Returns the last report and the variants disabled, each with the failure that did it."""
    model = model or tiny_model()
    disabled: dict[str, str] = {}
    previous: tuple[str, str] | None = None  # (variant disabled last, the check that crashed)
    while True:
        report = smoke_test(bin_dir, binaries, model, edges)
        bad = report.failed
        if previous is not None and bad is not None and bad.verdict == "signal" and bad.name == previous[1]:
            # The same crash without that variant: it was not the cause. Put it back.
            restore_variant(bin_dir, previous[0])
            del disabled[previous[0]]
            log(f"the crash does not depend on the CPU variant; {previous[0]} restored")
            return smoke_test(bin_dir, binaries, model, edges), disabled
        variant = report.cpu_variant
        if (
            bad is None
            or bad.verdict != "signal"
            or not variant
            or variant in disabled
            or len(cpu_variants(bin_dir)) < 2
        ):
            return report, disabled
        disabled[variant] = bad.line()
        previous = (variant, bad.name)
        log(f"CPU variant {variant} crashed ({bad.detail}); disabling it and testing the next best")
        disable_variant(bin_dir, variant)


def restore_variant(bin_dir: Path, variant: str) -> None:
    for lib in (bin_dir / DISABLED_DIR).glob(f"libggml-cpu-{variant}.so*"):
        lib.rename(bin_dir / lib.name)


def disable_variant(bin_dir: Path, variant: str) -> None:
    """Move ``libggml-cpu-<variant>.so`` out of the loader's sight (into ``cpu-disabled/``)."""
    (bin_dir / DISABLED_DIR).mkdir(exist_ok=True)
    for lib in bin_dir.glob(f"libggml-cpu-{variant}.so*"):
        lib.rename(bin_dir / DISABLED_DIR / lib.name)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "Model")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_provenance(native: bool, bin_dir: Path, report: SmokeReport, disabled: dict[str, str]) -> dict[str, Any]:
    """What the provenance says about the CPU code: portable (its variants, the one chosen
    here, the ones disabled) or native (tied to this CPU)."""
    out: dict[str, Any] = {
        "cpu_build": "native" if native else "portable",
        "cpu_variants": cpu_variants(bin_dir),
        "cpu_variant_chosen": report.cpu_variant,
        "cpu_variants_disabled": disabled,
    }
    if native:
        out["cpu_tied_to"] = (
            f"{_cpu_model()} on {platform.node()}: compiled with -march=native, this engine "
            "may crash (SIGILL) on another CPU; build without --native for a portable one"
        )
    return out
