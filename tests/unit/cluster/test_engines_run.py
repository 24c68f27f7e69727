"""`up`, `down`, `status`, preflight and supervision of vLLM / SGLang / Ray deployments on fakes:
a :class:`FakeNetwork` whose nodes answer the facts script, fake ``ray start`` / ``vllm serve``
processes, the Ray probe's report written as the real probe would, and a fake clock."""

from __future__ import annotations

import json
import re
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from splitserve import ClusterError, NodeError
from splitserve.cluster import (
    Event,
    FakeNetwork,
    Program,
    Supervisor,
    cluster_state_dir,
    down,
    format_plan,
    gather_facts,
    parse_spec,
    plan_launch,
    read_state,
    read_supervisor_log,
    up,
)
from splitserve.cluster._engines_facts import (
    FACT_MARK,
    engine_preflight,
    facts_script,
    gather_engine_facts,
    parse_facts_output,
)

HEAD_IP, N2_IP, N3_IP = "10.99.0.1", "10.99.0.2", "10.99.0.3"


def ip_json(name: str, address: str, mtu: int = 1500) -> str:
    return json.dumps(
        [
            {
                "ifname": "lo",
                "mtu": 65536,
                "operstate": "UNKNOWN",
                "addr_info": [{"local": "127.0.0.1", "prefixlen": 8}],
            },
            {"ifname": name, "mtu": mtu, "operstate": "UP", "addr_info": [{"local": address, "prefixlen": 24}]},
        ]
    )


def facts_output(nic: str, *, engine: str | None = None, ray: str | None = "2.60.0", gpus: int = 0) -> bytes:
    def section(key: str, rc: int, out: str) -> str:
        return f"{FACT_MARK}{key}\n{out}\n@@splitserve-rc {rc}\n"

    text = section("nic", 0, nic)
    text += section("engine", 0, engine) if engine else section("engine", 1, "")
    text += section("ray", 0, f"ray, version {ray}") if ray else section("ray", 127, "")
    lines = "\n".join(f"GPU {i}: NVIDIA GB10 (UUID: GPU-{i})" for i in range(gpus))
    text += section("gpus", 0, lines) if gpus else section("gpus", 127, "")
    text += section("gds", 1, "")
    return text.encode()


def answer(net: FakeNetwork, host: str, output: bytes) -> None:
    net.node(host).answers.append((FACT_MARK, subprocess.CompletedProcess(["sh"], 0, output, b"")))


def probe_spec(tmp_path: Path, **vllm: Any) -> Any:
    return parse_spec(
        {
            "name": "nsray",
            "backend": "vllm",
            "state_dir": str(tmp_path / "st"),
            "workers": [
                {"name": "n2", "host": "box2", "bind": N2_IP, "workdir": str(tmp_path / "n2")},
                {"name": "n3", "host": "box3", "bind": N3_IP, "workdir": str(tmp_path / "n3")},
            ],
            "gateway": {"enabled": False},
            "supervise": {"backoff_initial": 1, "backoff_max": 4, "poll_seconds": 0.5},
            "vllm": {
                "model": "probe",
                "launcher": "ray",
                "ray_probe": True,
                "python": "/venv/bin/python",
                "ray": {"num_cpus": 1, "object_store_memory": "100MiB"},
                **vllm,
            },
        }
    )


def ray_network(probe_after: float = 3.0, nodes: int = 3) -> FakeNetwork:
    """Three nodes answering the facts script; ``ray start --head`` opens its port after 1 s; the
    probe writes its report ``probe_after`` seconds after it starts, as the real one does."""
    net = FakeNetwork()
    answer(net, "local", facts_output(ip_json("veth-head", HEAD_IP)))
    answer(net, "box2", facts_output(ip_json("veth-n2", N2_IP)))
    answer(net, "box3", facts_output(ip_json("veth-n3", N3_IP)))
    net.program("ray", Program(listen_after=1.0))

    def on_spawn(proc: Any) -> None:
        if "splitserve.cluster._ray_probe" in proc.argv:
            out = proc.argv[proc.argv.index("--out") + 1]
            report = {
                "ok": True,
                "alive_nodes": nodes,
                "expected_nodes": 3,
                "reports": [{"hostname": h, "env": {"NCCL_SOCKET_IFNAME": i}} for h, i in (("h", "veth-head"),)],
            }
            net.after(probe_after, lambda: net.node("local").write_file(out, json.dumps(report).encode()))

    net.on_spawn.append(on_spawn)
    return net


