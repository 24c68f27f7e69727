"""Hosts for multi-host tests (used by conftest.py's ``hosts`` fixture): Linux network namespaces joined to this one by veth pairs,
each running a real sshd (Debian's openssh-server) with a throwaway key.

Every box gets a /30 of its own (``10.213.X.1`` on this side, ``10.213.X.2`` in the
box), an alias ``boxN`` in a private ssh config file, and a private work folder (the
namespaces share the file system, so distinct folders stand in for distinct disks).
Everything is torn down afterwards, also when a test fails: every process left in a
namespace is killed, then the namespace (and with it its veth pair) is deleted.
Traffic stays inside these namespaces and loopback.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PREFIX = "ssmh"


@dataclass
class Box:
    name: str
    """The ssh alias (``box1``)."""
    netns: str
    address: str
    """The box's address on its link (the RPC bind address)."""
    head_address: str
    workdir: Path

    def exec(self, *argv: str, **kw: object) -> subprocess.CompletedProcess[str]:
        """Run a command inside the box's namespace (not over ssh)."""
        return subprocess.run(
            ["ip", "netns", "exec", self.netns, *argv], capture_output=True, text=True, timeout=60, **kw
        )  # type: ignore[call-overload]

    def pids(self) -> list[int]:
        out = subprocess.run(["ip", "netns", "pids", self.netns], capture_output=True, text=True).stdout
        return [int(p) for p in out.split() if p.isdigit()]


@dataclass
class Hosts:
    boxes: list[Box]
    ssh_config: Path
    key: Path
    sshd_pids: list[int]

    def user_pids(self) -> dict[str, list[int]]:
        """Processes in each box other than sshd (its listener and the shared-connection sessions)."""
        return {b.name: [p for p in b.pids() if p not in self.sshd_pids and _comm(p) != "sshd"] for b in self.boxes}


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=check, timeout=60)


def unavailable(*more_tools: str) -> str | None:
    """Why these tests cannot run here (None: they can)."""
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    for tool in ("ip", "ssh", "ssh-keygen", *more_tools):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if not Path("/usr/sbin/sshd").exists():
        return "openssh-server (/usr/sbin/sshd) is not installed"
    return None


def _kill_netns(name: str) -> None:
    out = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True).stdout
    pids = [int(p) for p in out.split() if p.isdigit()]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in pids):
            time.sleep(0.05)
    subprocess.run(["ip", "netns", "del", name], capture_output=True)


