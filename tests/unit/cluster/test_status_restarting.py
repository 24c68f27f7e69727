"""`status` while a cluster restarts and after a death nobody restarts: the supervisor's record
(supervisor.json) on fakes, and `status` reading it with a real lock on a real state folder
(valid JSON, the attempt and the cause, exit 4), also in the window where the cluster's state is
gone; without a supervisor, the cause from the logs and the command to run (exit 3)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fake_cluster import ENGINE, W2, local_spec
from splitserve.cli import app
from splitserve.cli._app import _register
from splitserve.cluster import Event, FakeNetwork, Program, Supervisor, cluster_status
from splitserve.cluster import _execute as ex
from splitserve.cluster._state import ClusterState, ProcessRecord, SupervisorLock, write_state
from splitserve.cluster._supervise import read_supervision

_register(["status"])


def test_the_supervisor_records_its_phase_the_attempt_and_the_cause(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = local_spec(tmp_path, supervise={"backoff_initial": 1, "backoff_max": 4})
    net = FakeNetwork()
    net.program("ggml-rpc-server", Program(log=["Starting RPC server v3.0.0"]))
    net.program("llama-server", Program(log=["Remote RPC server crashed or returned malformed response"]))
    monkeypatch.setattr(ex, "preflight_or_raise", lambda *a: None)
    sup = Supervisor(spec, engine=ENGINE, preflight=True, edges=net.edges())
    root = tmp_path / "st"
    seen: list[tuple[str, dict[str, object] | None]] = []
    readies = 0

    def on_event(e: Event) -> None:
        seen.append((e.kind, read_supervision(root)))

    def on_ready(_state: object) -> None:
        nonlocal readies
        readies += 1
        seen.append(("on_ready", read_supervision(root)))
        if readies == 1:
            net.after(1.0, lambda: net.kill(port=W2))
        else:
            sup.stop()

    sup.emit_user = on_event
    sup.run(on_ready=on_ready)
    ready = [rec for kind, rec in seen if kind == "on_ready"]
    assert [r["phase"] for r in ready] == ["serving", "serving"]  # type: ignore[index]
    assert ready[1]["restarts"] == 1  # type: ignore[index]
    restarting = next(rec for kind, rec in seen if kind == "restarting")
    assert restarting is not None and restarting["phase"] == "restarting" and restarting["attempt"] == 1
    assert str(restarting["cause"]).startswith("w2 killed by signal 9")
    assert "ggml-rpc-server was killed by signal 9" in str(restarting["detail"])
    assert read_supervision(root) is None  # gone with the supervisor


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def write_cluster(root: Path, logs: Path) -> None:
    logs.mkdir(parents=True, exist_ok=True)
    (logs / "w2.log").write_text("# splitserve: started\nStarting RPC server v3.0.0\naccepted client\n")
    (logs / "head.log").write_text(
        "# splitserve: started\nload_tensors: done\n"
        "/src/ggml-rpc.cpp:582: Remote RPC server crashed or returned malformed response\n"
        # ggml's backtrace after the abort: frames that name `abort`, not the cause
        "/e/lib/libggml-base.so(+0x1574b)[0x7f3b1c1e974b]\n"
        "/e/lib/libggml-base.so(ggml_abort+0x15f)[0x7f3b1c1e9d8f]\n"
        "#3  0x00007f3b1c1e9d8f in ggml_abort () from /e/lib/libggml-base.so\n"
    )
    procs = [
        ProcessRecord("w2", "rpc", "local", dead_pid(), None, "127.0.0.1", 50101, str(logs / "w2.log"), ["rpc"]),
        ProcessRecord(
            "head", "server", "local", dead_pid(), None, "127.0.0.1", 8080, str(logs / "head.log"), ["llama-server"]
        ),
    ]
    write_state(
        root,
        ClusterState(
            name=root.name,
            spec_file="/specs/c.toml",
            model="/m.gguf",
            endpoint="http://127.0.0.1:1",
            engine="e",
            phase="ready",
            processes=procs,
        ),
    )


def status(name: str, *extra: str) -> tuple[int, str]:
    res = CliRunner().invoke(app, ["status", "--name", name, *extra])
    return res.exit_code, res.stdout


def test_status_between_a_restarts_stop_and_start(state_home: Path) -> None:
    root = state_home / "c1"
    lock = SupervisorLock(root, "c1")
    lock.acquire()
    try:
        import os

        (root / "supervisor.json").write_text(
            json.dumps(
                {
                    "pid": os.getpid(),
                    "phase": "restarting",
                    "attempt": 2,
                    "restarts": 3,
                    "cause": "w2 killed by signal 9 (then head)",
                    "detail": "ggml-rpc-server was killed by signal 9",
                    "since": 1.0,
                }
            )
        )
        (root / "supervisor.log").write_text(
            "\n".join(json.dumps({"kind": k, "node": "cluster"}) for k in ("restarting", "restarting", "ready")) + "\n"
        )
        code, out = status("c1", "--json")
        data = json.loads(out)
        assert code == 4
        assert data["phase"] == "restarting" and data["processes"] == []
        assert data["restart"]["attempt"] == 2 and data["restart"]["cause"] == "w2 killed by signal 9 (then head)"
        assert data["restarts"] == 2 and data["supervisor"]["pid"] == os.getpid()
        code, out = status("c1")
        assert code == 4
        alone = CliRunner().invoke(app, ["status", "--json"])  # the only cluster, found by its lock
        assert alone.exit_code == 4 and json.loads(alone.stdout)["name"] == "c1"
        assert out.startswith("cluster c1: restarting (attempt 2, cause: w2 killed by signal 9 (then head))")
        # the dead processes still recorded, before the supervisor has stopped them: restarting too
        write_cluster(root, state_home / "logs")
        data = cluster_status(root)
        assert data["phase"] == "restarting" and data["restart"]["attempt"] == 2
    finally:
        lock.release()


def test_status_after_a_death_without_supervision_names_the_cause_and_the_command(state_home: Path) -> None:
    root = state_home / "c2"
    write_cluster(root, state_home / "logs")
    code, out = status("c2", "--json")
    data = json.loads(out)
    assert code == 3
    assert data["phase"] == "stopped" and data["supervisor"] is None and data["restart"] is None
    assert data["cause"]["node"] == "w2"
    head = next(o for o in data["cause"]["others"] if o["node"] == "head")
    assert "Remote RPC server crashed" in head["message"]
    assert data["next"] == "splitserve up -c /specs/c.toml"
    code, out = status("c2")
    assert code == 3
    assert "cause: w2: ggml-rpc-server died" in out
    assert "then head: llama-server died" in out and "Remote RPC server crashed" in out
    assert "bring it back with: splitserve up -c /specs/c.toml" in out
