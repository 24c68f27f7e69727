"""The link check's facts and rules, pure: what ``ip -j addr show``, ``ip -j route get ADDR``,
sysfs (``/sys/class/net/IFACE/speed``) and ``iperf3 --json`` report, parsed, and the rows
(``link-rate``, ``link-mtu``, ``link-route``) that preflight makes of them. The I/O (the facts
script run on each end, the transfer) is :mod:`._link`'s.
"""

from __future__ import annotations

import ipaddress
import json
import shlex
from dataclasses import dataclass, field
from typing import Literal

from .._errors import ClusterError
from ._checks import CheckRow

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
    operstate: str | None = None
    """``UP``, ``DOWN``, ``UNKNOWN`` (loopback, some virtual links) as ``ip`` reports it."""


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
    """Interfaces from ``ip -j addr show`` (iproute2's JSON); none for output that is not that JSON.
    The link check and the vLLM / SGLang node facts both read it."""
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
                str(item["operstate"]) if item.get("operstate") else None,
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


def jumbo_mtu(head: EndFacts, worker: EndFacts, bind: str) -> int | None:
    """The MTU both ends share when it is above 1500 (then the path between is worth a probe)."""
    hif = head.interface(head.route.dev) if head.route else None
    wif = worker.holding(bind)
    if hif and wif and hif.mtu and hif.mtu == wif.mtu and hif.mtu > 1500:
        return hif.mtu
    return None


def mtu_row(node: str, bind: str, head: EndFacts, worker: EndFacts, path_ok: bool | None = None) -> CheckRow:
    """``link-mtu``: the MTU of the head's interface the route leaves by against the worker's
    interface holding the bind address; with jumbo frames on both, ``path_ok`` says whether a
    full-size datagram crossed the path (None: not probed, or no answer either way)."""
    hif = head.interface(head.route.dev) if head.route else None
    wif = worker.holding(bind)
    if hif is None or wif is None or hif.mtu is None or wif.mtu is None:
        missing = "the head's route" if hif is None else f"an interface holding {bind} on the worker"
        return CheckRow("link-mtu", node, "skip", f"cannot compare MTUs: no {missing}")
    ends = f"head {hif.name} mtu {hif.mtu}, worker {wif.name} mtu {wif.mtu}"
    if hif.mtu == wif.mtu:
        both = f"mtu {hif.mtu} on both ends ({hif.name}, {wif.name})"
        if path_ok is False:
            return CheckRow(
                "link-mtu",
                node,
                "warn",
                f"{both}, but a {hif.mtu}-byte datagram with don't-fragment did not reach {bind} while a small "
                "one did: jumbo frames stop on the path (a switch or bridge port at 1500?)",
                f"set mtu {hif.mtu} on every switch / bridge port between the two, or the same smaller MTU on both ends",
            )
        return CheckRow(
            "link-mtu", node, "pass", both + (", and a full-size frame crossed the path" if path_ok else "")
        )
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


__all__ = [
    "CX7_CAP_GBPS",
    "DEFAULT_SECONDS",
    "RATE_WARN_FRACTION",
    "RECEIVER_LIMIT_S",
    "EndFacts",
    "Interface",
    "Route",
    "Tool",
    "Transfer",
    "choose_tool",
    "facts_script",
    "jumbo_mtu",
    "mtu_row",
    "parse_end_facts",
    "parse_ip_addr",
    "parse_ip_route_get",
    "parse_iperf3_json",
    "parse_speeds",
    "rate_row",
    "rated_mbps",
    "route_row",
    "streams_for",
]
