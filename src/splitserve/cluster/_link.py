"""The link check: a short bulk transfer from the head to each worker, and the traps of fast links.

For every remote worker, preflight sends data from the head to the worker's bind address (the
address RPC will use, on the worker's RPC port when free) for a couple of seconds and reads:

- ``link-rate``: the measured Gb/s beside the NIC's rated speed (``/sys/class/net/IFACE/speed`` of
  the head's interface the route leaves by and of the worker's interface holding the bind
  address) and the round trip (the kernel's lowest RTT of the transfer's connection); a warning
  under :data:`RATE_WARN_FRACTION` of the rated speed, naming the ConnectX-7 ~13 Gb/s cap when it
  looks like it.
- ``link-mtu``: the MTU at both ends (a warning on a mismatch; "jumbo frames on one side only"
  when one end is above 1500 and the other is not).
- ``link-route``: ``ip route get`` on the head: a warning when the route to the worker leaves by
  another interface than the one holding the head's address on that subnet, when no head address
  is on that subnet (a routed path), or when it leaves by a slow NIC while a much faster one is up.

The transfer is iperf3's when ``iperf3`` is installed on both ends (``iperf3 -s -1 -B BIND`` on the
worker, ``iperf3 -c BIND -J`` on the head), else a built-in one: :data:`RECEIVER` (a small Python
program) started on the worker through its :class:`~._transport.Node` (ssh), the head sending from
this process. Both listen only on the worker's bind address, and both are stopped when the check
ends, also on error (the receiver also ends itself after :data:`RECEIVER_LIMIT_S`).

Facts come from real command outputs: ``ip -j addr show``, ``ip -j route get ADDR``, sysfs, and
iperf3's ``--json``; the parsers are pure functions tested against recorded outputs.
"""

from __future__ import annotations

import ipaddress
import json
import shlex
import socket
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from .._errors import ClusterError
from ._checks import CheckRow
from ._transport import Node, ProcessRef
from ._transport import stop as stop_process

RATE_WARN_FRACTION = 0.5
"""A measured rate under this fraction of the NIC's rated speed is a warning."""
DEFAULT_SECONDS = 2.0
"""How long preflight sends to each worker."""
RECEIVER_LIMIT_S = 60
"""The built-in receiver and iperf3's server end themselves after this long, whatever happens."""
CX7_CAP_GBPS = (10.0, 16.0)
"""A ConnectX-7 port that came up degraded carries ~13 Gb/s while showing 200G (TCP 12.86, RDMA
13.23 Gb/s until reset: dgx-spark-playbooks PR #108)."""

Tool = Literal["auto", "iperf3", "builtin"]

# -- facts of one end ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Interface:
    """One network interface from ``ip -j addr show``."""

    name: str
    mtu: int | None
    up: bool
    addresses: tuple[ipaddress.IPv4Interface | ipaddress.IPv6Interface, ...] = ()


@dataclass(frozen=True)
class Route:
    """The kernel's route to one address, from ``ip -j route get ADDR``."""

    dev: str
    prefsrc: str | None = None
    gateway: str | None = None
    type: str = "unicast"


@dataclass
class EndFacts:
    """What one end of the link reported (:data:`FACTS_SCRIPT`)."""

    interfaces: list[Interface] = field(default_factory=list)
    route: Route | None = None
    """On the head: the route to the worker's bind address."""
    speeds: dict[str, int] = field(default_factory=dict)
    """Rated speed per interface, Mb/s, where sysfs knows it (virtual and down links do not)."""
    tools: set[str] = field(default_factory=set)
    """``iperf3`` / ``python3`` where installed."""
    ip_missing: bool = False

    def interface(self, name: str | None) -> Interface | None:
        return next((i for i in self.interfaces if i.name == name), None)

    def holding(self, address: str) -> Interface | None:
        """The interface that holds ``address`` itself."""
        ip = ipaddress.ip_address(address)
        return next((i for i in self.interfaces if any(a.ip == ip for a in i.addresses)), None)

    def on_subnet(self, address: str) -> tuple[Interface, ipaddress.IPv4Interface | ipaddress.IPv6Interface] | None:
        """This end's interface and address whose subnet holds ``address`` (the narrowest subnet)."""
        ip = ipaddress.ip_address(address)
        hits = [
            (i, a)
            for i in self.interfaces
            for a in i.addresses
            if a.version == ip.version and ip in a.network and a.ip != ip
        ]
        return max(hits, key=lambda h: h[1].network.prefixlen) if hits else None


