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
check asked for). Processes run behind :class:`Runner` (:class:`LocalRunner` here; the
cluster layer adapts its transports for other nodes; :class:`FakeRunner` for unit tests), so
the verdicts are pure code.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

import httpx

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


class Background(Protocol):
    def listening(self, host: str, port: int, timeout: float) -> bool:
        """Wait until ``host:port`` accepts connections (False: it died or did not in time)."""

    def stop(self) -> RunResult:
        """Stop the process (if it still runs) and say what it did."""


def wait_port(host: str, port: int, timeout: float, alive: Callable[[], bool]) -> bool:
    """Connect to ``host:port`` until it accepts, ``alive()`` turns False, or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and alive():
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return True
        except OSError:
            time.sleep(0.05)
    return False


class Runner(Protocol):
    """Runs the smoke test's processes."""

    def run(self, argv: list[str], timeout: float) -> RunResult:
        """Run a command that ends on its own."""

    def ask(self, argv: list[str], port: int, body: dict[str, Any], timeout: float) -> RunResult:
        """Start a server listening on 127.0.0.1:``port``, wait for /health, POST ``body`` to
        /completion, stop it."""

    def start(self, argv: list[str]) -> Background:
        """Start a process in the background (the RPC server)."""


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


def check_server(runner: Runner, server: Path, model: Path) -> tuple[Check, RunResult]:
    port = _free_port()
    res = runner.ask(server_argv(server, model, port, "-ngl", "0", "--device", "none"), port, BODY, TIMEOUT_S)
    return judge("server", "llama-server (one token on the local CPU)", res, _one_token), res


def check_rpc(
    runner: Runner,
    server: Path,
    rpc_server: Path,
    model: Path,
    expected: list[int] | None,
    host: str = "127.0.0.1",
    port: int | None = None,
    start: Callable[[list[str]], Background] | None = None,
) -> Check:
    """ggml-rpc-server on ``host:port`` (this machine by default; ``start`` runs it elsewhere)
    computes every layer of the token llama-server asks for."""
    port = port or _free_port()
    worker = (start or runner.start)([str(rpc_server), "-H", host, "-p", str(port)])
    head_port = _free_port()
    what = f"ggml-rpc-server on {host}"
    try:
        if not worker.listening(host, port, 30.0):
            done = worker.stop()
            if done.returncode is None:
                check = Check("rpc", "timeout", f"{what} did not listen on port {port} within 30 s", tail(done.log))
            else:
                check = judge("rpc", what, done, lambda _r: "it exited before listening")
            check.cpu_variant = cpu_variant(done.log)
            return check
        res = runner.ask(
            server_argv(server, model, head_port, "-ngl", "99", "--rpc", f"{host}:{port}"), head_port, BODY, TIMEOUT_S
        )
    finally:
        done = worker.stop()
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


def check_bench(runner: Runner, bench: Path, model: Path) -> tuple[Check, RunResult]:
    res = runner.run(
        [str(bench), "-m", str(model), "-p", "16", "-n", "4", "-r", "1", "-o", "json", "-ngl", "0"], TIMEOUT_S
    )
    return judge("bench", "llama-bench (pp16, tg4)", res, _bench_rows), res


def smoke_test(bin_dir: Path, binaries: dict[str, str], model: Path, runner: Runner | None = None) -> SmokeReport:
    """Run the three checks against the binaries in ``bin_dir`` on this machine."""
    runner = runner or LocalRunner()
    t0 = time.monotonic()
    server = bin_dir / binaries["server"]
    first, res = check_server(runner, server, model)
    expected = (res.reply or {}).get("tokens") if first.ok else None
    rpc = check_rpc(runner, server, bin_dir / binaries["rpc_server"], model, expected)
    bench, bench_res = check_bench(runner, bin_dir / binaries["bench"], model)
    # llama-bench prints which CPU variant the loader chose (llama-server's log does not).
    variant = cpu_variant(bench_res.log) or cpu_variant(res.log)
    return SmokeReport([first, rpc, bench], variant, time.monotonic() - t0, expected)


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


