"""A node's RDMA devices from sysfs, and why a worker that could use RDMA ended on TCP.

The pinned llama.cpp (``ggml/src/ggml-rpc/transport.cpp``) probes each verbs device under
``/sys/class/infiniband`` for a GID whose bytes are the RPC socket's local address (an IPv4
address as ``::ffff:a.b.c.d``), preferring RoCE v2 over v1, unless ``GGML_RDMA_DEV`` /
``GGML_RDMA_GID`` choose; the queue pair's path MTU is that port's ``active_mtu``. It registers
a 256 KiB send buffer and a 24 x 256 KiB receive ring per connection, which must fit the
process's locked-memory limit (``ulimit -l``). Any of these failing leaves the link on TCP
without a word, so a node that has a GID for the worker's bind address but a worker log that
ends on TCP is worth a warning naming the cause.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._node import sh_path
from ._transport_log import GOOD_MTU, TransportReading, parse_transport

if TYPE_CHECKING:
    from .._node import Node, ProcessRef
    from ._state import ClusterState

SYSFS = "/sys/class/infiniband"
RDMA_LOCKED_BYTES = 25 * 256 * 1024
"""What the engine registers per RPC connection: one 256 KiB send chunk and 24 receive chunks."""
ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"


@dataclass(frozen=True)
class Gid:
    index: int
    gid: str
    type: str | None = None
    """``RoCE v2``, ``IB/RoCE v1`` (sysfs's words)."""
    netdev: str | None = None

    @property
    def v2(self) -> bool:
        return bool(self.type and "v2" in self.type)


@dataclass
class RdmaPort:
    """One port of one verbs device (``mlx5_0`` port 1)."""

    device: str
    port: int
    active_mtu: int | None = None
    state: str | None = None
    link_layer: str | None = None
    rate: str | None = None
    gids: list[Gid] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.device} port {self.port}"


def sysfs_script(root: str = "") -> str:
    """A shell script printing ``path:value`` for each port's state and non-empty GIDs
    (``root``: a fake tree's prefix in tests)."""
    base = sh_path(root.rstrip("/") + SYSFS) if root else SYSFS
    return (
        f"for p in {base}/*/ports/*; do\n"
        '  [ -d "$p" ] || continue\n'
        '  grep -H . "$p/active_mtu" "$p/state" "$p/link_layer" "$p/rate" "$p"/gids/* '
        '"$p"/gid_attrs/types/* "$p"/gid_attrs/ndevs/* 2>/dev/null\n'
        "done\ntrue\n"
    )


_LINE = re.compile(r"(?:^|/)infiniband/(?P<dev>[^/]+)/ports/(?P<port>\d+)/(?P<rest>[^:]+):(?P<value>.*)$")


def parse_sysfs(text: str) -> list[RdmaPort]:
    """The ports in :func:`sysfs_script`'s output, sorted by device and port."""
    ports: dict[tuple[str, int], RdmaPort] = {}
    gids: dict[tuple[str, int], dict[int, dict[str, str]]] = {}
    for line in text.splitlines():
        m = _LINE.search(line.strip())
        if not m:
            continue
        key = (m.group("dev"), int(m.group("port")))
        port = ports.setdefault(key, RdmaPort(device=key[0], port=key[1]))
        rest, value = m.group("rest"), m.group("value").strip()
        if rest == "active_mtu":
            mtu = re.match(r"\d+", value)
            port.active_mtu = int(mtu.group(0)) if mtu else None
        elif rest in ("state", "link_layer", "rate"):
            setattr(port, rest, value)
        else:
            g = re.fullmatch(r"(gids|gid_attrs/types|gid_attrs/ndevs)/(\d+)", rest)
            if g:
                gids.setdefault(key, {}).setdefault(int(g.group(2)), {})[g.group(1)] = value
    for key, by_index in gids.items():
        for index in sorted(by_index):
            attrs = by_index[index]
            gid = attrs.get("gids", "").lower()
            if not gid or gid == ZERO_GID:
                continue
            ports[key].gids.append(
                Gid(index, gid, attrs.get("gid_attrs/types") or None, attrs.get("gid_attrs/ndevs") or None)
            )
    return [ports[k] for k in sorted(ports)]


def read_rdma_ports(node: Node, root: str = "") -> list[RdmaPort]:
    """The node's verbs ports (none: no RDMA device, or sysfs unreadable)."""
    res = node.run(sysfs_script(root), check=False, timeout=20.0)
    return parse_sysfs(res.stdout.decode("utf-8", "replace"))