def parse_ip_addr(text: str) -> list[Interface]:
    """Interfaces from ``ip -j addr show`` (iproute2's JSON)."""
    try:
        data = json.loads(text or "[]")
    except json.JSONDecodeError:
        return []
    out = []
    for item in data if isinstance(data, list) else []:
        if not isinstance(item, dict) or "ifname" not in item:
            continue
        addrs: list[ipaddress.IPv4Interface | ipaddress.IPv6Interface] = []
        for a in item.get("addr_info") or []:
            local, plen = a.get("local"), a.get("prefixlen")
            if local is None or plen is None:
                continue
            try:
                addrs.append(ipaddress.ip_interface(f"{local}/{plen}"))
            except ValueError:
                continue
        flags = item.get("flags") or []
        mtu = item.get("mtu")
        out.append(
            Interface(
                str(item["ifname"]),
                int(mtu) if isinstance(mtu, int) else None,
                "UP" in flags and item.get("operstate") != "DOWN",
                tuple(addrs),
            )
        )
    return out


def parse_ip_route_get(text: str) -> Route | None:
    """The route from ``ip -j route get ADDR`` (None when there is none)."""
    try:
        data = json.loads(text or "[]")
    except json.JSONDecodeError:
        return None
    if not isinstance(data, list) or not data or not isinstance(data[0], dict) or "dev" not in data[0]:
        return None
    r = data[0]
    return Route(str(r["dev"]), r.get("prefsrc"), r.get("gateway"), str(r.get("type", "unicast")))


def parse_speeds(text: str) -> dict[str, int]:
    """``IFACE SPEED`` lines (sysfs, Mb/s) to a dict; unknown speeds (-1, empty, errors) left out."""
    speeds = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit() and int(parts[1]) > 0:
            speeds[parts[0]] = int(parts[1])
    return speeds


def facts_script(route_to: str | None = None) -> str:
    """The ``sh`` script that reports one end's facts (sections parsed by :func:`parse_end_facts`)."""
    route = (
        f"echo @@route; ip -j route get {shlex.quote(route_to)} 2>/dev/null || true\n" if route_to is not None else ""
    )
    return (
        "if command -v ip >/dev/null 2>&1; then echo @@addr; ip -j addr show 2>/dev/null || true\n"
        + route
        + "else echo @@noip; fi\n"
        "echo @@speed\n"
        'for f in /sys/class/net/*/speed; do d=${f%/speed}; echo "${d##*/} $(cat "$f" 2>/dev/null)"; done\n'
        "echo @@tools\n"
        "for t in iperf3 python3; do command -v $t >/dev/null 2>&1 && echo $t; done\n"
        "true\n"
    )


def parse_end_facts(text: str) -> EndFacts:
    """The facts from :func:`facts_script`'s output."""
    sections: dict[str, list[str]] = {}
    current = ""
    for line in text.splitlines():
        if line.startswith("@@"):
            current = line[2:].strip()
            sections.setdefault(current, [])
        elif current:
            sections[current].append(line)
    facts = EndFacts(ip_missing="noip" in sections)
    facts.interfaces = parse_ip_addr("\n".join(sections.get("addr", [])))
    if "route" in sections:
        facts.route = parse_ip_route_get("\n".join(sections["route"]))
    facts.speeds = parse_speeds("\n".join(sections.get("speed", [])))
    facts.tools = {t.strip() for t in sections.get("tools", []) if t.strip()}
    return facts


