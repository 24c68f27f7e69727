"""``topology = "replicas"`` with vLLM / SGLang on fakes: one engine server per node (or per
group of K nodes), the gateway fronting them all by name, the dry run printing exactly what
`up` starts, `status` rows per replica, `down` stopping every one, and the spec's refusals."""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from splitserve import SpecError
from splitserve.cluster import (
    FakeNetwork,
    Program,
    down,
    format_plan,
    gather_facts,
    parse_spec,
    plan_launch,
    read_state,
    up,
)
from splitserve.cluster._engines_facts import FACT_MARK, gather_engine_facts
from splitserve.cluster._engines_plan import engine_plan
from splitserve.cluster._execute import restart_replica
from splitserve.cluster._replicas import replica_status
from splitserve.cluster._supervise import replica_of

HEAD_IP, W1_IP, W2_IP, W3_IP = "10.20.20.1", "10.20.20.2", "10.20.20.3", "10.20.20.4"
HOSTS = {"w1": ("box2", W1_IP), "w2": ("box3", W2_IP), "w3": ("box4", W3_IP)}


def kwdefaults(fn: Any) -> dict[str, Any]:
    """A function's keyword-only defaults (to patch one for a test); it has some."""
    assert fn.__kwdefaults__ is not None, fn
    return fn.__kwdefaults__


def facts_output(address: str, engine: str) -> bytes:
    nic = json.dumps(
        [
            {
                "ifname": "lo",
                "mtu": 65536,
                "operstate": "UNKNOWN",
                "addr_info": [{"local": "127.0.0.1", "prefixlen": 8}],
            },
            {"ifname": "enp1s0", "mtu": 9000, "operstate": "UP", "addr_info": [{"local": address, "prefixlen": 24}]},
        ]
    )
    sections = [("nic", 0, nic), ("engine", 0, engine), ("ray", 127, ""), ("gpus", 0, ""), ("gds", 1, "")]
    gpus = "\n".join(f"GPU {i}: NVIDIA H200 (UUID: GPU-{i})" for i in range(2))
    text = "".join(f"{FACT_MARK}{k}\n{gpus if k == 'gpus' else out}\n@@splitserve-rc {rc}\n" for k, rc, out in sections)
    return text.encode()


def spec_of(tmp_path: Path, backend: str, workers: int = 1, topology: str = "replicas", **table: Any) -> Any:
    return parse_spec(
        {
            "name": "reps",
            "backend": backend,
            "topology": topology,
            "state_dir": str(tmp_path / "st"),
            "head": {"devices": ["CUDA0", "CUDA1"]},
            "workers": [
                {"name": n, "host": h, "bind": ip, "port": 8090, "devices": ["CUDA0", "CUDA1"]}
                for n, (h, ip) in list(HOSTS.items())[:workers]
            ],
            "gateway": {"port": 8100},
            backend: {
                "model": "Qwen/Qwen3-0.6B",
                "tensor_parallel_size": 2,
                "python": "/venv/bin/python",
                "api_key": "engine-key",
                **table,
            },
        }
    )


def network(backend: str, workers: int = 1) -> FakeNetwork:
    net = FakeNetwork()
    for host, ip in [("local", HEAD_IP), *list(HOSTS.values())[:workers]]:
        out = facts_output(ip, "0.11.0")
        net.node(host).answers.append((FACT_MARK, subprocess.CompletedProcess(["sh"], 0, out, b"")))
    net.program("vllm" if backend == "vllm" else "python", Program(listen_after=5.0))
    return net


def token_when_listening(net: FakeNetwork, asked: list[str]) -> Any:
    def token(url: str, model: str, key: str | None) -> str | None:
        asked.append(url)
        host, port = url.removeprefix("http://").rsplit(":", 1)
        return "Hi" if key == "engine-key" and net.listener(host, int(port)) is not None else None

    return token


def printed_argv(line: str) -> list[str]:
    """A dry-run command line's argv: its words after the leading ``VAR=value`` ones."""
    words = shlex.split(line)
    while words and "=" in words[0] and not words[0].startswith("-"):
        words.pop(0)
    return words


def masked(argv: list[str]) -> list[str]:
    return ["***" if i and argv[i - 1] == "--api-key" else a for i, a in enumerate(argv)]


def dry_run_lines(spec: Any, net: FakeNetwork) -> list[str]:
    """What `up --dry-run` prints for ``spec`` on the nodes of ``net``."""
    return format_plan(plan_launch(spec, gather_facts(spec, edges=net.edges()))).splitlines()