def address_gid(address: str) -> str | None:
    """The GID the engine looks for: the address's 16 bytes (IPv4 mapped as ``::ffff:a.b.c.d``)."""
    try:
        ip = ipaddress.ip_address(address.strip("[]"))
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv4Address):
        ip = ipaddress.IPv6Address(b"\x00" * 10 + b"\xff\xff" + ip.packed)
    return ":".join(ip.exploded.split(":")).lower()


def gid_for_address(
    ports: list[RdmaPort], address: str, env: Mapping[str, str] | None = None
) -> tuple[RdmaPort, Gid] | None:
    """The port and GID the engine would pick for a socket bound to ``address``: RoCE v2 first,
    within ``GGML_RDMA_DEV`` when set."""
    env = env or {}
    target = address_gid(address)
    if target is None:
        return None
    dev = env.get("GGML_RDMA_DEV")
    found = [(p, g) for p in ports if not dev or p.device == dev for g in p.gids if g.gid == target]
    found.sort(key=lambda pg: (not pg[1].v2, pg[0].device, pg[0].port, pg[1].index))
    return found[0] if found else None


def parse_memlock(limits: str) -> int | None:
    """The soft locked-memory limit in bytes from ``/proc/PID/limits`` (-1: unlimited; None: absent)."""
    m = re.search(r"^Max locked memory\s+(\S+)", limits, re.M)
    if not m:
        return None
    return -1 if m.group(1) == "unlimited" else int(m.group(1))


def parse_environ(data: bytes) -> dict[str, str]:
    """``/proc/PID/environ`` (NUL-separated) as a dict."""
    out: dict[str, str] = {}
    for item in data.split(b"\0"):
        key, sep, value = item.decode("utf-8", "replace").partition("=")
        if sep:
            out[key] = value
    return out


@dataclass
class WorkerRdmaFacts:
    """What the worker's node and process say about RDMA."""

    ports: list[RdmaPort] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    memlock: int | None = None


def worker_facts(node: Node, ref: ProcessRef, root: str = "") -> WorkerRdmaFacts:
    """Read the node's verbs ports and the worker process's environment and memlock limit."""
    facts = WorkerRdmaFacts(ports=read_rdma_ports(node, root))
    if not facts.ports:
        return facts
    environ = node.read_file(f"/proc/{ref.pid}/environ")
    facts.env = parse_environ(environ) if environ else {}
    limits = node.read_file(f"/proc/{ref.pid}/limits")
    facts.memlock = parse_memlock(limits.decode("utf-8", "replace")) if limits else None
    return facts


def _kib(n: int) -> str:
    return f"{n // 1024} KiB" if n < 1 << 20 else f"{n / (1 << 20):.2f} MiB".replace(".00 ", " ")


def check_transport(
    reading: TransportReading, facts: WorkerRdmaFacts, bind: str, engine_rdma: str | None = None
) -> list[str]:
    """Warnings about a worker's transport given its node's RDMA facts; they are also appended
    to ``reading.warnings``. ``engine_rdma``: the engine's provenance (``on``/``off``)."""
    out: list[str] = []
    ports, env = facts.ports, facts.env
    if not ports:
        return out
    match = gid_for_address(ports, bind, env)
    if match is None:
        if reading.kind != "RDMA" and address_gid(bind) is not None:
            names = ", ".join(p.name for p in ports)
            out.append(
                f"the node has RDMA ({names}) but no GID for the bind address {bind}: bind the worker "
                "(and point the head's --rpc) to the RDMA link's address to use RDMA"
            )
    else:
        port, gid = match
        where = f"{port.name} GID {gid.index} ({gid.type or 'RoCE'}"
        where += f", {gid.netdev})" if gid.netdev else ")"
        # (an activated link's own mtu= line already warns through parse_transport)
        low = port.active_mtu is not None and port.active_mtu < GOOD_MTU
        if reading.kind != "RDMA" and port.link_layer in (None, "Ethernet") and low:
            dev = gid.netdev or "the RDMA interface"
            out.append(
                f"RoCE MTU {port.active_mtu} on {port.name}: the interface MTU is 1500; set {dev}'s MTU to "
                f"9000 on both ends (ip link set {dev} mtu 9000) so RoCE runs at 4096"
            )
        if reading.kind == "TCP":
            out.append(
                f"the worker ended on TCP although {where} holds its bind address {bind}: {_cause(reading, facts, gid, engine_rdma)}"
            )
    for w in out:
        if w not in reading.warnings:
            reading.warnings.append(w)
    return out


