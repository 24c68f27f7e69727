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
program) started on the worker through its :class:`~splitserve._node.Node` (ssh), the head sending from
this process. Both listen only on the worker's bind address, and both are stopped when the check
ends, also on error (the receiver also ends itself after :data:`RECEIVER_LIMIT_S`).

Facts come from real command outputs: ``ip -j addr show``, ``ip -j route get ADDR``, sysfs, and
iperf3's ``--json``; the parsers and the rules are pure functions (:mod:`._link_facts`, re-exported
here) tested against recorded outputs.
"""

from __future__ import annotations

import errno
import shlex
import socket
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from .._errors import ClusterError
from .._net import is_loopback
from .._node import Node, ProcessRef, wait_reaped
from .._node import stop as stop_process
from ._checks import CheckRow
from ._link_facts import (
    CX7_CAP_GBPS,
    DEFAULT_SECONDS,
    RATE_WARN_FRACTION,
    RECEIVER_LIMIT_S,
    EndFacts,
    Interface,
    Route,
    Tool,
    Transfer,
    choose_tool,
    facts_script,
    jumbo_mtu,
    mtu_row,
    parse_end_facts,
    parse_ip_addr,
    parse_ip_route_get,
    parse_iperf3_json,
    parse_speeds,
    rate_row,
    rated_mbps,
    route_row,
    streams_for,
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


# linux/in.h and linux/in6.h (Python's socket module lacks some of them)
_IP_MTU_DISCOVER, _IPV6_MTU_DISCOVER, _PMTUDISC_DO = 10, 23, 2


def _refused(address: str, port: int, size: int, tries: int = 3, wait: float = 0.3) -> bool | None:
    """Whether a UDP datagram of ``size`` bytes (IP and UDP headers included) sent with
    don't-fragment reaches ``address``: the far kernel answers a port nothing listens on with ICMP
    port unreachable, which a connected socket reads as a refusal. False: sent, never answered;
    None: cannot be sent from here."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    payload = bytes(max(1, size - (48 if family == socket.AF_INET6 else 28)))
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        try:
            if family == socket.AF_INET:
                s.setsockopt(socket.IPPROTO_IP, _IP_MTU_DISCOVER, _PMTUDISC_DO)
            else:
                s.setsockopt(socket.IPPROTO_IPV6, _IPV6_MTU_DISCOVER, _PMTUDISC_DO)
            s.connect((address, port))
        except OSError:
            return None
        s.settimeout(wait)
        for _ in range(tries):
            try:
                s.send(payload)
                s.recv(16)
            except ConnectionRefusedError:
                return True
            except TimeoutError:
                continue
            except OSError as exc:  # EMSGSIZE: a route here already knows a smaller path MTU
                return False if exc.errno == errno.EMSGSIZE else None
    return False


def probe_path_mtu(address: str, port: int, mtu: int) -> bool | None:
    """Whether a full-size (``mtu``) datagram crosses the path to ``address`` when a small one does
    (None: the small one got no answer either, e.g. a firewall, so nothing can be said). Sent to
    ``port`` over UDP, where the worker's RPC server (TCP) is not listening; nothing is started there."""
    if not _refused(address, port, 128):
        return None
    return bool(_refused(address, port, mtu))


def _wait_ended(node: Node, ref: ProcessRef, log: Path, timeout: float = 3.0) -> None:
    """Wait (at most ``timeout``) until a stopped receiver has left the process table, and on an
    ssh node until its wrapper shell has recorded the exit status (its last act)."""
    from ._ssh import EXIT_MARK, SshNode

    if not isinstance(node, SshNode):
        wait_reaped([(node, ref)], timeout)
        return
    deadline = time.monotonic() + timeout
    while EXIT_MARK not in node.read_log(log, 1 << 14) and time.monotonic() < deadline:
        time.sleep(0.05)


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
        _wait_ended(worker, ref, log)


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
    mtu = jumbo_mtu(head_facts, worker_facts, bind)
    path_ok = probe_path_mtu(bind, target.port, mtu) if mtu else None
    rows = [route_row(name, bind, head_facts), mtu_row(name, bind, head_facts, worker_facts, path_ok)]
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
        if not w.remote or w.bind in ("0.0.0.0", "::") or is_loopback(w.bind):
            # The same machine, a wildcard or the worker's own loopback: no link to measure (the
            # link and bind rows say what is wrong with the last two).
            continue
        log = Path(w.workdir) / "clusters" / spec.name / f"link-{w.name}.log"
        target = LinkTarget(w.name, node_for(w.host, spec.ssh), w.bind, w.port, log)
        rows += check_link(head, target, seconds=seconds, tool=tool)[0]
    return rows


__all__ = [
    "CX7_CAP_GBPS",
    "DEFAULT_SECONDS",
    "RATE_WARN_FRACTION",
    "RECEIVER",
    "RECEIVER_LIMIT_S",
    "EndFacts",
    "Interface",
    "LinkTarget",
    "Route",
    "Tool",
    "Transfer",
    "check_link",
    "choose_tool",
    "facts_script",
    "jumbo_mtu",
    "link_check_rows",
    "measure",
    "mtu_row",
    "parse_end_facts",
    "parse_ip_addr",
    "parse_ip_route_get",
    "parse_iperf3_json",
    "parse_speeds",
    "probe_path_mtu",
    "rate_row",
    "rated_mbps",
    "route_row",
    "send_for",
    "streams_for",
]
