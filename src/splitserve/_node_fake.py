"""In-memory nodes for tests, shipped beside :class:`~splitserve._node.Node` (as httpx ships
MockTransport) and :class:`~splitserve._clock.FakeClock`.

A :class:`FakeNodes` holds :class:`FakeNode` s (one per host) and a :class:`~splitserve._clock.FakeClock`.
A process spawned on a fake node is a :class:`FakeProcess` whose behaviour comes from a
:class:`Program` chosen by the binary's name: when it starts listening on the port its argv names
(``-p`` / ``--port``), what it writes to its log, when it exits and with what status. Nothing runs:
time moves only when the code under test sleeps on the fake clock, so a 60-second timeout takes
microseconds. Tests kill processes (:meth:`FakeNodes.kill`, now or :meth:`FakeNodes.after` a
while), read what was started (:attr:`FakeNodes.spawned`) and the signals sent
(:attr:`FakeNodes.signals`), and ask who listens on a port (:meth:`FakeNodes.listener`).

The engine smoke test runs on these directly; the cluster's
:class:`~splitserve.cluster.FakeNetwork` is a :class:`FakeNodes` that also answers for the
engine's HTTP API (its I/O edges).

    nodes = FakeNodes()
    nodes.program("llama-server", Program(listen_after=2.0, log=["load_tensors: ..."]))
    ref = nodes.node("local").spawn(["/e/bin/llama-server", "--port", "8080"], {}, Path("/l/s.log"))
    nodes.clock.sleep(2.0)
    assert nodes.listener("127.0.0.1", 8080) is not None
"""

from __future__ import annotations

import signal as _signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from ._clock import FakeClock
from ._errors import ClusterError
from ._node import Node, ProcessRef


@dataclass
class Program:
    """How a fake process behaves (seconds are on the fake clock, from its spawn)."""

    listen_after: float | None = 0.0
    """When it starts accepting connections on its port (None: never)."""
    exit_after: float | None = None
    """When it exits by itself (None: it runs until signalled)."""
    exit_code: int = 1
    log: list[str] = field(default_factory=list)
    """Lines it writes to its log at once."""
    rpc_protocol: str | None = "3.0.0"
    """What it answers to an RPC HELLO (ggml-rpc-server), when it listens."""
    ignores_sigterm: bool = False
    http_status: int = 200
    """What it answers to ``GET /health`` while it listens (the gateway's readiness)."""


@dataclass
class FakeProcess:
    node: str
    argv: list[str]
    env: dict[str, str]
    log: Path
    started: float
    program: Program
    pid: int
    exit_code: int | None = None
    """None while it runs; negative: the signal that ended it."""

    @property
    def port(self) -> int | None:
        for flag in ("-p", "--port"):
            if flag in self.argv:
                i = self.argv.index(flag)
                if i + 1 < len(self.argv) and self.argv[i + 1].isdigit():
                    return int(self.argv[i + 1])
        return None

    @property
    def bind(self) -> str:
        for flag in ("-H", "--host", "--node-ip-address"):  # the last: ray start
            if flag in self.argv:
                i = self.argv.index(flag)
                if i + 1 < len(self.argv):
                    return self.argv[i + 1]
        return "127.0.0.1"


