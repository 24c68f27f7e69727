"""Hosts on one private segment for the Ray tests: a *head* network namespace holding a bridge, and
boxes (namespaces joined to that bridge by veth pairs), each with a real sshd.

Unlike netns_hosts.py (one /30 per box, the head in this namespace), every address here is in a
namespace of its own, so Ray's listeners (bound to the node's address) never reach this
machine's own interfaces, and the boxes reach each other (Ray's raylets talk node to node).
The head's commands run with :meth:`BridgeHosts.head_cmd` (``ip netns exec``). Each box's sshd
runs in a private mount namespace with its own ``/tmp/ray``: the namespaces share one file
system, and Ray keeps its sockets and session files there.

Everything is torn down afterwards: every process in the namespaces killed, then the namespaces
(and with them the bridge and the veth pairs) deleted.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path

from netns_hosts import _kill_netns, _leftovers
from netns_hosts import unavailable as hosts_unavailable

PREFIX = "ssray"


@dataclass
class RayBox:
    name: str
    """The ssh alias (``rbox2``)."""
    netns: str
    address: str
    interface: str
    """The box's end of its veth pair (what NCCL_SOCKET_IFNAME must name there)."""
    workdir: Path

    def pids(self) -> list[int]:
        out = subprocess.run(["ip", "netns", "pids", self.netns], capture_output=True, text=True).stdout
        return [int(p) for p in out.split() if p.isdigit()]


@dataclass
class BridgeHosts:
    head_netns: str
    head_address: str
    head_interface: str
    boxes: list[RayBox]
    ssh_config: Path
    sshd_pids: list[int]

    def head_cmd(self, *argv: str) -> list[str]:
        """``argv`` run inside the head's namespace."""
        return ["ip", "netns", "exec", self.head_netns, *argv]

    def head_pids(self) -> list[int]:
        out = subprocess.run(["ip", "netns", "pids", self.head_netns], capture_output=True, text=True).stdout
        return [int(p) for p in out.split() if p.isdigit()]

    def user_pids(self) -> dict[str, list[int]]:
        """Processes in each namespace other than sshd (the head's under ``head``)."""
        out = {"head": [p for p in self.head_pids() if comm(p) != "ssh"]}
        for b in self.boxes:
            out[b.name] = [p for p in b.pids() if p not in self.sshd_pids and not comm(p).startswith("sshd")]
        return out

    def pid_of(self, box: RayBox, name: str) -> int:
        """The pid of the process called ``name`` (``raylet``) in ``box``."""
        found = [p for p in box.pids() if comm(p) == name]
        if not found:
            raise AssertionError(f"no {name} in {box.name}: {[(p, comm(p)) for p in box.pids()]}")
        return found[0]


def comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _sh(*argv: str) -> None:
    subprocess.run(list(argv), capture_output=True, text=True, check=True, timeout=60)


def unavailable() -> str | None:
    return hosts_unavailable("unshare")