def role_of(proc: Any) -> str:
    argv = proc.argv
    if "splitserve.cluster._ray_probe" in argv:
        return "probe"
    if Path(argv[0]).name == "ray":
        return "ray_head" if "--head" in argv else f"ray_worker@{proc.node}"
    return Path(argv[0]).name


def test_facts_script_round_trip() -> None:
    script = facts_script({"nic": ["ip", "-j", "addr", "show"], "gpus": ["nvidia-smi", "-L"]})
    assert "ip -j addr show" in script and "nvidia-smi -L" in script
    out = parse_facts_output(facts_output(ip_json("eth1", "10.0.0.1"), gpus=2).decode())
    assert out["gpus"][0] == 0 and out["gpus"][1].count("GB10") == 2
    assert out["engine"] == (1, "") and json.loads(out["nic"][1])[1]["ifname"] == "eth1"


def test_gather_facts_finds_head_address_from_the_workers_subnet(tmp_path: Path) -> None:
    net = ray_network()
    facts = gather_engine_facts(probe_spec(tmp_path), net.edges())
    head = facts.node("head")
    assert (head.address, head.interface, head.ray_version, head.python) == (
        HEAD_IP,
        "veth-head",
        "2.60.0",
        "/venv/bin/python",
    )
    assert facts.node("n3").interface == "veth-n3"
    assert "/venv/bin/ray --version" in net.node("box2").commands[0]


def test_up_probe_starts_ray_in_order_waits_for_the_report_and_records_every_rank(tmp_path: Path) -> None:
    spec = probe_spec(tmp_path)
    net = ray_network()
    events: list[Event] = []
    state = up(spec, on_event=events.append, edges=net.edges())
    assert state.phase == "ready"
    assert [role_of(p) for p in net.spawned] == ["ray_head", "ray_worker@box2", "ray_worker@box3", "probe"]
    head_start = net.spawned[0].started
    assert all(p.started >= head_start + 1.0 for p in net.spawned[1:]), "workers join once the GCS port answers"
    assert [(p.node, p.role) for p in state.processes] == [
        ("head", "ray_head"),
        ("n2", "ray_worker"),
        ("n3", "ray_worker"),
        ("head", "ray_probe"),
    ]
    for proc in net.spawned[1:3]:
        env = proc.env
        assert env["RAY_memory_monitor_refresh_ms"] == "0" and env["NCCL_SOCKET_IFNAME"].startswith("veth-n")
        assert env["VLLM_HOST_IP"] in (N2_IP, N3_IP)
    assert state.extra["probe"]["alive_nodes"] == 3 and state.extra["ray_address"] == f"{HEAD_IP}:6379"
    assert state.endpoint == "" and state.engine == "ray 2.60.0"
    kinds = [e.kind for e in events]
    assert kinds.count("fix") >= 3 and "ray_joined" in kinds and kinds[-1] == "ready"
    on_disk = read_state(cluster_state_dir(spec))
    assert on_disk is not None and len(on_disk.processes) == 4

    stopped = down(spec, edges=net.edges())
    assert stopped == ["head", "n2", "n3", "head"]  # the probe, the Ray workers, the Ray head last
    terms = [role_of(p) for _t, p, sig in net.signals if sig == signal.SIGTERM]
    assert terms == ["probe", "ray_worker@box2", "ray_worker@box3", "ray_head"]
    assert net.running() == [] and read_state(cluster_state_dir(spec)) is None


