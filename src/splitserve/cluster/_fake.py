"""The cluster's in-memory network for tests: the root's fake nodes
(:mod:`splitserve._node_fake`: :class:`Program`, :class:`FakeProcess`, :class:`FakeNode`,
re-exported here) plus what the executor and the supervisor ask of a network.

A :class:`FakeNetwork` is a :class:`~splitserve._node_fake.FakeNodes` (nodes, processes, signals,
timers on one :class:`~splitserve._clock.FakeClock`) that also answers for ports (in use, spare,
answering), RPC HELLO, llama-server's HTTP API and the gateway's ``/health``.
:meth:`FakeNetwork.edges` is the whole I/O bundle the executor and the supervisor take
(:class:`~._edges.Edges`): these nodes, this network, a :class:`~splitserve.engine.FakeEngine`
that answers only while the fake llama-server listens on the URL's port, the gateway's
``/health`` answered by the fake gateway process, and the fake clock.

    net = FakeNetwork()
    net.program("llama-server", Program(listen_after=2.0, log=["load_tensors: ..."]))
    net.program("ggml-rpc-server", Program(listen_after=None), port=50053)   # this worker never listens
    up(spec, engine=engine, edges=net.edges(FakeEngine(loading=3)))
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from urllib.parse import urlsplit

from .._clock import FakeClock
from .._errors import ClusterError
from .._node import Node
from .._node_fake import FakeNode, FakeNodes, FakeProcess, Program
from ..engine import BlockingEngine, FakeEngine
from ._edges import Edges, EngineProbe


class FakeNetwork(FakeNodes):
    """Fake nodes that see each other's listening ports, on one fake clock, as the cluster's
    network (:class:`~._edges.Network`) and I/O edges (:meth:`edges`)."""

    def __init__(self, clock: FakeClock | None = None) -> None:
        super().__init__(clock)
        self.taken_ports: set[tuple[str, int]] = set()
        """(bind, port) held by someone else (port_in_use says yes)."""
        self.engine: FakeEngine | None = None
        """The engine :meth:`edges` gave out (llama-server's HTTP API)."""

    def edges(self, engine: FakeEngine | None = None) -> Edges:
        """The I/O edges of the executor and the supervisor, all fake (see the module).

        ``engine`` (default: the one given before, else a :class:`~splitserve.engine.FakeEngine`
        that is ready at once) answers for llama-server while a fake process listens on the port
        of the URL asked for."""
        if engine is not None or self.engine is None:
            self.engine = engine or FakeEngine()
        return Edges(
            node=self.node_for,
            net=self,
            engine=self.engine_client,
            http_health=self.http_health,
            clock=self.clock,
        )

    def node_for(self, host: str, ssh: object = None) -> Node:
        """:func:`~._nodes.node_for` of this network: the fake node of ``host`` (ssh settings ignored)."""
        return self.node(host)

    def engine_client(self, url: str, api_key: str | None = None) -> AbstractContextManager[EngineProbe]:
        """A blocking client of :attr:`engine`, reachable while something listens at ``url``."""
        engine = self.engine if self.engine is not None else FakeEngine()
        self.engine = engine
        parts = urlsplit(url)
        host, port = parts.hostname or "127.0.0.1", parts.port or 80
        engine.available = lambda: self.listener(host, port) is not None
        return BlockingEngine(engine)

    def http_health(self, url: str) -> tuple[int, str]:
        """``GET url`` (the gateway's ``/health``): the listening process's ``http_status``, or
        (0, ``ConnectError``) when nothing listens there."""
        parts = urlsplit(url)
        proc = self.listener(parts.hostname or "127.0.0.1", parts.port or 80)
        if proc is None:
            return 0, "ConnectError"
        status = proc.program.http_status
        return status, '{"status":"ok"}' if status == 200 else '{"status":"unavailable"}'

    # -- what the executor asks of the network (see _edges.Network) ----------------------------
    def port_in_use(self, bind: str, port: int) -> bool:
        return (bind, port) in self.taken_ports or self.listener(bind, port) is not None

    def port_busy(self, host: str, bind: str, port: int) -> bool:
        return self.port_in_use(bind, port)

    def port_answers(self, host: str, port: int, timeout: float = 0.5) -> bool:
        return self.listener(host, port) is not None

    def spare_port(self, bind: str, avoid: set[int]) -> int:
        """The lowest port from 40000 up that nothing holds (deterministic, unlike the kernel's)."""
        port = 40000
        while port in avoid or self.port_in_use(bind, port):
            port += 1
        return port

    def rpc_hello(self, host: str, port: int) -> str:
        proc = self.listener(host, port)
        if proc is None or proc.program.rpc_protocol is None:
            raise ClusterError(f"connection refused by {host}:{port}")
        return proc.program.rpc_protocol


__all__ = ["FakeNetwork", "FakeNode", "FakeProcess", "Program"]
