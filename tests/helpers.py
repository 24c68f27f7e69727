"""Helpers shared by the integration tests: free ports, specs for the real small
models, process checks and a bare llama-server for comparisons."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from splitserve.engine import Engine


def ctrl_c_default() -> None:
    """``preexec_fn`` of a child a test interrupts with SIGINT: SIGINT back to its default there, so
    the child's Python turns it into KeyboardInterrupt even when the test runner itself ignores
    SIGINT (started as a background job of a shell without job control, ``cmd &`` in a script,
    which Python then leaves ignored in every child)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def free_ports(n: int) -> list[int]:
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [int(s.getsockname()[1]) for s in socks]
    for s in socks:
        s.close()
    return ports


def two_worker_spec(
    tmp_path: Path, model: Path, name: str = "t", gateway: dict[str, Any] | None = None, **server: Any
) -> Path:
    """A cluster spec file: two local RPC workers, a head and the gateway, on free loopback ports."""
    w1, w2, head, gw = free_ports(4)
    server = {"port": head, "ctx_size": 2048, "tensor_split": [1, 1]} | server
    lines = [
        f'name = "{name}"',
        f'model = "{model}"',
        "",
        "[[workers]]",
        'name = "w1"',
        f"port = {w1}",
        "",
        "[[workers]]",
        'name = "w2"',
        f"port = {w2}",
        "",
        "[server]",
    ]
    for key, value in server.items():
        lines.append(f"{key} = {json.dumps(value)}")
    lines += ["", "[gateway]"]
    for key, value in ({"port": gw} | (gateway or {})).items():
        if value is not None:  # None: leave the key out (its default)
            lines.append(f"{key} = {json.dumps(value)}")
    path = tmp_path / f"{name}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def pid_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def wait_dead(pids: list[int], timeout: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = [p for p in pids if pid_alive(p)]
        if not alive:
            return []
        time.sleep(0.05)
    return [p for p in pids if pid_alive(p)]


def greedy(endpoint: str, prompt: str, n_predict: int = 32) -> str:
    body = {"prompt": prompt, "n_predict": n_predict, "temperature": 0.0, "seed": 7, "cache_prompt": False}
    resp = httpx.post(f"{endpoint}/completion", json=body, timeout=120)
    resp.raise_for_status()
    return str(resp.json()["content"])


@contextmanager
def bare_server(engine: Engine, model: Path, *extra: str, ctx: int = 2048) -> Iterator[str]:
    """llama-server on the local CPU, no RPC: the unsplit reference. If it dies before it
    serves, the failure says how (exit status or signal) and shows the end of its log."""
    (port,) = free_ports(1)
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    log = tempfile.NamedTemporaryFile(prefix="bare-llama-server-", suffix=".log", delete=False)
    proc = subprocess.Popen(
        [
            str(engine.server),
            "-m",
            str(model),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "-c",
            str(ctx),
            "-ngl",
            "999",
            *extra,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise AssertionError(died_message("bare llama-server", proc.returncode, Path(log.name)))
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        yield url
    finally:
        proc.kill()
        proc.wait()
        log.close()
        os.unlink(log.name)


def died_message(what: str, returncode: int, log: Path, lines: int = 15) -> str:
    """``<what> was killed by SIGILL`` / ``exited with code 1``, and the last lines of its log."""
    how = f"was killed by {signal.Signals(-returncode).name}" if returncode < 0 else f"exited with code {returncode}"
    text = log.read_text(errors="replace").splitlines()[-lines:] if log.is_file() else []
    return f"{what} {how}; last lines of {log}:\n" + "\n".join(text)


@contextmanager
def rpc_workers(
    engine: Engine, ports: list[int], tmp_dir: Path | None = None
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """ggml-rpc-server on each loopback port, each with its log; a worker that dies before it
    listens fails the test with its exit status and the end of its log."""
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    folder = Path(tempfile.mkdtemp(prefix="rpc-workers-", dir=tmp_dir))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for port in ports:
            with open(folder / f"rpc-{port}.log", "wb") as log:
                procs.append(
                    subprocess.Popen(
                        [str(engine.rpc_server), "-H", "127.0.0.1", "-p", str(port)],
                        env=env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
        for port, proc in zip(ports, procs):
            deadline = time.monotonic() + 20
            while True:
                if proc.poll() is not None:
                    raise AssertionError(
                        died_message(f"ggml-rpc-server on port {port}", proc.returncode, folder / f"rpc-{port}.log")
                    )
                with socket.socket() as s:
                    if s.connect_ex(("127.0.0.1", port)) == 0:
                        break
                if time.monotonic() > deadline:
                    raise AssertionError(
                        f"ggml-rpc-server on port {port} did not listen in 20 s; log: {folder / f'rpc-{port}.log'}"
                    )
                time.sleep(0.05)
        yield procs
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait(timeout=30)


@contextmanager
def serve_app(app: Any) -> Iterator[str]:
    """An ASGI app under uvicorn in a thread on a free loopback port; yields its base URL."""
    import threading

    import uvicorn

    (port,) = free_ports(1)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the app did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)
