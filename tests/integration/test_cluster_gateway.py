"""The gateway `up` starts in front of the head: the official openai client talks to it, the
spec's key is enforced, `down` stops it first, and supervision restarts a dead gateway alone."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import httpx
import openai
import pytest

from helpers import pid_alive, two_worker_spec, wait_dead
from splitserve.cluster import Supervisor, cluster_state_dir, down, load_spec, read_state, read_supervisor_log, up

pytestmark = [pytest.mark.engine]


def test_up_serves_openai_clients_through_the_gateway(engine, smollm2, state_home, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    spec = load_spec(
        two_worker_spec(tmp_path, smollm2, name="gwkey", gateway={"api_key": "sk-test-cluster", "model_name": "smol"})
    )
    state = up(spec, engine=engine)
    try:
        gw = state.gateway
        assert gw is not None and state.endpoint.endswith(f":{gw.port}")
        assert state.engine_url != state.endpoint
        # The key stays out of the process's command line.
        assert "sk-test-cluster" not in Path(f"/proc/{gw.pid}/cmdline").read_text()

        client = openai.OpenAI(base_url=f"{state.endpoint}/v1", api_key="sk-test-cluster", max_retries=0)
        assert [m.id for m in client.models.list().data] == ["smol"]
        reply = client.chat.completions.create(
            model="smol", max_tokens=8, temperature=0, messages=[{"role": "user", "content": "Say hello."}]
        )
        assert reply.choices[0].message.content and reply.usage and reply.usage.completion_tokens >= 1
        pieces = [
            c.choices[0].delta.content or ""
            for c in client.chat.completions.create(
                model="smol",
                max_tokens=8,
                temperature=0,
                stream=True,
                messages=[{"role": "user", "content": "Say hello."}],
            )
            if c.choices
        ]
        assert "".join(pieces) == reply.choices[0].message.content  # greedy: the same text streamed

        wrong = openai.OpenAI(base_url=f"{state.endpoint}/v1", api_key="sk-wrong", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            wrong.models.list()
        # any model name is served, as llama-server does, and answered with the served id
        other = client.chat.completions.create(
            model="gpt-4o", max_tokens=4, messages=[{"role": "user", "content": "hi"}]
        )
        assert other.model == "smol"
        # llama-server's native endpoints stay reachable on its own port.
        assert httpx.get(f"{state.engine_url}/props", timeout=10).status_code == 200
    finally:
        stopped = down(spec)
    assert stopped[0] == "gateway" and set(stopped) == {"gateway", "head", "w1", "w2"}
    assert wait_dead([p.pid for p in state.processes]) == []


def test_without_a_port_the_gateway_takes_8000_or_a_free_one(engine, smollm2, state_home, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import socket

    spec = load_spec(two_worker_spec(tmp_path, smollm2, name="gwport", gateway={"port": None}))
    holder = socket.socket()
    try:
        holder.bind(("127.0.0.1", 8000))
        holder.listen(1)
    except OSError:
        pass  # someone else holds 8000 already: the same case
    events: list[tuple[str, str]] = []
    try:
        state = up(spec, engine=engine, on_event=lambda e: events.append((e.kind, e.message)))
        try:
            gw = state.gateway
            assert gw is not None and gw.port != 8000
            assert any(k == "gateway_port" and f"listens on {gw.port}" in m for k, m in events)
            r = httpx.get(f"{state.endpoint}/v1/models", timeout=10)
            assert r.status_code == 200 and r.json()["data"]
        finally:
            down(spec)
    finally:
        holder.close()


def test_gateway_death_restarts_the_gateway_alone(engine, smollm2, state_home, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    text = two_worker_spec(tmp_path, smollm2, name="gwsup").read_text()
    spec_file = tmp_path / "gwsup2.toml"
    spec_file.write_text(text + "\n[supervise]\nbackoff_initial = 0.2\npoll_seconds = 0.2\n")
    spec = load_spec(spec_file)
    root = cluster_state_dir(spec)
    sup = Supervisor(spec, engine=engine)
    runner = threading.Thread(target=sup.run, daemon=True)
    runner.start()
    try:
        deadline = time.monotonic() + 120
        while (st := read_state(root)) is None or st.phase != "ready":
            assert runner.is_alive() and time.monotonic() < deadline
            time.sleep(0.1)
        first = {p.node: p.pid for p in st.processes}
        os.kill(first["gateway"], signal.SIGKILL)

        deadline = time.monotonic() + 120
        while True:
            assert runner.is_alive() and time.monotonic() < deadline
            now = read_state(root)
            if now is not None and now.gateway is not None and now.gateway.pid != first["gateway"]:
                try:
                    r = httpx.post(
                        f"{now.endpoint}/v1/chat/completions",
                        timeout=30,
                        json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4},
                    )
                    if r.status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
            time.sleep(0.1)
        second = {p.node: p.pid for p in now.processes}
        # The engine kept its model: head and workers are the same processes.
        assert {n: second[n] for n in ("w1", "w2", "head")} == {n: first[n] for n in ("w1", "w2", "head")}
        assert all(pid_alive(second[n]) for n in second)
        kinds = [(e["kind"], e["node"]) for e in read_supervisor_log(spec)]
        assert ("died", "gateway") in kinds and ("restarted", "gateway") in kinds
        assert "restarting" not in [k for k, _ in kinds]
    finally:
        sup.stop()
        runner.join(60)
    assert not runner.is_alive()
    assert wait_dead(list(second.values())) == []
