"""The engine smoke test on the nodes of a cluster (preflight's ``smoke`` rows).

The head and local workers use engines of this machine: their smoke test ran when the engine
was built here (its result is in the provenance, with this machine's fingerprint) or runs now.
A remote worker's ggml-rpc-server is started on the node, on its own bind address and port,
through the node's transport (the same path `up` takes), and computes every layer of the tiny
model's greedy token for the head's llama-server; the token must be the head's.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from .._node import Node
from ..engine import (
    Check,
    Engine,
    SmokeEdges,
    SmokeProcess,
    SmokeReport,
    check_rpc,
    machine_fingerprint,
    smoke_test,
    tiny_model,
)
from ._spec import ClusterSpec, WorkerSpec
from ._ssh import exit_status_from_log

ROLES = ("server", "rpc_server", "bench")


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
    argv = [str(engine.path("rpc_server")), "-H", worker.bind, "-p", str(worker.port)]
    rpc = SmokeProcess(transport, argv, env, log, exit_status=exit_status_from_log)
    with tempfile.TemporaryDirectory(prefix="splitserve-smoke-") as tmp:
        return check_rpc(
            SmokeEdges(),
            Path(tmp),
            head.server,
            engine.path("rpc_server"),
            tiny_model(),
            token,
            worker=rpc,
            host=worker.bind,
            port=worker.port,
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
