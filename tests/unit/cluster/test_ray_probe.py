"""The Ray probe's pure parts: what a node reports, the summary, waiting for the nodes."""

from __future__ import annotations

import json
from pathlib import Path

from splitserve.cluster._ray_probe import node_report, parse_args, summary, wait_for_nodes, write_json

NODES = [
    {"NodeID": "a", "Alive": True, "NodeManagerAddress": "10.0.0.1", "Resources": {"CPU": 1.0}},
    {"NodeID": "b", "Alive": False, "NodeManagerAddress": "10.0.0.2"},
    {"NodeID": "c", "Alive": True, "NodeManagerAddress": "10.0.0.3"},
]


def test_node_report_keeps_only_the_fixes_variables() -> None:
    env = {"NCCL_SOCKET_IFNAME": "eth1", "VLLM_HOST_IP": "10.0.0.1", "HOME": "/root"}
    report = node_report(env)
    assert report["env"] == {"NCCL_SOCKET_IFNAME": "eth1", "VLLM_HOST_IP": "10.0.0.1"}
    assert report["hostname"] and isinstance(report["pid"], int)


def test_summary_counts_alive_nodes_and_reports() -> None:
    s = summary("10.0.0.1:6379", 2, NODES, [{"ip": "10.0.0.1"}, {"ip": "10.0.0.3"}])
    assert s["alive_nodes"] == 2 and s["ok"] is True
    assert [n["address"] for n in s["nodes"]] == ["10.0.0.1", "10.0.0.3"]
    assert summary("x", 3, NODES, [])["ok"] is False


def test_wait_for_nodes_until_enough_or_timeout() -> None:
    now = [0.0]
    seen = [NODES[:1], NODES[:1], NODES]

    def listing() -> list[dict[str, object]]:
        return seen.pop(0) if len(seen) > 1 else seen[0]

    def sleep(s: float) -> None:
        now[0] += s

    got = wait_for_nodes(listing, 2, 10, sleep=sleep, clock=lambda: now[0])
    assert got is not None and len(got) == 2 and now[0] == 1.0
    assert wait_for_nodes(lambda: NODES[:1], 2, 3, sleep=sleep, clock=lambda: now[0]) is None


def test_write_json_and_args(tmp_path: Path) -> None:
    out = tmp_path / "d" / "r.json"
    write_json(out, {"ok": True})
    assert json.loads(out.read_text()) == {"ok": True} and not out.with_name("r.json.tmp").exists()
    args = parse_args(["--address", "h:1", "--expect-nodes", "3", "--out", str(out), "--node-ip-address", "h"])
    assert (args.address, args.expect_nodes, args.node_ip_address, args.timeout) == ("h:1", 3, "h", 300.0)
