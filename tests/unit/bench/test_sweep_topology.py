"""``bench sweep --set topology=split,replicas``: topology (and replica_nodes) are spec keys a sweep
sets like the server options; each point restarts the cluster through `up` (here on the fake
network): a split is one llama-server over RPC workers, replicas a llama-server per node."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gguf_factory import dense_llama
from splitserve._errors import UsageError
from splitserve.bench import parse_set
from splitserve.bench._cluster import ClusterRestarter, with_server
from splitserve.cluster import FakeNetwork, cluster_state_dir, parse_spec, read_state
from splitserve.engine import FakeEngine

FILES = {"llama-server": b"server", "ggml-rpc-server": b"rpc", "libggml-base.so": b"ggml", "libllama.so": b"llama"}
BOX = ("box2", "10.9.0.2")
PORT = 50300


def cluster_spec(tmp_path: Path, **extra: Any) -> Any:
    (model,) = dense_llama(tmp_path / "m.gguf", n_layer=4, n_vocab=320)
    engine = tmp_path / "engine"
    (engine / "bin").mkdir(parents=True)
    for name, data in FILES.items():
        (engine / "bin" / name).write_bytes(data)
    (engine / "engine.json").write_text(
        json.dumps(
            {
                "key": "b4000-cpu",
                "backend": "cpu",
                "bin_dir": "bin",
                "binaries": {"server": "llama-server", "rpc_server": "ggml-rpc-server"},
                "rpc_protocol": "3.0.0",
            }
        )
    )
    spec = {
        "name": "sweeptopo",
        "model": str(model),
        "engine": str(engine),
        "state_dir": str(tmp_path / "st"),
        "workers": [{"name": "w1", "host": BOX[0], "bind": BOX[1], "port": PORT}],
    } | extra
    return parse_spec(spec)


def network() -> FakeNetwork:
    net = FakeNetwork()
    sums = "".join(f"{hashlib.sha256(d).hexdigest()}  {n}\n" for n, d in FILES.items())
    net.node(BOX[0]).answers.append(("sha256sum", subprocess.CompletedProcess([], 0, sums.encode(), b"")))
    return net


def launched(net: FakeNetwork, since: int) -> list[tuple[str, str]]:
    out = []
    for p in net.spawned[since:]:
        name = "gateway" if p.argv[1:4] == ["-m", "splitserve", "serve"] else Path(p.argv[0]).name
        out.append((p.node, name))
    return sorted(out)


def test_a_topology_sweep_restarts_the_cluster_as_a_split_then_as_replicas(tmp_path: Path) -> None:
    spec = cluster_spec(tmp_path)
    points = parse_set(["topology=split,replicas"])
    assert points == [{"topology": "split"}, {"topology": "replicas"}]
    net = network()
    restarter = ClusterRestarter(spec, preflight=False, edges=net.edges(FakeEngine()))

    seen = []
    for values in points:
        before = len(net.spawned)
        target, facts = restarter.start(values)
        seen.append((facts["topology"], facts["servers"], launched(net, before), target.url))
        state = read_state(cluster_state_dir(spec))
        assert state is not None and state.phase == "ready"
    assert restarter.finish() == "the cluster is down (it was not running before the sweep)"
    assert net.running() == []

    (split, n_split, split_procs, split_url), (reps, n_reps, reps_procs, reps_url) = seen
    assert (split, n_split) == ("split", 1)
    assert split_procs == [("box2", "ggml-rpc-server"), ("local", "gateway"), ("local", "llama-server")]
    assert (reps, n_reps) == ("replicas", 2)
    assert reps_procs == [("box2", "llama-server"), ("local", "gateway"), ("local", "llama-server")]
    assert split_url == reps_url  # one endpoint: the gateway in front of either


def test_topology_values_are_checked_before_anything_starts(tmp_path: Path) -> None:
    spec = cluster_spec(tmp_path, topology="replicas", replica_nodes=1)
    split = with_server(spec, {"topology": "split", "ubatch": 128})
    assert (split.topology, split.replica_nodes, split.server.ubatch) == ("split", None, 128)
    assert (spec.topology, spec.replica_nodes) == ("replicas", 1)  # the spec itself is unchanged
    assert with_server(spec, {"topology": "replicas:2"}).topology_asked == ("replicas", 2)
    with pytest.raises(UsageError, match=r"--set topology=mesh: 'mesh' is not one of: auto, split, replicas"):
        with_server(spec, {"topology": "mesh"})
    with pytest.raises(UsageError, match=r"--set topology=split: replica_nodes: only with topology"):
        with_server(spec, {"topology": "split", "replica_nodes": 2})
    with pytest.raises(UsageError, match=r"unknown server option; use one of .*topology, replica_nodes"):
        with_server(spec, {"topo": "split"})