def test_a_worker_that_never_joins_fails_up_naming_the_wait_and_stops_everything(tmp_path: Path) -> None:
    spec = probe_spec(tmp_path).model_copy(update={"load_timeout": 30.0})
    net = ray_network(nodes=2)
    with pytest.raises(NodeError, match=r"head: the Ray probe did not report 3 nodes within 30 s"):
        up(spec, edges=net.edges())
    assert net.running() == [] and read_state(cluster_state_dir(spec)) is None


def test_a_rank_that_dies_while_joining_is_named(tmp_path: Path) -> None:
    spec = probe_spec(tmp_path)
    net = ray_network(probe_after=20.0)
    net.on_spawn.append(
        lambda p: net.after(2.0, lambda: net.end(p, -9)) if "--address" in p.argv and p.node == "box3" else None
    )
    with pytest.raises(NodeError, match=r"n3: ray start \(a worker node\) was killed by signal 9 while the Ray nodes"):
        up(spec, edges=net.edges())
    assert net.running() == []


def test_preflight_failures_refuse_up_before_anything_starts(tmp_path: Path) -> None:
    spec = probe_spec(tmp_path)
    net = ray_network()
    net.node("box3").answers.clear()
    answer(net, "box3", facts_output(ip_json("veth-n3", N3_IP), ray="2.59.0"))
    answer(net, "local", b"")  # unused: the first answer wins
    with pytest.raises(NodeError, match=r"n3: preflight ray: ray 2.59.0 here, 2.60.0 on the other nodes"):
        up(spec, edges=net.edges())
    assert net.spawned == []
    rows = {(r.check, r.node): r for r in engine_preflight(spec, net.edges())}
    assert rows[("ray", "n3")].status == "fail" and rows[("ssh", "n2")].status == "pass"
    assert rows[("ports", "head")].status == "pass" and rows[("nic", "n2")].message.startswith("veth-n2")


def test_a_taken_ray_port_is_refused(tmp_path: Path) -> None:
    net = ray_network()
    net.taken_ports.add((HEAD_IP, 6379))
    with pytest.raises(NodeError, match=r"head: port 6379 on 10.99.0.1 is already in use by another process"):
        up(probe_spec(tmp_path), edges=net.edges())


def test_dry_run_lists_the_fixes_and_every_command(tmp_path: Path) -> None:
    spec = probe_spec(tmp_path)
    net = ray_network()
    text = format_plan(plan_launch(spec, gather_facts(spec, edges=net.edges())))
    assert re.search(r"^# fix: NCCL_SOCKET_IFNAME", text, re.M) and "RAY_memory_monitor_refresh_ms=0" in text
    assert "ray start --head --node-ip-address 10.99.0.1" in text and "--object-store-memory 104857600" in text
    assert (
        re.search(r"^# \d+\. head: start the Ray probe on local$", text, re.M) and "says every node (3) joined" in text
    )
    assert re.search(r"^# \d+\. head: wait until Ray's GCS port 10.99.0.1:6379 answers", text, re.M)
    assert net.spawned == []


def native_spec(tmp_path: Path, gateway: bool = True) -> Any:
    return parse_spec(
        {
            "name": "sparks",
            "backend": "vllm",
            "state_dir": str(tmp_path / "st"),
            "workers": [{"name": "spark2", "host": "spark2", "bind": "10.20.20.2", "devices": ["CUDA0"]}],
            "head": {"devices": ["CUDA0"]},
            "gateway": {"enabled": gateway, "port": 8100},
            "vllm": {
                "model": "Qwen/Qwen3-0.6B",
                "tensor_parallel_size": 2,
                "python": "/venv/bin/python",
                "api_key": "engine-key",
            },
        }
    )


def native_network() -> FakeNetwork:
    net = FakeNetwork()
    answer(net, "local", facts_output(ip_json("enp1s0f0np0", "10.20.20.1", 9000), engine="0.11.0", gpus=1))
    answer(net, "spark2", facts_output(ip_json("enp1s0f0np0", "10.20.20.2", 9000), engine="0.11.0", gpus=1))
    net.program("vllm", Program(listen_after=5.0))
    return net