@pytest.mark.parametrize("backend", ["vllm", "sglang"])
def test_replicas_of_one_node_start_a_server_per_node_and_the_gateway_fronts_both(tmp_path: Path, backend: str) -> None:
    spec = spec_of(tmp_path, backend)
    net = network(backend)
    asked: list[str] = []
    state = up(spec, edges=net.edges(), first_token=token_when_listening(net, asked))
    assert state.phase == "ready"
    head, w1, gw = net.spawned
    assert (head.node, w1.node, gw.node) == ("local", "box2", "local")
    for proc, host, port in ((head, "127.0.0.1", "8080"), (w1, W1_IP, "8090")):
        argv = proc.argv
        assert argv[argv.index("--host") + 1] == host and argv[argv.index("--port") + 1] == port
        assert "--nnodes" not in argv and "--headless" not in argv and "--dist-init-addr" not in argv
        assert argv[argv.index("--tensor-parallel-size" if backend == "vllm" else "--tp-size") + 1] == "2"
    # each replica was asked for a token on its own server, the head's first
    assert asked.index("http://127.0.0.1:8080") < asked.index(f"http://{W1_IP}:8090")
    engines = gw.argv[gw.argv.index("--engine") + 1]
    assert engines == f"head={backend}+http://127.0.0.1:8080,w1={backend}+http://{W1_IP}:8090"
    assert state.endpoint == "http://127.0.0.1:8100"
    rows = read_state(tmp_path / "st")
    assert rows is not None
    assert [(r["name"], r["server"], r["workers"], r["url"]) for r in rows.extra["replicas"]] == [
        ("head", "head", [], "http://127.0.0.1:8080"),
        ("w1", "w1", [], f"http://{W1_IP}:8090"),
    ]
    # status: one row per replica with its nodes; one that died is down
    procs = [{"node": p.node, "alive": p.node != "w1"} for p in state.processes]
    status = replica_status(rows, procs, probe=False)
    assert [(r["name"], r["nodes"], r["health"]) for r in status] == [
        ("head", ["head"], "unknown"),
        ("w1", ["w1"], "down"),
    ]
    # the supervisor restarts a dead replica alone; the gateway is no replica's
    assert replica_of(rows, {"w1"}) == rows.extra["replicas"][1]
    assert replica_of(rows, {"gateway"}) is None and replica_of(rows, {"head", "w1"}) is None
    assert down(spec, edges=net.edges()) == ["gateway", "head", "w1"]
    assert net.running() == [] and read_state(tmp_path / "st") is None


@pytest.mark.parametrize("backend", ["vllm", "sglang"])
def test_up_starts_exactly_what_the_dry_run_printed(tmp_path: Path, backend: str) -> None:
    spec = spec_of(tmp_path, backend)
    net = network(backend)
    lines = dry_run_lines(spec, net)
    assert net.spawned == []
    text = "\n".join(lines)
    assert f'# topology = "replicas": 2 {backend} server(s) of 1 node(s) each (head; w1)' in text
    assert f". w1: replica w1 (w1) ready when http://{W1_IP}:8090/v1/completions streams a token" in text
    printed = [printed_argv(line) for line in lines if not line.startswith("#")]
    net = network(backend)
    up(spec, edges=net.edges(), first_token=token_when_listening(net, []))
    assert printed == [masked(p.argv) for p in net.spawned]
    assert [p.node for p in net.spawned] == ["local", "box2", "local"]
    down(spec, edges=net.edges())


def test_replicas_of_two_nodes_each_run_their_own_multi_node_launch(tmp_path: Path) -> None:
    spec = spec_of(tmp_path, "vllm", workers=3, topology="replicas:2", tensor_parallel_size=4)
    net = network("vllm", workers=3)
    plan = engine_plan(spec, gather_engine_facts(spec, net.edges()))
    assert [(r.name, r.nodes, r.url) for r in plan.replicas] == [
        ("head", ["head", "w1"], "http://127.0.0.1:8080"),
        ("w2", ["w2", "w3"], f"http://{W2_IP}:8090"),
    ]
    by_node = {p.node: p.argv for p in plan.processes}
    for node, rank, master, port in (("head", 0, HEAD_IP, 29501), ("w1", 1, HEAD_IP, 29501), ("w2", 0, W2_IP, 29502)):
        argv = by_node[node]
        assert argv[argv.index("--nnodes") + 1] == "2" and argv[argv.index("--node-rank") + 1] == str(rank)
        assert argv[argv.index("--master-addr") + 1] == master
        assert argv[argv.index("--master-port") + 1] == str(port)
    assert "--headless" in by_node["w1"] and "--headless" in by_node["w3"] and "--headless" not in by_node["w2"]
    assert [p.role for p in plan.processes] == ["vllm", "vllm_headless", "vllm", "vllm_headless"]


def test_auto_stays_one_server_over_every_node(tmp_path: Path) -> None:
    spec = spec_of(tmp_path, "vllm", topology="auto")
    plan = engine_plan(spec, gather_engine_facts(spec, network("vllm").edges()))
    assert plan.replicas == [] and [p.role for p in plan.processes] == ["vllm", "vllm_headless"]


