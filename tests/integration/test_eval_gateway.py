"""`splitserve eval run` against the demo model through the gateway: every turn and transcript
flows, and a run killed mid-way continues where it stopped when run again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import bare_server, serve_app
from splitserve.eval._records import read_records
from splitserve.gateway import GatewayConfig, create_app

pytestmark = [pytest.mark.engine, pytest.mark.slow]
FIXTURES = Path(__file__).parent.parent / "fixtures" / "eval" / "toolery"


@pytest.fixture(scope="module")
def gateway(engine, smollm2) -> Iterator[str]:  # type: ignore[no-untyped-def]
    with (
        bare_server(engine, smollm2, "--parallel", "2", "-t", "1", ctx=4096) as engine_url,
        serve_app(create_app(GatewayConfig(engine_url=engine_url))) as url,
    ):
        yield url


def eval_cmd(url: str, out: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "splitserve",
        "eval",
        "run",
        str(FIXTURES),
        "--url",
        url,
        "--max-tokens",
        "24",
        "--concurrency",
        "1",
        "-o",
        str(out),
        "--no-report",
    ]


def trial_lines(out: Path) -> list[dict]:
    if not (out / "run.jsonl").exists():
        return []
    return [r for r in read_records(out) if r["type"] == "trial"]


def test_demo_model_runs_the_fixtures_and_resumes_after_a_kill(gateway: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    env = {**os.environ, "COLUMNS": "120"}
    proc = subprocess.Popen(
        eval_cmd(gateway, out), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    deadline = time.monotonic() + 300
    while len(trial_lines(out)) < 2:
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
        assert time.monotonic() < deadline, "no trial finished in 300 s"
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    before = trial_lines(out)
    assert 2 <= len(before) < 8

    done = subprocess.run(eval_cmd(gateway, out), env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    after = trial_lines(out)
    keys = [(t["scenario"], t["trial"]) for t in after]
    assert len(keys) == len(set(keys)) == 8  # every fixture once, none twice
    assert after[: len(before)] == before  # what the killed run finished is kept as it was
    headers = [r for r in read_records(out) if r["type"] == "run"]
    assert [h["resumed"] for h in headers] == [False, True]
    assert headers[1]["remaining"] == 8 - len(before)
    for t in after:
        assert t["verdict"] in ("pass", "fail", "timeout")
        assert t["messages"][0]["role"] in ("system", "user") and t["turns"] >= 1
        if t["verdict"] != "timeout":
            assert t["messages"][-1]["role"] == "assistant" and t["completion_tokens"] > 0
    report = subprocess.run(
        [sys.executable, "-m", "splitserve", "eval", "report", str(out)], capture_output=True, text=True, timeout=120
    )
    assert report.returncode == 0, report.stderr
    assert (out / "report" / "report.md").read_text().count("|") > 10
