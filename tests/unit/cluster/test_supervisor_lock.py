"""The supervisor's lock on the state folder: who holds it, a second `up` refused with nothing
touched, `down` asking the holder to stop; and the root cause ordered by who died first."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from splitserve import ClusterError
from splitserve._clock import FakeClock
from splitserve._node import ProcessRef
from splitserve.cluster import Edges, cluster_state_dir, down, parse_spec, up
from splitserve.cluster import _supervise as sv
from splitserve.cluster._state import (
    LOCK_FILE,
    ClusterState,
    ProcessRecord,
    SupervisorLock,
    lock_holder,
    read_state,
    write_state,
)


def make_spec(tmp_path: Path):  # type: ignore[no-untyped-def]
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    return parse_spec(
        {
            "name": "lk",
            "model": str(tmp_path / "m.gguf"),
            "state_dir": str(tmp_path / "st"),
            "workers": [{"name": "w1"}],
        }
    )


HOLD = """
import sys, time
from pathlib import Path
from splitserve.cluster._state import SupervisorLock
lock = SupervisorLock(Path(sys.argv[1]), "lk", command="splitserve run -c lk.toml")
lock.acquire()
print("held", flush=True)
time.sleep(120)
"""


def test_the_lock_names_its_holder_and_is_released(tmp_path: Path) -> None:
    root = tmp_path / "st"
    assert lock_holder(root) is None
    lock = SupervisorLock(root, "lk", command="splitserve up --foreground -c x.toml")
    lock.acquire()
    try:
        holder = lock_holder(root)
        assert holder is not None and holder.pid == os.getpid() and holder.start_ticks
        assert "up --foreground" in holder.describe()
        with pytest.raises(ClusterError, match=rf"cluster lk is held by its supervisor, pid {os.getpid()}"):
            SupervisorLock(root, "lk").acquire()  # a second supervisor, even in this process
    finally:
        lock.release()
    assert lock_holder(root) is None and (root / LOCK_FILE).exists()


def test_a_second_up_is_refused_and_down_asks_the_supervisor_to_stop(tmp_path: Path) -> None:
    spec = make_spec(tmp_path)
    root = cluster_state_dir(spec)
    root.mkdir(parents=True)
    # A "running" cluster: this test's own sleeping child stands in for a worker.
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    from splitserve._node import start_ticks

    state = ClusterState(
        name="lk",
        spec_file=None,
        model="m",
        endpoint="http://127.0.0.1:1",
        engine="e",
        processes=[
            ProcessRecord(
                "w1",
                "rpc",
                "local",
                worker.pid,
                start_ticks(worker.pid),
                "127.0.0.1",
                1,
                str(tmp_path / "w1.log"),
                ["sleep"],
            )
        ],
    )
    write_state(root, state)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(root)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(ClusterError) as info:
            up(spec)
        msg = str(info.value)
        assert f"held by its supervisor, pid {holder.pid} (splitserve run -c lk.toml" in msg
        assert "splitserve down" in msg and "\n" not in msg
        assert worker.poll() is None and read_state(root) is not None  # nothing touched
        t0 = time.monotonic()
        stopped = down(spec, supervisor_timeout=20)
        assert holder.wait(5) == -15  # SIGTERM from down
        assert stopped == ["w1"] and time.monotonic() - t0 < 20
        assert lock_holder(root) is None
        # what the (stand-in) supervisor left running is stopped by down itself
        assert worker.wait(15) is not None and read_state(root) is None
    finally:
        for p in (holder, worker):
            if p.poll() is None:
                p.kill()
                p.wait()


class FakeTransport:
    host = "local"

    def __init__(self, codes: dict[int, int | None], logs: dict[str, str]) -> None:
        self.codes = codes  # pid -> exit status (None: alive)
        self.logs = logs
        self.after_settle: dict[int, int] = {}

    def alive(self, ref: ProcessRef) -> bool:
        return self.codes.get(ref.pid) is None

    def exit_code(self, ref: ProcessRef) -> int | None:
        return self.codes.get(ref.pid)

    def read_log(self, log: Path, max_bytes: int = 0) -> str:
        return self.logs.get(log.name, "")


def _edges(fake: FakeTransport, clock: FakeClock | None = None) -> Edges:
    def node(host: object, ssh: object = None) -> FakeTransport:
        return fake

    return Edges(node=node, clock=clock or FakeClock())  # type: ignore[arg-type]


def _state(*procs: tuple[str, str, int]) -> ClusterState:
    return ClusterState(
        name="s",
        spec_file=None,
        model="m",
        endpoint="http://x",
        engine="e",
        processes=[ProcessRecord(n, r, "local", pid, None, "127.0.0.1", pid, f"/l/{n}.log", []) for n, r, pid in procs],
    )


PROCS = (("gateway", "gateway", 1), ("w1", "rpc", 2), ("w2", "rpc", 3), ("head", "server", 4))


def test_a_dead_head_is_named_before_the_workers_it_took_with_it() -> None:
    fake = FakeTransport(
        {1: None, 2: -13, 3: None, 4: -9},
        {"w1.log": "recv failed\nClient connection closed\n", "head.log": "srv  update_slots\n"},
    )
    death = sv.find_dead(_state(*PROCS), settle=0, edges=_edges(fake))
    assert death is not None and death.node == "head" and "killed by signal 9" in death.message
    assert [d.node for d in death.others] == ["w1"]
    assert "signal 13" in death.others[0].message and "because its head went away" in death.others[0].message


def test_a_killed_worker_stays_the_root_cause() -> None:
    fake = FakeTransport({1: None, 2: None, 3: -9, 4: -6}, {})
    death = sv.find_dead(_state(*PROCS), settle=0, edges=_edges(fake))
    assert death is not None and death.node == "w2" and "signal 9" in death.message
    assert [d.node for d in death.others] == ["head"] and "after w2" in death.others[0].message


def test_who_died_first_comes_first() -> None:
    fake = FakeTransport({1: -9, 2: None, 3: None, 4: None}, {})
    clock = FakeClock()

    def settle(now: float) -> None:  # the head dies while the first death settles
        fake.codes[4] = -6

    clock.on_advance.append(settle)
    death = sv.find_dead(_state(*PROCS), settle=0.01, edges=_edges(fake, clock))
    assert clock.slept == [0.01]
    assert death is not None and death.node == "gateway"  # seen dead first, though it ranks last by role
    assert [d.node for d in death.others] == ["head"]


def test_the_supervisor_log_has_the_root_cause_first(tmp_path: Path) -> None:
    spec = make_spec(tmp_path)
    sup = sv.Supervisor(spec)
    head = sv.Death("head", "server", "llama-server was killed by signal 9 while serving", ["x"], -9)
    w1 = sv.Death(
        "w1",
        "rpc",
        "ggml-rpc-server was killed by signal 13 while serving",
        [],
        -13,
        because="it died because its head went away",
    )
    head.others = [w1]
    sup._report(head)
    log = sv.read_supervisor_log(spec)
    assert [(e["node"], e["root_cause"]) for e in log] == [("head", True), ("w1", False)]
    assert log[1]["after"] == "head" and "because its head went away" in str(log[1]["message"])