def _cause(reading: TransportReading, facts: WorkerRdmaFacts, gid: Gid, engine_rdma: str | None) -> str:
    env = facts.env
    if env.get("GGML_RPC_NO_RDMA"):
        return "GGML_RPC_NO_RDMA is set in its environment (unset it on both ends)"
    if reading.rdma_build is False or engine_rdma == "off":
        return (
            "no RDMA in the engine build (install libibverbs-dev and rdma-core, then "
            "`splitserve engine build`; its provenance must say rdma: on)"
        )
    if facts.memlock is not None and facts.memlock != -1 and facts.memlock < RDMA_LOCKED_BYTES:
        return (
            f"memlock limit {_kib(facts.memlock)} (ulimit -l) is below the {_kib(RDMA_LOCKED_BYTES)} RDMA "
            "registers per connection: raise it (memlock unlimited in /etc/security/limits.conf or the "
            "unit's LimitMEMLOCK=infinity; containers: --ulimit memlock=-1)"
        )
    forced = env.get("GGML_RDMA_GID")
    if forced is not None and forced.strip() != str(gid.index):
        return f"GID mismatch: GGML_RDMA_GID={forced} but the bind address's GID is index {gid.index}"
    if reading.cause and reading.cause.startswith("RDMA activation failed"):
        return (
            "RDMA activation failed: GID mismatch between the ends (both --rpc and bind addresses must be on "
            "the RDMA link, same subnet) or the memlock limit on the head"
        )
    if reading.cause == "the other end offered no RDMA":
        return (
            "the head offered no RDMA: its node has no GID for its address on this link, its engine has no "
            "RDMA, GGML_RPC_NO_RDMA is set there, or its memlock limit is too low"
        )
    return reading.cause or "the RDMA probe failed without a message (GGML_RDMA_DEV, GGML_RDMA_GID, memlock)"


def write_fake_sysfs(root: Path, ports: list[RdmaPort]) -> Path:
    """Write ``ports`` as a sysfs tree under ``root`` (``root/sys/class/infiniband/...``), the
    way the kernel lays it out, for tests of the readers above; returns ``root``."""
    for p in ports:
        base = root / SYSFS.lstrip("/") / p.device / "ports" / str(p.port)
        for sub in ("gids", "gid_attrs/types", "gid_attrs/ndevs"):
            (base / sub).mkdir(parents=True, exist_ok=True)
        if p.active_mtu is not None:
            code = {256: 1, 512: 2, 1024: 3, 2048: 4, 4096: 5}.get(p.active_mtu, 0)
            (base / "active_mtu").write_text(f"{p.active_mtu} ({code})\n")
        for name in ("state", "link_layer", "rate"):
            value = getattr(p, name)
            if value is not None:
                (base / name).write_text(f"{value}\n")
        used = {g.index: g for g in p.gids}
        for index in range(max(used, default=-1) + 3):  # trailing empty entries, as the kernel has
            g = used.get(index)
            (base / "gids" / str(index)).write_text(f"{g.gid if g else ZERO_GID}\n")
            if g and g.type:
                (base / "gid_attrs/types" / str(index)).write_text(f"{g.type}\n")
            if g and g.netdev:
                (base / "gid_attrs/ndevs" / str(index)).write_text(f"{g.netdev}\n")
    return root


def spark_port(device: str, netdev: str, address: str, mtu: int = 4096) -> RdmaPort:
    """A DGX Spark ConnectX-7 half (``rocep1s0f1`` / ``enp1s0f1np1``) with the GIDs the kernel
    gives an interface holding ``address``: link-local v1/v2 at 0/1, the IPv4 v1/v2 at 2/3."""
    ll = "fe80:0000:0000:0000:4cbb:47ff:fe0c:1a2b"
    ipv4 = address_gid(address) if address else None
    gids = [Gid(0, ll, "IB/RoCE v1", netdev), Gid(1, ll, "RoCE v2", netdev)]
    if ipv4:
        gids += [Gid(2, ipv4, "IB/RoCE v1", netdev), Gid(3, ipv4, "RoCE v2", netdev)]
    return RdmaPort(device, 1, mtu, "4: ACTIVE", "Ethernet", "200 Gb/sec (4X HDR)", gids)


def worker_transport(
    node: Node, ref: ProcessRef, log_text: str, bind: str, engine_rdma: str | None = None, root: str = ""
) -> TransportReading:
    """A worker's transport from its log, checked against its node's RDMA devices: the
    reading's warnings say why a worker that could use RDMA is on TCP, and a low RoCE MTU."""
    facts = worker_facts(node, ref, root)
    reading = parse_transport(log_text, env=facts.env)
    check_transport(reading, facts, bind, engine_rdma)
    return reading


