"""The real `up`, `down`, `restart_gateway` and `Supervisor` on fakes: a :class:`FakeNetwork` of
nodes and processes, a :class:`FakeEngine` for llama-server's HTTP API and a fake clock, so a
60-second timeout or a supervised restart with backoff takes milliseconds of wall time."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from fake_cluster import ENGINE, GATEWAY, HEAD, W1, W2, local_spec, role, roles
from splitserve import ClusterError, NodeError
from splitserve.cluster import Event, FakeNetwork, Program, Supervisor, cluster_state_dir, down, read_state, up
from splitserve.cluster._execute import restart_gateway
from splitserve.engine import FakeEngine
from splitserve.engine._fake import FakeFailure

OOM = "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 9000.00 MiB on device 0: cudaMalloc failed: out of memory"


def port_of(argv: list[str]) -> int:
    flag = "-p" if "-p" in argv else "--port"
    return int(argv[argv.index(flag) + 1])


def test_a_two_worker_cluster_comes_up_in_order_and_goes_down(tmp_path: Path) -> None:
    spec = local_spec(tmp_path)
    net = FakeNetwork()
    engine = FakeEngine(loading=4)  # llama-server answers 503 to its first four health checks
    events: list[Event] = []
    state = up(spec, engine=ENGINE, preflight=False, edges=net.edges(engine), on_event=events.append)

    # The gateway first (it waits for the engine), the workers, then llama-server pointing at them.
    assert roles(net) == ["gateway", "w1", "w2", "head"]
    gw, w1, w2, head = (p.argv for p in net.spawned)
    assert gw[1:4] == ["-m", "splitserve", "serve"] and port_of(gw) == GATEWAY
    assert w1 == ["/opt/llama/bin/ggml-rpc-server", "-H", "127.0.0.1", "-p", str(W1), "-c"]
    assert w2 == ["/opt/llama/bin/ggml-rpc-server", "-H", "127.0.0.1", "-p", str(W2), "-c"]
    assert head[0] == "/opt/llama/bin/llama-server" and port_of(head) == HEAD
    assert head[head.index("--rpc") + 1] == f"127.0.0.1:{W1},127.0.0.1:{W2}"
    assert all(p.env["LD_LIBRARY_PATH"].startswith("/opt/llama/bin") for p in net.spawned[1:])

    # Ready means /health 200 and then a one-token completion.
    assert [r.kind for r in engine.requests] == ["health"] * 5 + ["stream"]  # a whole completion, streamed
    assert engine.requests[-1].body["n_predict"] == 1
    assert state.phase == "ready" and state.endpoint == f"http://127.0.0.1:{GATEWAY}"
    assert state.load_seconds is not None and state.load_seconds > 0
    kinds = [e.kind for e in events]
    assert kinds.index("head_started") < kinds.index("gateway_ready") < kinds.index("ready")

    # The state file names exactly the processes started, with their pids.
    saved = read_state(cluster_state_dir(spec))
    assert saved is not None
    assert [(r.node, r.pid) for r in saved.processes] == [
        (n, p.pid) for n, p in zip(["gateway", "w1", "w2", "head"], net.spawned, strict=True)
    ]
    assert saved.engine_endpoint == f"http://127.0.0.1:{HEAD}"

    stopped = down(spec, edges=net.edges(engine))
    assert sorted(stopped) == ["gateway", "head", "w1", "w2"]
    assert net.running() == []
    # SIGTERM, the gateway first (clients get a refused connection), then the head, then workers.
    assert [(role(p), sig) for _t, p, sig in net.signals] == [
        ("gateway", signal.SIGTERM),
        ("head", signal.SIGTERM),
        ("w1", signal.SIGTERM),
        ("w2", signal.SIGTERM),
    ]
    assert read_state(cluster_state_dir(spec)) is None


def test_a_worker_that_never_listens_times_out_naming_it_and_everything_is_stopped(tmp_path: Path) -> None:
    spec = local_spec(tmp_path)
    net = FakeNetwork()
    net.program("ggml-rpc-server", Program(listen_after=None), port=W2)
    t0 = net.clock.monotonic()
    with pytest.raises(NodeError) as info:
        up(spec, engine=ENGINE, preflight=False, worker_timeout=5, edges=net.edges())
    msg = str(info.value)
    assert info.value.node == "w2" and "\n" not in msg
    assert msg == f"w2: port {W2} on 127.0.0.1 did not answer within 5 s (waiting for: w2)"
    assert 5 <= net.clock.monotonic() - t0 < 6, "it waited the timeout on the fake clock"
    assert roles(net) == ["gateway", "w1", "w2"], "the head never started"
    assert net.running() == []
    assert read_state(cluster_state_dir(spec)) is None


def test_a_worker_that_dies_during_load_is_named_as_the_root_cause_with_its_log(tmp_path: Path) -> None:
    spec = local_spec(tmp_path)
    net = FakeNetwork()
    net.program("ggml-rpc-server", Program(exit_after=3.0, exit_code=1, log=["accepted client", OOM]), port=W1)
    # The head loses its worker at the same moment: the worker is still the root cause.
    net.program("llama-server", Program(exit_after=3.0, exit_code=1, log=["llama_model_load: RPC connection lost"]))
    with pytest.raises(NodeError) as info:
        up(spec, engine=ENGINE, preflight=False, edges=net.edges(FakeEngine(loading=True)))
    msg = str(info.value)
    assert info.value.node == "w1"
    assert msg == (
        f"w1: ggml-rpc-server exited with code 1 during load: {OOM} (log: {tmp_path / 'st' / 'logs' / 'w1.log'})"
    )
    assert net.running() == []
    assert read_state(cluster_state_dir(spec)) is None


def test_the_heads_failing_first_completion_fails_up(tmp_path: Path) -> None:
    spec = local_spec(tmp_path)
    net = FakeNetwork()
    engine = FakeEngine([FakeFailure(500, "failed to find a free slot")])
    with pytest.raises(NodeError) as info:
        up(spec, engine=ENGINE, preflight=False, edges=net.edges(engine))
    assert info.value.node == "head"
    assert str(info.value).startswith("head: the first one-token completion failed: engine answered HTTP 500")
    assert "failed to find a free slot" in str(info.value)
    assert roles(net) == ["gateway", "w1", "w2", "head"]
    assert net.running() == []
    assert read_state(cluster_state_dir(spec)) is None


def test_a_busy_port_is_refused_before_anything_starts(tmp_path: Path) -> None:
    spec = local_spec(tmp_path)
    net = FakeNetwork()
    net.taken_ports.add(("127.0.0.1", W2))
    with pytest.raises(NodeError, match=rf"^w2: port {W2} on 127.0.0.1 is already in use by another process$"):
        up(spec, engine=ENGINE, preflight=False, edges=net.edges())
    assert net.spawned == []


def test_a_taken_default_gateway_port_moves_the_gateway_to_a_spare_one(tmp_path: Path) -> None:
    spec = local_spec(tmp_path)
    net = FakeNetwork()
    net.taken_ports.add(("127.0.0.1", GATEWAY))
    events: list[Event] = []
    state = up(spec, engine=ENGINE, preflight=False, edges=net.edges(), on_event=events.append)
    gw = net.spawned[0]
    assert role(gw) == "gateway" and port_of(gw.argv) == 40000  # the fake network's spare port
    assert state.endpoint == f"http://127.0.0.1:{port_of(gw.argv)}"
    (note,) = [e.message for e in events if e.kind == "gateway_port"]
    assert note.startswith(f"port {GATEWAY} is taken; the gateway listens on {port_of(gw.argv)}")


def test_a_second_up_stops_what_the_first_left_running(tmp_path: Path) -> None:
    spec = local_spec(tmp_path)
    net = FakeNetwork()
    up(spec, engine=ENGINE, preflight=False, edges=net.edges())
    first = list(net.spawned)
    events: list[Event] = []
    up(spec, engine=ENGINE, preflight=False, edges=net.edges(), on_event=events.append)
    assert all(p.exit_code == -signal.SIGTERM for p in first)
    assert roles(net, net.running()) == ["gateway", "w1", "w2", "head"]
    (stale,) = [e.message for e in events if e.kind == "stale"]
    # each process named for what it is, in the order they were stopped
    assert "stopped what was left of it: gateway (the gateway, pid " in stale
    assert ", head (llama-server, pid " in stale and ", w1 (ggml-rpc-server, pid " in stale
    assert stale.index("head (") < stale.index("w1 (") < stale.index("w2 (")


def test_restart_gateway_starts_the_gateway_alone_on_its_old_port(tmp_path: Path) -> None:
    spec = local_spec(tmp_path)
    net = FakeNetwork()
    state = up(spec, engine=ENGINE, preflight=False, edges=net.edges())
    old_gw, *engine_procs = net.spawned
    net.kill(port=GATEWAY)
    state = restart_gateway(spec, state, edges=net.edges())
    new_gw = net.spawned[-1]
    assert len(net.spawned) == 5 and role(new_gw) == "gateway"
    assert new_gw.argv == old_gw.argv and new_gw.pid != old_gw.pid
    assert all(p.exit_code is None for p in engine_procs), "the engine kept serving"
    saved = read_state(cluster_state_dir(spec))
    assert saved is not None and saved.gateway is not None and saved.gateway.pid == new_gw.pid
    assert [r.node for r in saved.processes] == ["gateway", "w1", "w2", "head"], "its record where the old one was"


def test_restart_gateway_that_never_turns_healthy_is_stopped_with_the_reason(tmp_path: Path) -> None:
    spec = local_spec(tmp_path)
    net = FakeNetwork()
    state = up(spec, engine=ENGINE, preflight=False, edges=net.edges())
    net.kill(port=GATEWAY)
    net.program("splitserve serve", Program(http_status=503))
    with pytest.raises(NodeError) as info:
        restart_gateway(spec, state, edges=net.edges())
    assert info.value.node == "gateway"
    assert f"the gateway on 127.0.0.1:{GATEWAY} was not ready within 60 s (last: HTTP 503" in str(info.value)
    assert roles(net, net.running()) == ["w1", "w2", "head"], "the new gateway was stopped, the engine left"


def supervisor_log(tmp_path: Path) -> list[dict[str, object]]:
    return [json.loads(ln) for ln in (tmp_path / "st" / "supervisor.log").read_text().splitlines()]


def test_supervisor_restarts_the_whole_cluster_in_order_after_a_worker_dies(tmp_path: Path) -> None:
    spec = local_spec(tmp_path, supervise={"backoff_initial": 2, "poll_seconds": 0.5})
    net = FakeNetwork()
    net.program("ggml-rpc-server", Program(log=["Starting RPC server v3.0.0", OOM]), port=W1)
    sup = Supervisor(spec, engine=ENGINE, preflight=False, edges=net.edges())
    ready_at: list[float] = []
    killed_at: list[float] = []

    def kill_w1() -> None:
        killed_at.append(net.clock.monotonic())
        net.kill(port=W1)

    def on_ready(_state: object) -> None:
        ready_at.append(net.clock.monotonic())
        if len(ready_at) == 1:
            net.after(10, kill_w1)
        else:
            sup.stop()

    sup.run(on_ready=on_ready)

    assert roles(net) == ["gateway", "w1", "w2", "head"] * 2, "everything again, in order"
    first, second = net.spawned[:4], net.spawned[4:]
    assert first[1].exit_code == -signal.SIGKILL
    assert all(p.exit_code is not None for p in first) and net.running() == []
    # Seen within a poll, then the backoff (2 s) before anything starts again.
    assert second[0].started - killed_at[0] >= 2.0
    assert second[0].started - killed_at[0] < 2.0 + 0.5 + 0.5
    log = supervisor_log(tmp_path)
    (died,) = [e for e in log if e["kind"] == "died"]
    assert died["node"] == "w1" and died["root_cause"] is True
    assert "ggml-rpc-server was killed by signal 9 while serving" in str(died["message"])
    tail = died["tail"]
    assert isinstance(tail, list) and tail[-2:] == ["Starting RPC server v3.0.0", OOM]
    (restarting,) = [e for e in log if e["kind"] == "restarting"]
    assert restarting["delay"] == 2.0
    assert log[-1]["kind"] == "stopping" and sup.restarts == 1


def test_supervisor_restarts_a_dead_gateway_alone(tmp_path: Path) -> None:
    spec = local_spec(tmp_path)
    net = FakeNetwork()
    sup = Supervisor(spec, engine=ENGINE, preflight=False, edges=net.edges())
    net.after(5, lambda: net.kill(port=GATEWAY))
    net.after(10, sup.stop)
    sup.run()
    assert roles(net) == ["gateway", "w1", "w2", "head", "gateway"]
    assert net.spawned[4].argv == net.spawned[0].argv
    assert all(p.exit_code == -signal.SIGTERM for p in net.spawned[1:]), "engine processes ran until the end"
    kinds = [(e["kind"], e["node"]) for e in supervisor_log(tmp_path)]
    assert kinds == [("ready", "head"), ("died", "gateway"), ("restarted", "gateway"), ("stopping", "cluster")]
    assert sup.restarts == 1


def test_supervisor_raises_at_once_when_the_cluster_never_came_up(tmp_path: Path) -> None:
    spec = local_spec(tmp_path)
    net = FakeNetwork()
    net.taken_ports.add(("127.0.0.1", W1))
    sup = Supervisor(spec, engine=ENGINE, preflight=False, edges=net.edges())
    with pytest.raises(ClusterError, match=r"^w1: port 50100 on 127.0.0.1 is already in use"):
        sup.run()
    assert net.spawned == [] and sup.restarts == 0
