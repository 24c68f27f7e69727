"""State handling: the state file round-trips, a recycled pid is never taken for
ours, and stopping a process group leaves nothing behind."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from splitserve import ClusterError
from splitserve._node import start_ticks, stop
from splitserve.cluster import ClusterState, LocalNode, ProcessRef, SshNode, SshSpec, node_for, read_state
from splitserve.cluster._state import ProcessRecord, clear_state, write_state


def record(pid: int, ticks: int | None, node: str = "w1") -> ProcessRecord:
    return ProcessRecord(
        node=node,
        role="rpc",
        host="local",
        pid=pid,
        start_ticks=ticks,
        bind="127.0.0.1",
        port=50052,
        log="/tmp/x.log",
        argv=["ggml-rpc-server"],
    )


def test_state_file_round_trips(tmp_path: Path) -> None:
    state = ClusterState(
        name="c",
        spec_file="/s.toml",
        model="/m.gguf",
        endpoint="http://127.0.0.1:8080",
        engine="e",
        phase="ready",
        load_seconds=1.5,
        processes=[record(123, 456)],
        extra={"memory": [{"device": "RPC0[127.0.0.1:50052]"}]},
    )
    write_state(tmp_path, state)
    assert read_state(tmp_path) == state
    clear_state(tmp_path)
    assert read_state(tmp_path) is None


def test_state_knows_the_gateway_and_the_engine_url(tmp_path: Path) -> None:
    gw = ProcessRecord(
        node="gateway",
        role="gateway",
        host="local",
        pid=9,
        start_ticks=1,
        bind="127.0.0.1",
        port=8000,
        log="/tmp/g.log",
        argv=["python"],
    )
    state = ClusterState(
        name="c",
        spec_file=None,
        model="/m.gguf",
        endpoint="http://127.0.0.1:8000",
        engine="e",
        processes=[record(1, 2), gw],
        engine_endpoint="http://127.0.0.1:8080",
    )
    write_state(tmp_path, state)
    back = read_state(tmp_path)
    assert back is not None and back.gateway == gw and back.engine_url == "http://127.0.0.1:8080"
    # A state file written before the gateway was part of `up` has no engine_endpoint.
    old = ClusterState(
        name="c",
        spec_file=None,
        model="/m.gguf",
        endpoint="http://127.0.0.1:8080",
        engine="e",
        processes=[record(1, 2)],
    )
    text = old.to_json().replace('  "engine_endpoint": null,\n', "").replace(',\n  "engine_endpoint": null', "")
    assert "engine_endpoint" not in text
    (tmp_path / "state.json").write_text(text)
    back = read_state(tmp_path)
    assert back is not None and back.gateway is None and back.engine_url == "http://127.0.0.1:8080"


def test_ssh_settings_are_a_typed_field_and_old_states_still_read(tmp_path: Path) -> None:
    ssh = SshSpec(config=tmp_path / "ssh_config", options=["Port=2222"], connect_timeout=4.0)
    state = ClusterState(name="c", spec_file=None, model="/m.gguf", endpoint="http://x", engine="e", ssh=ssh)
    write_state(tmp_path, state)
    assert json.loads((tmp_path / "state.json").read_text())["ssh"] == {
        "config": str(tmp_path / "ssh_config"),
        "options": ["Port=2222"],
        "connect_timeout": 4.0,
    }
    back = read_state(tmp_path)
    assert back == state and back.ssh == ssh and "ssh" not in back.extra
    # a state file of an earlier `up` kept the ssh settings under "extra"
    data = json.loads(state.to_json())
    data["extra"] = {"ssh": data.pop("ssh"), "backend": "vllm"}
    (tmp_path / "state.json").write_text(json.dumps(data))
    old = read_state(tmp_path)
    assert old is not None and old.ssh == ssh and old.extra == {"backend": "vllm"}
    node = node_for("box2", old.ssh)
    assert node is node_for("box2", ssh)
    assert isinstance(node, SshNode) and node.ssh_argv()[1:3] == ["-F", str(tmp_path / "ssh_config")]
    assert node.options == ["Port=2222"] and node.connect_timeout == 4.0


def test_corrupt_state_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "state.json").write_text("{not json")
    with pytest.raises(ClusterError, match="unreadable cluster state"):
        read_state(tmp_path)


def test_spawn_alive_stop_and_exit_code(tmp_path: Path) -> None:
    transport = LocalNode()
    ref = transport.spawn(
        [sys.executable, "-c", "print('hi', flush=True); import time; time.sleep(60)"],
        {"PATH": "/usr/bin:/bin"},
        tmp_path / "p.log",
    )
    assert ref.start_ticks == start_ticks(ref.pid)
    deadline = time.monotonic() + 10
    while "hi" not in transport.read_log(tmp_path / "p.log") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "hi" in transport.read_log(tmp_path / "p.log")
    assert transport.alive(ref)
    assert (transport.rss_bytes(ref) or 0) > 0
    assert stop(transport, ref, grace=5)
    assert not transport.alive(ref)
    assert transport.exit_code(ref) == -15


def test_stop_takes_the_whole_process_group(tmp_path: Path) -> None:
    transport = LocalNode()
    child_pid_file = tmp_path / "child.pid"
    script = (
        "import subprocess, sys, time;"
        f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
        f"open({str(child_pid_file)!r}, 'w').write(str(p.pid)); time.sleep(60)"
    )
    ref = transport.spawn([sys.executable, "-c", script], {"PATH": "/usr/bin:/bin"}, tmp_path / "g.log")
    deadline = time.monotonic() + 10
    while not (child_pid_file.exists() and child_pid_file.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int(child_pid_file.read_text())
    assert stop(transport, ref, grace=5)
    deadline = time.monotonic() + 5
    while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    gone = (
        not Path(f"/proc/{child}").exists() or Path(f"/proc/{child}/stat").read_text().split(")")[1].split()[0] == "Z"
    )
    assert gone, "the worker's own children must stop with it"


def test_recycled_pid_is_not_ours() -> None:
    # A process that runs, but started at another time than the one recorded: never signalled.
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        fresh = LocalNode()  # knows no children: judges by /proc only, as `down` in a new process does
        real = ProcessRef(sleeper.pid, start_ticks(sleeper.pid))
        impostor = ProcessRef(sleeper.pid, (real.start_ticks or 0) + 12345)
        assert fresh.alive(real)
        assert not fresh.alive(impostor)
        fresh.signal(impostor, 9)
        assert sleeper.poll() is None, "a pid recorded with another start time must not be signalled"
    finally:
        sleeper.kill()
        sleeper.wait()


def test_zombie_is_not_alive() -> None:
    proc = subprocess.Popen(["true"])
    ref = ProcessRef(proc.pid, start_ticks(proc.pid))
    time.sleep(0.3)  # exited, not yet reaped: a zombie
    assert not LocalNode().alive(ref)
    proc.wait()


def test_a_stopped_process_of_another_parent_is_gone_when_stop_returns() -> None:
    # Started by a shell that exits at once: its parent becomes init, as for a cluster that one
    # `splitserve up` started and another `splitserve down` stops. Killed, it stays a zombie
    # until init reaps it; wait_reaped waits for that.
    from splitserve._node import wait_reaped

    out = subprocess.run(
        ["sh", "-c", "setsid sleep 60 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True, check=True
    )
    pid = int(out.stdout.strip())
    ref = ProcessRef(pid, start_ticks(pid))
    transport = LocalNode()  # a fresh transport: not its child
    assert transport.alive(ref)
    assert stop(transport, ref, grace=2)
    wait_reaped([(transport, ref)])
    assert not Path(f"/proc/{pid}").exists()
