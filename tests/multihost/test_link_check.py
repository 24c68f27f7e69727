"""The link check across hosts: a real bulk transfer over SSH-started endpoints, on a veth link that
`tc` shapes (tbf on the head's end, the direction the head sends in), and the MTU trap.

Everything runs between this namespace and the boxes' namespaces: the transfer goes to the box's
own address over the test's own veth pair (checked by its byte counter), and no process of the
check is left in the box or here afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from netns_hosts import Box, Hosts

from helpers import free_ports
from splitserve.cluster import parse_spec
from splitserve.cluster._link import LinkTarget, Transfer, check_link, link_check_rows
from splitserve.cluster._nodes import node_for

pytestmark = [pytest.mark.multihost]

SECONDS = 3.0
"""Long enough that TCP's start and tbf's first burst are a small part of the count."""


def _sh(*argv: str) -> str:
    return subprocess.run(list(argv), capture_output=True, text=True, check=True, timeout=30).stdout


def head_dev(box: Box) -> str:
    """The head's end of the box's veth pair (the route to the box)."""
    return str(json.loads(_sh("ip", "-j", "route", "get", box.address))[0]["dev"])


def box_dev(box: Box) -> str:
    data = json.loads(_sh("ip", "-n", box.netns, "-j", "addr", "show"))
    return next(i["ifname"] for i in data if any(a.get("local") == box.address for a in i.get("addr_info", [])))


def tx_bytes(dev: str) -> int:
    return int(Path(f"/sys/class/net/{dev}/statistics/tx_bytes").read_text())


def shape(dev: str, gbit: float | None) -> None:
    """tbf on ``dev``'s egress at ``gbit`` (None: no shaping). The bucket holds 20 ms at the rate, so
    a sender the busy CPUs hold back for a few ms catches up (over SECONDS it adds under 1%)."""
    if gbit is None:
        subprocess.run(["tc", "qdisc", "del", "dev", dev, "root"], capture_output=True, timeout=30)
        return
    burst = max(256 * 1024, int(gbit * 1e9 / 8 * 0.020))
    _sh(
        "tc",
        "qdisc",
        "replace",
        "dev",
        dev,
        "root",
        "tbf",
        "rate",
        f"{gbit:g}gbit",
        "burst",
        str(burst),
        "latency",
        "50ms",
    )


def leftovers(hosts: Hosts, box: Box) -> list[str]:
    """Processes of the check still running a moment after it returned (they are stopped when it
    ends; a shell exiting may take a few ms): in the box (anything but sshd), and here (an iperf3
    or receiver aimed at the box)."""
    deadline = time.monotonic() + 3
    while (found := _running(hosts, box)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return found


def _running(hosts: Hosts, box: Box) -> list[str]:
    out = [f"box pid {p}: {_cmdline(p)}" for p in hosts.user_pids()[box.name]]
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if box.address in cmd and ("iperf3" in cmd or "splitserve-link" in cmd):
            out.append(f"here pid {proc.name}: {cmd[:80]}")
    return out


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:80]
    except OSError:
        return "?"


@pytest.fixture(scope="module")
def link(hosts: Hosts, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Box, LinkTarget]]:
    """Box 1 as a worker target over real SSH; the shaping and MTUs reset afterwards."""
    box = hosts.boxes[0]
    spec = parse_spec(
        {
            "name": "linkcheck",
            "model": str(tmp_path_factory.mktemp("m") / "model.gguf"),
            "ssh": {"config": str(hosts.ssh_config), "connect_timeout": 5},
            "workers": [
                {
                    "name": "w1",
                    "host": box.name,
                    "bind": box.address,
                    "port": free_ports(1)[0],
                    "workdir": str(box.workdir),
                }
            ],
        }
    )
    w = spec.workers[0]
    target = LinkTarget(w.name, node_for(w.host, spec.ssh), w.bind, w.port, box.workdir / "link.log")
    try:
        yield box, target
    finally:
        shape(head_dev(box), None)
        _sh("ip", "link", "set", "dev", head_dev(box), "mtu", "1500")
        _sh("ip", "-n", box.netns, "link", "set", "dev", box_dev(box), "mtu", "1500")


def measured(hosts: Hosts, link: tuple[Box, LinkTarget], tool: str) -> tuple[Transfer, dict[str, dict[str, str]]]:
    box, target = link
    before = tx_bytes(head_dev(box))
    rows, transfer = check_link(node_for("local"), target, seconds=SECONDS, tool=tool)  # type: ignore[arg-type]
    assert transfer is not None, rows
    # The bytes went out by the test's own veth to the box (and nothing is left running).
    assert tx_bytes(head_dev(box)) - before >= transfer.bytes
    assert leftovers(hosts, box) == []
    return transfer, {r.check: r.as_dict() for r in rows}


def rated_gbit(box: Box) -> float | None:
    try:
        mbps = int(Path(f"/sys/class/net/{head_dev(box)}/speed").read_text())
    except (OSError, ValueError):
        return None
    return mbps / 1000 if mbps > 0 else None


def test_builtin_transfer_at_1_gbit(hosts: Hosts, link: tuple[Box, LinkTarget]) -> None:
    box, _ = link
    shape(head_dev(box), 1.0)
    transfer, rows = measured(hosts, link, "builtin")
    assert transfer.tool == "built-in"
    assert 0.8 <= transfer.gbps <= 1.2, transfer
    rate = rows["link-rate"]
    assert f"{transfer.gbps:.2f} Gb/s to {box.address}" in rate["message"]
    rated = rated_gbit(box)
    if rated is not None and rated >= 2.5:  # veth reports 10 Gb/s: shaped to 1, that is the trap
        assert rate["status"] == "warn" and "under 50%" in rate["message"] and rate["fix"], rate
    assert rows["link-route"]["status"] == "pass", rows["link-route"]
    assert rows["link-mtu"]["status"] == "pass", rows["link-mtu"]


def test_iperf3_transfer_within_20_percent_at_2_gbit_and_capped_at_10(
    hosts: Hosts, link: tuple[Box, LinkTarget]
) -> None:
    """iperf3 with jumbo frames on both ends (as such links are set up). Shaped to 2.5 Gbit/s, the
    reading is within 20%: this 2-core machine's veth carries 4-9 Gb/s even at load 8-12, so the
    figure is the shaping's, not the machine's. Shaped to 10 Gbit/s, the reading never exceeds it
    by more than 20% (whether it reaches 10 depends on the CPUs: benchmarks/bench_link_check.py
    reports it)."""
    assert shutil.which("iperf3"), "iperf3 is not installed (scripts/setup.sh installs it)"
    box, _ = link
    _sh("ip", "link", "set", "dev", head_dev(box), "mtu", "9000")
    _sh("ip", "-n", box.netns, "link", "set", "dev", box_dev(box), "mtu", "9000")
    shape(head_dev(box), 2.5)
    transfer, rows = measured(hosts, link, "iperf3")
    assert transfer.tool == "iperf3" and transfer.min_rtt_ms is not None
    assert 2.0 <= transfer.gbps <= 3.0, transfer
    assert rows["link-mtu"]["status"] == "pass", rows["link-mtu"]
    shape(head_dev(box), 10.0)
    transfer, rows = measured(hosts, link, "iperf3")
    assert transfer.tool == "iperf3" and transfer.gbps <= 12.0, transfer
    shape(head_dev(box), None)


def test_mtu_mismatch_warns_and_matching_mtus_pass(hosts: Hosts, link: tuple[Box, LinkTarget]) -> None:
    box, target = link
    shape(head_dev(box), None)
    _sh("ip", "link", "set", "dev", head_dev(box), "mtu", "1500")
    _sh("ip", "-n", box.netns, "link", "set", "dev", box_dev(box), "mtu", "9000")
    rows, _ = check_link(node_for("local"), target, seconds=0.5, tool="builtin")
    mtu = next(r for r in rows if r.check == "link-mtu")
    assert mtu.status == "warn" and "jumbo frames on one side only" in mtu.message, mtu
    assert f"head {head_dev(box)} mtu 1500, worker {box_dev(box)} mtu 9000" in mtu.message
    assert f"ip link set dev {head_dev(box)} mtu 9000" in mtu.fix
    _sh("ip", "link", "set", "dev", head_dev(box), "mtu", "9000")
    rows, _ = check_link(node_for("local"), target, seconds=0.5, tool="builtin")
    mtu = next(r for r in rows if r.check == "link-mtu")
    assert mtu.status == "pass" and "mtu 9000 on both ends" in mtu.message, mtu
    assert "a full-size frame crossed the path" in mtu.message, mtu
    # Jumbo frames at both ends but not on the path: the head's veth drops UDP datagrams of 2048
    # bytes and more (htb's class 1:20 feeds a pfifo of length 0), as a switch port at 1500 would.
    dev = head_dev(box)
    _sh("tc", "qdisc", "replace", "dev", dev, "root", "handle", "1:", "htb", "default", "10", "r2q", "100000")
    _sh("tc", "class", "add", "dev", dev, "parent", "1:", "classid", "1:10", "htb", "rate", "50gbit")
    _sh("tc", "class", "add", "dev", dev, "parent", "1:", "classid", "1:20", "htb", "rate", "1mbit")
    _sh("tc", "qdisc", "add", "dev", dev, "parent", "1:20", "handle", "20:", "pfifo", "limit", "0")
    for bit in ("0x0800", "0x1000", "0x2000", "0x4000", "0x8000"):
        _sh("tc", "filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "1", "u32",
            "match", "ip", "protocol", "17", "0xff", "match", "u16", bit, bit, "at", "2", "flowid", "1:20")  # fmt: skip
    try:
        rows, _ = check_link(node_for("local"), target, seconds=0.5, tool="builtin")
    finally:
        shape(dev, None)
    mtu = next(r for r in rows if r.check == "link-mtu")
    assert mtu.status == "warn" and "jumbo frames stop on the path" in mtu.message, mtu
    assert leftovers(hosts, box) == []


def test_receiver_stopped_when_the_transfer_fails(
    hosts: Hosts, link: tuple[Box, LinkTarget], monkeypatch: pytest.MonkeyPatch
) -> None:
    from splitserve.cluster import _link

    box, target = link

    def broken(address: str, port: int, seconds: float, connect_timeout: float = 5.0) -> Transfer:
        assert hosts.user_pids()[box.name], "the receiver should be running now"
        raise _link.ClusterError("injected: the head's sender failed")

    monkeypatch.setattr(_link, "send_for", broken)
    rows, transfer = check_link(node_for("local"), target, seconds=0.5, tool="builtin")
    assert transfer is None
    rate = next(r for r in rows if r.check == "link-rate")
    assert rate.status == "warn" and "injected" in rate.message
    assert leftovers(hosts, box) == []


def test_preflight_rows_for_remote_workers_only(hosts: Hosts, link: tuple[Box, LinkTarget]) -> None:
    box, target = link
    spec = parse_spec(
        {
            "name": "linkrows",
            "model": "/nonexistent/model.gguf",
            "ssh": {"config": str(hosts.ssh_config)},
            "workers": [
                {"name": "w1", "host": box.name, "bind": box.address, "port": target.port, "workdir": str(box.workdir)},
                {"name": "local1", "port": free_ports(1)[0]},
                {"name": "lo1", "host": box.name, "bind": "127.0.0.1", "port": target.port},
            ],
        }
    )
    rows = link_check_rows(spec, spec.workers, seconds=0.5)
    assert sorted((r.check, r.node) for r in rows) == [("link-mtu", "w1"), ("link-rate", "w1"), ("link-route", "w1")]
    assert leftovers(hosts, box) == []


def test_busy_rpc_port_falls_back_from_iperf3_to_the_builtin_receiver(
    hosts: Hosts, link: tuple[Box, LinkTarget]
) -> None:
    """iperf3's server cannot listen on a port that is taken (a running worker's): the built-in
    receiver takes a free port on the same address instead."""
    assert shutil.which("iperf3"), "iperf3 is not installed (scripts/setup.sh installs it)"
    box, target = link
    shape(head_dev(box), None)
    holder = subprocess.Popen(
        ["ip", "netns", "exec", box.netns, "python3", "-c",
         "import socket, sys, time; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
         "s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(); "
         "print('held', flush=True); time.sleep(120)", box.address, str(target.port)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        rows, transfer = check_link(node_for("local"), target, seconds=0.5)
    finally:
        holder.kill()
        holder.wait()
    assert transfer is not None and transfer.tool == "built-in", rows
    rate = next(r for r in rows if r.check == "link-rate")
    assert "iperf3 failed" in rate.message and "Gb/s to" in rate.message, rate
    assert leftovers(hosts, box) == []


def test_receiver_ends_itself_when_the_head_never_comes(hosts: Hosts, link: tuple[Box, LinkTarget]) -> None:
    """The built-in receiver's own limit (``alarm``): a head that dies before sending leaves nothing
    behind on the worker for long. Started here with a 1-second limit."""
    from splitserve._node import stop
    from splitserve.cluster._link import RECEIVER

    box, target = link
    node = target.node
    log = box.workdir / "orphan.log"
    node.new_log(log, "# orphan receiver")
    ref = node.spawn(["python3", "-c", RECEIVER, box.address, "0", "1"], {}, log)
    try:
        deadline = time.monotonic() + 10
        while node.alive(ref) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not node.alive(ref), "the receiver outlived its limit"
        assert "splitserve-link listening" in node.read_log(log)
    finally:
        stop(node, ref, grace=1.0)
    assert leftovers(hosts, box) == []