# -- the transfer -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Transfer:
    """One measured bulk transfer from the head to a worker."""

    tool: str
    """``iperf3`` or ``built-in``."""
    bits_per_second: float
    """As the receiving end counted it."""
    seconds: float
    bytes: int
    streams: int = 1
    min_rtt_ms: float | None = None
    """The round trip of the sending connection(s): the kernel's lowest (``tcpi_min_rtt``) for the
    built-in transfer; for iperf3 the lowest of its smoothed samples (``tcpi_rtt``, under load)."""
    retransmits: int | None = None
    note: str = ""

    @property
    def gbps(self) -> float:
        return self.bits_per_second / 1e9


def parse_iperf3_json(text: str) -> Transfer:
    """A :class:`Transfer` from ``iperf3 -c ... --json``; :class:`ClusterError` with iperf3's own
    message when the test failed."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        raise ClusterError(f"iperf3 printed no JSON: {text.strip()[:200] or 'no output'}") from None
    if not isinstance(data, dict):
        raise ClusterError("iperf3 printed no JSON object")
    if data.get("error"):
        raise ClusterError(f"iperf3: {data['error']}")
    end = data.get("end") or {}
    received = end.get("sum_received") or {}
    sent = end.get("sum_sent") or {}
    if "bits_per_second" not in received:
        raise ClusterError("iperf3's JSON has no end.sum_received (the test did not finish)")
    rtts = [
        s["sender"]["min_rtt"] for s in end.get("streams") or [] if isinstance(s.get("sender", {}).get("min_rtt"), int)
    ]
    streams = len(end.get("streams") or []) or 1
    return Transfer(
        "iperf3",
        float(received["bits_per_second"]),
        float(received.get("seconds", 0.0)),
        int(received.get("bytes", 0)),
        streams,
        min(rtts) / 1000.0 if rtts else None,
        int(sent["retransmits"]) if isinstance(sent.get("retransmits"), int) else None,
    )


RECEIVER = r"""
import signal, socket, sys, time
bind, port, limit = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
signal.alarm(limit)
s = socket.socket(socket.AF_INET6 if ":" in bind else socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind((bind, port))
except OSError:
    s.bind((bind, 0))
s.listen(8)
print("splitserve-link listening", s.getsockname()[1], flush=True)
buf = memoryview(bytearray(4 << 20))
while True:
    c, _ = s.accept()
    first = c.recv_into(buf)
    if not first:
        c.close()
        continue
    t0 = time.perf_counter()
    n = 0
    while True:
        k = c.recv_into(buf)
        if not k:
            break
        n += k
    t1 = time.perf_counter()
    c.sendall(("%d %.6f\n" % (n, t1 - t0)).encode())
    c.close()
    print("splitserve-link received", n + first, "bytes", flush=True)
    break
"""
"""The built-in receiver (``python3 -c RECEIVER BIND PORT LIMIT``): listens on the bind address
only (the given port, or any free one when it is taken), counts what one sender sends from its
first byte to its end, answers ``BYTES SECONDS`` (after the first chunk) and exits; ``alarm``
ends it after LIMIT seconds whatever happens."""

_READY = {"builtin": "splitserve-link listening", "iperf3": "Server listening on"}

# struct tcp_info (linux/tcp.h): tcpi_total_retrans at byte 100, tcpi_min_rtt (µs) at byte 148.
_TCPI_RETRANS, _TCPI_MIN_RTT = 100, 148


def _tcp_info(sock: socket.socket) -> tuple[float | None, int | None]:
    """(lowest RTT in ms, retransmits) of a connected TCP socket, from the kernel's TCP_INFO."""
    try:
        raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    except (OSError, AttributeError):
        return None, None
    rtt = struct.unpack_from("I", raw, _TCPI_MIN_RTT)[0] if len(raw) >= _TCPI_MIN_RTT + 4 else 0
    retrans = struct.unpack_from("I", raw, _TCPI_RETRANS)[0] if len(raw) >= _TCPI_RETRANS + 4 else None
    return (rtt / 1000.0 if rtt else None), retrans


def send_for(address: str, port: int, seconds: float, connect_timeout: float = 5.0) -> Transfer:
    """Send to the built-in receiver at ``address:port`` for ``seconds``; its count is the result."""
    chunk = memoryview(bytes(1 << 20))
    try:
        sock = socket.create_connection((address, port), timeout=connect_timeout)
    except OSError as exc:
        raise ClusterError(f"cannot connect to {address}:{port}: {exc.strerror or exc}") from None
    with sock:
        sock.settimeout(max(30.0, seconds * 4))
        sent = 0
        try:
            deadline = time.perf_counter() + seconds
            while time.perf_counter() < deadline:
                sock.sendall(chunk)
                sent += len(chunk)
            rtt, retrans = _tcp_info(sock)
            sock.shutdown(socket.SHUT_WR)
            reply = b""
            while not reply.endswith(b"\n"):
                part = sock.recv(256)
                if not part:
                    break
                reply += part
        except OSError as exc:
            raise ClusterError(f"transfer to {address}:{port} broke off: {exc.strerror or exc}") from None
    parts = reply.split()
    if len(parts) != 2:
        raise ClusterError(f"the receiver on {address} answered {reply[:80]!r} after {sent} bytes")
    n, secs = int(parts[0]), float(parts[1])
    return Transfer("built-in", n * 8 / secs if secs > 0 else 0.0, secs, n, 1, rtt, retrans)


def _wait_ready(node: Node, ref: ProcessRef, log: Path, marker: str, timeout: float = 15.0) -> str:
    """The receiver's log once ``marker`` is in it; :class:`ClusterError` when it died first."""
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        text = node.read_log(log, 1 << 16)
        if marker in text:
            return text
        if not node.alive(ref):
            text = node.read_log(log, 1 << 16)
            if marker in text:
                return text
            lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("# splitserve")]
            raise ClusterError(f"the receiver on {node.host} ended before listening: {' '.join(lines[-2:])[:200]}")
        time.sleep(0.05)
    raise ClusterError(f"the receiver on {node.host} did not listen within {timeout:.0f} s")


