"""Which :class:`~splitserve._node.Node` serves a spec's ``host``: this machine, or another one over SSH."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .._node import LocalNode, Node
from ._ssh import SshNode

if TYPE_CHECKING:
    from ._spec import SshSpec

_NODES: dict[object, Node] = {}

LOCAL_HOSTS = ("local", "localhost", "127.0.0.1")


def node_for(host: str, ssh: SshSpec | None = None) -> Node:
    """The node for a spec's ``host`` value (one shared instance per host and ssh settings).

    ``ssh`` is the spec's (or the state's) :class:`~splitserve.cluster.SshSpec`; without it the
    plain ``ssh`` defaults apply."""
    if host in LOCAL_HOSTS:
        return _NODES.setdefault("local", LocalNode())
    cfg, options, timeout = (ssh.config, ssh.options, ssh.connect_timeout) if ssh is not None else (None, [], 10.0)
    key = (host, str(cfg) if cfg else None, tuple(options), float(timeout))
    if key not in _NODES:
        _NODES[key] = SshNode(host, config=Path(cfg) if cfg else None, options=options, connect_timeout=float(timeout))
    return _NODES[key]


__all__ = ["LOCAL_HOSTS", "node_for"]
