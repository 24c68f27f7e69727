"""`splitserve preflight` on this machine: one row per check and node, JSON and exit status."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import two_worker_spec

pytestmark = [pytest.mark.engine]


def preflight(spec_file: Path) -> tuple[int, list[dict[str, str]]]:
    res = subprocess.run(
        [sys.executable, "-m", "splitserve", "preflight", "-c", str(spec_file), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    return res.returncode, json.loads(res.stdout)


def test_rows_per_check_and_node(engine, smollm2, state_home, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    rc, rows = preflight(two_worker_spec(tmp_path, smollm2, name="pf"))
    by = {(r["check"], r["node"]): r for r in rows}
    assert all("," not in r["node"] for r in rows)
    for check in ("memory", "ports", "bind"):
        assert {n for (c, n) in by if c == check} >= {"w1", "w2"}, check
    assert {n for (c, n) in by if c == "oom-killer"} == {"head", "w1", "w2"}
    # each node's GPU clocks and power state; a machine without nvidia-smi says it has none (a pass)
    assert {n for (c, n) in by if c == "gpu-state"} == {"head", "w1", "w2"}
    if shutil.which("nvidia-smi") is None:
        gpu = by[("gpu-state", "w1")]
        assert gpu["status"] == "pass" and gpu["message"].startswith("no NVIDIA GPU (nvidia-smi not found)")
    assert ("ports", "gateway") in by and by[("ports", "gateway")]["status"] == "pass"
    assert {r["status"] for r in rows} <= {"pass", "warn", "fail", "skip"}
    assert rc == (1 if any(r["status"] == "fail" for r in rows) else 0)


def test_a_taken_port_and_a_wildcard_bind_are_failing_rows(engine, smollm2, state_home, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    spec_file = two_worker_spec(tmp_path, smollm2, name="pfbad")
    text = spec_file.read_text().replace('name = "w2"\n', 'name = "w2"\nbind = "0.0.0.0"\n', 1)
    spec_file.write_text(text)
    port = int(text.split('name = "w1"\nport = ')[1].split("\n")[0])
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", port))
    blocker.listen(1)
    try:
        rc, rows = preflight(spec_file)
    finally:
        blocker.close()
    assert rc == 1
    by = {(r["check"], r["node"]): r for r in rows}
    assert by[("ports", "w1")]["status"] == "fail" and "in use by another process" in by[("ports", "w1")]["message"]
    assert "workers[w1].port" in by[("ports", "w1")]["fix"]
    assert by[("bind", "w2")]["status"] == "fail" and "wildcard" in by[("bind", "w2")]["message"]
    assert "allow_public_rpc = true" in by[("bind", "w2")]["fix"]


def test_a_missing_model_fails_preflight_with_one_line_naming_it_and_the_fix(
    engine, smollm2, state_home, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    spec_file = two_worker_spec(tmp_path, smollm2, name="pfnomodel")
    missing = tmp_path / "models" / "SmolLM2-135M-Instruct-Q4_1.gguf"
    spec_file.write_text(spec_file.read_text().replace(str(smollm2), str(missing)))
    res = subprocess.run(
        [sys.executable, "-m", "splitserve", "preflight", "-c", str(spec_file)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "80"},
    )
    assert res.returncode == 1, res.stdout + res.stderr
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("fail: model (head)")]
    assert len(lines) == 1, res.stdout
    assert str(missing) in lines[0] and "splitserve fetch" in lines[0] and str(spec_file) in lines[0]
    rc, rows = preflight(spec_file)
    assert rc == 1 and [r["status"] for r in rows if r["check"] == "model"] == ["fail"]
