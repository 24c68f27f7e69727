"""The dashboard in a real headless Chromium (Debian's ``chromium``, driven by Playwright) on the
demo cluster (SmolLM2, two local RPC workers, `up --foreground` as a real process, a key on the
gateway): the page asks for the key once, shows both workers with their layer ranges and memory,
a streaming request's tokens/s, a killed worker as down and then back after the supervisor's
restart. A screenshot of each state goes to docs/ui/."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_ui_layout import check_layout, eval_run

from helpers import two_worker_spec, wait_dead
from splitserve.cluster import cluster_state_dir, load_spec, read_state

CHROMIUM = Path("/usr/bin/chromium")
playwright = pytest.importorskip("playwright.sync_api")
pytestmark = [
    pytest.mark.engine,
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium (scripts/setup.sh)"),
]

KEY = "sk-ui-browser-test"
SHOTS = Path(__file__).resolve().parents[2] / "docs" / "ui"
BENCH = Path(__file__).resolve().parents[2] / "docs" / "benchmarks" / "cpu-smollm2"


def _wait_ready(root: Path, sup: subprocess.Popen[str], after: float = 0.0, timeout: float = 180) -> dict[str, int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert sup.poll() is None, f"the supervisor exited: {sup.stderr.read() if sup.stderr else ''}"
        state = read_state(root)
        if state is not None and state.phase == "ready" and (state.ready_at or 0) > after:
            return {p.node: p.pid for p in state.processes}
        time.sleep(0.1)
    raise AssertionError("cluster not ready in time")


def _stream(endpoint: str, done: threading.Event) -> None:
    body = {
        "model": "smol",
        "stream": True,
        "max_tokens": 600,
        "temperature": 0.0,
        "messages": [{"role": "user", "content": "Write a very long story about a lighthouse keeper."}],
    }
    try:
        with httpx.stream(
            "POST",
            f"{endpoint}/v1/chat/completions",
            json=body,
            timeout=120,
            headers={"Authorization": f"Bearer {KEY}"},
        ) as resp:
            for _ in resp.iter_lines():
                pass
    except httpx.HTTPError:
        pass
    finally:
        done.set()


@pytest.fixture()
def cluster(engine, smollm2, state_home, tmp_path: Path):  # type: ignore[no-untyped-def]
    spec_file = two_worker_spec(
        tmp_path, smollm2, name="uidemo", gateway={"api_key": KEY, "model_name": "smol"}, parallel=2
    )
    # a slower watch, so that the page (polling once a second) sees the dead worker before the restart
    spec_file.write_text(spec_file.read_text() + "\n[supervise]\npoll_seconds = 3.0\nbackoff_initial = 1.0\n")
    (tmp_path / "bench-runs").mkdir()
    shutil.copy(BENCH / "speed.json", tmp_path / "bench-runs" / "speed.json")
    shutil.copytree(BENCH / "speed", tmp_path / "bench-runs" / "speed")
    root = cluster_state_dir(load_spec(spec_file))
    sup = subprocess.Popen(
        [sys.executable, "-m", "splitserve", "up", "-c", str(spec_file), "--foreground", "--skip-preflight"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    pids: dict[str, int] = {}
    try:
        pids = _wait_ready(root, sup)
        yield {"root": root, "sup": sup, "pids": pids, "endpoint": read_state(root).endpoint}  # type: ignore[union-attr]
    finally:
        if sup.poll() is None:
            os.kill(sup.pid, signal.SIGTERM)
        try:
            sup.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(sup.pid, signal.SIGKILL)
            sup.wait()
        state = read_state(root)
        wait_dead(list(pids.values()) + ([p.pid for p in state.processes] if state else []))


def test_the_dashboard_in_a_real_browser(cluster: dict[str, Any]) -> None:
    endpoint, root, pids = cluster["endpoint"], cluster["root"], cluster["pids"]
    SHOTS.mkdir(parents=True, exist_ok=True)
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        requests: list[str] = []
        page.on("request", lambda r: requests.append(r.url))
        t0 = time.monotonic()
        page.goto(f"{endpoint}/ui")
        expect(page.locator("#key-form")).to_be_visible(timeout=10_000)  # behind auth: it asks
        page.fill("#key-input", KEY)
        page.click("#key-form button")
        w1, w2 = page.locator("tr[data-node=w1]"), page.locator("tr[data-node=w2]")
        expect(w2).to_have_attribute("data-status", "up", timeout=15_000)
        print(f"first render with the key: {time.monotonic() - t0:.2f} s")
        expect(page.locator("#key-form")).to_be_hidden()
        for row in (w1, w2):
            assert re.fullmatch(r"\d+–\d+( \+out)?", row.locator("td.layers").inner_text().strip())
            assert "MiB" in row.inner_text() and "of " in row.inner_text()
        assert w1.locator("td.layers").inner_text().startswith("0–")
        expect(page.locator("#run-bench img").first).to_be_visible(timeout=15_000)  # the bench run's plot
        page.wait_for_timeout(1500)
        page.screenshot(path=str(SHOTS / "cluster.png"), full_page=True)

        # a request's tokens/s while it streams
        done = threading.Event()
        threading.Thread(target=_stream, args=(endpoint, done), daemon=True).start()
        tps = page.locator("tr[data-processing=true] td.tps")
        expect(tps.first).to_have_text(re.compile(r"^[1-9]\d*\.\d$|^0\.[1-9]$"), timeout=30_000)
        print(f"tokens/s shown while streaming: {tps.first.inner_text()}")
        page.screenshot(path=str(SHOTS / "streaming.png"), full_page=True)
        assert done.wait(120)

        # a killed worker: down, then back after the supervisor's restart. The supervisor is held
        # (SIGSTOP) while the page is checked: a restart stops the gateway too, and one that comes
        # before the page's next refresh would otherwise hide the dead worker (a race CI lost once).
        t_kill = time.time()
        os.kill(cluster["sup"].pid, signal.SIGSTOP)
        try:
            os.kill(pids["w1"], signal.SIGKILL)
            expect(w1).to_have_attribute("data-status", "down", timeout=10_000)
            page.screenshot(path=str(SHOTS / "worker-down.png"), full_page=True)
        finally:
            os.kill(cluster["sup"].pid, signal.SIGCONT)
        _wait_ready(root, cluster["sup"], after=t_kill)
        expect(w1).not_to_have_attribute("data-pid", str(pids["w1"]), timeout=60_000)
        expect(w1).to_have_attribute("data-status", "up", timeout=30_000)
        expect(page.locator("#warnings li.died").first).to_be_visible(timeout=10_000)
        page.wait_for_timeout(1500)
        page.screenshot(path=str(SHOTS / "restarted.png"), full_page=True)

        # the key: in this tab's sessionStorage only, never on the page, no request leaves the gateway
        assert KEY not in page.content()
        assert page.evaluate("() => sessionStorage.getItem('splitserve-key')") == KEY
        assert page.evaluate("() => localStorage.length") == 0
        assert all(u.startswith(endpoint) or u.startswith("blob:") for u in requests), requests
        browser.close()
    state = httpx.get(f"{endpoint}/ui/state", headers={"Authorization": f"Bearer {KEY}"}, timeout=10).json()
    assert KEY not in json.dumps(state)
    assert [n["node"] for n in state["nodes"]][:2] == ["w1", "w2"] and state["cluster"]["restarts"] >= 1


def test_the_page_at_1400_and_1920_px(cluster: dict[str, Any], tmp_path: Path) -> None:
    """What a person sees at two common widths on the real demo cluster, with a real `bench speed`
    run (its report written by default, beside the spec, though bench ran in another folder) and an
    eval report: the layout checks of test_ui_layout.py (nothing off the page or a card, the
    chart's labels inside it, plots at nearly their own size, a readable memory bar); screenshots
    docs/ui/cluster-1400.png and cluster-1920.png."""
    endpoint = cluster["endpoint"]
    spec_file = tmp_path / "uidemo.toml"
    for old in (tmp_path / "bench-runs").iterdir():  # the fixture's copied run: this test makes its own
        shutil.rmtree(old) if old.is_dir() else old.unlink()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    bench = subprocess.run(
        [
            sys.executable,
            "-m",
            "splitserve",
            "bench",
            "speed",
            "-c",
            str(spec_file),
            "--prompt-tokens",
            "64",
            "--gen-tokens",
            "8",
            "--repeat",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=elsewhere,
        env={**os.environ, "SPLITSERVE_API_KEY": KEY},
    )
    assert bench.returncode == 0, bench.stdout + bench.stderr
    (run,) = (tmp_path / "bench-runs").glob("speed-*.json")  # beside the spec, though bench ran elsewhere
    assert (run.with_suffix("") / "report.md").is_file()
    eval_run(tmp_path / "eval-runs" / "smol-builtin")
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        for width in (1400, 1920):
            page = browser.new_page(viewport={"width": width, "height": 1000})
            page.goto(f"{endpoint}/ui")
            page.fill("#key-input", KEY)
            page.click("#key-form button")
            expect(page.locator("tr[data-node=w2]")).to_have_attribute("data-status", "up", timeout=15_000)
            expect(page.locator("#run-bench img").first).to_be_visible(timeout=30_000)
            expect(page.locator("#run-eval img")).to_have_count(2, timeout=30_000)
            expect(page.locator("#run-bench")).to_contain_text(run.stem, timeout=30_000)  # runs: re-read every 10 s
            page.wait_for_timeout(1500)
            page.screenshot(path=str(SHOTS / f"cluster-{width}.png"), full_page=True)
            check_layout(page, width)
            page.close()
        browser.close()
