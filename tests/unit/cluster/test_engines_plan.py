"""vLLM / SGLang plans as values: each fixture's spec and node facts give exactly the commands,
environment and notes its ``expected`` holds (tests/fixtures/plans/engines/*.json).

After a deliberate change to the plans, rewrite the fixtures with
``SPLITSERVE_UPDATE_FIXTURES=1 pytest tests/unit/cluster/test_engines_plan.py`` and read the diff.
"""

from __future__ import annotations

import json
import os
import tomllib
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from splitserve.cluster import parse_spec
from splitserve.cluster._engines_plan import (
    EngineFacts,
    EngineNode,
    engine_plan,
    fact_commands,
    node_facts,
    parse_gpu_list,
    parse_version,
)
from splitserve.cluster._link_facts import EndFacts, parse_ip_addr
from splitserve.cluster._preflight_engines import backend_checks

FIXTURES = Path(__file__).parents[2] / "fixtures" / "plans" / "engines"
CASES = sorted(FIXTURES.glob("*.json"))


def render(data: dict[str, Any]) -> dict[str, Any]:
    # a fixture gives its spec as data, or as the TOML a user writes
    spec = parse_spec(tomllib.loads(data["spec_toml"]) if "spec_toml" in data else data["spec"])
    facts = EngineFacts.from_dict(data["facts"])
    plan = engine_plan(spec, facts)
    replicas = {"replicas": [asdict(r) for r in plan.replicas]} if plan.replicas else {}
    return {
        **replicas,
        "endpoint": plan.endpoint,
        "probe_out": str(plan.probe_out) if plan.probe_out else None,
        "processes": [
            {
                "node": p.node,
                "role": p.role,
                "host": p.host,
                "argv": p.argv,
                "env": p.env,
                "bind": p.bind,
                "port": p.port,
                "log": str(p.log),
            }
            for p in plan.processes
        ],
        "notes": plan.notes,
        "checks": [r.as_dict() for r in backend_checks(spec, facts)],
    }


def test_there_are_fixtures_for_every_launch_style() -> None:
    names = {p.stem for p in CASES}
    assert {"vllm-native-tp2-2nodes", "vllm-ray-tp3-3nodes", "vllm-ray-probe-3nodes", "sglang-tp2-2nodes"} <= names
    assert len(CASES) >= 8


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_plan_matches_fixture(path: Path) -> None:
    data = json.loads(path.read_text())
    got = render(data)
    if os.environ.get("SPLITSERVE_UPDATE_FIXTURES") == "1":
        data["expected"] = got
        path.write_text(json.dumps(data, indent=2) + "\n")
    assert data["expected"], f"{path.name}: no expected plan (run with SPLITSERVE_UPDATE_FIXTURES=1 once)"
    assert got == data["expected"]


def load(name: str) -> dict[str, Any]:
    return dict(json.loads((FIXTURES / f"{name}.json").read_text()))


def procs(name: str) -> list[dict[str, Any]]:
    return list(render(load(name))["processes"])