def worker_transports(state: ClusterState, max_bytes: int = 1 << 20) -> dict[str, TransportReading]:
    """Each live RPC worker's transport (by node name), read from its log and checked against
    its node's RDMA devices; a worker that cannot be read is left out."""
    from .._errors import ClusterError
    from ._nodes import node_for

    out: dict[str, TransportReading] = {}
    for rec in state.processes:
        if rec.role != "rpc":
            continue
        try:
            node = node_for(rec.host, state.ssh)
            if not node.alive(rec.ref):
                continue
            out[rec.node] = worker_transport(node, rec.ref, node.read_log(Path(rec.log), max_bytes), rec.bind)
        except ClusterError:
            continue
    return out


def parse_ulimit_l(text: str) -> int | None:
    """``ulimit -l`` (KiB, or ``unlimited``) in bytes; -1: unlimited; None: not a number."""
    value = text.strip().splitlines()[-1].strip() if text.strip() else ""
    if value == "unlimited":
        return -1
    return int(value) * 1024 if value.isdigit() else None


def rdma_row(
    worker: str, bind: str, ports: list[RdmaPort], memlock: int | None, env: Mapping[str, str], engine_rdma: str
) -> Any:
    """Preflight's ``rdma`` row for one worker: whether its RPC link can run on RDMA, before
    anything starts (the same causes :func:`check_transport` names after the fact)."""
    from ._checks import CheckRow

    if not ports:
        return CheckRow("rdma", worker, "pass", "no RDMA device on the node (/sys/class/infiniband): RPC over TCP")
    names = ", ".join(p.name for p in ports)
    match = gid_for_address(ports, bind, env)
    if match is None:
        return CheckRow(
            "rdma",
            worker,
            "warn",
            f"the node has RDMA ({names}) but no GID for the bind address {bind}: RPC will run on TCP",
            "bind the worker (and point the head's --rpc) to its address on the RDMA link",
        )
    port, gid = match
    where = f"{port.name} GID {gid.index} ({gid.type or 'RoCE'})"
    problems: list[tuple[str, str]] = []
    if env.get("GGML_RPC_NO_RDMA"):
        problems.append(("GGML_RPC_NO_RDMA is set in the worker's env: RPC will run on TCP", "remove it from env"))
    if engine_rdma != "on":
        problems.append(
            (
                f"the engine has no RDMA transport (rdma: {engine_rdma}): RPC will run on TCP",
                "apt-get install libibverbs-dev rdma-core, then splitserve engine build",
            )
        )
    if memlock is not None and memlock != -1 and memlock < RDMA_LOCKED_BYTES:
        problems.append(
            (
                f"memlock limit {_kib(memlock)} (ulimit -l) is below the {_kib(RDMA_LOCKED_BYTES)} RDMA registers "
                "per connection: the probe fails and RPC runs on TCP",
                "memlock unlimited (/etc/security/limits.conf, LimitMEMLOCK=infinity; containers: --ulimit memlock=-1)",
            )
        )
    forced = env.get("GGML_RDMA_GID")
    if forced is not None and forced.strip() != str(gid.index):
        problems.append(
            (f"GID mismatch: GGML_RDMA_GID={forced} but {bind} is GID {gid.index}", f"GGML_RDMA_GID={gid.index}")
        )
    low = port.active_mtu is not None and port.active_mtu < GOOD_MTU
    if port.link_layer in (None, "Ethernet") and low:
        dev = gid.netdev or "the RDMA interface"
        problems.append(
            (
                f"RoCE MTU {port.active_mtu} on {port.name}: the interface MTU is 1500",
                f"ip link set {dev} mtu 9000 on both ends so RoCE runs at 4096",
            )
        )
    if problems:
        return CheckRow("rdma", worker, "warn", "; ".join(p for p, _ in problems), "; ".join(f for _, f in problems))
    mtu = f", mtu {port.active_mtu}" if port.active_mtu else ""
    return CheckRow("rdma", worker, "pass", f"RDMA ready on {where} for {bind}{mtu}")


def preflight_rdma_rows(spec: Any, engines: Mapping[str, Any], reachable: Any) -> list[Any]:
    """An ``rdma`` row per reachable llama.cpp worker (``reachable(worker)``: its facts were read)."""
    from .._errors import ClusterError
    from ._nodes import node_for

    rows = []
    for w in spec.workers:
        if not reachable(w) or w.bind in ("0.0.0.0", "::"):
            continue
        try:
            node = node_for(w.host, spec.ssh)
            ports = read_rdma_ports(node)
            memlock = None
            if ports:
                memlock = parse_ulimit_l(node.run("ulimit -l", check=False, timeout=20.0).stdout.decode())
        except ClusterError:
            continue
        engine = engines.get(w.name) or engines.get("head")
        rdma = str(getattr(engine, "rdma", "unknown")) if engine is not None else "unknown"
        rows.append(rdma_row(w.name, w.bind, ports, memlock, w.env, rdma))
    return rows