@pytest.mark.parametrize(
    ("workers", "topology", "table", "expected"),
    [
        (2, "replicas:2", {}, "replicas of 2 node(s), but the spec has 3"),
        (1, "replicas:3", {}, "replicas of 3 node(s), but the spec has 2"),
        (1, "replicas", {"launcher": "ray"}, 'use vllm.launcher = "native"'),
        (1, "replicas", {"api_key": None}, "replica w1's server binds workers[w1].bind = '10.20.20.2'"),
    ],
)
def test_a_replicas_spec_the_engine_cannot_serve_is_one_line(
    tmp_path: Path, workers: int, topology: str, table: dict[str, Any], expected: str
) -> None:
    with pytest.raises(SpecError) as exc:
        spec_of(tmp_path, "vllm", workers=workers, topology=topology, **table)
    assert expected in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize("backend", ["vllm", "sglang"])
def test_supervisor_restarts_only_the_replica_whose_server_died(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    from splitserve.cluster import Event, Supervisor, read_supervisor_log

    spec = spec_of(tmp_path, backend)
    net = network(backend)
    asked: list[str] = []
    monkeypatch.setitem(kwdefaults(up), "first_token", token_when_listening(net, asked))
    monkeypatch.setitem(kwdefaults(restart_replica), "first_token", token_when_listening(net, asked))
    served: list[Any] = []

    def on_event(event: Event) -> None:
        if event.kind == "restarted":  # what `status` reads once w1 serves again
            state = read_state(tmp_path / "st")
            assert state is not None
            procs = [{"node": p.node, "alive": net.edges().node(p.host, None).alive(p.ref)} for p in state.processes]
            served.append((state, procs))
            sup.stop()

    sup = Supervisor(spec, edges=net.edges(), on_event=on_event)
    killed: list[int] = []

    def kill_w1() -> None:
        w1 = next(p for p in net.running() if p.node == "box2")
        killed.append(w1.pid)
        net.kill("box2", "vllm" if backend == "vllm" else "python", sig=9)

    sup.run(on_ready=lambda _state: net.after(2.0, kill_w1))
    head, w1, gw = net.spawned[:3]
    assert [p.node for p in net.spawned[3:]] == ["box2"], "only w1's server started again"
    again = net.spawned[3]
    assert again.argv == w1.argv and w1.pid == killed[0] and w1.exit_code == -9
    assert head.exit_code == gw.exit_code == -signal.SIGTERM, "they served until the supervisor stopped"
    ((state, procs),) = served
    assert state.phase == "ready"
    assert [(p.node, p.pid) for p in state.processes] == [("head", head.pid), ("w1", again.pid), ("gateway", gw.pid)]
    assert asked[-1] == f"http://{W1_IP}:8090", "w1 streamed a token before it counted as restarted"
    assert all(p["alive"] for p in procs)
    assert [r["health"] for r in replica_status(state, procs, probe=False)] == ["unknown", "unknown"], "none down"
    kinds = [(e["kind"], e["node"]) for e in read_supervisor_log(spec) if e["kind"] in ("died", "restart", "restarted")]
    assert kinds == [("died", "w1"), ("restarted", "w1")]
    assert sup.restarts == 1
    assert net.running() == [] and read_state(tmp_path / "st") is None


def test_a_dead_rank_restarts_its_group_of_two_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from splitserve.cluster import Supervisor

    spec = spec_of(tmp_path, "vllm", workers=3, topology="replicas:2", tensor_parallel_size=4)
    net = network("vllm", workers=3)
    monkeypatch.setitem(kwdefaults(up), "first_token", token_when_listening(net, []))
    monkeypatch.setitem(kwdefaults(restart_replica), "first_token", token_when_listening(net, []))
    sup = Supervisor(spec, edges=net.edges(), on_event=lambda e: sup.stop() if e.kind == "restarted" else None)
    sup.run(on_ready=lambda _state: net.after(2.0, lambda: net.kill("box4", "vllm", sig=9)))
    first = net.spawned[:5]
    assert [p.node for p in first] == ["local", "box2", "box3", "box4", "local"]
    again = net.spawned[5:]
    assert [(p.node, p.argv) for p in again] == [(p.node, p.argv) for p in first[2:4]], "w2's group, w2 first"
    assert first[2].exit_code == -signal.SIGTERM and first[3].exit_code == -9, "w2 stopped by the supervisor"
    assert all(p.exit_code == -signal.SIGTERM for p in (first[0], first[1], first[4])), "the other group served on"
    assert net.running() == []


def test_one_replica_gives_the_gateway_its_plain_url(tmp_path: Path) -> None:
    spec = spec_of(tmp_path, "sglang", workers=0)
    lines = dry_run_lines(spec, network("sglang", workers=0))
    gateway = printed_argv(next(ln for ln in reversed(lines) if not ln.startswith("#")))
    assert gateway[gateway.index("--engine") + 1] == "sglang+http://127.0.0.1:8080"
    assert lines[0] == '# topology = "replicas": 1 sglang server(s) of 1 node(s) each (head)'
