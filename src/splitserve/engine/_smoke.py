"""The engine's smoke test: do its binaries compute on this machine's CPU?

A build can compile and still die on first use: code for instructions the CPU lacks
(``-march=native`` on another CPU), or features the CPU reports but the kernel does not grant
(AMX tile state in a VM). Three checks find that in seconds, on the tiny model of
:mod:`._tiny`:

``server``  llama-server generates one greedy token on the local CPU (no devices);
``rpc``     ggml-rpc-server serves the tensor operations of that same token for a
            llama-server that offloads every layer to it; the token must be the same;
``bench``   llama-bench runs a tiny prompt and generation (pp16 / tg4).

Each check ends in a verdict: ``ok``, ``signal`` (killed by SIGILL, SIGSEGV ...), ``timeout``,
``exit`` (a non-zero exit status), or ``wrong-output`` (it ran, but the reply is not what the
check asked for). Processes run on a :class:`~splitserve._node.Node` (:class:`LocalNode` here,
a worker's node for the cluster's RPC check, a fake node in unit tests) and the HTTP and port
probes go through :class:`SmokeEdges`, so the verdicts are pure code.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from .._clock import SYSTEM_CLOCK, Clock
from .._errors import SplitserveError
from .._node import LocalNode, Node, ProcessRef, stop
from ._rdma import runtime_hint

PROMPT = "hello world"
BODY = {"prompt": PROMPT, "n_predict": 1, "temperature": 0.0, "cache_prompt": False, "return_tokens": True}
TIMEOUT_S = 120.0
LOG_TAIL = 6

_VARIANT = re.compile(r"loaded CPU backend from \S*?libggml-cpu-([A-Za-z0-9_.]+?)\.(?:so|dll|dylib)")
CRASH_SIGNALS = (signal.SIGILL, signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGABRT)


@dataclass
class RunResult:
    """What one process did."""

    returncode: int | None
    """Exit status; negative for a signal (as :mod:`subprocess` reports it); ``None`` when it
    was still running when the check stopped it (a server that did its job)."""
    log: str = ""
    timed_out: bool = False
    reply: dict[str, Any] | None = None
    """The server's JSON reply to the request (``ask`` only)."""


def port_open(host: str, port: int) -> bool:
    """Whether ``host:port`` accepts a connection now."""
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def _health_ok(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=5.0).status_code == 200
    except httpx.HTTPError:
        return False


def _post_completion(url: str, body: dict[str, Any], timeout: float) -> dict[str, Any] | None:
    """POST ``body`` to ``url``/completion: the JSON reply, or None (no JSON, a dropped
    connection); raises :class:`httpx.TimeoutException` when no reply came in time."""
    try:
        resp = httpx.post(f"{url}/completion", json=body, timeout=timeout)
        reply = resp.json() if resp.headers.get("content-type", "").startswith("application/json") else None
    except httpx.TimeoutException:
        raise
    except (httpx.HTTPError, ValueError):
        return None
    return reply if isinstance(reply, dict) else None


@dataclass
class SmokeEdges:
    """The smoke test's I/O: its processes on a node, the engine's HTTP API and open ports seen
    from here, and a clock. The defaults are this machine; unit tests pass a fake node and clock
    (``splitserve._node_fake.FakeNodes``) and answer the HTTP calls themselves."""

    node: Node = field(default_factory=LocalNode)
    clock: Clock = SYSTEM_CLOCK
    listening: Callable[[str, int], bool] = port_open
    health: Callable[[str], bool] = _health_ok
    """``GET url/health`` answers 200."""
    complete: Callable[[str, dict[str, Any], float], dict[str, Any] | None] = _post_completion
    log_dir: Path | None = None
    """Where the checks' logs go (None: a temporary folder, removed after the test)."""