class _LocalBackground:
    def __init__(self, argv: list[str]) -> None:
        self._log = tempfile.TemporaryFile()
        self._result: RunResult | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        try:
            self._proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                env=_env(),
                start_new_session=True,
            )
        except OSError as exc:
            self._result = RunResult(127, f"cannot start {argv[0]}: {exc.strerror or exc}")
            self._log.close()

    def poll(self) -> int | None:
        return self._proc.poll() if self._proc is not None else 127

    def wait(self, timeout: float) -> int | None:
        return self._proc.wait(timeout) if self._proc is not None else 127

    def listening(self, host: str, port: int, timeout: float) -> bool:
        return wait_port(host, port, timeout, lambda: self.poll() is None)

    def stop(self) -> RunResult:
        if self._result is None and self._proc is not None:
            rc = self._proc.poll()
            if rc is None:
                os.killpg(self._proc.pid, signal.SIGKILL)
                self._proc.wait()
            self._log.seek(0)
            self._result = RunResult(rc, self._log.read().decode("utf-8", "replace"))
            self._log.close()
        assert self._result is not None
        return self._result


class LocalRunner:
    """Processes on this machine, each in its own session, killed when the check ends."""

    def run(self, argv: list[str], timeout: float) -> RunResult:
        proc = _LocalBackground(argv)
        try:
            rc = proc.wait(timeout)
            return RunResult(rc, proc.stop().log)
        except subprocess.TimeoutExpired:
            return RunResult(None, proc.stop().log, timed_out=True)

    def ask(self, argv: list[str], port: int, body: dict[str, Any], timeout: float) -> RunResult:
        proc = _LocalBackground(argv)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + timeout
        try:
            with httpx.Client(timeout=5.0) as client:
                while time.monotonic() < deadline:
                    if proc.poll() is not None:
                        return proc.stop()
                    try:
                        if client.get(f"{url}/health").status_code == 200:
                            break
                    except httpx.HTTPError:
                        pass
                    time.sleep(0.05)
                else:
                    return RunResult(None, proc.stop().log, timed_out=True)
                try:
                    resp = client.post(f"{url}/completion", json=body, timeout=max(1.0, deadline - time.monotonic()))
                    reply = resp.json() if resp.headers.get("content-type", "").startswith("application/json") else None
                except httpx.TimeoutException:
                    return RunResult(None, proc.stop().log, timed_out=True)
                except (httpx.HTTPError, ValueError):
                    reply = None
                    try:  # a crash mid-request: let the process finish dying, to see how
                        proc.wait(5.0)
                    except subprocess.TimeoutExpired:
                        pass
            done = proc.stop()
            return RunResult(done.returncode, done.log, reply=reply if isinstance(reply, dict) else None)
        except BaseException:
            proc.stop()
            raise

    def start(self, argv: list[str]) -> Background:
        return _LocalBackground(argv)


# -- for unit tests --------------------------------------------------------------------------


class _FakeBackground:
    def __init__(self, result: RunResult) -> None:
        self.result = result

    def listening(self, host: str, port: int, timeout: float) -> bool:
        return self.result.returncode is None and not self.result.timed_out

    def stop(self) -> RunResult:
        return self.result


class FakeRunner:
    """A :class:`Runner` that answers from a table: binary name -> result (a list gives one per
    call). Unknown binaries succeed: a server replies with one token, a command prints the two
    rows of llama-bench's JSON, a background process served one client."""

    OK_REPLY: ClassVar[dict[str, object]] = {"tokens": [228], "tokens_predicted": 1, "content": "x"}
    OK_BENCH = '[{"n_prompt": 16, "n_gen": 0, "avg_ts": 900.0}, {"n_prompt": 0, "n_gen": 4, "avg_ts": 300.0}]'

    def __init__(self, results: dict[str, RunResult | list[RunResult]] | None = None) -> None:
        self.results = dict(results or {})
        self.calls: list[list[str]] = []

    def _result(self, argv: list[str], default: RunResult) -> RunResult:
        self.calls.append(argv)
        found = self.results.get(Path(argv[0]).name)
        if isinstance(found, list):
            return found.pop(0) if found else default
        return found or default

    def run(self, argv: list[str], timeout: float) -> RunResult:
        return self._result(
            argv, RunResult(0, "load_backend: loaded CPU backend from /e/libggml-cpu-x64.so\n" + self.OK_BENCH)
        )

    def ask(self, argv: list[str], port: int, body: dict[str, Any], timeout: float) -> RunResult:
        return self._result(argv, RunResult(None, "srv llama_server: model loaded", reply=dict(self.OK_REPLY)))

    def start(self, argv: list[str]) -> Background:
        return _FakeBackground(self._result(argv, RunResult(None, "Accepted client connection")))
