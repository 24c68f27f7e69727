"""A node's RDMA devices read from sysfs (fake trees in tmp dirs, read by the real shell script),
and the warning when a worker that could use RDMA ended on TCP, with its cause."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from splitserve._node import LocalNode, ProcessRef
from splitserve.cluster._rdma_node import (
    RDMA_LOCKED_BYTES,
    RdmaPort,
    WorkerRdmaFacts,
    address_gid,
    check_transport,
    gid_for_address,
    parse_environ,
    parse_memlock,
    read_rdma_ports,
    spark_port,
    worker_facts,
    write_fake_sysfs,
)
from splitserve.cluster._transport_log import TransportReading, parse_transport

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "rpc_transport"
BIND = "192.168.100.2"


def spark(tmp_path: Path, mtu: int = 4096, address: str = BIND) -> Path:
    """Both x4 halves of a Spark's QSFP port; the bind address on the first."""
    return write_fake_sysfs(
        tmp_path / "root",
        [
            spark_port("rocep1s0f0", "enp1s0f0np0", address, mtu),
            spark_port("roceP2p1s0f0", "enP2p1s0f0np0", "", mtu),
        ],
    )


def ports_of(root: Path) -> list[RdmaPort]:
    return read_rdma_ports(LocalNode(), str(root))


def tcp(
    cause: str | None = "no RDMA device with a GID for the bind address", rdma_build: bool | None = True
) -> TransportReading:
    return TransportReading(kind="TCP", rdma_build=rdma_build, cause=cause)


def test_the_sysfs_script_reads_ports_mtu_and_gids(tmp_path: Path) -> None:
    ports = ports_of(spark(tmp_path))
    assert [p.name for p in ports] == ["roceP2p1s0f0 port 1", "rocep1s0f0 port 1"]
    p = ports[1]
    assert (p.active_mtu, p.state, p.link_layer, p.rate) == (4096, "4: ACTIVE", "Ethernet", "200 Gb/sec (4X HDR)")
    assert [(g.index, g.type, g.netdev) for g in p.gids][2:] == [
        (2, "IB/RoCE v1", "enp1s0f0np0"),
        (3, "RoCE v2", "enp1s0f0np0"),
    ]
    assert len(ports[0].gids) == 2  # link-local only; the empty (all-zero) entries are left out


def test_no_rdma_device_is_no_ports(tmp_path: Path) -> None:
    assert ports_of(tmp_path / "empty") == []


def test_the_engines_gid_choice_ipv4_mapped_and_roce_v2_first(tmp_path: Path) -> None:
    assert address_gid("192.168.100.2") == "0000:0000:0000:0000:0000:ffff:c0a8:6402"
    assert address_gid("worker-1") is None
    ports = ports_of(spark(tmp_path))
    port, gid = gid_for_address(ports, BIND) or (None, None)
    assert port is not None and gid is not None
    assert (port.device, gid.index, gid.type) == ("rocep1s0f0", 3, "RoCE v2")
    assert gid_for_address(ports, BIND, {"GGML_RDMA_DEV": "roceP2p1s0f0"}) is None
    assert gid_for_address(ports, "10.0.0.9") is None


def test_tcp_with_a_gid_for_the_bind_address_is_a_warning_naming_the_cause(tmp_path: Path) -> None:
    facts = WorkerRdmaFacts(ports=ports_of(spark(tmp_path)), memlock=8 << 20)
    r = tcp()
    (w,) = check_transport(r, facts, BIND)
    assert "ended on TCP although rocep1s0f0 port 1 GID 3 (RoCE v2, enp1s0f0np0)" in w and w in r.warnings


@pytest.mark.parametrize(
    ("reading", "facts", "engine_rdma", "cause"),
    [
        (tcp(), {"env": {"GGML_RPC_NO_RDMA": "1"}}, "on", "GGML_RPC_NO_RDMA is set"),
        (tcp("engine built without RDMA", False), {}, None, "no RDMA in the engine build"),
        (tcp(), {}, "off", "no RDMA in the engine build"),
        (tcp(), {"memlock": 64 * 1024}, "on", "memlock limit 64 KiB (ulimit -l)"),
        (tcp(), {"env": {"GGML_RDMA_GID": "1"}}, "on", "GID mismatch: GGML_RDMA_GID=1"),
        (tcp("RDMA activation failed (GID or route mismatch ...)"), {}, "on", "RDMA activation failed: GID mismatch"),
        (tcp("the other end offered no RDMA"), {}, "on", "the head offered no RDMA"),
    ],
)
def test_each_cause(
    tmp_path: Path, reading: TransportReading, facts: dict[str, object], engine_rdma: str | None, cause: str
) -> None:
    f = WorkerRdmaFacts(ports=ports_of(spark(tmp_path)), **facts)  # type: ignore[arg-type]
    (w,) = check_transport(reading, f, BIND, engine_rdma)
    assert w.split(": ", 1)[1].startswith(cause), w


def test_unlimited_memlock_is_not_a_cause(tmp_path: Path) -> None:
    f = WorkerRdmaFacts(ports=ports_of(spark(tmp_path)), memlock=-1)
    (w,) = check_transport(tcp(), f, BIND, "on")
    assert "memlock" not in w.split(": ", 1)[1].split("(")[0]


