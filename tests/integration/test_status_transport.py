"""`up` and `status` say which transport each RPC worker ended on, read from the worker's own log."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import greedy, two_worker_spec
from splitserve.engine._rdma import rdma_support

pytestmark = [pytest.mark.engine]

CLI = [sys.executable, "-m", "splitserve"]
TCP_CAUSES = {"engine built without RDMA", "no RDMA device with a GID for the bind address"}


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=600, check=False)


def test_status_shows_each_workers_transport(engine, smollm2, state_home, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    spec_file = two_worker_spec(tmp_path, smollm2, name="tr", gateway={"enabled": False})
    res = run_cli("up", "-c", str(spec_file))
    assert res.returncode == 0, res.stderr
    try:
        status = json.loads(run_cli("status", "-c", str(spec_file), "--json").stdout)
        text = run_cli("status", "-c", str(spec_file)).stdout
        # the head and its two workers serve over the RPC link whatever its transport
        assert greedy(status["engine_endpoint"], "The capital of France is", n_predict=4).strip()
    finally:
        assert run_cli("down", "-c", str(spec_file)).returncode == 0
    workers = {p["node"]: p for p in status["processes"] if p["role"] == "rpc"}
    assert set(workers) == {"w1", "w2"}
    for name, p in workers.items():
        # loopback has no RDMA device: TCP, with the cause the worker's banner gives
        t = p["transport"]
        assert t["transport"] == "TCP" and t["cause"] in TCP_CAUSES, t
        assert f"{name} transport: TCP ({t['cause']})" in text
        assert f"{name} transport: TCP ({t['cause']})" in res.stdout  # up says it too, once ready
        # an engine built with RDMA (libibverbs-dev installed, as setup.sh does) falls back to
        # TCP on loopback, and the worker's banner says RDMA was compiled in
        if engine.rdma == "on":
            assert t["rdma_build"] is True and t["cause"] == "no RDMA device with a GID for the bind address", t
    head = next(p for p in status["processes"] if p["role"] == "server")
    assert "transport" not in head


def test_with_libibverbs_installed_the_engine_has_rdma(engine) -> None:  # type: ignore[no-untyped-def]
    support = rdma_support()
    # scripts/setup.sh installs libibverbs-dev before the engine build
    assert support.on, f"this machine cannot build RDMA: {support.reason} (run scripts/setup.sh)"
    assert engine.rdma == "on", engine.provenance.get("rdma_reason")
    assert engine.provenance["rdma_reason"].startswith("libibverbs found")