def _leftovers(prefix: str = PREFIX) -> None:
    """Namespaces named ``prefix-PID-...`` of an earlier run whose process is gone."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        name = line.split()[0] if line.split() else ""
        parts = name.split("-")
        if len(parts) >= 3 and parts[0] == prefix and parts[1].isdigit() and not Path(f"/proc/{parts[1]}").exists():
            _kill_netns(name)


def make_hosts(base: Path, count: int) -> Iterator[Hosts]:
    _leftovers()
    pid = os.getpid()
    key = base / "id_ed25519"
    hostkey = base / "hostkey"
    _sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key))
    _sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(hostkey))
    Path("/run/sshd").mkdir(exist_ok=True)
    boxes: list[Box] = []
    sshd_pids: list[int] = []
    config_lines = []
    try:
        for i in range(1, count + 1):
            ns = f"{PREFIX}-{pid}-{i}"
            octet = (pid % 60) * 4 + i
            head_addr, box_addr = f"10.213.{octet}.1", f"10.213.{octet}.2"
            here, there = f"smh{pid % 100000}h{i}", f"smh{pid % 100000}n{i}"
            _sh("ip", "netns", "add", ns)
            box = Box(f"box{i}", ns, box_addr, head_addr, base / f"box{i}")
            boxes.append(box)
            box.workdir.mkdir()
            _sh("ip", "link", "add", here, "type", "veth", "peer", "name", there)
            _sh("ip", "link", "set", there, "netns", ns)
            _sh("ip", "addr", "add", f"{head_addr}/30", "dev", here)
            _sh("ip", "link", "set", here, "up")
            _sh("ip", "-n", ns, "addr", "add", f"{box_addr}/30", "dev", there)
            _sh("ip", "-n", ns, "link", "set", there, "up")
            _sh("ip", "-n", ns, "link", "set", "lo", "up")
            cfg = base / f"sshd{i}.conf"
            cfg.write_text(
                "\n".join(
                    [
                        f"ListenAddress {box_addr}",
                        "Port 22",
                        f"HostKey {hostkey}",
                        f"AuthorizedKeysFile {key}.pub",
                        "PermitRootLogin prohibit-password",
                        "PasswordAuthentication no",
                        "KbdInteractiveAuthentication no",
                        "UsePAM no",
                        "StrictModes no",
                        f"PidFile {base}/sshd{i}.pid",
                        "MaxSessions 64",
                        "MaxStartups 64",
                        "LogLevel ERROR",
                        "",
                    ]
                )
            )
            # A mount namespace of the box's own hides the user's ~/.bashrc from its sessions (bash
            # reads it for every ssh command; a slow one, e.g. `pyenv init`, would slow every call).
            sshd = f"exec /usr/sbin/sshd -f {cfg} -E {base / f'sshd{i}.log'}"
            rc = Path.home() / ".bashrc"
            if rc.exists():
                empty = base / "empty_bashrc"
                empty.write_text("")
                sshd = f"mount --bind {empty} {rc} && {sshd}"
            _sh("ip", "netns", "exec", ns, "unshare", "-m", "--propagation", "private", "sh", "-c", sshd)
            deadline = time.monotonic() + 10
            pidfile = base / f"sshd{i}.pid"
            # sshd creates the file before it writes the pid: wait for the number, not the file
            while not (pidfile.exists() and pidfile.read_text().strip()) and time.monotonic() < deadline:
                time.sleep(0.05)
            sshd_pids.append(int(pidfile.read_text().strip()))
            config_lines += [
                f"Host {box.name}",
                f"  HostName {box_addr}",
                "  User root",
                f"  IdentityFile {key}",
                "  IdentitiesOnly yes",
                "  StrictHostKeyChecking no",
                "  UserKnownHostsFile /dev/null",
                "",
            ]
        ssh_config = base / "ssh_config"
        ssh_config.write_text("\n".join(config_lines))
        yield Hosts(boxes, ssh_config, key, sshd_pids)
    finally:
        # Close shared ssh connections of this config, then empty and delete every namespace.
        for box in boxes:
            subprocess.run(
                [
                    "ssh",
                    "-F",
                    str(base / "ssh_config"),
                    "-o",
                    f"ControlPath=/tmp/splitserve-ssh-{os.getuid()}/%C",
                    "-O",
                    "exit",
                    box.name,
                ],
                capture_output=True,
                timeout=10,
            )
        for box in boxes:
            _kill_netns(box.netns)


def remote_spec(
    path: Path,
    model: Path,
    hosts: Hosts,
    name: str,
    *,
    ports: tuple[int, int] = (50052, 50053),
    head_port: int,
    extra: str = "",
    workers: str | None = None,
    server: str = "",
) -> Path:
    """A spec with one RPC worker in each box, over SSH."""
    lines = [
        f'name = "{name}"',
        f'model = "{model}"',
        extra,
        "",
        "[ssh]",
        f'config = "{hosts.ssh_config}"',
        "connect_timeout = 5",
        "",
    ]
    if workers is None:
        for box, port in zip(hosts.boxes, ports):
            lines += [
                "[[workers]]",
                f'name = "w{box.name[-1]}"',
                f'host = "{box.name}"',
                f'bind = "{box.address}"',
                f"port = {port}",
                f'workdir = "{box.workdir}"',
                "",
            ]
    else:
        lines.append(workers)
    lines += ["[server]", f"port = {head_port}", "ctx_size = 2048", server, ""]
    from helpers import free_ports

    lines += ["[gateway]", f"port = {free_ports(1)[0]}", ""]
    path.write_text("\n".join(lines))
    return path
