"""Replicas on the fake network: `up` with ``topology = "replicas"`` starts a llama-server per node
(or per group), the gateway routes across them, the state records each replica, the supervisor
restarts a dead replica alone (the others and the gateway keep running) and `down` stops all."""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gguf_factory import dense_llama
from splitserve.cluster import FakeNetwork, Supervisor, cluster_state_dir, down, parse_spec, read_state, up
from splitserve.cluster._replicas import replica_status
from splitserve.engine import FakeEngine

FILES = {"llama-server": b"server", "ggml-rpc-server": b"rpc", "libggml-base.so": b"ggml", "libllama.so": b"llama"}
BOXES = {"box2": "10.9.0.2", "box3": "10.9.0.3", "box4": "10.9.0.4"}
PORT = 50200


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("replicas")
    (model,) = dense_llama(root / "m.gguf", n_layer=4, n_vocab=320)
    bin_dir = root / "engine" / "bin"
    bin_dir.mkdir(parents=True)
    for name, data in FILES.items():
        (bin_dir / name).write_bytes(data)
    (root / "engine" / "engine.json").write_text(
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
    return model, root / "engine"


def spec_of(tmp_path: Path, shared: tuple[Path, Path], topology: str, boxes: int, **extra: Any):  # type: ignore[no-untyped-def]
    model, engine = shared
    data: dict[str, Any] = {
        "name": "reps",
        "model": str(model),
        "engine": str(engine),
        "state_dir": str(tmp_path / "st"),
        "topology": topology,
        "workers": [
            {"name": f"w{i + 1}", "host": host, "bind": bind, "port": PORT}
            for i, (host, bind) in enumerate(list(BOXES.items())[:boxes])
        ],
        "supervise": {"backoff_initial": 1, "poll_seconds": 0.5},
    }
    data.update(extra)
    return parse_spec(data)


def network() -> FakeNetwork:
    """Remote boxes whose engine copy (llama-server's files included) matches the head's."""
    net = FakeNetwork()
    sums = "".join(f"{hashlib.sha256(d).hexdigest()}  {n}\n" for n, d in FILES.items())
    for host in BOXES:
        net.node(host).answers.append(("sha256sum", subprocess.CompletedProcess([], 0, sums.encode(), b"")))
    return net


def binary(argv: list[str]) -> str:
    name = Path(argv[0]).name
    return "gateway" if argv[1:4] == ["-m", "splitserve", "serve"] else name


def started(net: FakeNetwork) -> list[tuple[str, str]]:
    """(node, binary) of every process started, in order."""
    return [(p.node, binary(p.argv)) for p in net.spawned]


def flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def supervisor_log(tmp_path: Path) -> list[dict[str, Any]]:
    return [json.loads(ln) for ln in (tmp_path / "st" / "supervisor.log").read_text().splitlines()]


def test_replicas_of_one_node_each_run_their_own_llama_server(tmp_path: Path, shared: tuple[Path, Path]) -> None:
    spec = spec_of(tmp_path, shared, "replicas", 2)
    net = network()
    state = up(spec, preflight=False, edges=net.edges(FakeEngine()))

    assert sorted(started(net)) == sorted(
        [("local", "gateway"), ("local", "llama-server"), ("box2", "llama-server"), ("box3", "llama-server")]
    ), "no ggml-rpc-server: every node serves alone"
    gw = next(p.argv for p in net.spawned if binary(p.argv) == "gateway")
    assert flag(gw, "--engine") == f"head=http://127.0.0.1:8080,w1=http://10.9.0.2:{PORT},w2=http://10.9.0.3:{PORT}"
    box2 = net.find("box2", "llama-server").argv
    assert (flag(box2, "--host"), flag(box2, "--port"), flag(box2, "--rpc")) == ("10.9.0.2", str(PORT), None)
    assert box2[0] == "~/.cache/splitserve/engines/b4000-cpu/llama-server", "the engine copied to the worker"
    head = net.find("local", "llama-server").argv
    assert flag(head, "--rpc") is None and flag(head, "--port") == "8080"

    assert state.phase == "ready"
    saved = read_state(cluster_state_dir(spec))
    assert saved is not None
    assert [(r["name"], r["boxes"], r["server"], r["workers"]) for r in saved.extra["replicas"]] == [
        ("head", ["head"], "head", []),
        ("w1", ["w1"], "w1", []),
        ("w2", ["w2"], "w2", []),
    ]
    assert {(r.node, r.role) for r in saved.processes} == {
        ("gateway", "gateway"),
        ("head", "server"),
        ("w1", "server"),
        ("w2", "server"),
    }

    assert sorted(down(spec, edges=net.edges())) == ["gateway", "head", "w1", "w2"]
    assert net.running() == []
    assert read_state(cluster_state_dir(spec)) is None


def test_replicas_of_two_nodes_use_their_groups_rpc_workers(tmp_path: Path, shared: tuple[Path, Path]) -> None:
    spec = spec_of(tmp_path, shared, "replicas:2", 3)
    net = network()
    up(spec, preflight=False, edges=net.edges(FakeEngine()))
    assert sorted(started(net)) == sorted(
        [
            ("local", "gateway"),
            ("box2", "ggml-rpc-server"),
            ("box4", "ggml-rpc-server"),
            ("local", "llama-server"),
            ("box3", "llama-server"),
        ]
    )
    assert flag(net.find("local", "llama-server").argv, "--rpc") == f"10.9.0.2:{PORT}"
    box3 = net.find("box3", "llama-server").argv
    assert (flag(box3, "--host"), flag(box3, "--rpc")) == ("10.9.0.3", f"10.9.0.4:{PORT}")
    gw = next(p.argv for p in net.spawned if binary(p.argv) == "gateway")
    assert flag(gw, "--engine") == f"head=http://127.0.0.1:8080,w2=http://10.9.0.3:{PORT}"
    down(spec, edges=net.edges())
    assert net.running() == []


def test_the_supervisor_restarts_a_dead_replica_alone(tmp_path: Path, shared: tuple[Path, Path]) -> None:
    spec = spec_of(tmp_path, shared, "replicas", 2)
    net = network()
    sup = Supervisor(spec, preflight=False, edges=net.edges(FakeEngine()))
    net.after(5, lambda: net.kill("box2", "llama-server"))
    net.after(20, sup.stop)
    sup.run()

    first, again = net.spawned[:4], net.spawned[4:]
    assert [(p.node, binary(p.argv)) for p in again] == [("box2", "llama-server")], "only w1's server again"
    assert again[0].argv == net.spawned[[p.node for p in first].index("box2")].argv
    assert all(p.exit_code == -signal.SIGTERM for p in first if p.node != "box2"), "the others served to the end"
    kinds = [(e["kind"], e["node"]) for e in supervisor_log(tmp_path) if e["kind"] != "engine"]
    assert kinds == [
        ("ready", "head"),
        ("died", "w1"),
        ("restarting", "w1"),
        ("restarted", "w1"),
        ("stopping", "cluster"),
    ]
    assert sup.restarts == 1
    assert net.running() == []


def test_a_dead_rpc_worker_restarts_its_replica_only(tmp_path: Path, shared: tuple[Path, Path]) -> None:
    spec = spec_of(tmp_path, shared, "replicas:2", 3)
    net = network()
    sup = Supervisor(spec, preflight=False, edges=net.edges(FakeEngine()))
    net.after(5, lambda: net.kill("box4", "ggml-rpc-server"))
    net.after(20, sup.stop)
    sup.run()
    again = [(p.node, binary(p.argv)) for p in net.spawned[5:]]
    assert again == [("box4", "ggml-rpc-server"), ("box3", "llama-server")], "the worker, then its replica's server"
    box3_first = next(p for p in net.spawned[:5] if p.node == "box3")
    assert box3_first.exit_code is not None and box3_first.exit_code != -signal.SIGKILL, "stopped by the supervisor"
    head = next(p for p in net.spawned[:5] if p.node == "local" and binary(p.argv) == "llama-server")
    assert head.exit_code == -signal.SIGTERM, "replica head ran until the end"
    died = [e for e in supervisor_log(tmp_path) if e["kind"] == "died"]
    assert [e["node"] for e in died] == ["w3"]


def test_replica_status_names_each_replicas_nodes_and_health() -> None:
    state = SimpleNamespace(
        extra={
            "replicas": [
                {"name": "head", "boxes": ["head", "w1"], "server": "head", "workers": ["w1"], "url": "http://a"},
                {"name": "w2", "boxes": ["w2", "w3"], "server": "w2", "workers": ["w3"], "url": "http://b"},
            ]
        }
    )

    procs = [
        {"node": "head", "alive": True},
        {"node": "w1", "alive": True},
        {"node": "w2", "alive": True},
        {"node": "w3", "alive": False},
    ]
    rows = replica_status(state, procs, probe=False)
    assert [(r["name"], r["nodes"], r["health"]) for r in rows] == [
        ("head", ["head", "w1"], "unknown"),
        ("w2", ["w2", "w3"], "down"),
    ]


def test_plan_prints_the_topology_auto_chose_and_why(tmp_path: Path, shared: tuple[Path, Path]) -> None:
    from typer.testing import CliRunner

    from splitserve.cli import _inspect  # noqa: F401  (registers `plan`)
    from splitserve.cli._app import app

    model, _engine = shared
    path = tmp_path / "c.toml"
    path.write_text(
        f'model = "{model}"\n[head]\nmemory_gib = 8\n'
        '[[workers]]\nname = "w1"\nhost = "box2"\nbind = "10.9.0.2"\nmemory_gib = 8\n'
    )
    res = CliRunner().invoke(app, ["plan", "-c", str(path), "--json"])
    assert res.exit_code == 0, res.output
    topo = json.loads(res.stdout)["topology"]
    assert (topo["asked"], topo["kind"], topo["group_size"], topo["replicas"]) == (
        "auto",
        "replicas",
        1,
        [["head"], ["w1"]],
    )
    assert [a["kind"] for a in topo["alternatives"]] == ["replicas", "split"]
    text = CliRunner().invoke(app, ["plan", "-c", str(path)])
    assert text.exit_code == 0, text.output
    assert "topology: 2 replicas of 1 (head, w1)" in text.stdout
    assert "  why: the model with ctx" in text.stdout and "split over all: " in text.stdout


def test_a_dead_gateway_comes_back_routing_to_every_replica(tmp_path: Path, shared: tuple[Path, Path]) -> None:
    spec = spec_of(tmp_path, shared, "replicas", 2)
    net = network()
    sup = Supervisor(spec, preflight=False, edges=net.edges(FakeEngine()))
    net.after(5, lambda: net.kill(port=8000))  # the gateway (the default port)
    net.after(10, sup.stop)
    sup.run()
    gateways = [p.argv for p in net.spawned if binary(p.argv) == "gateway"]
    assert len(gateways) == 2 and gateways[1] == gateways[0]
    assert flag(gateways[1], "--engine") == (
        f"head=http://127.0.0.1:8080,w1=http://10.9.0.2:{PORT},w2=http://10.9.0.3:{PORT}"
    )


def test_a_replicas_backoff_doubles_when_it_dies_again_soon_and_resets_after_stable_seconds(
    tmp_path: Path, shared: tuple[Path, Path]
) -> None:
    spec = spec_of(tmp_path, shared, "replicas", 2)
    spec.supervise.stable_seconds = 30
    net = network()
    sup = Supervisor(spec, preflight=False, edges=net.edges(FakeEngine()))
    for at in (5, 10, 60):  # soon after the first restart, then after serving 30 s
        net.after(at, lambda: net.kill("box2", "llama-server"))
    net.after(80, sup.stop)
    sup.run()
    delays = [e["delay"] for e in supervisor_log(tmp_path) if e["kind"] == "restarting"]
    assert delays == [1.0, 2.0, 1.0]
