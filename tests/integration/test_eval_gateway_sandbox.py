"""`splitserve eval run` of built-in coding scenarios against the demo model (SmolLM2) through
the gateway: each trial plays in its own real workspace, is graded by its final state, and a
run killed mid-way continues where it stopped when run again."""

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
N = 3


@pytest.fixture(scope="module")
def gateway(engine, smollm2) -> Iterator[str]:  # type: ignore[no-untyped-def]
    with (
        bare_server(engine, smollm2, "--parallel", "2", "-t", "1", ctx=4096) as engine_url,
        serve_app(create_app(GatewayConfig(engine_url=engine_url))) as url,
    ):
        yield url


def eval_cmd(url: str, out: Path) -> list[str]:
    return [sys.executable, "-m", "splitserve", "eval", "run", "builtin", "--category", "coding",
            "--limit", str(N), "--url", url, "--max-tokens", "48", "--concurrency", "1",
            "-o", str(out), "--no-report"]  # fmt: skip


def trial_lines(out: Path) -> list[dict]:
    if not (out / "run.jsonl").exists():
        return []
    return [r for r in read_records(out) if r["type"] == "trial"]


def test_coding_scenarios_run_in_real_workspaces_and_resume_after_a_kill(gateway: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    env = {**os.environ, "COLUMNS": "120"}
    proc = subprocess.Popen(eval_cmd(gateway, out), env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 600
    while len(trial_lines(out)) < 1:
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
        assert time.monotonic() < deadline, "no trial finished in 600 s"
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    before = trial_lines(out)
    assert 1 <= len(before) < N

    done = subprocess.run(eval_cmd(gateway, out), env=env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-2000:]
    after = trial_lines(out)
    keys = [(t["scenario"], t["trial"]) for t in after]
    assert len(keys) == len(set(keys)) == N
    assert after[: len(before)] == before
    headers = [r for r in read_records(out) if r["type"] == "run"]
    assert [h["resumed"] for h in headers] == [False, True] and headers[0]["sandbox"] == "local"
    assert any(t["verdict"] != "timeout" for t in after)
    for t in after:
        assert t["category"] == "coding" and t["verdict"] in ("pass", "fail", "timeout")
        if t["verdict"] == "timeout":
            continue
        checks = {c["check"]: c for c in t["checks"]}
        # graded on the real workspace: the hidden tests ran on the final files
        assert "hidden tests" in checks["state_tests_pass"]["detail"]
        assert "state_matches_oracle" in checks
        for call in t["calls"]:
            if call["name"] == "run_tests" and call["result_kind"] != "error":
                assert "passed" in call["result"] or "failed" in call["result"] or "error" in call["result"]


def test_docker_is_refused_in_one_line_when_no_engine_runs(tmp_path: Path) -> None:
    from splitserve.eval._sandbox import docker_problem

    if docker_problem() is None:
        pytest.skip("a Docker engine runs here")
    done = subprocess.run([sys.executable, "-m", "splitserve", "eval", "run", "builtin", "--category", "coding",
                           "--limit", "1", "--url", "http://127.0.0.1:9", "--sandbox", "docker",
                           "-o", str(tmp_path / "run"), "--no-report"],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode != 0
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "--sandbox docker" in lines[0] and "Docker engine" in lines[0], done.stderr
