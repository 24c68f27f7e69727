"""Clients that leave and clients that never finish, against a real llama-server (SmolLM2).

- every generating path (chat, /v1/completions, native /completion; streamed and not) frees
  the engine's slot within about a second of its client going away, checked through the
  engine's own ``/slots``;
- a request queued behind the per-key limit whose client leaves gives its queue place back
  and never reaches the engine;
- ``splitserve serve`` as a process, raw sockets: a 64 MiB header is refused at once with the
  gateway's memory flat, and a half-sent request head is closed after the header time-out,
  with either HTTP implementation.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from test_gateway import engine_url, running_gateway  # noqa: F401 - fixture

from helpers import free_ports
from splitserve.gateway import GatewayConfig

LONG = 1500  # tokens: minutes on this CPU, so a slot still busy after the disconnect shows


def _host_port(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def send_raw(url: str, path: str, body: dict[str, object]) -> socket.socket:
    """A POST written on a raw socket and left unread (closing the socket is the client leaving)."""
    data = json.dumps(body).encode()
    sock = socket.create_connection(_host_port(url), timeout=30)
    sock.sendall(
        f"POST {path} HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\n\r\n".encode()
        + data
    )
    return sock


def slots(engine: str) -> list[dict[str, object]]:
    return httpx.get(f"{engine}/slots", timeout=10).json()  # type: ignore[no-any-return]


def wait_slot(engine: str, slot: int, busy: bool, timeout: float) -> float:
    """Seconds until the engine's ``slot`` is (not) processing; fails after ``timeout``."""
    start = time.monotonic()
    while bool(slots(engine)[slot]["is_processing"]) != busy:
        assert time.monotonic() - start < timeout, f"slot {slot} still {'idle' if busy else 'busy'} after {timeout} s"
        time.sleep(0.02)
    return time.monotonic() - start


def metric(url: str, name: str) -> float:
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


PATHS = {
    "chat": (
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "Tell a long story."}], "max_tokens": LONG},
    ),
    "completions": ("/v1/completions", {"prompt": "Once upon a time", "max_tokens": LONG}),
    "native": ("/completion", {"prompt": "Once upon a time", "n_predict": LONG}),
}
FREED: dict[str, float] = {}


@pytest.mark.engine
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("path", list(PATHS))
def test_a_client_that_leaves_frees_the_engine_slot(
    engine_url: str,  # noqa: F811
    path: str,
    stream: bool,
) -> None:
    route, body = PATHS[path]
    with running_gateway(GatewayConfig(engine_url=engine_url)) as url:
        httpx.get(f"{url}/v1/models", timeout=30)  # the served model read before the clock runs
        sock = send_raw(url, route, {**body, "stream": stream, "ignore_eos": True, "id_slot": 0, "cache_prompt": False})
        wait_slot(engine_url, 0, busy=True, timeout=60)
        time.sleep(0.3)  # well into decoding
        sock.close()
        freed = wait_slot(engine_url, 0, busy=False, timeout=10)
        FREED[f"{path}/{'streamed' if stream else 'whole'}"] = freed
        print(f"\n{path} {'streamed' if stream else 'whole'}: slot free {freed:.2f} s after the disconnect")
        assert freed < 2.5
        n = slots(engine_url)[0]["next_token"][0]["n_decoded"]  # type: ignore[index]
        assert n < LONG
        deadline = time.monotonic() + 5
        while metric(url, "splitserve_client_disconnects_total") < 1:
            assert time.monotonic() < deadline, "the disconnect was not counted"
            time.sleep(0.05)


@pytest.mark.engine
def test_a_queued_request_whose_client_left_gives_its_place_back(engine_url: str) -> None:  # noqa: F811
    cfg = GatewayConfig(engine_url=engine_url, max_concurrent=1, max_queue=1)
    with running_gateway(cfg) as url:
        httpx.get(f"{url}/v1/models", timeout=30)
        held = send_raw(
            url,
            "/v1/chat/completions",
            {
                "messages": [{"role": "user", "content": "Tell a long story."}],
                "max_tokens": LONG,
                "ignore_eos": True,
                "stream": True,
                "id_slot": 0,
            },
        )
        wait_slot(engine_url, 0, busy=True, timeout=60)
        before = slots(engine_url)[1].get("id_task")
        queued = send_raw(
            url, "/v1/completions", {"prompt": "queued", "max_tokens": LONG, "ignore_eos": True, "id_slot": 1}
        )
        deadline = time.monotonic() + 10
        while metric(url, "splitserve_queue_depth") < 1:
            assert time.monotonic() < deadline, "the second request never queued"
            time.sleep(0.05)
        full = httpx.post(f"{url}/v1/completions", json={"prompt": "x", "max_tokens": 1}, timeout=30)
        assert full.status_code == 429  # one running, one waiting: the queue is full
        queued.close()
        start = time.monotonic()
        while metric(url, "splitserve_queue_depth") > 0:
            assert time.monotonic() - start < 2, "the abandoned request kept its queue place"
            time.sleep(0.02)
        print(f"\nqueue place freed {time.monotonic() - start:.2f} s after the client left")
        # its place is free again: a new request queues instead of a 429
        again = send_raw(url, "/v1/completions", {"prompt": "again", "max_tokens": 1, "id_slot": 1})
        deadline = time.monotonic() + 10
        while metric(url, "splitserve_queue_depth") < 1:
            assert time.monotonic() < deadline, "a new request found no queue place"
            time.sleep(0.05)
        again.close()
        held.close()
        wait_slot(engine_url, 0, busy=False, timeout=10)
        time.sleep(1.5)  # time for an abandoned request to reach the engine, were it sent
        assert slots(engine_url)[1].get("id_task") == before, "an abandoned request reached the engine"
        assert metric(url, "splitserve_queue_depth") == 0
        assert metric(url, "splitserve_requests_running") == 0


