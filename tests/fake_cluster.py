"""Clusters on fakes for unit tests: a fixed engine, local specs in a tmp folder, the roles of what
a :class:`~splitserve.cluster.FakeNetwork` started.

    net = FakeNetwork()
    state = up(local_spec(tmp_path), engine=ENGINE, preflight=False, edges=net.edges(FakeEngine()))
    assert roles(net) == ["gateway", "w1", "w2", "head"]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from splitserve.cluster import ClusterSpec, FakeNetwork, parse_spec
from splitserve.cluster._fake import FakeProcess
from splitserve.engine import Engine

BIN = Path("/opt/llama/bin")
ENGINE = Engine(
    root=BIN.parent,
    bin_dir=BIN,
    provenance={
        "key": "b4000-cpu",
        "backend": "cpu",
        "binaries": {"server": "llama-server", "rpc_server": "ggml-rpc-server", "bench": "llama-bench"},
        "rpc_protocol": "3.0.0",
    },
)
"""An engine that is nowhere on disk: its binaries are only names the fake network knows."""

W1, W2, HEAD, GATEWAY = 50100, 50101, 8080, 8000
"""The ports of :func:`local_spec`'s processes."""


def local_spec(tmp_path: Path, workers: int = 2, **extra: Any) -> ClusterSpec:
    """Workers ``w1``.. on loopback (ports 50100..), llama-server on 8080, the gateway on 8000; the
    state folder and a stand-in model file under ``tmp_path``."""
    model = tmp_path / "m.gguf"
    if not model.exists():
        model.write_bytes(b"GGUF stand-in: never read by a fake llama-server")
    data: dict[str, Any] = {
        "name": "fake",
        "model": str(model),
        "state_dir": str(tmp_path / "st"),
        "workers": [{"name": f"w{i + 1}", "port": W1 + i} for i in range(workers)],
    }
    data.update(extra)
    return parse_spec(data)


def role(proc: FakeProcess) -> str:
    """``gateway``, ``head`` or the worker's name (``w1`` for port 50100, ...)."""
    name = Path(proc.argv[0]).name
    if name == "llama-server":
        return "head"
    if name == "ggml-rpc-server":
        return f"w{(proc.port or W1) - W1 + 1}"
    return "gateway" if proc.argv[1:4] == ["-m", "splitserve", "serve"] else name


def roles(net: FakeNetwork, procs: list[FakeProcess] | None = None) -> list[str]:
    """The role of every process started (or of ``procs``), in start order."""
    return [role(p) for p in (net.spawned if procs is None else procs)]