def measure(
    head: Node,
    worker: Node,
    bind: str,
    port: int,
    log: Path,
    *,
    tool: Literal["iperf3", "builtin"],
    seconds: float = DEFAULT_SECONDS,
    streams: int = 1,
) -> Transfer:
    """One bulk transfer from the head to ``bind`` (the worker's address), by ``tool``.

    The receiver is started on the worker listening on ``bind`` only, and stopped when this
    returns or raises."""
    worker.new_log(log, "# splitserve: link check receiver")
    if tool == "iperf3":
        argv = [
            "iperf3",
            "-s",
            "-1",
            "-B",
            bind,
            "-p",
            str(port),
            "--forceflush",
            "--idle-timeout",
            str(RECEIVER_LIMIT_S),
        ]
    else:
        argv = ["python3", "-c", RECEIVER, bind, str(port), str(RECEIVER_LIMIT_S)]
    ref = worker.spawn(argv, {}, log)
    try:
        text = _wait_ready(worker, ref, log, _READY[tool])
        if tool == "iperf3":
            cmd = ["iperf3", "-c", bind, "-p", str(port), "-t", str(max(1, round(seconds))), "-P", str(streams), "-J"]
            cmd += ["--connect-timeout", "5000"]
            res = head.run(" ".join(shlex.quote(a) for a in cmd), timeout=seconds + 30, check=False)
            return parse_iperf3_json(res.stdout.decode("utf-8", "replace"))
        line = next(ln for ln in text.splitlines() if _READY["builtin"] in ln)
        return send_for(bind, int(line.split()[-1]), seconds)
    finally:
        stop_process(worker, ref, grace=2.0)