def test_native_two_nodes_has_rendezvous_and_the_fixes() -> None:
    head, worker = procs("vllm-native-tp2-2nodes")
    assert head["argv"][1:3] == ["serve", head["argv"][2]]
    for flag in ("--nnodes", "--node-rank", "--master-addr", "--master-port"):
        assert flag in head["argv"] and flag in worker["argv"]
    assert "--headless" in worker["argv"] and "--headless" not in head["argv"]
    assert "--port" in head["argv"] and "--port" not in worker["argv"]
    assert worker["argv"][worker["argv"].index("--node-rank") + 1] == "1"
    for p in (head, worker):
        assert {"NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "UCX_NET_DEVICES", "VLLM_HOST_IP"} <= set(p["env"])
        assert p["argv"][p["argv"].index("--load-format") + 1] == "safetensors"
    assert head["env"]["VLLM_HOST_IP"] != worker["env"]["VLLM_HOST_IP"]


def test_ray_three_sparks_gets_the_three_forum_fixes() -> None:
    plan = render(load("vllm-ray-tp3-3nodes"))
    roles = [p["role"] for p in plan["processes"]]
    assert roles == ["ray_head", "ray_worker", "ray_worker", "vllm"]
    for p in plan["processes"][:3]:
        argv = p["argv"]
        assert argv[argv.index("--object-store-memory") + 1] == str(1024**3)
        assert p["env"]["RAY_memory_monitor_refresh_ms"] == "0"
        assert "--block" in argv
    vllm = plan["processes"][3]["argv"]
    assert vllm[vllm.index("--distributed-executor-backend") + 1] == "ray"
    assert vllm[vllm.index("--load-format") + 1] == "safetensors"
    notes = " ".join(plan["notes"])
    for fix in ("NCCL_SOCKET_IFNAME", "--object-store-memory", "RAY_memory_monitor_refresh_ms=0", "safetensors"):
        assert fix in notes


def test_probe_runs_instead_of_vllm_and_needs_no_gpus() -> None:
    plan = render(load("vllm-ray-probe-3nodes"))
    assert [p["role"] for p in plan["processes"]] == ["ray_head", "ray_worker", "ray_worker", "ray_probe"]
    probe = plan["processes"][-1]["argv"]
    assert probe[1:3] == ["-m", "splitserve.cluster._ray_probe"] and probe[probe.index("--expect-nodes") + 1] == "3"
    assert plan["endpoint"] == "" and plan["probe_out"]
    assert all(p["argv"][p["argv"].index("--num-gpus") + 1] == "0" for p in plan["processes"][:3])
    assert {r["status"] for r in plan["checks"] if r["check"] == "gpus"} == {"skip"}


def test_single_node_has_no_rendezvous_and_no_nic_variables() -> None:
    (p,) = procs("vllm-single-node")
    assert "--nnodes" not in p["argv"] and "NCCL_SOCKET_IFNAME" not in p["env"]


def test_sglang_dist_init_addr_on_every_rank() -> None:
    head, worker = procs("sglang-tp2-2nodes")
    for p, rank in ((head, "0"), (worker, "1")):
        argv = p["argv"]
        assert argv[1:3] == ["-m", "sglang.launch_server"]
        assert argv[argv.index("--node-rank") + 1] == rank
        assert argv[argv.index("--dist-init-addr") + 1] == "10.20.20.1:20000"
    assert "--port" in head["argv"] and "--port" not in worker["argv"]


# -- facts parsers ---------------------------------------------------------------------------

IP_JSON = json.dumps(
    [
        {"ifname": "lo", "mtu": 65536, "operstate": "UNKNOWN", "addr_info": [{"local": "127.0.0.1", "prefixlen": 8}]},
        {
            "ifname": "enp1s0f0np0",
            "mtu": 9000,
            "operstate": "UP",
            "addr_info": [{"local": "10.20.20.1", "prefixlen": 24}, {"local": "fe80::1", "prefixlen": 64}],
        },
    ]
)


def test_parsers_read_ip_nvidia_smi_and_versions() -> None:
    ifaces = parse_ip_addr(IP_JSON)
    assert [i.name for i in ifaces] == ["lo", "enp1s0f0np0"]
    found = EndFacts(interfaces=ifaces).on_subnet("10.20.20.2")
    assert found is not None and found[0].name == "enp1s0f0np0" and str(found[1].ip) == "10.20.20.1"
    assert parse_gpu_list("GPU 0: NVIDIA GB10 (UUID: GPU-1234)\n") == ("NVIDIA GB10",)
    assert parse_version("ray, version 2.60.0\n") == "2.60.0"
    assert parse_version("0.11.0\n") == "0.11.0"


def test_node_facts_from_command_outputs() -> None:
    spec = parse_spec({"backend": "vllm", "vllm": {"model": "m", "launcher": "ray"}})
    assert set(fact_commands(spec)) == {"engine", "nic", "gpus", "ray"}
    node = node_facts(
        "head",
        "10.20.20.1",
        {
            "engine": (1, ""),
            "nic": (0, IP_JSON),
            "gpus": (0, "GPU 0: NVIDIA GB10 (UUID: x)\n"),
            "ray": (0, "ray, version 2.60.0"),
        },
    )
    assert node == EngineNode(
        name="head",
        address="10.20.20.1",
        interface="enp1s0f0np0",
        mtu=9000,
        operstate="UP",
        gpus=1,
        gpu_names=("NVIDIA GB10",),
        engine_version=None,
        ray_version="2.60.0",
    )
    assert node.is_unified is True
