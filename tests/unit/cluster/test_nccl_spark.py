"""The Spark NCCL block of the vLLM / SGLang fixes, derived from each node's RDMA facts (a fake
sysfs tree read by the real script): both HCAs in NCCL_IB_HCA, merged, the GID index of the
node's address, no GPUDirect RDMA on unified memory; shown in --dry-run."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from splitserve._node import LocalNode
from splitserve.cluster import LaunchFacts, format_plan, parse_spec, plan_launch
from splitserve.cluster._engines_plan import EngineFacts, engine_plan, node_facts, rdma_facts
from splitserve.cluster._rdma_node import RdmaPort, spark_port, sysfs_script, write_fake_sysfs

FIXTURES = Path(__file__).parents[2] / "fixtures" / "plans" / "engines"
NIC = json.dumps(
    [
        {"ifname": "enp1s0f0np0", "mtu": 9000, "operstate": "UP", "addr_info": [{"local": "ADDR", "prefixlen": 24}]},
    ]
)


def sysfs_output(tmp_path: Path, name: str, ports: list[RdmaPort]) -> str:
    root = write_fake_sysfs(tmp_path / name, ports)
    return LocalNode().run(sysfs_script(str(root))).stdout.decode()


def spark_node(tmp_path: Path, name: str, address: str, gpu: str = "NVIDIA GB10", halves: int = 2) -> Any:
    """A Spark with its QSFP port 0 cabled: both x4 halves up, the address on the first."""
    ports = [spark_port("rocep1s0f0", "enp1s0f0np0", address)]
    if halves == 2:
        ports.append(spark_port("roceP2p1s0f0", "enP2p1s0f0np0", ""))
    ports.append(RdmaPort("rocep1s0f1", 1, 1024, "1: DOWN", "Ethernet", "10 Gb/sec (1X QDR)"))  # port 1, no cable
    outputs = {
        "nic": (0, NIC.replace("ADDR", address)),
        "gpus": (0, f"GPU 0: {gpu} (UUID: GPU-1)\n"),
        "engine": (0, "0.33.0\n"),
        "rdma": (0, sysfs_output(tmp_path, name, ports)),
    }
    return node_facts(name, address, outputs, "/opt/venv/bin/python", gds=False)


def spec(backend: str = "vllm") -> Any:
    data = copy.deepcopy(json.loads((FIXTURES / "vllm-native-tp2-2nodes.json").read_text())["spec"])
    if backend == "sglang":
        data["backend"] = "sglang"
        data["sglang"] = data.pop("vllm")
        data["sglang"].pop("gpu_memory_utilization")
        data["sglang"].pop("max_model_len")
        data["sglang"].pop("served_model_name")
    return parse_spec(data)


def test_node_facts_read_the_active_hcas_and_the_gid_of_the_address(tmp_path: Path) -> None:
    n = spark_node(tmp_path, "head", "10.20.20.1")
    assert n.rdma_hcas == ("roceP2p1s0f0:1", "rocep1s0f0:1")  # port 1's HCA is down: left out
    assert n.rdma_gid_index == 3 and n.is_unified
    assert rdma_facts(None, "10.20.20.1") == ((), None)


def test_two_sparks_get_the_block_in_env_and_notes(tmp_path: Path) -> None:
    facts = EngineFacts((spark_node(tmp_path, "head", "10.20.20.1"), spark_node(tmp_path, "spark2", "10.20.20.2")))
    plan = engine_plan(spec(), facts)
    for p in plan.processes:
        assert p.env["NCCL_IB_HCA"] == "=roceP2p1s0f0:1,rocep1s0f0:1"
        assert p.env["NCCL_IB_MERGE_NICS"] == "1"
        assert p.env["NCCL_IB_GID_INDEX"] == "3"
        assert p.env["NCCL_NET_GDR_LEVEL"] == "0"
        assert p.env["NCCL_SOCKET_IFNAME"] == "enp1s0f0np0"
    notes = "\n".join(plan.notes)
    assert (
        "NCCL_IB_HCA = every RDMA port that is up, so NCCL uses both HCAs (head: =roceP2p1s0f0:1,rocep1s0f0:1" in notes
    )
    assert (
        "NCCL_IB_GID_INDEX = the RoCE v2 GID of the node's address, read from /sys/class/infiniband (head: 3" in notes
    )
    assert "NCCL_NET_GDR_LEVEL=0 on unified-memory nodes (GB10)" in notes
    shown = format_plan(plan_launch(spec(), LaunchFacts(engines={}, nodes=facts)))
    assert "NCCL_IB_HCA==roceP2p1s0f0:1,rocep1s0f0:1 NCCL_IB_MERGE_NICS=1" in shown  # the value starts with =
    assert "NCCL_IB_GID_INDEX=3" in shown and "NCCL_NET_GDR_LEVEL=0" in shown


def test_sglang_gets_it_too(tmp_path: Path) -> None:
    facts = EngineFacts((spark_node(tmp_path, "head", "10.20.20.1"), spark_node(tmp_path, "spark2", "10.20.20.2")))
    plan = engine_plan(spec("sglang"), facts)
    assert {p.env.get("NCCL_IB_GID_INDEX") for p in plan.processes} == {"3"}


def test_one_hca_no_merge_and_a_discrete_gpu_keeps_gpudirect(tmp_path: Path) -> None:
    facts = EngineFacts(
        (
            spark_node(tmp_path, "head", "10.20.20.1", gpu="NVIDIA H100 80GB HBM3", halves=1),
            spark_node(tmp_path, "spark2", "10.20.20.2", gpu="NVIDIA H100 80GB HBM3", halves=1),
        )
    )
    env = engine_plan(spec(), facts).processes[0].env
    assert env["NCCL_IB_HCA"] == "=rocep1s0f0:1" and env["NCCL_IB_GID_INDEX"] == "3"
    assert "NCCL_IB_MERGE_NICS" not in env and "NCCL_NET_GDR_LEVEL" not in env


def test_no_gid_for_the_address_is_a_note_and_no_index(tmp_path: Path) -> None:
    head = spark_node(tmp_path, "head", "10.20.20.1")
    other = spark_node(tmp_path, "spark2", "10.20.20.2")
    facts = EngineFacts((head, type(other)(**{**other.__dict__, "rdma_gid_index": None})))
    plan = engine_plan(spec(), facts)
    worker = next(p for p in plan.processes if p.node == "spark2")
    assert "NCCL_IB_GID_INDEX" not in worker.env and "NCCL_IB_HCA" in worker.env
    assert any(n.startswith("fix not written on spark2: no RDMA GID holds 10.20.20.2") for n in plan.notes)


def test_no_rdma_ports_no_block_and_the_user_env_wins(tmp_path: Path) -> None:
    data = json.loads((FIXTURES / "vllm-native-tp2-2nodes.json").read_text())
    plain = engine_plan(spec(), EngineFacts.from_dict(data["facts"]))
    assert not any(k.startswith("NCCL_IB") for p in plain.processes for k in p.env)
    s = spec()
    s.vllm.env["NCCL_IB_GID_INDEX"] = "1"  # type: ignore[union-attr]
    facts = EngineFacts((spark_node(tmp_path, "head", "10.20.20.1"), spark_node(tmp_path, "spark2", "10.20.20.2")))
    assert {p.env["NCCL_IB_GID_INDEX"] for p in engine_plan(s, facts).processes} == {"1"}


def test_facts_round_trip_through_json(tmp_path: Path) -> None:
    facts = EngineFacts((spark_node(tmp_path, "head", "10.20.20.1"),))
    again = EngineFacts.from_dict(json.loads(json.dumps(facts.as_dict())))
    assert again == facts