# -- the rules ----------------------------------------------------------------------------------


def _gb(mbps: int) -> str:
    return f"{mbps / 1000:g} Gb/s"


def rated_mbps(head: EndFacts, worker: EndFacts, bind: str) -> tuple[int | None, str]:
    """The link's rated speed (the slower end's, Mb/s) and where it was read."""
    hdev = head.route.dev if head.route else None
    wif = worker.holding(bind)
    known = []
    where = []
    if hdev and hdev in head.speeds:
        known.append(head.speeds[hdev])
        where.append(f"head {hdev} {_gb(head.speeds[hdev])}")
    if wif and wif.name in worker.speeds:
        known.append(worker.speeds[wif.name])
        where.append(f"worker {wif.name} {_gb(worker.speeds[wif.name])}")
    return (min(known) if known else None), ", ".join(where)


def rate_row(node: str, bind: str, head: EndFacts, worker: EndFacts, transfer: Transfer) -> CheckRow:
    """``link-rate``: the measured rate against the NIC's rated speed."""
    rated, where = rated_mbps(head, worker, bind)
    how = f"{transfer.tool}, {transfer.seconds:.1f} s, {transfer.streams} stream{'s' * (transfer.streams > 1)}"
    if transfer.note:
        how += f"; {transfer.note}"
    rtt = ""
    if transfer.min_rtt_ms is not None:
        kind = "lowest smoothed RTT under load" if transfer.tool == "iperf3" else "lowest RTT"
        rtt = f"; {kind} {transfer.min_rtt_ms:.3f} ms"
    text = f"{transfer.gbps:.2f} Gb/s to {bind} ({how}){rtt}"
    if rated is None:
        return CheckRow("link-rate", node, "pass", text + "; rated speed unknown (sysfs reports none)")
    share = transfer.bits_per_second / (rated * 1e6)
    text += f"; rated {_gb(rated)} ({where}): {share:.0%}"
    if share >= RATE_WARN_FRACTION:
        return CheckRow("link-rate", node, "pass", text)
    hdev = head.route.dev if head.route else "IFACE"
    if rated >= 100_000 and CX7_CAP_GBPS[0] <= transfer.gbps <= CX7_CAP_GBPS[1]:
        fix = (
            "looks like a ConnectX-7 port that came up degraded (~13 Gb/s while showing 200G): reset it "
            "(sudo mlxfwreset -d DEV reset, or power-cycle) and check `sudo lspci -vv` LnkSta (Gen5 x4)"
        )
    elif transfer.tool == "built-in" and rated >= 25_000:
        fix = "one Python TCP stream cannot fill this link: install iperf3 on both ends and run preflight again"
    else:
        fix = (
            f"check `ethtool {hdev}` on both ends (speed, duplex, link partner), the cable and port, "
            "and what else uses the link or the CPUs"
        )
    return CheckRow("link-rate", node, "warn", text + f", under {RATE_WARN_FRACTION:.0%}", fix)