def make_bridge_hosts(base: Path, count: int) -> Generator[BridgeHosts, None, None]:
    """A head namespace and ``count`` boxes on one /24 (the head ``.1``, box i ``.(i+1)``)."""
    _leftovers(PREFIX)
    pid = os.getpid()
    net = f"10.215.{pid % 250}"
    head_ns = f"{PREFIX}-{pid}-h"
    key = base / "id_ed25519"
    hostkey = base / "hostkey"
    _sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key))
    _sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(hostkey))
    Path("/run/sshd").mkdir(exist_ok=True)
    namespaces = [head_ns]
    boxes: list[RayBox] = []
    sshd_pids: list[int] = []
    config_lines: list[str] = []
    try:
        _sh("ip", "netns", "add", head_ns)
        _sh("ip", "-n", head_ns, "link", "set", "lo", "up")
        _sh("ip", "-n", head_ns, "link", "add", "br0", "type", "bridge")
        _sh("ip", "-n", head_ns, "addr", "add", f"{net}.1/24", "dev", "br0")
        _sh("ip", "-n", head_ns, "link", "set", "br0", "up")
        for i in range(2, count + 2):
            ns = f"{PREFIX}-{pid}-{i}"
            namespaces.append(ns)
            _sh("ip", "netns", "add", ns)
            address = f"{net}.{i}"
            here, there = f"brp{i}", f"eth{i}"
            _sh("ip", "-n", head_ns, "link", "add", here, "type", "veth", "peer", "name", there, "netns", ns)
            _sh("ip", "-n", head_ns, "link", "set", here, "master", "br0")
            _sh("ip", "-n", head_ns, "link", "set", here, "up")
            _sh("ip", "-n", ns, "addr", "add", f"{address}/24", "dev", there)
            _sh("ip", "-n", ns, "link", "set", there, "up")
            _sh("ip", "-n", ns, "link", "set", "lo", "up")
            box = RayBox(f"rbox{i}", ns, address, there, base / f"rbox{i}")
            box.workdir.mkdir()
            (box.workdir / "ray").mkdir()
            boxes.append(box)
            cfg = base / f"sshd{i}.conf"
            cfg.write_text(
                "\n".join(
                    [
                        f"ListenAddress {address}",
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
            # The box's own /tmp/ray (Ray's sockets and session files), and an empty ~/.bashrc.
            mounts = f"mkdir -p /tmp/ray && mount --bind {box.workdir / 'ray'} /tmp/ray"
            rc = Path.home() / ".bashrc"
            if rc.exists():
                empty = base / "empty_bashrc"
                empty.write_text("")
                mounts += f" && mount --bind {empty} {rc}"
            sshd = f"{mounts} && exec /usr/sbin/sshd -f {cfg} -E {base / f'sshd{i}.log'}"
            _sh("ip", "netns", "exec", ns, "unshare", "-m", "--propagation", "private", "sh", "-c", sshd)
            pidfile = base / f"sshd{i}.pid"
            deadline = time.monotonic() + 10
            while not (pidfile.exists() and pidfile.read_text().strip()) and time.monotonic() < deadline:
                time.sleep(0.05)
            sshd_pids.append(int(pidfile.read_text().strip()))
            config_lines += [
                f"Host {box.name}",
                f"  HostName {address}",
                "  User root",
                f"  IdentityFile {key}",
                "  IdentitiesOnly yes",
                "  StrictHostKeyChecking no",
                "  UserKnownHostsFile /dev/null",
                "",
            ]
        ssh_config = base / "ssh_config"
        ssh_config.write_text("\n".join(config_lines))
        yield BridgeHosts(head_ns, f"{net}.1", "br0", boxes, ssh_config, sshd_pids)
    finally:
        for box in boxes:
            subprocess.run(
                [
                    "ip", "netns", "exec", head_ns, "ssh", "-F", str(base / "ssh_config"),
                    "-o", f"ControlPath=/tmp/splitserve-ssh-{os.getuid()}/%C", "-O", "exit", box.name,
                ],
                capture_output=True,
                timeout=10,
            )  # fmt: skip
        for ns in reversed(namespaces):
            _kill_netns(ns)


def ray_spec(path: Path, hosts: BridgeHosts, name: str, python: str, *, supervise: str = "") -> Path:
    """A ``backend = "vllm"`` spec over Ray in probe mode: the head and one worker per box."""
    lines = [
        f'name = "{name}"',
        'backend = "vllm"',
        f'state_dir = "{path.parent / (name + "-state")}"',
        "",
        "[ssh]",
        f'config = "{hosts.ssh_config}"',
        "connect_timeout = 5",
        "",
        "[gateway]",
        "enabled = false",
        "",
    ]
    for box in hosts.boxes:
        lines += [
            "[[workers]]",
            f'name = "n{box.name[-1]}"',
            f'host = "{box.name}"',
            f'bind = "{box.address}"',
            f'workdir = "{box.workdir}"',
            "",
        ]
    lines += [
        "[vllm]",
        'model = "probe"',
        'launcher = "ray"',
        "ray_probe = true",
        f'python = "{python}"',
        "",
        "[vllm.ray]",
        "num_cpus = 1",
        'object_store_memory = "100MiB"',
        "",
        supervise,
        "",
    ]
    path.write_text("\n".join(lines))
    return path
