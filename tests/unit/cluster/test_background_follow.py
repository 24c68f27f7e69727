"""How plain `up` follows the supervisor it leaves in the background: it relays the supervisor's
output line by line until the cluster serves under that supervisor (its lock, a ready state, the
supervisor saying `serving`), or until the supervisor exits (its last line says why). The
supervisor here is a real process that does what `splitserve run` does to the state folder."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from splitserve.cluster import read_state
from splitserve.cluster._supervise import BackgroundSupervisor

SERVES = """
import json, os, sys, time
from pathlib import Path
from splitserve.cluster._state import ClusterState, SupervisorLock, write_state
root = Path(sys.argv[1])
lock = SupervisorLock(root, "bg")
lock.acquire()
print("00:00:01 w1: started", flush=True)
time.sleep(0.3)
print("00:00:02 head: ready", flush=True)
write_state(root, ClusterState(name="bg", spec_file=None, model="/m.gguf", endpoint="http://127.0.0.1:1",
                               engine="e", phase="ready", ready_at=time.time()))
(root / "supervisor.json").write_text(json.dumps({"pid": os.getpid(), "phase": "serving"}))
time.sleep(60)
"""

FAILS = """
import sys, time
print("00:00:01 w1: started", flush=True)
time.sleep(0.2)
sys.stdout.write("splitserve: error: head: llama-server exited with code 1 during load")
sys.exit(1)
"""


def background(tmp_path: Path, script: str) -> BackgroundSupervisor:
    root = tmp_path / "bg"
    root.mkdir()
    out = root / "supervisor.out"
    out.write_text("# an earlier supervisor's line\n")
    offset = out.stat().st_size
    with open(out, "ab") as fh:
        proc = subprocess.Popen([sys.executable, "-c", script, str(root)], stdout=fh, stderr=subprocess.STDOUT)
    return BackgroundSupervisor(proc, root, out, offset, time.time() - 1)


def test_it_relays_the_output_until_the_cluster_serves_and_leaves_the_supervisor_running(tmp_path: Path) -> None:
    bg = background(tmp_path, SERVES)
    lines: list[str] = []
    try:
        state = bg.follow(lines.append, poll=0.05)
        assert state is not None and state.phase == "ready" and read_state(bg.root) is not None
        assert lines == ["00:00:01 w1: started", "00:00:02 head: ready"]  # not the earlier line
        assert bg.process.poll() is None
    finally:
        bg.stop(timeout=10)
    assert bg.process.poll() is not None


def test_a_supervisor_that_exits_ends_the_follow_with_its_last_line(tmp_path: Path) -> None:
    bg = background(tmp_path, FAILS)
    lines: list[str] = []
    assert bg.follow(lines.append, poll=0.05) is None
    assert lines == ["00:00:01 w1: started", "splitserve: error: head: llama-server exited with code 1 during load"]
    assert bg.process.returncode == 1
