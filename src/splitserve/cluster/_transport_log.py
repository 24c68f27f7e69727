"""Which transport an RPC link ended on, read from the engine's own log lines.

The pinned llama.cpp (``ggml/src/ggml-rpc/transport.cpp``, ``ggml-rpc.cpp``) negotiates RDMA
in the RPC HELLO and otherwise stays on TCP. What it prints:

- ``ggml-rpc-server``'s banner: ``  transport      : TCP (RDMA auto-negotiate enabled)`` when
  built with RDMA (libibverbs found at build time), ``  transport      : TCP`` when not;
- ``RDMA probed: dev=mlx5_0 gid=3 RoCEv2 qpn=… inline=…`` when a verbs device has a GID for
  the socket's local address (or ``GGML_RDMA_GID``);
- ``RDMA activated: qpn=A->B mtu=4096 rx_depth=24`` once both sides switched (the TCP socket
  carries nothing after that);
- ``RDMA activate failed, staying on TCP`` when the queue pair could not be brought up;
- the Apple Thunderbolt transport: ``RDMA(Apple/UC) probed: …`` / ``RDMA(Apple/UC) activated: …``.

A failed probe (no device, no GID for the bind address) and ``GGML_RPC_NO_RDMA`` print nothing,
and neither does a peer that offered no RDMA: :func:`parse_transport` infers those from what
is missing, with the process's environment for ``GGML_RPC_NO_RDMA``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

BANNER_RDMA = "transport      : TCP (RDMA auto-negotiate enabled)"
_BANNER = re.compile(r"^\s*transport\s*:\s*TCP(?P<rdma>\s*\(RDMA auto-negotiate enabled\))?\s*$", re.M)
_PROBED = re.compile(
    r"RDMA(?P<apple>\(Apple/UC\))? probed: dev=(?P<dev>\S+)(?: port=\d+)? gid=(?P<gid>-?\d+)(?P<ver> RoCEv[12])?"
)
_ACTIVATED = re.compile(
    r"RDMA(?P<apple>\(Apple/UC\))? activated: qpn=(?P<local>\d+)->(?P<remote>\d+) mtu=(?P<mtu>\d+) "
    r"rx_depth=(?P<depth>\d+)"
)
_FAILED = re.compile(r"RDMA activate failed, staying on TCP|RDMA\(Apple/UC\) (?:RTR|RTS) failed[^\n]*")
_WC_ERROR = re.compile(r"RDMA(?:\(Apple/UC\))? (?:CQ |recv |send )?wc error: status=(?P<status>\d+)[^\n]*")

_ACCEPTED = "Accepted client connection"

#: RoCE path MTUs below this are a warning (the interface is at 1500: RoCE then runs at 1024).
GOOD_MTU = 4096


@dataclass
class TransportReading:
    """What one RPC link runs on."""

    kind: str
    """``RDMA``, ``TCP`` or ``unknown`` (nothing in the log says yet)."""
    mtu: int | None = None
    device: str | None = None
    gid: int | None = None
    gid_type: str | None = None
    apple: bool = False
    rdma_build: bool | None = None
    """Whether the engine that wrote the log was built with RDMA (None: the log does not say)."""
    cause: str | None = None
    """Why it is on TCP, when it is and the log (or env) tells."""
    warnings: list[str] = field(default_factory=list)

    def text(self) -> str:
        """``RDMA (mtu 4096)``, ``TCP (GGML_RPC_NO_RDMA is set)``, ``TCP``."""
        if self.kind == "RDMA":
            return f"RDMA (mtu {self.mtu})" if self.mtu else "RDMA"
        if self.kind == "TCP" and self.cause:
            return f"TCP ({self.cause})"
        return self.kind

    def as_dict(self) -> dict[str, object]:
        return {
            "transport": self.kind,
            "text": self.text(),
            "mtu": self.mtu,
            "device": self.device,
            "gid": self.gid,
            "gid_type": self.gid_type,
            "apple": self.apple,
            "rdma_build": self.rdma_build,
            "cause": self.cause,
            "warnings": list(self.warnings),
        }


def _last(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    m = None
    for m in pattern.finditer(text):  # noqa: B007 - the last match is the one wanted
        pass
    return m


def parse_transport(text: str, env: Mapping[str, str] | None = None, connected: bool | None = None) -> TransportReading:
    """The transport of the last connection in a ggml-rpc-server (or llama-server) log.

    ``env``: the process's environment (``GGML_RPC_NO_RDMA`` there leaves no line);
    ``connected``: whether the head has connected; None: a worker's log says so itself
    (``Accepted client connection``). Before a connection a worker's log has only its banner,
    so the reading is ``unknown`` unless the build or the environment rules RDMA out."""
    env = env or {}
    banner = _last(_BANNER, text)
    # Everything before the last banner belongs to an earlier run of the same log file.
    if banner is not None:
        text = text[banner.start() :]
    rdma_build = None if banner is None else banner.group("rdma") is not None
    accepted = text.rfind(_ACCEPTED)
    if accepted >= 0:  # the last connection's lines (the probe runs per connection)
        text = text[accepted:]
    if connected is None:
        connected = accepted >= 0
    reading = TransportReading(kind="unknown", rdma_build=rdma_build)
    probed, activated, failed = _last(_PROBED, text), _last(_ACTIVATED, text), _last(_FAILED, text)
    if probed:
        reading.rdma_build = True
        reading.device, reading.gid = probed.group("dev"), int(probed.group("gid"))
        reading.gid_type = (probed.group("ver") or "").strip() or None
        reading.apple = probed.group("apple") is not None
    if activated and (failed is None or activated.start() > failed.start()):
        reading.rdma_build = True
        reading.kind = "RDMA"
        reading.mtu = int(activated.group("mtu"))
        reading.apple = reading.apple or activated.group("apple") is not None
        if not reading.apple and reading.mtu < GOOD_MTU:
            reading.warnings.append(
                f"RoCE path MTU {reading.mtu}: an interface MTU of 1500 caps RoCE at 1024; set the RDMA "
                "interface's MTU to 9000 on both ends (ip link set DEV mtu 9000) and restart the cluster"
            )
        if reading.gid_type == "RoCEv1":
            reading.warnings.append("RDMA runs on a RoCEv1 GID; RoCEv2 (routable) is expected on these links")
        wc = _last(_WC_ERROR, text)
        if wc and wc.start() > activated.start():
            reading.warnings.append(f"RDMA completion error after activation: {wc.group(0).strip()}")
        return reading
    if failed:
        reading.kind = "TCP"
        reading.cause = "RDMA activation failed (GID or route mismatch between the ends, or the memlock limit)"
        reading.warnings.append(
            "RDMA was probed but its activation failed, staying on TCP: check that both ends' --rpc/bind "
            "addresses are on the RDMA link, GGML_RDMA_GID, and `ulimit -l` (containers: --ulimit memlock=-1)"
        )
        return reading
    if env.get("GGML_RPC_NO_RDMA"):
        reading.kind, reading.cause = "TCP", "GGML_RPC_NO_RDMA is set"
        return reading
    if reading.rdma_build is False:
        reading.kind, reading.cause = "TCP", "engine built without RDMA"
        return reading
    if not connected:
        return reading
    reading.kind = "TCP"
    if probed:
        reading.cause = "the other end offered no RDMA"
    elif reading.rdma_build:
        reading.cause = "no RDMA device with a GID for the bind address"
    return reading
