"""The I/O edges the cluster layer's executor and supervisor go through, as one replaceable bundle.

:class:`Edges` holds them: nodes (:class:`~splitserve._node.Node`), the network as seen from this
machine (:class:`Network`: is a port held, does it answer, what does an RPC server say to
HELLO), the engine's HTTP API (a blocking client) and the gateway's ``/health``, and a clock.
:data:`REAL_EDGES` are the real ones; tests build fake ones from
:class:`~._fake.FakeNetwork`, a :class:`~splitserve.engine.FakeEngine` and a
:class:`~splitserve._clock.FakeClock`.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from .._clock import SYSTEM_CLOCK, Clock
from .._errors import ClusterError
from .._node import Node
from ._nodes import LOCAL_HOSTS, node_for

if TYPE_CHECKING:
    from ..engine import CompletionRequest, EngineHealth


def port_in_use(bind: str, port: int) -> bool:
    """Whether a local TCP port cannot be bound (someone listens there)."""
    family = socket.AF_INET6 if ":" in bind else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((bind, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return True
            if exc.errno == errno.EADDRNOTAVAIL:
                raise ClusterError(f"{bind} is not an address of this machine") from None
            raise
    return False


def port_answers(bind: str, port: int, timeout: float = 0.5) -> bool:
    """Whether a TCP connection to ``bind:port`` is accepted."""
    try:
        with socket.create_connection((bind, port), timeout=timeout):
            return True
    except OSError:
        return False


def probe_port(host: str, port: int, timeout: float = 1.0) -> str:
    """``open`` (something accepts), ``closed`` (refused) or ``timeout`` (nothing answered: a
    firewall dropping it, or a listener whose backlog is full because it never accepts)."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return "open"
    except ConnectionRefusedError:
        return "closed"
    except TimeoutError:
        return "timeout"
    except OSError:
        return "closed"


class Network(Protocol):
    """What the executor asks of the network, from this machine."""

    def port_busy(self, host: str, bind: str, port: int) -> bool:
        """Whether ``bind:port`` on node ``host`` is held by some program."""
        ...

    def port_answers(self, host: str, port: int, timeout: float = 0.5) -> bool:
        """Whether a TCP connection to ``host:port`` is accepted."""
        ...

    def rpc_hello(self, host: str, port: int) -> str:
        """The RPC protocol version a ggml-rpc-server answers HELLO with."""
        ...

    def spare_port(self, bind: str, avoid: set[int]) -> int:
        """A port free on this machine's ``bind`` address, none of ``avoid``."""
        ...


class RealNetwork:
    """Sockets from this machine."""

    def port_busy(self, host: str, bind: str, port: int) -> bool:
        if host in LOCAL_HOSTS:
            return port_in_use(bind, port)
        return probe_port(bind, port) != "closed"

    def port_answers(self, host: str, port: int, timeout: float = 0.5) -> bool:
        return port_answers(host, port, timeout)

    def rpc_hello(self, host: str, port: int) -> str:
        from ._distribute import rpc_hello

        return rpc_hello(host, port)

    def spare_port(self, bind: str, avoid: set[int]) -> int:
        family = socket.AF_INET6 if ":" in bind else socket.AF_INET
        while True:
            with socket.socket(family, socket.SOCK_STREAM) as s:
                s.bind((bind, 0))
                port = int(s.getsockname()[1])
            if port not in avoid:
                return port


class EngineProbe(Protocol):
    """The engine's HTTP API as readiness needs it (``splitserve.engine.BlockingEngine``)."""

    def health(self) -> EngineHealth: ...

    def complete(self, request: CompletionRequest) -> dict[str, Any]: ...


def _http_health(url: str) -> tuple[int, str]:
    """GET ``url`` (the gateway's /health): (status, body); (0, error name) when nothing answers."""
    import httpx

    try:
        r = httpx.get(url, timeout=2.0)
    except httpx.HTTPError as exc:
        return 0, type(exc).__name__
    return r.status_code, r.text[:200]


def _engine_client(url: str, api_key: str | None) -> AbstractContextManager[EngineProbe]:
    from ..engine import BlockingEngine

    return BlockingEngine(url, api_key=api_key, timeout=60.0)


@dataclass
class Edges:
    """Every I/O edge of the executor and the supervisor: the real ones by default, fakes in tests."""

    node: Callable[[str, Any], Node] = node_for
    """(host, the spec's ssh settings) -> the node."""
    net: Network = field(default_factory=RealNetwork)
    engine: Callable[[str, str | None], AbstractContextManager[EngineProbe]] = _engine_client
    """(llama-server's URL, its key) -> a blocking client."""
    http_health: Callable[[str], tuple[int, str]] = _http_health
    clock: Clock = SYSTEM_CLOCK


REAL_EDGES = Edges()

__all__ = [
    "REAL_EDGES",
    "Edges",
    "EngineProbe",
    "Network",
    "RealNetwork",
    "port_answers",
    "port_in_use",
    "probe_port",
]
