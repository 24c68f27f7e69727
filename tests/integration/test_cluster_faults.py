"""Faults at `up`: each gives a one-line error naming the node and the cause, a
non-zero exit, and no process left running."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import two_worker_spec, wait_dead
from splitserve import NodeError, SpecError
from splitserve.cluster import Event, cluster_state_dir, down, load_spec, up

pytestmark = [pytest.mark.engine]


class PidRecorder:
    """Reads the cluster's state file at every `up` event, so the test knows every pid started."""

    def __init__(self, spec, on_event=None) -> None:  # type: ignore[no-untyped-def]
        self.state_file = cluster_state_dir(spec) / "state.json"
        self.pids: dict[str, int] = {}
        self.on_event = on_event

    def __call__(self, event: Event) -> None:
        if self.state_file.exists():
            for p in json.loads(self.state_file.read_text())["processes"]:
                self.pids[p["node"]] = p["pid"]
        if self.on_event:
            self.on_event(event, self)


def assert_nothing_left(spec, rec: PidRecorder) -> None:  # type: ignore[no-untyped-def]
    assert wait_dead(list(rec.pids.values())) == [], f"left running: {rec.pids}"
    assert not rec.state_file.exists()


def test_missing_model_cli_one_line_exit_2(smollm2, state_home, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    spec_file = two_worker_spec(tmp_path, tmp_path / "missing.gguf", name="nomodel")
    res = subprocess.run(
        [sys.executable, "-m", "splitserve", "up", "-c", str(spec_file)], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert "nomodel.toml: model:" in lines[0] and "missing.gguf does not exist" in lines[0]
    assert "Traceback" not in res.stderr
    assert not (cluster_state_dir(load_spec(spec_file)) / "state.json").exists()


def test_worker_port_already_taken(engine, smollm2, state_home, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    spec = load_spec(two_worker_spec(tmp_path, smollm2, name="porttaken"))
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", spec.workers[1].port))
    blocker.listen(1)
    rec = PidRecorder(spec)
    try:
        with pytest.raises(NodeError) as info:
            up(spec, engine=engine, on_event=rec)
    finally:
        blocker.close()
    assert info.value.node == "w2"
    assert f"port {spec.workers[1].port} on 127.0.0.1 is already in use" in str(info.value)
    assert_nothing_left(spec, rec)


def test_worker_dies_during_load(engine, smollm2, state_home, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    spec = load_spec(two_worker_spec(tmp_path, smollm2, name="workerdies"))

    def kill_w2_when_head_starts(event: Event, rec: PidRecorder) -> None:
        if event.kind == "head_started":
            os.kill(rec.pids["w2"], signal.SIGKILL)

    rec = PidRecorder(spec, kill_w2_when_head_starts)
    with pytest.raises(NodeError) as info:
        up(spec, engine=engine, on_event=rec)
    assert info.value.node == "w2"
    assert "ggml-rpc-server was killed by signal 9 during load" in str(info.value)
    assert "\n" not in str(info.value)
    assert set(rec.pids) == {"w1", "w2", "head", "gateway"}
    assert_nothing_left(spec, rec)


def test_server_exits_at_start(engine, smollm2, state_home, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    spec = load_spec(two_worker_spec(tmp_path, smollm2, name="badflag", extra_args=["--no-such-flag"]))
    rec = PidRecorder(spec)
    with pytest.raises(NodeError) as info:
        up(spec, engine=engine, on_event=rec)
    assert info.value.node == "head"
    msg = str(info.value)
    assert "llama-server exited with code" in msg and "--no-such-flag" in msg
    assert_nothing_left(spec, rec)


def test_server_exits_cli_reports_node_and_cause(engine, smollm2, state_home, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    spec_file = two_worker_spec(tmp_path, smollm2, name="badctx", extra_args=["--no-such-flag"])
    res = subprocess.run(
        [sys.executable, "-m", "splitserve", "up", "-c", str(spec_file)], capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 1
    err_lines = [ln for ln in res.stderr.splitlines() if "error" in ln]
    assert len(err_lines) == 1 and err_lines[0].startswith("splitserve: error: head: llama-server exited")
    assert "Traceback" not in res.stderr


def test_spec_error_before_anything_starts(tmp_path: Path, state_home) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "bad.toml"
    bad.write_text('model = "x.gguf"\n[[workers]]\nname = "w1"\nbind = "0.0.0.0"\n')
    with pytest.raises(SpecError, match=r"bad\.toml: workers\[w1\]\.bind = '0\.0\.0\.0' is a wildcard"):
        up(load_spec(bad))
    res = subprocess.run(
        [sys.executable, "-m", "splitserve", "up", "-c", str(bad), "--skip-preflight"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1
    assert "is a wildcard address" in res.stderr and "allow_public_rpc = true" in res.stderr


def test_status_after_a_worker_died_says_degraded_and_exits_3(engine, smollm2, state_home, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    spec_file = two_worker_spec(tmp_path, smollm2, name="degraded")
    spec = load_spec(spec_file)
    state = up(spec, engine=engine)
    try:
        pids = {p.node: p.pid for p in state.processes}
        os.kill(pids["w1"], signal.SIGKILL)
        assert wait_dead([pids["w1"]]) == []
        res = subprocess.run(
            [sys.executable, "-m", "splitserve", "status", "-c", str(spec_file), "--json"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert res.returncode == 3
        data = json.loads(res.stdout)
        alive = {p["node"]: p["alive"] for p in data["processes"]}
        assert alive["w1"] is False and alive["gateway"] is True
        assert data["phase"] == "degraded"
    finally:
        down(spec)
    assert wait_dead(list(pids.values())) == []


def test_load_failure_names_the_real_cause(engine, smollm2, state_home, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # llama.cpp refuses a quantized V cache without flash attention, then logs generic wrappers
    # ("failed to create context", "exiting due to model loading error"): the cause is named.
    spec = load_spec(two_worker_spec(tmp_path, smollm2, name="vcache", cache_type_v="q8_0", flash_attn="off"))
    rec = PidRecorder(spec)
    with pytest.raises(NodeError) as info:
        up(spec, engine=engine, on_event=rec)
    assert info.value.node == "head"
    assert "quantized V cache requires flash_attn" in str(info.value)
    assert_nothing_left(spec, rec)
