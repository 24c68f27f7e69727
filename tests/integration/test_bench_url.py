"""`bench speed|context|report --url` against a real llama-server with SmolLM2 on the CPU."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import bare_server, ctrl_c_default
from splitserve.bench import load_run

pytestmark = [pytest.mark.engine]

CLI = [sys.executable, "-m", "splitserve"]


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def server(engine, smollm2) -> Iterator[str]:  # type: ignore[no-untyped-def]
    with bare_server(engine, smollm2, "--parallel", "2", ctx=2048) as url:
        yield url


def test_speed_fills_every_field_and_reports(server: str, tmp_path: Path) -> None:
    out = tmp_path / "speed.json"
    res = run_cli(
        "bench",
        "speed",
        "--url",
        server,
        "--prompt-tokens",
        "64",
        "--gen-tokens",
        "8",
        "--concurrency",
        "1,2",
        "--repeat",
        "1",
        "-o",
        str(out),
        "--report",
        "--label",
        "cpu",
    )
    assert res.returncode == 0, res.stderr
    run = load_run(out)
    assert run.complete and run.server["total_slots"] == 2 and run.server["n_ctx"] == 1024
    assert run.server.get("build_info") and run.engine.get("build_info")
    assert run.machine["cpu_cores"] >= 1 and run.calibration["tokens_per_word"] > 0
    speed = [r for r in run.records if r.kind == "speed"]
    assert len(speed) == 3 and [r.kind for r in run.records].count("calibration") == 3
    for r in speed:
        assert r.ok, r.error
        assert r.completion_tokens == 8 and r.tokens_source == "usage" and r.finish_reason == "length"
        assert 40 <= (r.prompt_tokens or 0) <= 90
        assert r.cached_tokens is not None and not r.cache_hit
        assert None not in (r.ttf_chunk_ms, r.ttf_token_ms, r.ttf_content_ms, r.e2e_ms)
        assert r.ttf_reasoning_ms is None  # SmolLM2 does not reason
        assert r.ttf_chunk_ms <= r.ttf_token_ms <= r.e2e_ms  # type: ignore[operator]
        assert len(r.token_times_ms) >= 2 and r.token_times_ms == sorted(r.token_times_ms)
        for key in ("prompt_n", "prompt_ms", "predicted_n", "predicted_ms", "cache_n"):
            assert key in (r.timings or {}), key
        # the server's own counts agree with usage
        assert r.timings["prompt_n"] + r.timings["cache_n"] == r.prompt_tokens  # type: ignore[index]
    assert len({r.batch for r in speed if r.cell["concurrency"] == 2}) == 1
    report = out.with_suffix("") / "report.md"
    text = report.read_text()
    assert "| 64 | 1 |" in text and "| 64 | 2 |" in text and "cpu" in text
    assert (out.with_suffix("") / "throughput-vs-concurrency.png").stat().st_size > 1000


def test_cache_hit_detector_catches_a_repeated_prompt(server: str, tmp_path: Path) -> None:
    out = tmp_path / "reuse.json"
    res = run_cli(
        "bench",
        "speed",
        "--url",
        server,
        "--prompt-tokens",
        "64",
        "--gen-tokens",
        "2",
        "--repeat",
        "3",
        "--reuse-prompt",
        "-o",
        str(out),
    )
    assert res.returncode == 0, res.stderr
    speed = [r for r in load_run(out).records if r.kind == "speed"]
    assert [r.cache_hit for r in speed] == [False, True, True]
    assert all((r.cached_tokens or 0) >= (r.prompt_tokens or 0) - 2 for r in speed[1:])
    assert "hit the prompt cache" in res.stderr


def test_needle_found_at_short_length_and_control_is_a_miss(server: str, tmp_path: Path) -> None:
    # Each run draws a new random needle; a 135M model misreads an odd one on some CPUs, so up to
    # three runs (three different needles) may be needed for a find. The control must miss every time.
    answers = []
    for attempt in range(3):
        out = tmp_path / f"ctx{attempt}.json"
        res = run_cli(
            "bench",
            "context",
            "--url",
            server,
            "--lengths",
            "160",
            "--depths",
            "0.5",
            "--control",
            "--max-tokens",
            "24",
            "-o",
            str(out),
            "--report",
        )
        assert res.returncode == 0, res.stderr
        cells = {r.cell["depth"]: r for r in load_run(out).records if r.kind == "context"}
        assert cells["control"].extra["verdict"] == "miss"
        if cells[0.5].extra["verdict"] == "found":
            break
        assert cells[0.5].extra["reason"]  # a miss always says why
        answers.append((cells[0.5].extra["expected"], cells[0.5].text))
    assert cells[0.5].extra["verdict"] == "found", answers
    assert cells["control"].extra["verdict"] == "miss"
    assert cells["control"].extra["reason"]
    assert all(r.timings and r.timings["prompt_n"] > 100 and not r.cache_hit for r in cells.values())
    text = (out.with_suffix("") / "report.md").read_text()
    assert "| 160 | found | MISS |" in text


def test_length_beyond_the_server_context_is_skipped_not_sent(server: str, tmp_path: Path) -> None:
    out = tmp_path / "long.json"
    res = run_cli("bench", "context", "--url", server, "--lengths", "4k", "--depths", "0.5", "-o", str(out))
    assert res.returncode == 0, res.stderr
    (cell,) = [r for r in load_run(out).records if r.kind == "context"]
    assert cell.extra["verdict"] == "skipped" and "n_ctx 1024" in (cell.error or "")


def test_completions_api(server: str, tmp_path: Path) -> None:
    out = tmp_path / "cmpl.json"
    res = run_cli(
        "bench",
        "speed",
        "--url",
        server + "/v1",
        "--api",
        "completions",
        "--prompt-tokens",
        "32",
        "--gen-tokens",
        "4",
        "--repeat",
        "1",
        "-o",
        str(out),
    )
    assert res.returncode == 0, res.stderr
    (r,) = [r for r in load_run(out).records if r.kind == "speed"]
    assert r.ok and r.completion_tokens == 4 and r.timings and r.ttf_content_ms is not None


def test_ctrl_c_keeps_what_was_measured(server: str, tmp_path: Path) -> None:
    out = tmp_path / "int.json"
    proc = subprocess.Popen(
        [
            *CLI,
            "bench",
            "speed",
            "--url",
            server,
            "--prompt-tokens",
            "32",
            "--gen-tokens",
            "4",
            "--repeat",
            "50",
            "-o",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=ctrl_c_default,
    )
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                if len(json.loads(out.read_text())["records"]) >= 4:
                    break
            except (FileNotFoundError, ValueError, KeyError):
                pass
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr and str(out) in stderr
    run = load_run(out)
    assert run.interrupted and not run.complete
    assert 4 <= len(run.records) < 52
    # the report renders a partial run and says so
    res = run_cli("bench", "report", str(out), "-o", str(tmp_path / "rep"), "--no-plots")
    assert res.returncode == 0 and "interrupted (partial)" in res.stdout


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    res = run_cli("bench", "speed", "--url", "http://127.0.0.1:9", "-o", str(tmp_path / "x.json"))
    assert res.returncode != 0 and "Traceback" not in res.stderr
    assert "cannot reach http://127.0.0.1:9/v1" in res.stderr
    res = run_cli("bench", "speed")
    assert res.returncode == 2 and "give exactly one of --url URL or -c cluster.toml" in res.stderr
    res = run_cli("bench", "report", str(tmp_path / "missing.json"))
    assert res.returncode == 2 and "no such run file" in res.stderr
