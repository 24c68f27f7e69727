"""A line of `up --dry-run` pasted on the node runs: the worker's command line, printed for a
worker whose work folder is under ``~`` (the default's form), is run by the login shell of a
network-namespace host over real SSH, as a user pasting it would, and the worker answers the
RPC HELLO on its address and port."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from netns_hosts import Hosts, remote_spec

from helpers import free_ports, wait_dead
from splitserve.cluster import load_spec, node_for
from splitserve.cluster._distribute import copy_engine, node_engine, rpc_hello

pytestmark = [pytest.mark.engine, pytest.mark.multihost]


def test_the_workers_dry_run_line_runs_when_pasted_on_its_node(
    engine,
    smollm2,
    state_home,
    hosts: Hosts,  # type: ignore[no-untyped-def]
    tmp_path: Path,
) -> None:
    box = hosts.boxes[0]
    home = subprocess.run(
        ["ssh", "-F", str(hosts.ssh_config), box.name, "echo $HOME"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout.strip()
    folder = f".cache/splitserve-dryrun-{uuid.uuid4().hex[:8]}"
    (port,) = free_ports(1)
    workers = (
        f'[[workers]]\nname = "w1"\nhost = "{box.name}"\nbind = "{box.address}"\nport = {port}\n'
        f'workdir = "~/{folder}"\n'
    )
    spec_file = remote_spec(
        tmp_path / "paste.toml",
        smollm2,
        hosts,
        "paste",
        head_port=free_ports(1)[0],
        workers=workers,
        extra=f'engine = "{engine.root}"',
    )
    spec = load_spec(spec_file)
    (worker,) = spec.workers
    started: list[int] = []
    try:
        copy_engine(worker, node_engine(worker, engine), node_for(box.name, spec.ssh))  # as `up` does
        out = subprocess.run(
            [sys.executable, "-m", "splitserve", "up", "-c", str(spec_file), "--dry-run", "--skip-preflight"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        (i,) = [i for i, ln in enumerate(lines) if ln.startswith(f"#    on {box.name}, log ")]
        line = lines[i + 1]
        assert "ggml-rpc-server" in line and "'~" not in line, line

        before = set(hosts.user_pids()[box.name])
        paste = subprocess.Popen(
            ["ssh", "-F", str(hosts.ssh_config), box.name, line],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        version = None
        deadline = time.monotonic() + 60
        while version is None and time.monotonic() < deadline and paste.poll() is None:
            try:
                version = rpc_hello(box.address, port, timeout=2)
            except OSError:
                time.sleep(0.2)
        started = [p for p in hosts.user_pids()[box.name] if p not in before]
        assert version is not None, f"the pasted line did not serve (exit {paste.poll()}): " + (
            paste.stdout.read() if paste.poll() is not None and paste.stdout else ""
        )
        assert version == engine.rpc_protocol
        # the process runs the copy under the node's home: the line's ~ became that home there
        binary = f"{home}/{folder}/engines/{engine.key}/ggml-rpc-server"
        cmdlines = [
            Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0") for p in started if Path(f"/proc/{p}").exists()
        ]
        assert any(binary.encode() in argv for argv in cmdlines), cmdlines
    finally:
        for pid in started:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        wait_dead(started)
        if "paste" in locals() and paste.poll() is None:
            os.killpg(paste.pid, signal.SIGTERM)
            paste.wait(10)
        shutil.rmtree(Path(home) / folder, ignore_errors=True)
