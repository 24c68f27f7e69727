"""The engine smoke test on the nodes of a cluster (preflight's ``smoke`` rows).

The head and local workers use engines of this machine: their smoke test ran when the engine
was built here (its result is in the provenance, with this machine's fingerprint) or runs now.
A remote worker's ggml-rpc-server is started on the node, on its own bind address and port,
through the node's transport (the same path `up` takes), and computes every layer of the tiny
model's greedy token for the head's llama-server; the token must be the head's.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

from .._errors import SplitserveError
from .._node import Node, ProcessRef, stop
from ..engine import (
    Check,
    Engine,
    LocalRunner,
    RunResult,
    SmokeReport,
    check_rpc,
    machine_fingerprint,
    smoke_test,
    tiny_model,
    wait_port,
)
from ._spec import ClusterSpec, WorkerSpec
from ._ssh import exit_status_from_log

ROLES = ("server", "rpc_server", "bench")


class NodeBackground:
    """A process on a node, as the smoke test's :class:`~splitserve.engine._smoke.Background`."""

    def __init__(self, transport: Node, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.transport, self.log = transport, log
        transport.new_log(log, "# splitserve: engine smoke test")
        self.ref: ProcessRef | None = None
        self.result: RunResult | None = None
        try:
            self.ref = transport.spawn(argv, env, log)
        except SplitserveError as exc:
            self.result = RunResult(127, str(exc))

    def listening(self, host: str, port: int, timeout: float) -> bool:
        ref = self.ref
        if ref is None:
            return False
        return wait_port(host, port, timeout, lambda: self.transport.alive(ref))

    def stop(self) -> RunResult:
        if self.result is None:
            assert self.ref is not None
            was_alive = self.transport.alive(self.ref)
            if was_alive:
                stop(self.transport, self.ref, grace=2.0)
            text = self.transport.read_log(self.log, max_bytes=64 << 10)
            code = None
            if not was_alive:
                code = self.transport.exit_code(self.ref)
                if code is None:
                    code = exit_status_from_log(text)
            elif exit_status_from_log(text) == -int(signal.SIGKILL):
                code = None  # our own SIGKILL after the grace period: it was still serving
            self.result = RunResult(code, text)
        return self.result


def local_report(engine: Engine) -> tuple[SmokeReport | dict[str, Any], bool]:
    """The smoke test of a local engine: the build's own result when it was built on this
    machine (same fingerprint), else a fresh run. Returns (report, from_build)."""
    recorded = engine.provenance.get("smoke")
    if isinstance(recorded, dict) and recorded.get("machine") == machine_fingerprint() and recorded.get("ok"):
        return recorded, True
    return smoke_test(engine.bin_dir, engine.provenance.get("binaries", {}), tiny_model()), False


def node_check(
    spec: ClusterSpec, worker: WorkerSpec, engine: Engine, head: Engine, token: list[int] | None, transport: Node
) -> Check:
    """ggml-rpc-server of ``engine`` on the worker's node serves the tiny model's token."""
    from ._commands import _library_env

    log = Path(f"{worker.workdir.rstrip('/')}/clusters/{spec.name}/logs/{worker.name}.smoke.log")
    env = _library_env(engine, worker.env)
    return check_rpc(
        LocalRunner(),
        head.server,
        engine.path("rpc_server"),
        tiny_model(),
        token,
        host=worker.bind,
        port=worker.port,
        start=lambda argv: NodeBackground(transport, argv, env, log),
    )


def fix_for(engine: Engine, check: Check, host: str) -> str:
    """What to do about a failed smoke check on ``host``."""
    if check.verdict == "signal":
        own = engine.provenance.get("node_path")
        if own:
            return (
                f"the llama.cpp build in {own} cannot run on {host}'s CPU: rebuild it there (portable: "
                "-DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON), or remove the worker's "
                "`engine` to use the head's"
            )
        if engine.provenance.get("cpu_build") == "native":
            return (
                "the engine was built with --native for another CPU: build the portable one "
                "(splitserve engine build, without --native) and use it for every node"
            )
        variant = check.cpu_variant or engine.provenance.get("cpu_variant_chosen")
        hint = f" --skip-cpu-variant {variant}" if variant else ""
        return (
            f"{host}'s CPU cannot run the code ggml chose there: rebuild without that CPU variant "
            f"(splitserve engine build --force{hint}) or see docs/engine.md"
        )
    if check.verdict == "timeout":
        return f"see the log on {host}; check that nothing else holds the port and that the node is not swapping"
    return f"see the log lines above and the engine's build log ({engine.provenance.get('log', 'engine.json')})"
