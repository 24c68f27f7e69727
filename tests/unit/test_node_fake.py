"""The root's in-memory nodes (``_node_fake``): a program listens, logs and exits on the fake
clock; signals, timers, ports, RPC HELLO and HTTP health follow what runs, with no process started."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from splitserve import ClusterError
from splitserve._node import stop
from splitserve._node_fake import FakeNodes, Program

SERVER = ["/e/bin/llama-server", "--port", "8080"]


def test_a_program_listens_logs_and_exits_on_the_fake_clock() -> None:
    nodes = FakeNodes()
    nodes.program("llama-server", Program(listen_after=2.0, exit_after=5.0, exit_code=3, log=["loading"]))
    node = nodes.node("local")
    ref = node.spawn(SERVER, {"A": "1"}, Path("/l/s.log"))
    assert node.read_log(Path("/l/s.log")) == "loading\n"
    assert node.alive(ref) and not nodes.listens("127.0.0.1", 8080) and not nodes.port_answers("127.0.0.1", 8080)
    nodes.clock.sleep(2.0)
    assert nodes.listener("localhost", 8080) is nodes.spawned[0] and nodes.port_in_use("127.0.0.1", 8080)
    assert nodes.http_health("http://127.0.0.1:8080/health")[0] == 200
    nodes.clock.sleep(3.0)
    assert not node.alive(ref) and node.exit_code(ref) == 3 and nodes.running() == []
    assert nodes.http_health("http://127.0.0.1:8080/health") == (0, "ConnectError")


def test_signals_timers_and_a_program_that_ignores_sigterm() -> None:
    nodes = FakeNodes()
    nodes.program("stubborn", Program(ignores_sigterm=True))
    node = nodes.node("box2")
    stubborn = node.spawn(["/bin/stubborn"], {}, Path("/l/a.log"))
    other = node.spawn(["/bin/other"], {}, Path("/l/b.log"))
    nodes.after(10.0, lambda: nodes.kill("box2", "other", signal.SIGSEGV))
    assert stop(node, stubborn, grace=1.0, clock=nodes.clock)  # gone, after a SIGKILL
    assert [sig for _t, _p, sig in nodes.signals] == [signal.SIGTERM, signal.SIGKILL]
    assert node.exit_code(stubborn) == -signal.SIGKILL and node.alive(other)
    nodes.clock.sleep(10.0)
    assert node.exit_code(other) == -signal.SIGSEGV


def test_ports_rpc_hello_and_an_unreachable_node() -> None:
    nodes = FakeNodes()
    nodes.program("ggml-rpc-server", Program(rpc_protocol="3.0.0"))
    nodes.node("box2").spawn(["/e/bin/ggml-rpc-server", "-H", "10.0.0.2", "-p", "50052"], {}, Path("/l/r.log"))
    assert nodes.rpc_hello("10.0.0.2", 50052) == "3.0.0"
    with pytest.raises(ClusterError, match=r"connection refused by 10\.0\.0\.2:50053"):
        nodes.rpc_hello("10.0.0.2", 50053)
    nodes.taken_ports.add(("10.0.0.2", 40000))
    assert nodes.spare_port("10.0.0.2", avoid={40001}) == 40002
    nodes.unreachable.add("box3")
    with pytest.raises(ClusterError, match="box3: ssh failed"):
        nodes.node_for("box3").run("true")