class SmokeProcess:
    """A process a check started on a node (a server, or the RPC server on a worker)."""

    def __init__(
        self,
        node: Node,
        argv: list[str],
        env: dict[str, str],
        log: Path,
        exit_status: Callable[[str], int | None] | None = None,
    ) -> None:
        self.node, self.log, self.exit_status = node, log, exit_status
        self.ref: ProcessRef | None = None
        self.result: RunResult | None = None
        try:
            node.new_log(log, "# splitserve: engine smoke test")
            self.ref = node.spawn(argv, env, log)
        except SplitserveError as exc:
            self.result = RunResult(127, str(exc))

    def alive(self) -> bool:
        return self.ref is not None and self.result is None and self.node.alive(self.ref)

    def wait(self, timeout: float, clock: Clock) -> bool:
        """Wait until it ends by itself (True) or ``timeout`` seconds pass (False)."""
        deadline = clock.monotonic() + timeout
        while self.alive():
            if clock.monotonic() >= deadline:
                return False
            clock.sleep(0.05)
        return True

    def listening(self, host: str, port: int, timeout: float, edges: SmokeEdges) -> bool:
        """Wait until ``host:port`` accepts connections (False: it died or did not in time)."""
        deadline = edges.clock.monotonic() + timeout
        while self.alive() and edges.clock.monotonic() < deadline:
            if edges.listening(host, port):
                return True
            edges.clock.sleep(0.05)
        return False

    def stop(self, clock: Clock = SYSTEM_CLOCK) -> RunResult:
        """Stop it (if it still runs) and say what it did: its exit status (None when it was
        still running: a server that did its job) and its log."""
        if self.result is None:
            assert self.ref is not None
            was_alive = self.node.alive(self.ref)
            if was_alive:
                stop(self.node, self.ref, grace=2.0, clock=clock)
            text = self.node.read_log(self.log, max_bytes=64 << 10)
            code = None
            if not was_alive:
                code = self.node.exit_code(self.ref)
                if code is None and self.exit_status is not None:
                    code = self.exit_status(text)
            self.result = RunResult(code, text)
        return self.result


def run_process(edges: SmokeEdges, argv: list[str], log: Path, timeout: float) -> RunResult:
    """Run a command that ends on its own (llama-bench)."""
    proc = SmokeProcess(edges.node, argv, _env(), log)
    if proc.wait(timeout, edges.clock):
        return proc.stop(edges.clock)
    return RunResult(None, proc.stop(edges.clock).log, timed_out=True)


def ask(edges: SmokeEdges, argv: list[str], port: int, log: Path, body: dict[str, Any], timeout: float) -> RunResult:
    """Start a server listening on 127.0.0.1:``port``, wait for /health, POST ``body`` to
    /completion, stop it."""
    clock = edges.clock
    proc = SmokeProcess(edges.node, argv, _env(), log)
    url = f"http://127.0.0.1:{port}"
    deadline = clock.monotonic() + timeout
    try:
        while True:
            if not proc.alive():
                return proc.stop(clock)
            if edges.health(url):
                break
            if clock.monotonic() >= deadline:
                return RunResult(None, proc.stop(clock).log, timed_out=True)
            clock.sleep(0.05)
        try:
            reply = edges.complete(url, body, max(1.0, deadline - clock.monotonic()))
        except httpx.TimeoutException:
            return RunResult(None, proc.stop(clock).log, timed_out=True)
        if reply is None:
            proc.wait(5.0, clock)  # a crash mid-request: let the process finish dying, to see how
        done = proc.stop(clock)
        return RunResult(done.returncode, done.log, reply=reply)
    except BaseException:
        proc.stop(clock)
        raise


@dataclass
class Check:
    """The verdict of one check."""

    name: str
    verdict: str
    detail: str
    log_tail: list[str] = field(default_factory=list)
    cpu_variant: str | None = None
    """The CPU variant the checked process loaded, where its log says."""

    @property
    def ok(self) -> bool:
        return self.verdict == "ok"

    def line(self) -> str:
        tail = f"; last lines: {' | '.join(self.log_tail)}" if self.log_tail and not self.ok else ""
        return f"{self.name}: {self.detail}{tail}"


@dataclass
class SmokeReport:
    """All checks of one smoke test, and the CPU variant ggml chose."""

    checks: list[Check]
    cpu_variant: str | None = None
    seconds: float = 0.0
    token: list[int] | None = None
    """The greedy token the local CPU computed (what every RPC node must compute too)."""

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def failed(self) -> Check | None:
        return next((c for c in self.checks if not c.ok), None)

    def summary(self) -> str:
        bad = self.failed
        if bad is None:
            names = ", ".join(c.name for c in self.checks)
            return f"{names} ok in {self.seconds:.1f} s" + (
                f" (CPU variant {self.cpu_variant})" if self.cpu_variant else ""
            )
        return bad.line()

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "cpu_variant": self.cpu_variant,
            "seconds": round(self.seconds, 1),
            "token": self.token,
            "checks": [asdict(c) for c in self.checks],
        }


