"""The cluster's in-memory network for tests: the root's fake nodes
(:mod:`splitserve._node_fake`: :class:`Program`, :class:`FakeProcess`, :class:`FakeNode`,
re-exported here) plus what the executor and the supervisor ask of a network.

A :class:`FakeNetwork` is a :class:`~splitserve._node_fake.FakeNodes` (nodes, processes, signals,
timers, ports, RPC HELLO and the gateway's ``/health`` on one :class:`~splitserve._clock.FakeClock`)
that also answers for llama-server's HTTP API with a :class:`~splitserve.engine.FakeEngine`.
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

import functools
from contextlib import AbstractContextManager
from urllib.parse import urlsplit

from .._clock import FakeClock
from .._node_fake import FakeNode, FakeNodes, FakeProcess, Program
from ..engine import BlockingEngine, FakeEngine
from ._edges import Edges, EngineProbe


class FakeNetwork(FakeNodes):
    """Fake nodes that see each other's listening ports, on one fake clock, with the cluster's
    I/O edges (:meth:`edges`: these nodes, the network, the engine, the gateway's health, the clock)."""

    def __init__(self, clock: FakeClock | None = None) -> None:
        super().__init__(clock)
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

    def engine_client(self, url: str, api_key: str | None = None) -> AbstractContextManager[EngineProbe]:
        """A blocking client of :attr:`engine`, reachable while something listens at ``url``."""
        engine = self.engine if self.engine is not None else FakeEngine()
        self.engine = engine
        parts = urlsplit(url)
        host, port = parts.hostname or "127.0.0.1", parts.port or 80
        engine.available = functools.partial(self.listens, host, port)
        return BlockingEngine(engine)


__all__ = ["FakeNetwork", "FakeNode", "FakeProcess", "Program"]