# -- hostile connections against `splitserve serve` as a process ---------------------------


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


@contextmanager
def serve_process(*args: str) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    (port,) = free_ports(1)
    (dead,) = free_ports(1)  # no engine needed: these requests never get that far
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "splitserve",
            "serve",
            "--engine",
            f"http://127.0.0.1:{dead}",
            "--port",
            str(port),
            *args,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else "died"
            try:
                httpx.get(f"{url}/metrics", timeout=2)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, "splitserve serve did not start"
                time.sleep(0.1)
        yield url, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _read_until_closed(sock: socket.socket, timeout: float) -> bytes:
    sock.settimeout(timeout)
    out = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return out
            out += chunk
    except (ConnectionResetError, BrokenPipeError):
        return out


HEADER_MIB = 64


def _big_header_attack(url: str) -> tuple[bytes, float]:
    """Send one ``HEADER_MIB`` MiB header (or as much as the gateway reads); its answer, seconds."""
    sock = socket.create_connection(_host_port(url), timeout=30)
    start = time.monotonic()
    sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: gw\r\nX-Big: ")
    piece = b"a" * (1024 * 1024)
    try:
        for _ in range(HEADER_MIB):
            sock.sendall(piece)
        sock.sendall(b"\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass  # closed on us: what we want
    answer = _read_until_closed(sock, 15)
    sock.close()
    return answer, time.monotonic() - start


@pytest.mark.parametrize("http", ["httptools", "h11"])
def test_a_huge_header_is_refused_with_memory_flat(http: str) -> None:
    with serve_process("--http", http) as (url, proc):
        rss_before = _rss_kib(proc.pid)
        answers = [_big_header_attack(url) for _ in range(2)]
        time.sleep(0.5)
        rss_after = _rss_kib(proc.pid)
        print(
            f"\n{http}: RSS {rss_before / 1024:.1f} MiB before, {rss_after / 1024:.1f} MiB after "
            f"two {HEADER_MIB} MiB headers; refused in {', '.join(f'{t:.2f} s' for _, t in answers)}"
        )
        for answer, seconds in answers:
            assert answer == b"" or answer.split(b" ", 2)[1] in (b"400", b"431"), answer[:200]
            assert seconds < 5
        assert rss_after - rss_before < 16 * 1024, (rss_before, rss_after)
        assert httpx.get(f"{url}/metrics", timeout=10).status_code == 200  # still serving


@pytest.mark.parametrize("http", ["httptools", "h11"])
def test_a_half_sent_head_is_closed_after_the_header_timeout(http: str) -> None:
    with serve_process("--http", http, "--header-timeout", "1.5") as (url, _):
        idle = socket.create_connection(_host_port(url), timeout=30)  # says nothing at all
        half = socket.create_connection(_host_port(url), timeout=30)
        start = time.monotonic()
        half.sendall(b"GET /v1/models HTTP/1.1\r\nHost: gw\r\nX-Slow: a")
        for _ in range(2):  # trickling bytes does not extend the deadline
            time.sleep(0.4)
            half.sendall(b"a")
        answer = _read_until_closed(half, 10)
        took = time.monotonic() - start
        assert b" 408 " in answer.split(b"\r\n", 1)[0] and 1.4 < took < 4, (answer[:100], took)
        assert _read_until_closed(idle, 10).startswith(b"HTTP/1.1 408")
        idle.close()
        half.close()
        # a whole request is unaffected, kept alive past the header time-out
        with httpx.Client(base_url=url, timeout=10) as c:
            assert c.get("/metrics").status_code == 200
            time.sleep(2)
            assert c.get("/metrics").status_code == 200


def test_too_many_header_lines_is_431() -> None:
    with serve_process("--max-headers", "20") as (url, _):
        r = httpx.get(f"{url}/metrics", headers={f"x-h{i}": "v" for i in range(40)}, timeout=10)
        assert r.status_code == 431 and r.json()["error"]["code"] == "request_header_fields_too_large"
        assert httpx.get(f"{url}/metrics", timeout=10).status_code == 200
