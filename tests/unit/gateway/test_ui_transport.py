"""The live page says each RPC worker's transport (RDMA with its MTU, or TCP with the cause), with
the RDMA check's warnings, as `status` does."""

from __future__ import annotations

from pathlib import Path

from splitserve.cluster import parse_transport
from splitserve.cluster._state import ClusterState, ProcessRecord
from splitserve.gateway._ui import ClusterReader
from splitserve.gateway._ui_state import History, Snapshot, assemble

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "rpc_transport"


def _proc(node: str, role: str, port: int, log: str = "/nonexistent.log") -> ProcessRecord:
    return ProcessRecord(
        node=node, role=role, host="local", pid=1, start_ticks=1, bind="127.0.0.1", port=port, log=log, argv=[]
    )


def _state(*procs: ProcessRecord) -> ClusterState:
    return ClusterState(
        name="demo",
        spec_file=None,
        model="/m.gguf",
        endpoint="http://127.0.0.1:8080",
        engine="cpu",
        phase="ready",
        started_at=1.0,
        ready_at=2.0,
        processes=list(procs),
    )


def test_worker_rows_carry_their_transport_and_the_head_none() -> None:
    rdma = parse_transport((FIX / "rdma_mtu1024.log").read_text()).as_dict()
    tcp = parse_transport((FIX / "tcp_build_without_rdma.log").read_text()).as_dict()
    snap = Snapshot(
        now=10.0,
        state=_state(_proc("w1", "rpc", 50052), _proc("w2", "rpc", 50053), _proc("head", "server", 8080)),
        transports={"w1": rdma, "w2": tcp},
    )
    nodes = {n["node"]: n for n in assemble(snap, History())["nodes"]}
    assert (
        nodes["w1"]["transport"]["text"] == "RDMA (mtu 1024)" and "mtu 9000" in nodes["w1"]["transport"]["warnings"][0]
    )
    assert nodes["w2"]["transport"]["text"] == "TCP (engine built without RDMA)"
    assert nodes["head"]["transport"] is None


def test_the_reader_reads_a_live_workers_log(tmp_path: Path) -> None:
    import os

    from splitserve._node import start_ticks

    log = tmp_path / "w1.log"
    log.write_text((FIX / "tcp_build_without_rdma.log").read_text())
    me = ProcessRecord(
        node="w1",
        role="rpc",
        host="local",
        pid=os.getpid(),  # a live process standing in for the worker
        start_ticks=start_ticks(os.getpid()),
        bind="127.0.0.1",
        port=50052,
        log=str(log),
        argv=[],
    )
    dead = _proc("w2", "rpc", 50053)
    reader = ClusterReader(8080, "http://127.0.0.1:8080")
    got = reader._read_transports(_state(me, dead), now=100.0)
    assert set(got) == {"w1"} and got["w1"]["text"] == "TCP (engine built without RDMA)"
