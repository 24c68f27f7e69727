"""The Ray probe: a trivial Ray job that stands in for ``vllm serve`` (``vllm.ray_probe = true``).

``python -m splitserve.cluster._ray_probe --address HEAD:6379 --node-ip-address HEAD --expect-nodes 3
--out FILE``
connects to the Ray cluster, waits until ``--expect-nodes`` nodes are alive, runs one task on each
node (pinned there by node id) that reports its hostname, its address as Ray sees it and the
variables the fixes set (:data:`PROBE_VARIABLES`), writes that JSON to ``--out``, then stays alive
until SIGTERM / SIGINT, so supervision can watch it like an engine.  While it lives it re-checks
the cluster every ``--watch`` seconds and exits 3 when a node is lost (a killed raylet), so the
supervisor notices and restarts the deployment.

Exit status: 0 after SIGTERM, 2 when the nodes did not all join within ``--timeout``, 3 when a
node was lost later.  It runs on the head with an interpreter that has splitserve and ``ray``; the
task it sends to the other nodes is pickled by value (this module's code, standard library only),
so those nodes need ``ray`` alone.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

PROBE_VARIABLES = (
    "NCCL_SOCKET_IFNAME",
    "GLOO_SOCKET_IFNAME",
    "UCX_NET_DEVICES",
    "VLLM_HOST_IP",
    "RAY_memory_monitor_refresh_ms",
)
"""The variables the fixes set (as in ``_engines_plan``; kept here so the probe needs no splitserve
imports beyond this file)."""

EXIT_TIMEOUT = 2
EXIT_NODE_LOST = 3


def node_report(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """What a Ray task sees on its node: host name, address, pid and the fixes' variables."""
    env = os.environ if env is None else env
    host = socket.gethostname()
    return {
        "hostname": host,
        "ip": _node_ip(),
        "pid": os.getpid(),
        "env": {k: env[k] for k in PROBE_VARIABLES if k in env},
    }


def _ray() -> Any:
    """The ``ray`` package, untyped (its functions carry no annotations for mypy --strict)."""
    import importlib

    return importlib.import_module("ray")


def _node_ip() -> str | None:
    try:
        return str(_ray().util.get_node_ip_address())
    except Exception:  # noqa: BLE001 - outside Ray (tests) there is no node address
        return None


def alive_nodes(nodes: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The entries of ``ray.nodes()`` that are alive."""
    return [n for n in nodes if n.get("Alive")]


def summary(
    address: str, expected: int, nodes: Sequence[Mapping[str, Any]], reports: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """The probe's JSON: the cluster's nodes as Ray lists them and each node task's report."""
    alive = alive_nodes(nodes)
    return {
        "address": address,
        "expected_nodes": expected,
        "alive_nodes": len(alive),
        "nodes": [
            {"node_id": n.get("NodeID"), "address": n.get("NodeManagerAddress"), "resources": n.get("Resources", {})}
            for n in alive
        ],
        "reports": list(reports),
        "ok": len(alive) >= expected and len(reports) >= expected,
        "written_at": time.time(),
    }


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    """Write ``data`` to ``path`` atomically (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)


def wait_for_nodes(
    list_nodes: Callable[[], Sequence[Mapping[str, Any]]],
    expected: int,
    timeout: float,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> list[Mapping[str, Any]] | None:
    """The alive nodes once there are ``expected`` of them, or None after ``timeout`` seconds."""
    deadline = clock() + timeout
    while True:
        alive = alive_nodes(list_nodes())
        if len(alive) >= expected:
            return alive
        if clock() >= deadline:
            return None
        sleep(0.5)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m splitserve.cluster._ray_probe", description=__doc__.split("\n")[0])
    p.add_argument("--address", required=True, help="the Ray head's GCS address, HOST:PORT")
    p.add_argument("--node-ip-address", default=None, help="this node's address in the Ray cluster (the head's)")
    p.add_argument("--expect-nodes", type=int, required=True, help="nodes that must join")
    p.add_argument("--out", type=Path, required=True, help="where the JSON report goes")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for the nodes (default 300)")
    p.add_argument("--watch", type=float, default=2.0, help="seconds between liveness checks (default 2)")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    ray = _ray()

    stop = {"flag": False}

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop["flag"] = True

    ray.init(address=args.address, log_to_driver=False, _node_ip_address=args.node_ip_address)
    # ray.init replaces the SIGTERM handler; ours goes in after it.
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    alive = wait_for_nodes(ray.nodes, args.expect_nodes, args.timeout)
    if alive is None:
        seen = len(alive_nodes(ray.nodes()))
        write_json(args.out, summary(args.address, args.expect_nodes, ray.nodes(), []))
        print(f"ray probe: {seen} of {args.expect_nodes} nodes joined within {args.timeout:g} s", file=sys.stderr)
        return EXIT_TIMEOUT
    import importlib

    cloudpickle: Any = importlib.import_module("ray.cloudpickle")
    strategies: Any = importlib.import_module("ray.util.scheduling_strategies")
    NodeAffinitySchedulingStrategy = strategies.NodeAffinitySchedulingStrategy

    # The other nodes have ray but maybe not splitserve: send the task's code, not a reference.
    cloudpickle.register_pickle_by_value(sys.modules[node_report.__module__])
    task = ray.remote(num_cpus=0)(node_report)
    refs = [
        task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=n["NodeID"], soft=False)).remote()
        for n in alive
    ]
    reports = ray.get(refs)
    write_json(args.out, summary(args.address, args.expect_nodes, ray.nodes(), reports))
    print(f"ray probe: {len(reports)} nodes report; written to {args.out}", flush=True)
    while not stop["flag"]:
        time.sleep(args.watch)
        now = len(alive_nodes(ray.nodes()))
        if now < args.expect_nodes and not stop["flag"]:
            print(f"ray probe: {now} of {args.expect_nodes} nodes alive: a node was lost", file=sys.stderr, flush=True)
            return EXIT_NODE_LOST
    ray.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