def signal_of(returncode: int | None) -> int | None:
    """The signal that ended a process: negative Popen codes, or a shell's 128+N."""
    if returncode is None:
        return None
    if returncode < 0:
        return -returncode
    if 128 < returncode < 128 + 65 and returncode - 128 in {int(s) for s in CRASH_SIGNALS}:
        return returncode - 128
    return None


def signal_name(signo: int) -> str:
    try:
        return signal.Signals(signo).name
    except ValueError:
        return f"signal {signo}"


def tail(log: str, n: int = LOG_TAIL) -> list[str]:
    return [ln.strip() for ln in log.splitlines() if ln.strip()][-n:]


def cpu_variant(log: str) -> str | None:
    """The CPU backend variant ggml loaded (``load_backend: loaded CPU backend from
    .../libggml-cpu-zen4.so``), or None (a native build has one CPU backend, linked in)."""
    hits = _VARIANT.findall(log)
    return hits[-1] if hits else None


def judge(name: str, what: str, result: RunResult, expect: Callable[[RunResult], str | None]) -> Check:
    """The verdict on one process: ``expect`` returns what is wrong with its output, or None."""
    check = _judge(name, what, result, expect)
    hint = runtime_hint(result.log) if not check.ok else None
    if hint:
        check.detail += f" ({hint})"
    return check


def _judge(name: str, what: str, result: RunResult, expect: Callable[[RunResult], str | None]) -> Check:
    lines = tail(result.log)
    if result.timed_out:
        return Check(name, "timeout", f"{what} did not finish in time", lines)
    signo = signal_of(result.returncode)
    if signo is not None:
        return Check(name, "signal", f"{what} was killed by {signal_name(signo)}", lines)
    if result.returncode not in (None, 0):
        return Check(name, "exit", f"{what} failed (exit {result.returncode})", lines)
    wrong = expect(result)
    if wrong:
        return Check(name, "wrong-output", f"{what}: {wrong}", lines)
    return Check(name, "ok", f"{what} ran")


def _one_token(result: RunResult) -> str | None:
    reply = result.reply
    if not isinstance(reply, dict):
        return "no reply"
    tokens = reply.get("tokens")
    if reply.get("tokens_predicted") != 1 or not isinstance(tokens, list) or len(tokens) != 1:
        return f"asked for one token, got {json.dumps(reply)[:160]}"
    return None