class FakeNode(Node):
    """A machine in a :class:`FakeNodes`: processes, files and commands, all in memory."""

    def __init__(self, host: str, net: FakeNodes) -> None:
        self.host = host
        self.net = net
        self.files: dict[str, bytes] = {}
        self.commands: list[str] = []
        """Every script :meth:`run` got, in order."""
        self.answers: list[tuple[str, subprocess.CompletedProcess[bytes]]] = []
        """(substring, result): the first whose substring is in a script answers it (default: exit 0)."""

    # -- commands and files -------------------------------------------------------------------
    def run(
        self, script: str, *, input: bytes | None = None, timeout: float = 60.0, check: bool = True
    ) -> subprocess.CompletedProcess[bytes]:
        self.net.check_reachable(self.host)
        self.commands.append(script)
        for needle, result in self.answers:
            if needle in script:
                if check and result.returncode != 0:
                    raise ClusterError(f"{self.host}: remote command failed (exit {result.returncode})")
                return result
        return subprocess.CompletedProcess(["sh", "-c", script], 0, b"", b"")

    def read_file(self, path: Path | str) -> bytes | None:
        self.net.check_reachable(self.host)
        return self.files.get(str(path))

    def write_file(self, path: Path | str, data: bytes) -> None:
        self.net.check_reachable(self.host)
        self.files[str(path)] = bytes(data)

    # -- processes ----------------------------------------------------------------------------
    def spawn(self, argv: list[str], env: dict[str, str], log_path: Path) -> ProcessRef:
        self.net.check_reachable(self.host)
        return self.net.start(self.host, argv, env, log_path)

    def _proc(self, ref: ProcessRef) -> FakeProcess | None:
        proc = self.net.processes.get(ref.pid)
        return proc if proc is not None and proc.node == self.host else None

    def alive(self, ref: ProcessRef) -> bool:
        self.net.check_reachable(self.host)
        proc = self._proc(ref)
        return proc is not None and proc.exit_code is None

    def signal(self, ref: ProcessRef, sig: int) -> None:
        proc = self._proc(ref)
        if proc is None or proc.exit_code is not None:
            return
        self.net.signals.append((self.net.clock.monotonic(), proc, sig))
        if sig == _signal.SIGTERM and proc.program.ignores_sigterm:
            return
        self.net.end(proc, -sig)

    def exit_code(self, ref: ProcessRef) -> int | None:
        proc = self._proc(ref)
        return None if proc is None else proc.exit_code

    def rss_bytes(self, ref: ProcessRef) -> int | None:
        return 100 << 20 if self.alive(ref) else None

    def new_log(self, log_path: Path, header: str) -> None:
        key = str(log_path)
        if key in self.files:
            self.files[key + ".1"] = self.files[key]
        self.files[key] = (header + "\n").encode()

    def read_log(self, log_path: Path, max_bytes: int = 1 << 20) -> str:
        return self.files.get(str(log_path), b"")[-max_bytes:].decode("utf-8", "replace")

    def read_log_since(self, log_path: Path, offset: int, max_bytes: int = 1 << 20) -> tuple[str, int]:
        data = self.files.get(str(log_path), b"")
        start = offset if len(data) >= offset else 0
        chunk = data[start : start + max_bytes]
        return chunk.decode("utf-8", "replace"), start + len(chunk)

    def append_log(self, log_path: Path | str, text: str) -> None:
        key = str(log_path)
        self.files[key] = self.files.get(key, b"") + text.encode()


