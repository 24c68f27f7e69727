"""`splitserve tune` on the demo-shaped cluster (SmolLM2 over two local RPC workers, CPU) with a small
grid: the full grid first (`--grid`, on a running cluster, which is brought back afterwards), then the
search against it; the best spec loads as a valid spec and keeps the user's keys, the report lists
every point measured and the one the planner rules out."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import free_ports
from splitserve.bench import load_run
from splitserve.cluster import cluster_state_dir, down, load_spec, read_state, up

pytestmark = [pytest.mark.engine, pytest.mark.slow]

CLI = [sys.executable, "-m", "splitserve"]
GRID = [
    "--set",
    "ubatch=128,512,2048",
    "--set",
    "threads=1,2",
    "--set",
    "speculation=none,ngram-mod",
    "--prompt-tokens",
    "48",
    "--gen-tokens",
    "16",
]


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=900)


def spec_file(tmp_path: Path, model: Path, engine_root: Path) -> Path:
    """Two local workers with 0.2 GiB each for the planner: ubatch 2048's compute buffer does not fit."""
    w1, w2, head, gw = free_ports(4)
    path = tmp_path / "tunec.toml"
    path.write_text(f"""\
# the user's own spec: this comment stays
name = "tunec"
model = "{model}"
engine = "{engine_root}"

[[workers]]
name = "w1"
port = {w1}
memory_gib = 0.2

[[workers]]
name = "w2"
port = {w2}
memory_gib = 0.2

[server]
port = {head}
ctx_size = 1024     # small on purpose
tensor_split = [1, 1]

[gateway]
port = {gw}
""")
    return path


def test_tune_against_the_full_grid_on_the_demo_cluster(engine, smollm2, state_home, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = spec_file(tmp_path, smollm2, engine.root)
    spec = load_spec(path)
    up(spec, engine=engine)
    try:
        bad = run_cli("tune", "-c", str(path), "--set", "ubatch=128,lots")
        assert bad.returncode == 2 and "--set ubatch" in bad.stderr and "Traceback" not in bad.stderr
        assert read_state(cluster_state_dir(spec)) is not None  # bad input touched nothing

        dry = run_cli("tune", "-c", str(path), *GRID, "--grid", "--dry-run")
        assert dry.returncode == 0, dry.stderr
        assert "grid: 12 points, 8 allowed by the planner, 4 ruled out" in dry.stdout

        grid_out = tmp_path / "grid.json"
        res = run_cli("tune", "-c", str(path), *GRID, "--grid", "-o", str(grid_out))
        assert res.returncode == 0, res.stderr
        state = read_state(cluster_state_dir(spec))
        assert state is not None and state.phase == "ready"  # it was running: it is back, as it was
    finally:
        down(spec)
    grid = load_run(grid_out)
    g = grid.summary["tune"]
    assert g["mode"] == "grid" and g["runs"] == 8 == len(grid.points) and len(g["excluded"]) == 4
    assert all(p.values["ubatch"] != 2048 for p in grid.points)
    assert all(p.error is None and len([r for r in p.records if r.kind == "speed" and r.ok]) == 2 for p in grid.points)

    out = tmp_path / "tune.json"
    res = run_cli("tune", "-c", str(path), *GRID, "-o", str(out), "--compare", str(grid_out))
    assert res.returncode == 0, res.stderr
    assert read_state(cluster_state_dir(spec)) is None  # it was down before: down after
    run = load_run(out)
    t = run.summary["tune"]
    assert t["mode"] == "tune" and t["best"] and t["runs"] == len(run.points) <= 8
    for p in run.points:  # what each point ran with is what llama-server got
        argv = p.server["cluster"]["head_argv"]
        assert argv[argv.index("--ubatch-size") + 1] == str(p.values["ubatch"])
        assert argv[argv.index("--threads") + 1] == str(p.values["threads"])
        assert ("--spec-type" in argv) == (p.values["speculation"] != "none")

    best = out.with_suffix(".toml")
    text = best.read_text()
    assert "# the user's own spec: this comment stays" in text and "ctx_size = 1024     # small on purpose" in text
    tuned = load_spec(best)
    assert tuned.name == "tunec" and [w.memory_gib for w in tuned.workers] == [0.2, 0.2]
    assert tuned.server.ctx_size == 1024 and tuned.server.tensor_split == [1, 1]
    want = t["best"]
    assert (tuned.server.ubatch or 512) == want["ubatch"]
    assert tuned.server.threads == want["threads"]
    assert tuned.server.speculation == ([] if want["speculation"] == "none" else [want["speculation"]])

    report = (out.with_suffix("") / "report.md").read_text()
    for s in t["steps"]:
        p = s["point"]
        row = f"| {s['run']} | {s['axis'] or '–'} | {p['speculation']} | {p['threads']} | {p['ubatch']} |"
        assert row in report
    assert "will not fit" in report and "## Against the full grid" in report
    assert (out.with_suffix("") / "tune.png").read_bytes().startswith(b"\x89PNG")
    print(json.dumps({k: t[k] for k in ("runs", "best", "best_score", "start_score", "stopped")}))