def mtu_row(node: str, bind: str, head: EndFacts, worker: EndFacts) -> CheckRow:
    """``link-mtu``: the MTU of the head's interface the route leaves by against the worker's
    interface holding the bind address."""
    hif = head.interface(head.route.dev) if head.route else None
    wif = worker.holding(bind)
    if hif is None or wif is None or hif.mtu is None or wif.mtu is None:
        missing = "the head's route" if hif is None else f"an interface holding {bind} on the worker"
        return CheckRow("link-mtu", node, "skip", f"cannot compare MTUs: no {missing}")
    ends = f"head {hif.name} mtu {hif.mtu}, worker {wif.name} mtu {wif.mtu}"
    if hif.mtu == wif.mtu:
        return CheckRow("link-mtu", node, "pass", f"mtu {hif.mtu} on both ends ({hif.name}, {wif.name})")
    low, low_if = ("worker", wif) if wif.mtu < hif.mtu else ("head", hif)
    fix = (
        f"set the same MTU on both ends, e.g. on the {low}: sudo ip link set dev {low_if.name} mtu "
        f"{max(hif.mtu, wif.mtu)} (and in its netplan / NetworkManager config), and on any switch between"
    )
    if max(hif.mtu, wif.mtu) > 1500 >= min(hif.mtu, wif.mtu):
        return CheckRow(
            "link-mtu",
            node,
            "warn",
            f"jumbo frames on one side only ({ends}): TCP still works (MSS is negotiated), "
            "but RoCE/RDMA and NCCL stall or run at MTU 1024",
            fix,
        )
    return CheckRow("link-mtu", node, "warn", f"MTU mismatch ({ends})", fix)


def route_row(node: str, bind: str, head: EndFacts) -> CheckRow:
    """``link-route``: the head's route to the worker's bind address."""
    route = head.route
    if route is None:
        return CheckRow(
            "link-route",
            node,
            "fail" if not head.ip_missing else "skip",
            f"the head has no route to {bind}" if not head.ip_missing else "`ip` is not installed on the head",
            f"give the head an address on {bind}'s link" if not head.ip_missing else "install iproute2",
        )
    own = head.on_subnet(bind)
    dev = head.interface(route.dev)
    if own is not None and own[0].name != route.dev:
        return CheckRow(
            "link-route",
            node,
            "warn",
            f"the route to {bind} leaves by {route.dev} (src {route.prefsrc or '?'}), but the head's address "
            f"{own[1]} on that subnet is on {own[0].name}",
            f"remove the overlapping route or address on {route.dev} (`ip route show match {bind}`), "
            "or give the fast link a subnet of its own",
        )
    if own is None and route.gateway:
        return CheckRow(
            "link-route",
            node,
            "warn",
            f"no address of the head is on {bind}'s subnet: routed via {route.gateway} over {route.dev}",
            f"bind the worker to its address on a link the head shares, or add a head address on {bind}'s subnet",
        )
    speed = head.speeds.get(route.dev)
    faster = [
        i
        for i in head.interfaces
        if i.up and i.name != route.dev and i.addresses and head.speeds.get(i.name, 0) >= 4 * (speed or 1 << 30)
    ]
    if speed and faster:
        best = max(faster, key=lambda i: head.speeds[i.name])
        return CheckRow(
            "link-route",
            node,
            "warn",
            f"the route to {bind} leaves by {route.dev} ({_gb(speed)}) while {best.name} "
            f"({_gb(head.speeds[best.name])}) is up: the management NIC instead of the fast one?",
            f"bind the worker to its address on {best.name}'s link",
        )
    held = f", the interface holding {own[1]}" if own else ""
    mtu = f", mtu {dev.mtu}" if dev and dev.mtu else ""
    return CheckRow("link-route", node, "pass", f"the route to {bind} leaves by {route.dev}{held}{mtu}")


def choose_tool(head: EndFacts, worker: EndFacts, tool: Tool = "auto") -> Literal["iperf3", "builtin"] | None:
    """iperf3 when both ends have it, else the built-in transfer when the worker has python3."""
    if tool == "iperf3":
        return "iperf3"
    if tool == "builtin":
        return "builtin"
    if "iperf3" in head.tools and "iperf3" in worker.tools:
        return "iperf3"
    return "builtin" if "python3" in worker.tools else None


def streams_for(head: EndFacts, worker: EndFacts, bind: str) -> int:
    """iperf3's parallel streams: one on links under 25G, four above (one TCP stream does not
    fill a 100-200G link)."""
    rated, _ = rated_mbps(head, worker, bind)
    return 4 if rated and rated >= 25_000 else 1


# -- preflight's rows ---------------------------------------------------------------------------