def test_rdma_active_or_no_device_is_no_warning(tmp_path: Path) -> None:
    rdma = parse_transport((FIX / "rdma_active.log").read_text())
    assert check_transport(rdma, WorkerRdmaFacts(ports=ports_of(spark(tmp_path))), BIND) == []
    assert check_transport(tcp(), WorkerRdmaFacts(), BIND) == []


def test_roce_mtu_1024_is_a_warning_naming_the_fix(tmp_path: Path) -> None:
    f = WorkerRdmaFacts(ports=ports_of(spark(tmp_path, mtu=1024)))
    warnings = check_transport(TransportReading(kind="unknown", rdma_build=True), f, BIND)
    assert warnings == [
        "RoCE MTU 1024 on rocep1s0f0 port 1: the interface MTU is 1500; set enp1s0f0np0's MTU to 9000 on "
        "both ends (ip link set enp1s0f0np0 mtu 9000) so RoCE runs at 4096"
    ]


def test_a_bind_address_off_the_rdma_link_is_a_warning(tmp_path: Path) -> None:
    f = WorkerRdmaFacts(ports=ports_of(spark(tmp_path)))
    (w,) = check_transport(tcp(), f, "10.0.0.9")
    assert "no GID for the bind address 10.0.0.9" in w and "rocep1s0f0 port 1" in w


def test_proc_limits_and_environ() -> None:
    limits = "Max open files            1024                 524288               files\n"
    assert (
        parse_memlock(limits + "Max locked memory         8388608              8388608              bytes\n") == 8 << 20
    )
    assert parse_memlock("Max locked memory         unlimited            unlimited            bytes\n") == -1
    assert parse_memlock(limits) is None
    assert RDMA_LOCKED_BYTES == 25 * 256 * 1024
    assert parse_environ(b"A=1\0GGML_RPC_NO_RDMA=1\0junk\0") == {"A": "1", "GGML_RPC_NO_RDMA": "1"}


def test_worker_facts_read_the_process_of_this_machine(tmp_path: Path) -> None:
    facts = worker_facts(LocalNode(), ProcessRef(os.getpid(), None), str(spark(tmp_path)))
    assert len(facts.ports) == 2 and facts.env.get("PATH") == os.environ.get("PATH")
    assert facts.memlock is not None


# --- preflight's rdma row: the same causes, before anything starts ----------------------------


def test_preflight_row_ready_and_each_problem(tmp_path: Path) -> None:
    from splitserve.cluster._rdma_node import parse_ulimit_l, rdma_row

    ports = ports_of(spark(tmp_path))
    ok = rdma_row("w1", BIND, ports, 8 << 20, {}, "on")
    assert (ok.check, ok.status) == ("rdma", "pass")
    assert ok.message == f"RDMA ready on rocep1s0f0 port 1 GID 3 (RoCE v2) for {BIND}, mtu 4096"
    off = rdma_row("w1", BIND, ports, parse_ulimit_l("64\n"), {"GGML_RPC_NO_RDMA": "1"}, "off")
    assert off.status == "warn"
    assert off.message.startswith("GGML_RPC_NO_RDMA is set")
    assert "the engine has no RDMA transport (rdma: off)" in off.message and "memlock limit 64 KiB" in off.message
    assert "libibverbs-dev" in off.fix and "--ulimit memlock=-1" in off.fix
    mtu = rdma_row("w1", BIND, ports_of(spark(tmp_path / "m", mtu=1024)), -1, {}, "on")
    assert mtu.status == "warn" and "RoCE MTU 1024" in mtu.message and "mtu 9000" in mtu.fix
    gid = rdma_row("w1", BIND, ports, None, {"GGML_RDMA_GID": "1"}, "on")
    assert "GID mismatch: GGML_RDMA_GID=1" in gid.message and gid.fix == "GGML_RDMA_GID=3"
    off_link = rdma_row("w1", "10.0.0.9", ports, None, {}, "on")
    assert off_link.status == "warn" and "no GID for the bind address 10.0.0.9" in off_link.message
    none = rdma_row("w1", BIND, [], None, {}, "off")
    assert none.status == "pass" and none.message.startswith("no RDMA device")
    assert parse_ulimit_l("unlimited\n") == -1 and parse_ulimit_l("8192") == 8 << 20 and parse_ulimit_l("") is None


def test_preflight_rows_per_reachable_worker() -> None:
    from splitserve.cluster import parse_spec
    from splitserve.cluster._rdma_node import preflight_rdma_rows

    spec = parse_spec(
        {
            "model": "/m.gguf",
            "workers": [
                {"name": "w1", "host": "local", "bind": "127.0.0.1"},
                {"name": "w2", "host": "local", "bind": "127.0.0.2", "port": 50053},
            ],
        }
    )
    rows = preflight_rdma_rows(spec, {}, lambda w: w.name == "w1")
    assert [r.node for r in rows] == ["w1"]
    if not Path("/sys/class/infiniband").is_dir():  # this machine: no RDMA device
        assert rows[0].status == "pass" and rows[0].message.startswith("no RDMA device")