def _bench_rows(result: RunResult) -> str | None:
    text = result.log
    start = text.find("[")
    try:
        rows = json.loads(text[start : text.rindex("]") + 1]) if start >= 0 else None
    except (ValueError, json.JSONDecodeError):
        rows = None
    if not isinstance(rows, list) or len(rows) != 2:
        return "no pp/tg results in its JSON output"
    if not all(isinstance(r, dict) and float(r.get("avg_ts") or 0) > 0 for r in rows):
        return "a zero or missing tokens/s figure"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_argv(server: Path, model: Path, port: int, *extra: str) -> list[str]:
    return [str(server), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-c", "256", "-np", "1", *extra]


def check_server(edges: SmokeEdges, log_dir: Path, server: Path, model: Path) -> tuple[Check, RunResult]:
    port = _free_port()
    argv = server_argv(server, model, port, "-ngl", "0", "--device", "none")
    res = ask(edges, argv, port, log_dir / "server.log", BODY, TIMEOUT_S)
    return judge("server", "llama-server (one token on the local CPU)", res, _one_token), res


def check_rpc(
    edges: SmokeEdges,
    log_dir: Path,
    server: Path,
    rpc_server: Path,
    model: Path,
    expected: list[int] | None,
    worker: SmokeProcess | None = None,
    host: str = "127.0.0.1",
    port: int | None = None,
) -> Check:
    """ggml-rpc-server on ``host:port`` (started here unless ``worker`` is one started on another
    node) computes every layer of the token llama-server asks for."""
    if worker is None:
        port = port or _free_port()
        worker = SmokeProcess(edges.node, [str(rpc_server), "-H", host, "-p", str(port)], _env(), log_dir / "rpc.log")
    assert port is not None
    head_port = _free_port()
    what = f"ggml-rpc-server on {host}"
    try:
        if not worker.listening(host, port, 30.0, edges):
            done = worker.stop(edges.clock)
            if done.returncode is None:
                check = Check("rpc", "timeout", f"{what} did not listen on port {port} within 30 s", tail(done.log))
            else:
                check = judge("rpc", what, done, lambda _r: "it exited before listening")
            check.cpu_variant = cpu_variant(done.log)
            return check
        argv = server_argv(server, model, head_port, "-ngl", "99", "--rpc", f"{host}:{port}")
        res = ask(edges, argv, head_port, log_dir / "rpc-head.log", BODY, TIMEOUT_S)
    finally:
        done = worker.stop(edges.clock)
    signo = signal_of(done.returncode)
    if signo is not None or done.returncode not in (None, 0) or done.timed_out:
        check = judge("rpc", what, done, lambda _r: None)
    else:

        def same_token(r: RunResult) -> str | None:
            wrong = _one_token(r)
            if wrong:
                return wrong
            got = (r.reply or {}).get("tokens")
            if expected is not None and got != expected:
                return f"computed token {got} where the local CPU computed {expected}: wrong arithmetic"
            if "Accepted client connection" not in done.log:
                return "the RPC server served no client"
            return None

        check = judge("rpc", f"{what} (every layer over RPC)", res, same_token)
    check.cpu_variant = cpu_variant(done.log)
    return check


def check_bench(edges: SmokeEdges, log_dir: Path, bench: Path, model: Path) -> tuple[Check, RunResult]:
    argv = [str(bench), "-m", str(model), "-p", "16", "-n", "4", "-r", "1", "-o", "json", "-ngl", "0"]
    res = run_process(edges, argv, log_dir / "bench.log", TIMEOUT_S)
    return judge("bench", "llama-bench (pp16, tg4)", res, _bench_rows), res


@contextmanager
def log_folder(edges: SmokeEdges) -> Iterator[Path]:
    """Where the checks' logs go: ``edges.log_dir``, else a temporary folder."""
    if edges.log_dir is not None:
        yield edges.log_dir
        return
    with tempfile.TemporaryDirectory(prefix="splitserve-smoke-") as tmp:
        yield Path(tmp)


def smoke_test(bin_dir: Path, binaries: dict[str, str], model: Path, edges: SmokeEdges | None = None) -> SmokeReport:
    """Run the three checks against the binaries in ``bin_dir`` on this machine."""
    edges = edges or SmokeEdges()
    t0 = edges.clock.monotonic()
    server = bin_dir / binaries["server"]
    with log_folder(edges) as logs:
        first, res = check_server(edges, logs, server, model)
        expected = (res.reply or {}).get("tokens") if first.ok else None
        rpc = check_rpc(edges, logs, server, bin_dir / binaries["rpc_server"], model, expected)
        bench, bench_res = check_bench(edges, logs, bin_dir / binaries["bench"], model)
    # llama-bench prints which CPU variant the loader chose (llama-server's log does not).
    variant = cpu_variant(bench_res.log) or cpu_variant(res.log)
    return SmokeReport([first, rpc, bench], variant, edges.clock.monotonic() - t0, expected)


def machine_fingerprint() -> str:
    """This machine as the smoke test's result depends on it: host, kernel, CPU model and
    flags (a digest). The same fingerprint means the same verdict."""
    import hashlib
    import platform

    try:
        cpu = "\n".join(
            sorted(
                {
                    ln.split(":", 1)[1].strip()
                    for ln in Path("/proc/cpuinfo").read_text().splitlines()
                    if ln.startswith(("model name", "flags", "Features", "CPU part"))
                }
            )
        )
    except OSError:
        cpu = platform.processor()
    digest = hashlib.sha256(cpu.encode()).hexdigest()[:12]
    return f"{platform.node()}/{platform.release()}/{platform.machine()}/{digest}"


# -- running for real ------------------------------------------------------------------------


def _env() -> dict[str, str]:
    # The binaries find their libraries through $ORIGIN; a stray LD_LIBRARY_PATH must not win.
    return {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