def test_up_native_waits_for_a_streamed_token_then_starts_the_gateway(tmp_path: Path) -> None:
    spec = native_spec(tmp_path)
    net = native_network()
    asked: list[tuple[str, str, str | None]] = []

    def token(url: str, model: str, key: str | None) -> str | None:
        asked.append((url, model, key))
        return "Hi" if net.listener("127.0.0.1", 8080) is not None else None

    state = up(spec, edges=net.edges(), first_token=token)
    assert state.phase == "ready" and state.load_seconds is not None and state.load_seconds >= 5.0
    assert asked[-1] == ("http://127.0.0.1:8080", "Qwen/Qwen3-0.6B", "engine-key") and len(asked) > 1
    head, rank1, gw = net.spawned
    assert "--headless" in rank1.argv and rank1.node == "spark2"
    assert gw.argv[gw.argv.index("--engine") + 1] == "vllm+http://127.0.0.1:8080"
    assert gw.env["SPLITSERVE_ENGINE_API_KEY"] == "engine-key" and "engine-key" not in " ".join(gw.argv)
    assert head.env["VLLM_API_KEY"] == "engine-key" and "VLLM_API_KEY" not in rank1.env
    assert state.endpoint == "http://127.0.0.1:8100" and state.engine == "vllm 0.11.0"
    assert [p.role for p in state.processes] == ["vllm", "vllm_headless", "gateway"]
    assert down(spec, edges=net.edges()) == ["gateway", "head", "spark2"]


def test_a_dead_rank_during_load_fails_up_with_its_name(tmp_path: Path) -> None:
    spec = native_spec(tmp_path, gateway=False)
    net = native_network()
    net.program("vllm", Program(listen_after=None))
    net.on_spawn.append(lambda p: net.after(3.0, lambda: net.end(p, 1)) if "--headless" in p.argv else None)
    with pytest.raises(NodeError, match=r"spark2: vllm serve --headless exited with code 1 during load"):
        up(spec, edges=net.edges(), first_token=lambda u, m, k: None)
    assert net.running() == []


def test_supervisor_notices_a_killed_ray_worker_and_restarts_everything_in_order(tmp_path: Path) -> None:
    spec = probe_spec(tmp_path)
    net = ray_network()
    sup = Supervisor(spec, edges=net.edges())
    readies: list[list[int]] = []

    def on_ready(state: Any) -> None:
        readies.append([p.pid for p in state.processes])
        if len(readies) == 1:  # a raylet dies: `ray start --block` on box3 exits 1
            net.after(2.0, lambda: net.kill("box3", "ray", sig=9))
        else:
            sup.stop()

    sup.run(on_ready=on_ready)
    assert len(readies) == 2 and not set(readies[0]) & set(readies[1]), "every rank was started again"
    log = read_supervisor_log(spec)
    died = [e for e in log if e["kind"] == "died"]
    assert died[0]["node"] == "n3" and "ray start (a worker node) was killed by signal 9" in str(died[0]["message"])
    assert any(e["kind"] == "restarting" for e in log)
    second = [role_of(p) for p in net.spawned[4:8]]
    assert second == ["ray_head", "ray_worker@box2", "ray_worker@box3", "probe"]
    assert net.running() == [] and read_state(cluster_state_dir(spec)) is None


def test_an_unreachable_worker_is_named(tmp_path: Path) -> None:
    net = ray_network()
    net.unreachable.add("box2")
    with pytest.raises(NodeError, match=r"n2: cannot gather its facts: box2: ssh failed"):
        up(probe_spec(tmp_path), edges=net.edges())
    rows = engine_preflight(probe_spec(tmp_path), net.edges())
    assert [(r.check, r.status) for r in rows if r.node == "n2"] == [("ssh", "fail")]


def test_no_facts_no_head_address(tmp_path: Path) -> None:
    net = ray_network()
    net.node("local").answers.clear()
    answer(net, "local", facts_output(ip_json("eth0", "192.168.1.5")))
    with pytest.raises(ClusterError, match=r"vllm.head_bind: no address of this machine is on the subnet"):
        gather_engine_facts(probe_spec(tmp_path), net.edges())
