"""The RPC transport (RDMA or TCP, and why) read from the pinned engine's log lines."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from splitserve._paths import sources_dir
from splitserve.cluster._transport_log import _ACTIVATED, _BANNER, _FAILED, _PROBED, _WC_ERROR, parse_transport

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "rpc_transport"


def read(name: str) -> str:
    return (FIX / name).read_text()


def test_rdma_activated_reads_rdma_with_its_mtu_and_device() -> None:
    r = parse_transport(read("rdma_active.log"))
    assert r.text() == "RDMA (mtu 4096)"
    assert (r.kind, r.mtu, r.device, r.gid, r.gid_type, r.rdma_build) == ("RDMA", 4096, "rocep1s0f1", 3, "RoCEv2", True)
    assert r.warnings == []


def test_mtu_1024_on_roce_is_a_warning_naming_the_fix() -> None:
    r = parse_transport(read("rdma_mtu1024.log"))
    assert r.text() == "RDMA (mtu 1024)"
    assert len(r.warnings) == 1 and "MTU 1024" in r.warnings[0] and "mtu 9000" in r.warnings[0]


def test_activation_failure_is_tcp_with_the_cause_and_a_warning() -> None:
    r = parse_transport(read("rdma_activate_failed.log"))
    assert r.kind == "TCP" and r.text().startswith("TCP (RDMA activation failed")
    assert r.device == "rocep1s0f1" and "memlock" in r.warnings[0]


def test_a_silent_probe_failure_is_tcp_no_device_for_the_bind_address() -> None:
    r = parse_transport(read("rdma_probe_silent.log"))
    assert r.text() == "TCP (no RDMA device with a GID for the bind address)" and r.rdma_build is True


def test_probed_but_the_peer_offered_none() -> None:
    assert parse_transport(read("rdma_peer_without.log")).text() == "TCP (the other end offered no RDMA)"


def test_an_engine_built_without_rdma_says_so() -> None:
    r = parse_transport(read("tcp_build_without_rdma.log"))
    assert r.text() == "TCP (engine built without RDMA)" and r.rdma_build is False


def test_ggml_rpc_no_rdma_in_the_environment_is_the_cause() -> None:
    r = parse_transport(read("rdma_probe_silent.log"), env={"GGML_RPC_NO_RDMA": "1"})
    assert r.text() == "TCP (GGML_RPC_NO_RDMA is set)"


def test_before_the_head_connects_the_reading_is_unknown() -> None:
    r = parse_transport(read("rdma_not_connected.log"))
    assert r.kind == "unknown" and r.rdma_build is True
    # ... unless the build already rules RDMA out
    banner_only = read("tcp_build_without_rdma.log").split("Accepted")[0]
    assert parse_transport(banner_only).text() == "TCP (engine built without RDMA)"


def test_the_last_run_and_the_last_connection_count() -> None:
    assert parse_transport(read("restarted_without_rdma.log")).text() == "TCP (engine built without RDMA)"
    assert parse_transport(read("reconnect_failed.log")).kind == "TCP"


def test_apple_thunderbolt_rdma_is_rdma_without_the_roce_mtu_warning() -> None:
    r = parse_transport(read("apple_tb5_active.log"))
    assert r.text() == "RDMA (mtu 1024)" and r.apple and r.device == "rdma_en2" and r.warnings == []


def test_a_head_log_with_a_completion_error_after_activation_warns() -> None:
    r = parse_transport(read("head_wc_error.log"), connected=True)
    assert r.kind == "RDMA" and r.rdma_build is True
    assert any("completion error" in w and "status=12" in w for w in r.warnings)


def test_as_dict_carries_the_reading() -> None:
    d = parse_transport(read("rdma_active.log")).as_dict()
    assert d["transport"] == "RDMA" and d["text"] == "RDMA (mtu 4096)" and d["mtu"] == 4096


# --- the fixtures' lines are the pinned source's own format strings -------------------------


def _pinned_rpc_dir() -> Path:
    found = sorted(sources_dir().glob("*/llama.cpp/ggml/src/ggml-rpc"))
    assert found, f"no unpacked llama.cpp source under {sources_dir()} (scripts/setup.sh's engine build unpacks it)"
    return found[-1]


def _render(fmt: str) -> str:
    """A C printf format filled with sample values."""
    values = iter(["mlx5_0", "3", " RoCEv2", "1234", "220", "5678", "4096", "24", "12", "x", "0x81", "1", "64", "128"])

    def sub(m: re.Match[str]) -> str:
        conv = m.group(0)[-1]
        v = next(values)
        if conv == "s":
            return v if not v.isdigit() else "rocep1s0f1"
        return v if v.isdigit() else "7"

    fmt = fmt.replace("%s wc error", "recv wc error")  # is_recv ? "recv" : "send"
    return re.sub(r"%(?:\d*)(?:z|l|ll)?[sduxi]", sub, fmt)


@pytest.mark.parametrize("file", ["transport.cpp", "transport-apple.cpp"])
def test_every_rdma_state_line_of_the_pinned_source_is_recognised(file: str) -> None:
    src = (_pinned_rpc_dir() / file).read_text()
    fmts = re.findall(r'GGML_LOG_(?:INFO|ERROR)\(\s*"(RDMA[^"]*)"', src)
    state = [f for f in fmts if re.search(r"probed|activated|activate failed|RTR failed|RTS failed|wc error", f)]
    assert state, f"no RDMA state lines in {file}"
    for fmt in state:
        line = _render(fmt).replace("\\n", "")
        assert any(p.search(line) for p in (_PROBED, _ACTIVATED, _FAILED, _WC_ERROR)), (fmt, line)


def test_the_worker_banner_of_the_pinned_source_is_recognised() -> None:
    src = (_pinned_rpc_dir() / "ggml-rpc.cpp").read_text()
    banners = re.findall(r'printf\("(\s*transport\s*:[^"]*)\\n"\)', src)
    assert len(banners) == 2
    for b in banners:
        m = _BANNER.search(b)
        assert m is not None and (m.group("rdma") is not None) == ("RDMA" in b)
