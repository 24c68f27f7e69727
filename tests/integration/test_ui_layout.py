"""The live page's layout as a person sees it at 1400 and 1920 px, in a real headless Chromium
(Debian's ``chromium``, driven by Playwright), without an engine: the gateway's own dashboard
handlers (page, static files with their CSP, state, run files) serve a fixed view of the demo
cluster (two RPC workers, llama.cpp's memory figures, a streaming slot, five minutes of
throughput), the committed CPU bench run with the report `bench speed` writes by default, and an
eval report. Nothing may run off the page or off a card, the throughput chart's labels sit inside
it ("now" included), plots show at (nearly) their own size, and a worker's memory bar is filled
by its weights / KV / compute. The screenshots are docs/ui/page-1400.png and page-1920.png;
test_ui_browser.py checks the same on the real demo cluster."""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.routing import Route

from helpers import free_ports
from splitserve.cluster._state import ClusterState, ProcessRecord
from splitserve.gateway._ui import Dashboard, find_runs
from splitserve.gateway._ui_state import History, Snapshot, assemble

CHROMIUM = Path("/usr/bin/chromium")
playwright = pytest.importorskip("playwright.sync_api")
uvicorn = pytest.importorskip("uvicorn")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium (scripts/setup.sh)"),
]

DOCS = Path(__file__).resolve().parents[2] / "docs"
SHOTS = DOCS / "ui"
BENCH = DOCS / "benchmarks" / "cpu-smollm2"
MIB, GIB = 1 << 20, 1 << 30


