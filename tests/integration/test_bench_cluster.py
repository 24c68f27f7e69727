"""`bench speed|engine|sweep -c` against the demo-shaped cluster (SmolLM2 over two local RPC workers)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from helpers import two_worker_spec
from splitserve.bench import load_run
from splitserve.cluster import cluster_state_dir, down, load_spec, read_state, up

pytestmark = [pytest.mark.engine]

CLI = [sys.executable, "-m", "splitserve"]


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=900)


def spec_file(tmp_path: Path, model: Path, engine_root: Path, name: str) -> Path:
    path = two_worker_spec(tmp_path, model, name=name, ctx_size=1024)
    path.write_text(f'engine = "{engine_root}"\n' + path.read_text())
    return path


def test_speed_and_engine_bench_on_a_running_cluster(engine, smollm2, state_home, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = spec_file(tmp_path, smollm2, engine.root, "benchc")
    spec = load_spec(path)
    up(spec, engine=engine)
    try:
        out = tmp_path / "speed.json"
        res = run_cli(
            "bench",
            "speed",
            "-c",
            str(path),
            "--prompt-tokens",
            "48",
            "--gen-tokens",
            "4",
            "--repeat",
            "1",
            "-o",
            str(out),
        )
        assert res.returncode == 0, res.stderr
        run = load_run(out)
        assert run.target["cluster"]["name"] == "benchc" and len(run.target["cluster"]["workers"]) == 2
        assert run.engine.get("bin_dir") and run.server["n_ctx"] == 1024
        (r,) = [r for r in run.records if r.kind == "speed"]
        assert r.ok and r.completion_tokens == 4 and r.timings and not r.cache_hit

        eout = tmp_path / "engine.json"
        res = run_cli("bench", "engine", "-c", str(path), "-p", "32", "-n", "4", "-r", "1", "-o", str(eout))
        assert res.returncode == 0, res.stderr
        erun = load_run(eout)
        assert [row["test"] for row in erun.engine_rows] == ["pp32", "tg4"]
        assert all(row["avg_ts"] > 0 and "RPC" in str(row.get("backends")) for row in erun.engine_rows)
        assert "--rpc" in erun.settings["argv"] and erun.target["cluster"]["name"] == "benchc"
        # the head was stopped for llama-bench and is back, serving
        state = read_state(cluster_state_dir(spec))
        assert state is not None and state.phase == "ready"
        chat = httpx.post(
            f"{state.endpoint}/v1/chat/completions",
            timeout=120,
            json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2},
        )
        assert chat.status_code == 200

        rep = run_cli("bench", "report", str(out), str(eout), "-o", str(tmp_path / "rep"))
        assert rep.returncode == 0, rep.stderr
        assert "## Serving path cost" in rep.stdout and "vs llama-bench tg" in rep.stdout
    finally:
        down(spec)


def test_sweep_restarts_the_cluster_per_point(engine, smollm2, state_home, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = spec_file(tmp_path, smollm2, engine.root, "benchs")
    out = tmp_path / "sweep.json"
    res = run_cli(
        "bench",
        "sweep",
        "-c",
        str(path),
        "--set",
        "ubatch=32,64",
        "--prompt-tokens",
        "48",
        "--gen-tokens",
        "4",
        "--repeat",
        "1",
        "-o",
        str(out),
        "--report",
    )
    assert res.returncode == 0, res.stderr
    run = load_run(out)
    assert [p.values for p in run.points] == [{"ubatch": 32}, {"ubatch": 64}]
    for p, ub in zip(run.points, (32, 64)):
        assert p.error is None
        assert p.server["cluster"]["server"]["ubatch"] == ub and p.server["n_ctx"] == 1024
        speed = [r for r in p.records if r.kind == "speed"]
        assert len(speed) == 1 and speed[0].ok and speed[0].cell["ubatch"] == ub
        argv = p.server["cluster"]["head_argv"]
        assert argv[argv.index("--ubatch-size") + 1] == str(ub)
        assert p.server["cluster"]["effective"]["n_ubatch"] == ub  # what the head's context really got
    assert any("the cluster is down" in n for n in run.notes)
    assert read_state(cluster_state_dir(load_spec(path))) is None
    text = (out.with_suffix("") / "report.md").read_text()
    assert "| 32 | 48 | 1 | 1024 | 1 | 32 |" in text and "| 64 | 48 | 1 | 1024 | 1 | 64 |" in text
    assert list(out.with_suffix("").glob("sweep-*.png"))


def test_sweep_rejects_a_bad_setting_before_restarting(engine, smollm2, state_home, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = spec_file(tmp_path, smollm2, engine.root, "benchbad")
    res = run_cli("bench", "sweep", "-c", str(path), "--set", "ubatch=512,big")
    assert res.returncode == 2 and "--set ubatch" in res.stderr and "Traceback" not in res.stderr