class FakeNodes:
    """Fake nodes that see each other's listening ports, on one fake clock: the processes they
    run (what each program does, when it listens and exits), the signals sent, timers, ports,
    RPC HELLO and HTTP health. :class:`~splitserve.cluster.FakeNetwork` adds the cluster's I/O
    edges with the engine's HTTP API (a :class:`~splitserve.engine.FakeEngine`)."""

    def __init__(self, clock: FakeClock | None = None) -> None:
        self.clock = clock or FakeClock()
        self.nodes: dict[str, FakeNode] = {}
        self.programs: dict[str, Program] = {}
        self.processes: dict[int, FakeProcess] = {}
        self.spawned: list[FakeProcess] = []
        """Every process started, in order."""
        self.unreachable: set[str] = set()
        self.taken_ports: set[tuple[str, int]] = set()
        """(bind, port) held by someone else (port_in_use says yes)."""
        self.on_spawn: list[Callable[[FakeProcess], None]] = []
        self.signals: list[tuple[float, FakeProcess, int]] = []
        """(fake time, process, signal) for every signal sent to a running process, in order."""
        self._port_programs: dict[tuple[str, int], Program] = {}
        self._timers: list[tuple[float, int, Callable[[], object]]] = []
        self._next_pid = 4000
        self.clock.on_advance.append(self._tick)

    # -- set-up -----------------------------------------------------------------------------
    def node(self, host: str) -> FakeNode:
        key = "local" if host in ("local", "localhost", "127.0.0.1") else host
        if key not in self.nodes:
            self.nodes[key] = FakeNode(key, self)
        return self.nodes[key]

    def program(self, name: str, program: Program, *, port: int | None = None) -> None:
        """The behaviour of every process whose binary's file name is ``name`` (``splitserve serve``
        for the gateway), or only of the one started with ``port`` when given."""
        if port is None:
            self.programs[name] = program
        else:
            self._port_programs[(name, port)] = program

    def after(self, seconds: float, action: Callable[[], object]) -> None:
        """Run ``action`` once the fake clock is ``seconds`` past now (e.g. kill a worker mid-run)."""
        self._timers.append((self.clock.monotonic() + seconds, len(self._timers), action))
        self._timers.sort(key=lambda t: (t[0], t[1]))

    def check_reachable(self, host: str) -> None:
        if host in self.unreachable:
            raise ClusterError(f"{host}: ssh failed: Connection timed out; check that `ssh {host} true` works")

    # -- processes ----------------------------------------------------------------------------
    def _program_for(self, argv: list[str], port: int | None) -> Program:
        name = Path(argv[0]).name
        if name.startswith("python") and "-m" in argv:  # python -m splitserve serve
            name = " ".join(argv[argv.index("-m") + 1 : argv.index("-m") + 3])
        if port is not None and (name, port) in self._port_programs:
            return self._port_programs[(name, port)]
        return self.programs.get(name, Program())

    def start(self, host: str, argv: list[str], env: dict[str, str], log: Path) -> ProcessRef:
        self._next_pid += 1
        proc = FakeProcess(host, list(argv), dict(env), log, self.clock.monotonic(), Program(), self._next_pid)
        proc.program = self._program_for(proc.argv, proc.port)
        self.processes[proc.pid] = proc
        self.spawned.append(proc)
        node = self.node(host)
        if proc.program.log:
            node.append_log(log, "".join(line + "\n" for line in proc.program.log))
        for callback in self.on_spawn:
            callback(proc)
        self._tick(self.clock.monotonic())
        return ProcessRef(proc.pid, int(proc.started * 100))

    def end(self, proc: FakeProcess, code: int) -> None:
        if proc.exit_code is None:
            proc.exit_code = code

    def find(self, node: str | None = None, role_binary: str | None = None, *, port: int | None = None) -> FakeProcess:
        """The newest running process on host ``node`` / of binary ``role_binary`` / started with
        ``port`` (each when given)."""
        for proc in reversed(self.spawned):
            if (
                proc.exit_code is None
                and (node is None or proc.node == self.node(node).host)
                and (role_binary is None or Path(proc.argv[0]).name == role_binary)
                and (port is None or proc.port == port)
            ):
                return proc
        raise AssertionError(f"no running process on {node or 'any node'} (binary {role_binary}, port {port})")

    def kill(
        self,
        node: str | None = None,
        role_binary: str | None = None,
        sig: int = _signal.SIGKILL,
        *,
        port: int | None = None,
    ) -> FakeProcess:
        """End the running process of ``node`` (the one whose binary name is ``role_binary``, or
        that was started with ``port``, if given) as signal ``sig`` would."""
        proc = self.find(node, role_binary, port=port)
        self.end(proc, -sig)
        return proc

    def running(self) -> list[FakeProcess]:
        return [p for p in self.spawned if p.exit_code is None]

    def _tick(self, now: float) -> None:
        for proc in self.processes.values():
            after = proc.program.exit_after
            if proc.exit_code is None and after is not None and now - proc.started >= after:
                self.end(proc, proc.program.exit_code)
        while self._timers and self._timers[0][0] <= now:
            _when, _n, action = self._timers.pop(0)
            action()

    def listener(self, host: str, port: int) -> FakeProcess | None:
        """The running process that listens on ``host:port`` now (a local one also on loopback), or None."""
        now = self.clock.monotonic()
        for proc in self.processes.values():
            la = proc.program.listen_after
            if (
                proc.exit_code is None
                and proc.port == port
                and la is not None
                and now - proc.started >= la
                and (proc.bind == host or (host in ("127.0.0.1", "localhost") and proc.node == "local"))
            ):
                return proc
        return None

    def listens(self, host: str, port: int) -> bool:
        """Whether a running process listens on ``host:port`` now."""
        return self.listener(host, port) is not None

    def http_health(self, url: str) -> tuple[int, str]:
        """``GET url`` (the gateway's ``/health``): the listening process's ``http_status``, or
        (0, ``ConnectError``) when nothing listens there."""
        parts = urlsplit(url)
        proc = self.listener(parts.hostname or "127.0.0.1", parts.port or 80)
        if proc is None:
            return 0, "ConnectError"
        status = proc.program.http_status
        return status, '{"status":"ok"}' if status == 200 else '{"status":"unavailable"}'

    def node_for(self, host: str, ssh: object = None) -> Node:
        """:func:`~splitserve.cluster.node_for` of this network: the fake node of ``host`` (ssh settings ignored)."""
        return self.node(host)

    # -- ports, as the cluster's executor asks of a network (cluster._edges.Network) ------------
    def port_in_use(self, bind: str, port: int) -> bool:
        return (bind, port) in self.taken_ports or self.listener(bind, port) is not None

    def port_busy(self, host: str, bind: str, port: int) -> bool:
        return self.port_in_use(bind, port)

    def port_answers(self, host: str, port: int, timeout: float = 0.5) -> bool:
        return self.listener(host, port) is not None

    def spare_port(self, bind: str, avoid: set[int]) -> int:
        """The lowest port from 40000 up that nothing holds (deterministic, unlike the kernel's)."""
        port = 40000
        while port in avoid or self.port_in_use(bind, port):
            port += 1
        return port

    def rpc_hello(self, host: str, port: int) -> str:
        proc = self.listener(host, port)
        if proc is None or proc.program.rpc_protocol is None:
            raise ClusterError(f"connection refused by {host}:{port}")
        return proc.program.rpc_protocol


__all__ = ["FakeNode", "FakeNodes", "FakeProcess", "Program"]