def eval_run(folder: Path) -> Path:
    """A finished eval run's folder and report (a small builtin-suite run written by hand: the
    page's layout is under test, not a model), under a long label as real runs have."""
    from splitserve.eval._report import write_report

    tiers = {"e": "easy", "m": "medium", "h": "hard", "v": "very_hard"}
    plays = {"e1": "ppp", "e2": "ppw", "m1": "pww", "m2": "ppa", "h1": "paa", "h2": "tpx", "v1": "pwp"}
    lines: list[dict[str, Any]] = [
        {
            "type": "run",
            "suite": "builtin",
            "url": "http://127.0.0.1:8000",
            "model": "smol",
            "trials": 3,
            "concurrency": 2,
            "filters": {},
            "scenarios": list(plays),
            "decode_tps": 50.0,
            "time_scale": 1.0,
            "started_at": "2026-12-05T00:00:00+00:00",
            "splitserve": "0.1",
            "label": "SmolLM2-135M-Instruct Q4_1 on two RPC workers, builtin suite",
        }
    ]
    for sid, verdicts in plays.items():
        for k, v in enumerate(verdicts):
            verdict, cause = {
                "p": ("pass", None),
                "w": ("fail", "wrong_tool"),
                "a": ("fail", "bad_arguments"),
                "t": ("timeout", "timeout"),
                "x": ("error", "http_error"),
            }[v]
            lines.append(
                {
                    "type": "trial",
                    "scenario": sid,
                    "trial": k,
                    "tier": tiers[sid[0]],
                    "category": "files" if sid[0] in "eh" else "shell",
                    "verdict": verdict,
                    "cause": cause,
                    "evidence": None if v == "p" else f"{cause} in trial {k}",
                    "duration_s": 4.0,
                    "gen_s": 2.0,
                    "completion_tokens": 50,
                    "time_budget_s": 60.0,
                    "started_at": "2026-12-05T00:00:10+00:00",
                }
            )
    folder.mkdir(parents=True)
    (folder / "run.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    write_report(folder, folder / "report")
    return folder


LAYOUT = """() => {
  const out = {page: document.documentElement.scrollWidth - innerWidth, cards: [], tables: [], labels: [], imgs: []};
  for (const c of document.querySelectorAll(".card")) out.cards.push(c.scrollWidth - c.clientWidth);
  for (const t of document.querySelectorAll(".run .table-box")) out.tables.push(t.scrollWidth - t.clientWidth);
  const svg = document.getElementById("tput").getBoundingClientRect();
  for (const t of document.querySelectorAll("#tput text")) {
    const b = t.getBoundingClientRect();
    out.labels.push([t.textContent, b.left - svg.left, svg.right - b.right]);
  }
  for (const i of document.querySelectorAll(".run img")) out.imgs.push([i.alt, i.naturalWidth, i.getBoundingClientRect().width]);
  const rects = [...document.querySelectorAll("tr[data-node=w1] td.mem svg.bar")[0].querySelectorAll("rect")];
  out.w1_bar = rects.reduce((a, r) => a + parseFloat(r.getAttribute("width")), 0);
  return out;
}"""


def check_layout(page: Any, width: int) -> None:
    """What a person would notice, as numbers: see the module's docstring."""
    got = page.evaluate(LAYOUT)
    assert got["page"] <= 0, f"{width}px: the page scrolls sideways by {got['page']} px"
    assert max(got["cards"]) <= 1, f"{width}px: a card overflows: {got['cards']}"
    assert got["tables"] and max(got["tables"]) <= 1, f"{width}px: a report table overflows: {got['tables']}"
    labels = {text: (left, right) for text, left, right in got["labels"]}
    assert "now" in labels and "-5 min" in labels, got["labels"]
    assert all(min(lr) >= 0 for lr in labels.values()), f"{width}px: a chart label sticks out: {got['labels']}"
    assert len(got["imgs"]) >= 3, got["imgs"]
    for alt, natural, shown in got["imgs"]:
        assert shown >= 0.7 * natural, f"{width}px: {alt} shrunk to {shown:.0f} of its {natural} px"
    assert got["w1_bar"] >= 90, f"{width}px: w1's memory bar is {got['w1_bar']:.0f}% drawn"


def _proc(node: str, role: str, port: int) -> ProcessRecord:
    return ProcessRecord(
        node=node,
        role=role,
        host="local",
        pid=4000 + port % 1000,
        start_ticks=1,
        bind="127.0.0.1",
        port=port,
        log=f"/state/logs/{node}.log",
        argv=[],
    )


def demo_view(root: Path, files: dict[str, Path]) -> dict[str, Any]:
    """/ui/state of the demo cluster after five minutes, a request streaming, as the real assemble()
    makes it from readings like the real ones (SmolLM2-135M Q4_1 on two local RPC workers)."""
    state = ClusterState(
        name="uidemo",
        spec_file=str(root / "uidemo.toml"),
        model="/m/SmolLM2-135M-Instruct.Q4_1.gguf",
        endpoint="http://127.0.0.1:8000",
        engine="cpu",
        phase="ready",
        started_at=1000.0,
        ready_at=1003.0,
        processes=[
            _proc("gateway", "gateway", 8000),
            _proc("w1", "rpc", 50052),
            _proc("w2", "rpc", 50053),
            _proc("head", "server", 8080),
        ],
    )
    node = {"n_layers": 15, "memory_bytes": int(23.54 * GIB), "output_layer": False}
    plan = {
        "nodes": [
            node
            | {
                "name": "w1",
                "layers": [0, 15],
                "weights_bytes": int(33.8 * MIB),
                "kv_bytes": 24 * MIB,
                "compute_bytes": int(30.6 * MIB),
                "total_bytes": int(88.4 * MIB),
                "headroom_bytes": int(23.41 * GIB),
            },
            node
            | {
                "name": "w2",
                "layers": [16, 29],
                "weights_bytes": int(58.3 * MIB),
                "kv_bytes": 21 * MIB,
                "compute_bytes": int(20.5 * MIB),
                "total_bytes": int(99.8 * MIB),
                "output_layer": True,
                "headroom_bytes": int(23.44 * GIB),
            },
        ],
        "host": {"weights_bytes": int(28.7 * MIB), "compute_bytes": int(15.6 * MIB)},
        "decode_tps_upper_bound": 95.0,
        "tensor_split": [0.52, 0.48],
        "settings": {"ctx": 2048, "parallel": 2, "cache_type_k": "f16", "cache_type_v": "f16"},
        "warnings": [],
    }
    memory: list[dict[str, Any]] = [
        {
            "device": "RPC0[127.0.0.1:50052]",
            "endpoint": "127.0.0.1:50052",
            "model_bytes": int(33.8 * MIB),
            "kv_bytes": 24 * MIB,
            "compute_bytes": int(31.1 * MIB),
            "output_bytes": 0,
            "other_bytes": 0,
            "total_bytes": int(88.9 * MIB),
        },
        {
            "device": "RPC1[127.0.0.1:50053]",
            "endpoint": "127.0.0.1:50053",
            "model_bytes": int(58.3 * MIB),
            "kv_bytes": 21 * MIB,
            "compute_bytes": int(20.9 * MIB),
            "output_bytes": 0,
            "other_bytes": 0,
            "total_bytes": int(100.2 * MIB),
        },
        {
            "device": "CPU",
            "endpoint": None,
            "model_bytes": int(28.7 * MIB),
            "kv_bytes": 0,
            "compute_bytes": int(15.7 * MIB),
            "output_bytes": MIB,
            "other_bytes": 0,
            "total_bytes": int(45.4 * MIB),
        },
    ]
    runs = find_runs([root], files)
    history, snap = History(), Snapshot(now=0.0)
    for i, t in enumerate(range(1010, 1310, 2)):
        # one request after another, each ~50 s at ~15 t/s
        slots: list[dict[str, Any]] = [
            {
                "id": 0,
                "n_ctx": 1024,
                "is_processing": True,
                "id_task": i // 25,
                "n_prompt_tokens": 40,
                "n_prompt_tokens_processed": 40,
                "n_prompt_tokens_cache": 0,
                "next_token": [{"n_decoded": 30 * (i % 25)}],
            },
            {"id": 1, "n_ctx": 1024, "is_processing": False},
        ]
        snap = Snapshot(
            now=float(t),
            state=state,
            alive={"gateway": True, "w1": True, "w2": True, "head": True},
            memory=memory,
            plan=plan,
            slots=slots,
            runs=runs,
            links={
                "127.0.0.1:50052": {"rtt_ms": 0.011, "bytes_sent": 36e6},
                "127.0.0.1:50053": {"rtt_ms": 0.009, "bytes_sent": 61e6},
            },
        )
        history.update(snap)
    return assemble(snap, history)


class FixedDashboard(Dashboard):
    """The gateway's dashboard handlers over a fixed view (no engine, no key)."""

    def __init__(self, view: dict[str, Any], files: dict[str, Path]) -> None:
        gw = SimpleNamespace(
            config=SimpleNamespace(port=1, engine_url="http://127.0.0.1:1"), authenticate=lambda request: None
        )
        super().__init__(gw)  # type: ignore[arg-type]
        self.view = view
        self.reader.files = files

    async def _compute(self) -> dict[str, Any]:
        return self.view


@pytest.fixture()
def served(tmp_path: Path) -> Any:
    (tmp_path / "bench-runs").mkdir()
    shutil.copy(BENCH / "speed.json", tmp_path / "bench-runs" / "speed.json")
    shutil.copytree(BENCH / "speed", tmp_path / "bench-runs" / "speed")
    eval_run(tmp_path / "eval-runs" / "smol-builtin")
    files: dict[str, Path] = {}
    ui = FixedDashboard(demo_view(tmp_path, files), files)
    app = Starlette(
        routes=[
            Route("/ui", ui.page),
            Route("/ui/state", ui.state),
            Route("/ui/static/{name}", ui.static),
            Route("/ui/file/{id}", ui.file),
        ]
    )
    (port,) = free_ports(1)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "the page's server did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.mark.parametrize("width", [1400, 1920])
def test_the_page_reads_right_at_common_widths(served: str, width: int) -> None:
    from playwright.sync_api import expect, sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": width, "height": 1000})
        page.goto(f"{served}/ui")
        expect(page.locator("tr[data-node=w2]")).to_have_attribute("data-status", "up", timeout=15_000)
        expect(page.locator("#run-eval img")).to_have_count(2, timeout=15_000)
        expect(page.locator("#run-bench img")).to_have_count(1, timeout=15_000)
        page.wait_for_function("() => [...document.querySelectorAll('.run img')].every((i) => i.complete)")
        assert page.locator("#run-eval img").first.get_attribute("alt") == "tiers.png", "the report's order"
        page.wait_for_timeout(500)
        page.screenshot(path=str(SHOTS / f"page-{width}.png"), full_page=True)
        check_layout(page, width)
        rtt = page.locator("tr[data-node=w1] td.rtt")
        assert rtt.inner_text() == "0.011 ms" and rtt.get_attribute("data-rtt-status") == "pass"
        assert "lowest TCP round trip" in (rtt.get_attribute("title") or "")
        browser.close()