@dataclass(frozen=True)
class LinkTarget:
    """One worker to check: its name, node, bind address and RPC port, and where its receiver logs."""

    name: str
    node: Node
    bind: str
    port: int
    log: Path


def check_link(
    head: Node, target: LinkTarget, *, seconds: float = DEFAULT_SECONDS, tool: Tool = "auto"
) -> tuple[list[CheckRow], Transfer | None]:
    """The ``link-rate``, ``link-mtu`` and ``link-route`` rows of one worker, and the transfer."""
    name, bind = target.name, target.bind
    try:
        head_facts = parse_end_facts(head.run(facts_script(bind), check=False, timeout=30).stdout.decode())
        worker_facts = parse_end_facts(target.node.run(facts_script(), check=False, timeout=30).stdout.decode())
    except ClusterError as exc:
        return [CheckRow("link-rate", name, "skip", f"cannot read the link's facts: {exc}", "fix ssh first")], None
    rows = [route_row(name, bind, head_facts), mtu_row(name, bind, head_facts, worker_facts)]
    chosen = choose_tool(head_facts, worker_facts, tool)
    if chosen is None:
        rows.insert(
            0,
            CheckRow(
                "link-rate",
                name,
                "skip",
                f"neither iperf3 on both ends nor python3 on {target.node.host}: nothing to measure with",
                "install iperf3 on the head and the worker (apt install iperf3)",
            ),
        )
        return rows, None
    streams = streams_for(head_facts, worker_facts, bind) if chosen == "iperf3" else 1
    try:
        try:
            transfer = measure(
                head, target.node, bind, target.port, target.log, tool=chosen, seconds=seconds, streams=streams
            )
        except ClusterError as exc:
            # iperf3's server cannot take another port when the RPC port is busy: the built-in
            # receiver can (any free port on the same address).
            if not (chosen == "iperf3" and tool == "auto" and "python3" in worker_facts.tools):
                raise
            chosen = "builtin"
            transfer = measure(head, target.node, bind, target.port, target.log, tool="builtin", seconds=seconds)
            transfer = replace(transfer, note=f"iperf3 failed ({exc})")
    except ClusterError as exc:
        rows.insert(
            0,
            CheckRow(
                "link-rate",
                name,
                "warn",
                f"could not measure the link to {bind} ({'iperf3' if chosen == 'iperf3' else 'built-in'}): {exc}",
                f"check that {bind}:{target.port} is reachable from the head (firewall) and free",
            ),
        )
        return rows, None
    rows.insert(0, rate_row(name, bind, head_facts, worker_facts, transfer))
    return rows, transfer


def link_check_rows(
    spec: Any, workers: Sequence[Any], *, seconds: float = DEFAULT_SECONDS, tool: Tool = "auto"
) -> list[CheckRow]:
    """Preflight's measured link rows for ``workers`` (remote ones of ``spec``, reachable by ssh)."""
    from ._nodes import node_for

    head = node_for("local")
    rows: list[CheckRow] = []
    for w in workers:
        if not w.remote or w.bind in ("0.0.0.0", "::"):
            continue
        log = Path(w.workdir) / "clusters" / spec.name / f"link-{w.name}.log"
        target = LinkTarget(w.name, node_for(w.host, spec.ssh), w.bind, w.port, log)
        rows += check_link(head, target, seconds=seconds, tool=tool)[0]
    return rows


__all__ = [
    "DEFAULT_SECONDS",
    "RATE_WARN_FRACTION",
    "RECEIVER",
    "EndFacts",
    "Interface",
    "LinkTarget",
    "Route",
    "Transfer",
    "check_link",
    "choose_tool",
    "facts_script",
    "link_check_rows",
    "measure",
    "mtu_row",
    "parse_end_facts",
    "parse_ip_addr",
    "parse_ip_route_get",
    "parse_iperf3_json",
    "parse_speeds",
    "rate_row",
    "route_row",
    "send_for",
]
