"""What every launch of a cluster's processes shares: :class:`ProcessRunner` starts processes on their
nodes through the :class:`~._edges.Edges`, remembers them, checks they still run (naming the first
that died, with the last lines of its log), waits for the gateway and stops everything it started.

:class:`~._execute.Executor`, which carries out every launch plan (llama.cpp's and vLLM / SGLang's),
is one; the vLLM / SGLang step kinds it inherits (:class:`~._engines_run.EngineSteps`) are written
against it. :func:`run_until_log` is the one-process run of `plan --measure`.
"""

from __future__ import annotations

from collections.abc import Callable

from .._clock import SYSTEM_CLOCK, Clock
from .._errors import ClusterError, NodeError
from .._node import Node, ProcessRef, stop, wait_reaped
from ._commands import ProcessPlan, process_env
from ._down import OnEvent, death_message
from ._edges import REAL_EDGES, Edges
from ._spec import ClusterSpec, is_local_host
from ._state import ClusterState, ProcessRecord

GATEWAY_TIMEOUT = 60.0
"""Seconds the gateway gets, once the engine is ready, to answer ``/health`` with 200."""


def process_record(proc: ProcessPlan, ref: ProcessRef) -> ProcessRecord:
    """What the state file keeps of a started process."""
    return ProcessRecord(
        node=proc.node,
        role=proc.role,
        host=proc.host,
        pid=ref.pid,
        start_ticks=ref.start_ticks,
        bind=proc.bind,
        port=proc.port,
        log=str(proc.log),
        argv=proc.argv,
    )


class ProcessRunner:
    """Starts a cluster's processes and remembers them, so that a failure stops all it started."""

    def __init__(
        self,
        spec: ClusterSpec,
        state: ClusterState,
        edges: Edges = REAL_EDGES,
        on_event: OnEvent | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> None:
        self.spec = spec
        self.state = state
        self.edges = edges
        self.clock = edges.clock
        self.emit = on_event or (lambda _e: None)
        self.should_stop = should_stop
        self.started: list[tuple[ProcessPlan, Node, ProcessRef]] = []

    def node(self, host: str) -> Node:
        return self.edges.node(host, self.spec.ssh)

    def spawn(self, proc: ProcessPlan) -> ProcessRef:
        """Start ``proc`` on its node with a fresh log headed by its command line."""
        self.check_alive("at start")
        node = self.node(proc.host)
        node.new_log(proc.log, f"# splitserve: {proc.shell()}")
        env = process_env(proc) if is_local_host(proc.host) else dict(proc.env)
        ref = node.spawn(proc.argv, env, proc.log)
        self.started.append((proc, node, ref))
        return ref

    def check_alive(self, during: str) -> None:
        """Raise for the first started process that died (RPC workers first: a dead worker is the
        root cause of a head that then fails), or when the caller asked to stop."""
        if self.should_stop is not None and self.should_stop():
            raise ClusterError(f"cluster {self.spec.name}: stopped {during} (asked to stop)")
        for proc, node, ref in sorted(self.started, key=lambda t: t[0].role != "rpc"):
            if not node.alive(ref):
                raise NodeError(proc.node, death_message(proc.role, node, ref, proc.log, during))

    def wait_gateway(self, gw: ProcessPlan, endpoint: str, during: str = "at start") -> None:
        """Until the gateway at ``endpoint`` answers ``/health`` with 200 (at most :data:`GATEWAY_TIMEOUT`)."""
        deadline = self.clock.monotonic() + GATEWAY_TIMEOUT
        last = "no answer"
        while True:
            self.check_alive(during)
            status, text = self.edges.http_health(endpoint + "/health")
            if status == 200:
                return
            last = f"HTTP {status}: {text}" if status else text
            if self.clock.monotonic() > deadline:
                raise NodeError(
                    "gateway",
                    f"the gateway on {gw.bind}:{gw.port} was not ready within "
                    f"{GATEWAY_TIMEOUT:.0f} s (last: {last}; log: {gw.log})",
                )
            self.clock.sleep(0.05)

    def stop_all(self) -> list[str]:
        """Stop what was started, last first; the processes that would not stop."""
        leftovers = []
        for proc, node, ref in reversed(self.started):
            if not stop(node, ref, clock=self.clock):
                leftovers.append(f"{proc.node} (pid {ref.pid})")
        wait_reaped([(n, r) for _p, n, r in self.started], clock=self.clock)
        return leftovers


def run_until_log(
    node: Node, proc: ProcessPlan, markers: tuple[str, ...], timeout: float, clock: Clock = SYSTEM_CLOCK
) -> str:
    """Start ``proc`` on ``node``, wait until its log holds one of ``markers`` (or it exits, or
    ``timeout`` passes), stop it and return its log (`plan --measure`)."""
    node.new_log(proc.log, f"# splitserve: {proc.shell()}")
    env = process_env(proc) if is_local_host(proc.host) else dict(proc.env)
    ref = node.spawn(proc.argv, env, proc.log)
    text, offset = "", 0
    deadline = clock.monotonic() + timeout
    try:
        while clock.monotonic() < deadline:
            chunk, offset = node.read_log_since(proc.log, offset)
            text += chunk
            if any(m in text for m in markers) or not node.alive(ref):
                chunk, offset = node.read_log_since(proc.log, offset)
                return text + chunk
            clock.sleep(0.05)
        return text
    finally:
        stop(node, ref, grace=2.0, clock=clock)


__all__ = ["GATEWAY_TIMEOUT", "ProcessRunner", "process_record", "run_until_log"]
