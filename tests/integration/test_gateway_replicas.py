"""Two real llama-servers (SmolLM2, loopback) as replicas behind one gateway (``--engine-url``
with two URLs): a session stays on the replica that holds its prompt in its cache, a new session
goes to the other, the live page (real headless Chromium) shows a row per replica, and when one
replica is killed with SIGKILL the requests that had not started are served by the other (no 5xx);
when it is back, the gateway's probe sends it work again."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from test_gateway import running_gateway

from helpers import died_message, free_ports
from splitserve.engine import Engine
from splitserve.gateway import GatewayConfig

pytestmark = [pytest.mark.engine]

# long enough that "most of the prompt came from the cache" cannot be chance, short enough to be
# cheap on one thread: a few hundred tokens (the figures below are fractions of its own count)
PROMPT = " ".join(f"word{i}" for i in range(80))
CHROMIUM = Path("/usr/bin/chromium")
SHOT = Path(__file__).resolve().parents[2] / "docs" / "ui" / "replicas-1400.png"


def page_rows(url: str) -> dict[str, dict[str, str]]:
    """The live page's replica rows in headless Chromium (name -> health, load, cached cell
    text); a screenshot goes to docs/ui/replicas-1400.png."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"{url}/ui")
            page.wait_for_selector("#replicas tbody tr[data-replica]", timeout=30_000)
            page.wait_for_timeout(1200)  # a second poll: the tokens/s window has two readings
            page.screenshot(path=str(SHOT), full_page=True)
            rows = page.eval_on_selector_all(
                "#replicas tbody tr[data-replica]",
                "rs => rs.map(r => [r.dataset.replica, r.dataset.health,"
                " r.querySelector('.load').textContent, r.querySelector('.cached').textContent])",
            )
        finally:
            browser.close()
    return {name: {"health": h, "load": load, "cached": cached} for name, h, load, cached in rows}


@contextmanager
def server(engine: Engine, model: Path, port: int) -> Iterator[subprocess.Popen[bytes]]:
    """llama-server on ``port`` (the caller may kill it); waits until it serves."""
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    log = tempfile.NamedTemporaryFile(prefix="replica-", suffix=".log", delete=False)
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
            "2048",
            "-np",
            "1",
            "-t",
            "1",
            "-ngl",
            "999",
            "--metrics",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise AssertionError(died_message("replica llama-server", proc.returncode, Path(log.name)))
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "replica llama-server did not become ready in 120 s"
            time.sleep(0.1)
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        log.close()
        os.unlink(log.name)


def prompt_tokens(port: int) -> float:
    """llama-server's own count of prompt tokens it processed (its Prometheus text)."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    m = re.search(r"^llamacpp:prompt_tokens_total (\S+)$", text, re.M)
    assert m, text[:500]
    return float(m.group(1))


def ask(url: str, session: str, extra: str = "") -> httpx.Response:
    return httpx.post(
        f"{url}/v1/chat/completions",
        headers={"X-Session-Id": session},
        timeout=300,
        json={"messages": [{"role": "user", "content": PROMPT + extra}], "max_tokens": 2, "temperature": 0},
    )


def test_sessions_stick_fail_over_and_come_back(engine: Engine, smollm2: Path) -> None:
    p1, p2 = free_ports(2)
    with server(engine, smollm2, p1) as r1, server(engine, smollm2, p2):
        cfg = GatewayConfig(engine_url=f"r1=http://127.0.0.1:{p1},r2=http://127.0.0.1:{p2}")
        with running_gateway(cfg) as url:
            first = ask(url, "agent-a")
            assert first.status_code == 200, first.text
            n = first.json()["usage"]["prompt_tokens"]
            assert n > 200, first.json()["usage"]
            on_r1, on_r2 = prompt_tokens(p1), prompt_tokens(p2)
            assert on_r1 >= n and on_r2 == 0  # the first session went to r1 (both idle: the first)
            again = ask(url, "agent-a", " and more")
            assert again.status_code == 200, again.text
            cached = again.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
            assert cached > 0.9 * n, again.json()["usage"]  # the same replica: its cache held the prompt
            assert prompt_tokens(p2) == 0
            other = ask(url, "agent-b")
            assert other.status_code == 200 and prompt_tokens(p2) >= n  # a new session: the other one

            if CHROMIUM.exists():  # the live page: a row per replica, with its health and cache
                rows = page_rows(url)
                assert set(rows) == {"r1", "r2"} and {r["health"] for r in rows.values()} == {"up"}
                assert rows["r1"]["cached"].strip().endswith("%"), rows  # agent-a's second turn hit
                assert rows["r1"]["load"].startswith("0"), rows

            os.killpg(r1.pid, signal.SIGKILL)
            r1.wait()
            answers = [ask(url, s, f" turn {i}") for i, s in enumerate(["agent-a", "agent-c", "agent-a", "agent-d"])]
            assert [a.status_code for a in answers] == [200] * 4, [a.text for a in answers if a.status_code != 200]
            health = httpx.get(f"{url}/health", timeout=30)
            assert health.status_code == 200  # one replica serves: the gateway is healthy

            with server(engine, smollm2, p1):  # r1 is back on its port (a supervisor would do this)
                before = prompt_tokens(p1)
                deadline = time.monotonic() + 60
                while prompt_tokens(p1) == before:
                    assert time.monotonic() < deadline, "the gateway never sent work to r1 again"
                    r = ask(url, f"new-{time.monotonic()}")
                    assert r.status_code == 200, r.text
                    time.sleep(0.2)
