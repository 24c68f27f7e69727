"""Preflight across hosts: every failing check provoked for real, each showing its row and fix."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from netns_hosts import Hosts, remote_spec

from helpers import free_ports
from splitserve import NodeError
from splitserve.cluster import Event, load_spec, preflight, up

pytestmark = [pytest.mark.engine, pytest.mark.multihost]


def cli_preflight(spec_file: Path) -> tuple[int, list[dict[str, str]], str]:
    res = subprocess.run(
        [sys.executable, "-m", "splitserve", "preflight", "-c", str(spec_file), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    rows = json.loads(res.stdout) if res.stdout.strip().startswith("[") else []
    return res.returncode, rows, res.stderr


def row(rows: list[dict[str, str]], check: str, node: str) -> dict[str, str]:
    hits = [r for r in rows if r["check"] == check and node in r["node"].split(",")]
    assert len(hits) == 1, (check, node, rows)
    return hits[0]


def test_all_pass_across_hosts(engine, smollm2, state_home, hosts: Hosts, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (hp,) = free_ports(1)
    spec_file = remote_spec(tmp_path / "ok.toml", smollm2, hosts, "ok", head_port=hp)
    rc, rows, err = cli_preflight(spec_file)
    assert rc == 0, (rows, err)
    for node in ("w1", "w2"):
        assert row(rows, "ssh", node)["status"] == "pass"
        assert row(rows, "link", node)["status"] in ("pass", "warn")
        assert row(rows, "ports", node)["status"] == "pass"
        assert row(rows, "bind", node)["status"] == "pass"
        # Empty work folders: preflight copies the head's engine, as up would, and tests it there.
        eng = row(rows, "engine", node)
        assert (
            eng["status"] == "pass" and "no copy in" in eng["message"] and "copied the head's build" in eng["message"]
        )
        smoke = row(rows, "smoke", node)
        assert smoke["status"] == "pass" and "computed the head's token" in smoke["message"], smoke
    assert row(rows, "smoke", "head")["status"] == "pass"
    assert {r["status"] for r in rows} <= {"pass", "warn"}
    # The second time the copies are there: nothing to copy.
    rc, rows, err = cli_preflight(spec_file)
    assert rc == 0 and "same build as the head" in row(rows, "engine", "w1")["message"]


def test_fake_earlyoom_fails_with_the_command_to_stop_it(
    engine, smollm2, state_home, hosts: Hosts, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    fake = tmp_path / "earlyoom"
    shutil.copy("/bin/sleep", fake)
    # Started inside box2; the boxes share one process table, so every node sees it.
    proc = subprocess.Popen(["ip", "netns", "exec", hosts.boxes[1].netns, str(fake), "120"])
    try:
        deadline = time.monotonic() + 10
        while "earlyoom" not in Path(f"/proc/{proc.pid}/comm").read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        (hp,) = free_ports(1)
        rc, rows, _ = cli_preflight(remote_spec(tmp_path / "oom.toml", smollm2, hosts, "oom", head_port=hp))
    finally:
        proc.kill()
        proc.wait()
    assert rc == 1
    r = row(rows, "oom-killer", "w2")
    assert r["status"] == "fail" and "earlyoom runs on box2" in r["message"]
    assert r["fix"] == "sudo systemctl disable --now earlyoom"


def test_port_held_open_on_a_box(engine, smollm2, state_home, hosts: Hosts, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    box = hosts.boxes[1]
    (hp,) = free_ports(1)
    spec_file = remote_spec(tmp_path / "port.toml", smollm2, hosts, "port", head_port=hp, ports=(50062, 50063))
    holder = subprocess.Popen(
        [
            "ip",
            "netns",
            "exec",
            box.netns,
            sys.executable,
            "-c",
            "import socket,time; s=socket.socket(); "
            f"s.bind(('{box.address}', 50063)); s.listen(8); print('ok', flush=True); time.sleep(120)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ok"
        rc, rows, _ = cli_preflight(spec_file)
        assert rc == 1
        r = row(rows, "ports", "w2")
        assert r["status"] == "fail" and f"{box.address}:50063 is in use by another process" in r["message"]
        assert r["fix"] == "stop that process or change workers[w2].port"
        assert row(rows, "ports", "w1")["status"] == "pass"
        # `up` refuses too (it runs the same checks), naming the node; nothing is left running.
        with pytest.raises(NodeError) as info:
            up(load_spec(spec_file), engine=engine)
        assert info.value.node == "w2" and "50063" in str(info.value)
    finally:
        holder.kill()
        holder.wait()
    assert hosts.user_pids()["box1"] == []


def test_bind_address_checks(engine, smollm2, state_home, hosts: Hosts, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    b1, b2 = hosts.boxes
    (hp,) = free_ports(1)
    # w1 asks to listen on box2's address: not an address of box1.
    workers = (
        f'[[workers]]\nname = "w1"\nhost = "box1"\nbind = "{b2.address}"\nport = 50072\nworkdir = "{b1.workdir}"\n'
        f'[[workers]]\nname = "w2"\nhost = "box2"\nbind = "{b2.address}"\nport = 50073\nworkdir = "{b2.workdir}"\n'
    )
    rc, rows, _ = cli_preflight(
        remote_spec(tmp_path / "bind.toml", smollm2, hosts, "bind", head_port=hp, workers=workers)
    )
    assert rc == 1
    r = row(rows, "bind", "w1")
    assert r["status"] == "fail" and f"{b2.address} is not an address of box1" in r["message"]
    assert b1.address in r["fix"]

    # A wildcard bind: a failing row with its fix unless allowed, then a warning row.
    wild = workers.replace(f'bind = "{b2.address}"\nport = 50072', 'bind = "0.0.0.0"\nport = 50072')
    spec_file = remote_spec(tmp_path / "wild.toml", smollm2, hosts, "wild", head_port=hp, workers=wild)
    rc, rows, _err = cli_preflight(spec_file)
    assert rc == 1
    r = row(rows, "bind", "w1")
    assert r["status"] == "fail" and "0.0.0.0 is a wildcard address" in r["message"]
    assert "allow_public_rpc = true" in r["fix"]
    spec_file = remote_spec(
        tmp_path / "wild2.toml", smollm2, hosts, "wild2", head_port=hp, workers=wild, extra="allow_public_rpc = true"
    )
    rc, rows, _ = cli_preflight(spec_file)
    r = row(rows, "bind", "w1")
    assert r["status"] == "warn" and "no authentication" in r["message"]


def test_node_with_a_different_engine_build(engine, smollm2, state_home, hosts: Hosts, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    b1, b2 = hosts.boxes
    # box1 "built its own" llama.cpp: an RPC server that speaks protocol 6.1.0.
    own = b1.workdir / "own-build" / "bin"
    own.mkdir(parents=True)
    fake = own / "ggml-rpc-server"
    fake.write_text("#!/bin/sh\necho 'Starting RPC server v6.1.0'\nexec sleep 30\n")
    fake.chmod(0o755)
    # box2 has a copy of the head's build with one library altered.
    (hp,) = free_ports(1)
    workers = (
        f'[[workers]]\nname = "w1"\nhost = "box1"\nbind = "{b1.address}"\nport = 50082\n'
        f'engine = "{own}"\nworkdir = "{b1.workdir}"\n'
        f'[[workers]]\nname = "w2"\nhost = "box2"\nbind = "{b2.address}"\nport = 50083\nworkdir = "{b2.workdir}"\n'
    )
    spec = load_spec(remote_spec(tmp_path / "eng.toml", smollm2, hosts, "eng", head_port=hp, workers=workers))
    copy = b2.workdir / "engines" / engine.key
    copy.mkdir(parents=True, exist_ok=True)
    for f in engine.bin_dir.iterdir():
        if f.name.startswith("libggml") or f.name == "ggml-rpc-server":
            shutil.copy(f, copy / f.name, follow_symlinks=True)
    with open(copy / "libggml-base.so.0.26.0", "ab") as fh:
        fh.write(b"different build")

    rows = [r.as_dict() for r in preflight(spec, engine=engine)]
    r1 = row(rows, "engine", "w1")
    assert r1["status"] == "fail" and "RPC protocol 6.1.0" in r1["message"] and "7.0.0" in r1["message"]
    assert "build the head's llama.cpp version on that node" in r1["fix"]
    r2 = row(rows, "engine", "w2")
    assert r2["status"] == "pass" and "differ from the head's" in r2["message"] and "copied" in r2["message"]
    assert row(rows, "smoke", "w1")["status"] == "skip"  # its engine row failed
    assert row(rows, "smoke", "w2")["status"] == "pass"
    with open(copy / "libggml-base.so.0.26.0", "ab") as fh:
        fh.write(b"different build")

    # Without the foreign build, `up` replaces box2's altered copy and verifies it.
    workers_ok = workers.replace(f'engine = "{own}"\n', "")
    spec = load_spec(remote_spec(tmp_path / "eng2.toml", smollm2, hosts, "eng2", head_port=hp, workers=workers_ok))
    events: list[Event] = []
    from splitserve.cluster import down

    up(spec, engine=engine, on_event=events.append)
    down(spec)
    msgs = " | ".join(e.message for e in events if e.kind == "engine" and e.node == "w2")
    assert "copied" in msgs and "sha256 verified" in msgs
    assert (copy / "libggml-base.so.0.26.0").read_bytes() == (engine.bin_dir / "libggml-base.so.0.26.0").read_bytes()
    assert hosts.user_pids() == {"box1": [], "box2": []}


def test_ssh_unreachable_memory_and_disk(engine, smollm2, state_home, hosts: Hosts, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    b1 = hosts.boxes[0]
    cfg = tmp_path / "ssh_config"
    # "dead" points at box1's address on a port where no sshd listens.
    cfg.write_text(
        hosts.ssh_config.read_text() + f"\nHost dead\n  HostName {b1.address}\n  Port 2222\n"
        f"  User root\n  IdentityFile {hosts.key}\n  StrictHostKeyChecking no\n"
    )
    # A 1 TiB sparse "model": more than any box has memory or disk for.
    big = tmp_path / "huge.gguf"
    with open(big, "wb") as fh:
        fh.truncate(1 << 40)
    (hp,) = free_ports(1)
    workers = (
        f'[[workers]]\nname = "w1"\nhost = "box1"\nbind = "{b1.address}"\nport = 50092\nworkdir = "{b1.workdir}"\n'
        f'[[workers]]\nname = "w2"\nhost = "dead"\nbind = "{b1.address}"\nport = 50093\n'
    )
    spec_file = remote_spec(
        tmp_path / "mix.toml", big, hosts, "mix", head_port=hp, workers=workers, extra="drop_caches = true"
    )
    text = spec_file.read_text().replace(f'config = "{hosts.ssh_config}"', f'config = "{cfg}"')
    spec_file.write_text(text)
    rc, rows, _ = cli_preflight(spec_file)
    assert rc == 1
    ssh = row(rows, "ssh", "w2")
    assert ssh["status"] == "fail" and "dead: ssh failed" in ssh["message"] and "ssh-copy-id dead" in ssh["fix"]
    assert row(rows, "engine", "w2")["status"] == "skip"
    mem = row(rows, "memory", "w1")
    assert mem["status"] == "fail" and "512.0 GiB" in mem["message"] and "tensor_split" in mem["fix"]
    disk = row(rows, "disk", "w1")
    assert disk["status"] == "warn" and "cache = false" in disk["fix"]
    assert row(rows, "drop-caches", "w1")["status"] == "pass"  # root on box1
    assert os.geteuid() == 0


def test_a_node_whose_rpc_server_dies_by_sigill_is_a_failing_smoke_row(
    engine,
    smollm2,
    state_home,
    hosts: Hosts,  # type: ignore[no-untyped-def]
    tmp_path: Path,
) -> None:
    b1, b2 = hosts.boxes
    # box1's own build: an RPC server that prints its version, then dies of an illegal
    # instruction, as a native build from another CPU does on its first kernel.
    own = b1.workdir / "sigill-build" / "bin"
    own.mkdir(parents=True)
    fake = own / "ggml-rpc-server"
    fake.write_text(
        "#!/bin/sh\necho 'Starting RPC server v7.0.0'\necho 'llama threadpool init'\nsleep 0.2\nkill -ILL $$\n"
    )
    fake.chmod(0o755)
    (hp,) = free_ports(1)
    workers = (
        f'[[workers]]\nname = "w1"\nhost = "box1"\nbind = "{b1.address}"\nport = 50102\n'
        f'engine = "{own}"\nworkdir = "{b1.workdir}"\n'
        f'[[workers]]\nname = "w2"\nhost = "box2"\nbind = "{b2.address}"\nport = 50103\nworkdir = "{b2.workdir}"\n'
    )
    spec_file = remote_spec(tmp_path / "ill.toml", smollm2, hosts, "ill", head_port=hp, workers=workers)
    rc, rows, _ = cli_preflight(spec_file)
    assert rc == 1
    assert row(rows, "engine", "w1")["status"] == "pass"
    r = row(rows, "smoke", "w1")
    assert r["status"] == "fail" and "killed by SIGILL" in r["message"] and "on box1" in r["message"], r
    assert "llama threadpool init" in r["message"], "the last lines of its log"
    assert str(own) in r["fix"] and "-DGGML_NATIVE=OFF" in r["fix"]
    assert row(rows, "smoke", "w2")["status"] == "pass"
    # `up` stops at the same row, before it starts anything.
    with pytest.raises(NodeError) as info:
        up(load_spec(spec_file), engine=engine)
    assert info.value.node == "w1" and "preflight smoke" in str(info.value) and "SIGILL" in str(info.value)
    assert hosts.user_pids() == {"box1": [], "box2": []}
