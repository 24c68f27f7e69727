"""The load meter counts the worker's side: cache hits from the engine's own log lines (fixtures:
real ggml-rpc-server logs of the pinned engine, a pre-filled and a cold load of a 4-layer model,
checked against the pinned source's format strings) or its read counter, and with RDMA the
tensors it saved; so a warm load reads 100 % at its end, not the few bytes the head's TCP
socket carried."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from splitserve._paths import sources_dir
from splitserve.cluster import ClusterState, parse_cache_log, worker_loaded_bytes
from splitserve.cluster._load_meter import _HIT, _SAVED, _SET, parse_proc_io, read_worker_side
from splitserve.cluster._state import ProcessRecord
from splitserve.gateway._ui_state import History, Snapshot, assemble

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "rpc_cache"
MIB = 1 << 20
BIG = 4 * 16 * MIB  # the worker's four 16 MiB tensors in the fixtures


def test_a_prefilled_load_is_all_cache_hits_in_the_engines_debug_lines() -> None:
    log = parse_cache_log((FIXTURES / "warm_debug.log").read_text())
    assert log.debug and log.hits == 4 and log.hit_bytes == BIG and log.saved == 0
    # the head sent only the small tensors and the hashes: the meter still reads all of it
    assert worker_loaded_bytes(3 * MIB, {"rchar": 0}, log) == BIG + 3 * MIB


def test_a_cold_load_saves_each_big_tensor_and_has_no_hit() -> None:
    log = parse_cache_log((FIXTURES / "cold_debug.log").read_text())
    assert log.debug and log.hits == 0 and log.saved == 4 and log.set_bytes > BIG
    info = parse_cache_log((FIXTURES / "cold_info.log").read_text())  # without GGML_RPC_DEBUG
    assert not info.debug and info.saved == 4 and info.hit_bytes == 0


def test_without_debug_lines_the_worker_read_counter_counts_its_cache_hits() -> None:
    io = parse_proc_io("rchar: 67200000\nwchar: 4096\nsyscr: 80\nsyscw: 12\nread_bytes: 0\nwrite_bytes: 8192\n")
    assert io == {"rchar": 67200000, "wchar": 4096, "read_bytes": 0, "write_bytes": 8192}
    assert worker_loaded_bytes(2 * MIB, io, parse_cache_log("Accepted client connection\n")) == 2 * MIB + 67200000


def test_tcp_and_rdma_cold_loads_are_not_counted_twice() -> None:
    # TCP: the saved tensors crossed the socket too (wchar < the head's count): the head's count
    assert worker_loaded_bytes(80 * MIB, {"rchar": 10_000, "wchar": BIG}) == 80 * MIB + 10_000
    # RDMA: the socket carried only the handshake; the tensors the worker saved are what arrived
    assert worker_loaded_bytes(4096, {"rchar": 10_000, "wchar": BIG}) == BIG + 10_000


def test_only_the_last_connection_counts() -> None:
    text = (FIXTURES / "warm_debug.log").read_text() + "Client connection closed\nAccepted client connection\n"
    assert parse_cache_log(text).hits == 0


def test_this_process_can_be_read_as_a_worker(tmp_path: Path) -> None:
    import os

    log = tmp_path / "w.log"
    log.write_text((FIXTURES / "warm_debug.log").read_text())
    io, parsed = read_worker_side("local", os.getpid(), str(log))
    assert io["rchar"] > 0 and parsed.hits == 4
    assert read_worker_side("local", 2**22 + 7, str(tmp_path / "none.log"))[0] == {}  # no such process: empty


def _state() -> ClusterState:
    st = ClusterState(name="c", spec_file=None, model="/m.gguf", endpoint="http://127.0.0.1:8000", engine="cpu")
    st.phase = "starting"
    st.processes = [
        ProcessRecord("w1", "rpc", "local", 11, None, "127.0.0.1", 50052, "/w1.log", []),
        ProcessRecord("head", "server", "local", 12, None, "127.0.0.1", 8080, "/head.log", []),
    ]
    return st


def test_the_page_reads_a_warm_load_as_complete() -> None:
    memory = [{"endpoint": "127.0.0.1:50052", "model_bytes": BIG + 3 * MIB}]
    h = History()
    first = Snapshot(now=0.0, state=_state(), memory=memory, links={"127.0.0.1:50052": {"bytes_sent": 0.0}})
    h.update(first)
    loaded = float(worker_loaded_bytes(3 * MIB, None, parse_cache_log((FIXTURES / "warm_debug.log").read_text())))
    snap = Snapshot(
        now=2.0,
        state=_state(),
        memory=memory,
        links={"127.0.0.1:50052": {"bytes_sent": 3.0 * MIB, "loaded_bytes": loaded}},
    )
    h.update(snap)
    load = assemble(snap, h)["nodes"][0]["load"]
    assert load["fraction"] == 1.0  # the head's TCP count alone: 3 / 67 = 4 %
    assert load["rate_bytes_per_s"] == loaded / 2.0


# --- the fixtures' lines are the pinned source's own format strings -------------------------


def _pinned_rpc_cpp() -> str:
    found = sorted(sources_dir().glob("*/llama.cpp/ggml/src/ggml-rpc/ggml-rpc.cpp"))
    assert found, f"no unpacked llama.cpp source under {sources_dir()} (scripts/setup.sh's engine build unpacks it)"
    return found[-1].read_text()


@pytest.mark.parametrize(
    ("func", "pattern"),
    [("set_tensor_hash", _HIT), ("set_tensor", _SET)],
)
def test_the_debug_lines_of_the_pinned_source_are_recognised(func: str, pattern: re.Pattern[str]) -> None:
    src = _pinned_rpc_cpp()
    body = src[src.index(f"bool rpc_server::{func}(") :]
    fmt = re.search(r'LOG_DBG\("(\[%s\] buffer:[^;]*?)",\s*__func__', body, re.S)
    assert fmt is not None
    text = re.sub(r'%"\s*PRI([ux])64\s*"', lambda m: "%ll" + m.group(1), fmt.group(1))
    values = iter(["0x55e8068d5aa0", "0x7ff69c7c4040", "0", "16777216", "531432eabee14374"])
    line = re.sub(r"%s|%p|%zu|%llu|%llx", lambda m: func if m.group(0) == "%s" else next(values), text)
    line = line.replace("\\n", "")
    assert pattern.search(line), line


def test_the_saved_line_of_the_pinned_source_is_recognised() -> None:
    src = _pinned_rpc_cpp()
    fmt = re.search(r'GGML_LOG_INFO\("(\[%s\] saved to [^"]*)"', src)
    assert fmt is not None
    line = fmt.group(1).replace("[%s]", "[set_tensor]").replace("%s", "/c/rpc/531432eabee14374").replace("\\n", "")
    assert _SAVED.search(line), line
