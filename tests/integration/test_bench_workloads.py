"""`bench speed|sweep --workload copy|edit|json|agent` against a real llama-server (and, for the
sweep, the demo-shaped cluster with its gateway) with SmolLM2 on the CPU."""

from __future__ import annotations

import itertools
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import bare_server, two_worker_spec
from splitserve.bench import load_run
from splitserve.bench._workloads import load_recording
from splitserve.cluster import cluster_state_dir, load_spec, read_state

pytestmark = [pytest.mark.engine]

CLI = [sys.executable, "-m", "splitserve"]

# A file SmolLM2-135M copies back faithfully: its greedy tokens are confident, so speculation's
# batched verification cannot tip a near tie (on the shipped 2 kB files the tiny model wanders,
# and there the CPU's batched numerics can change its greedy output; see docs/benchmarks).
POINT_PY = """class Point:
    def __init__(self, x, y):
        self.x = x
        self.y = y

    def move(self, dx, dy):
        self.x = self.x + dx
        self.y = self.y + dy

    def __repr__(self):
        return f"Point({self.x}, {self.y})"
"""


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def server(engine, smollm2) -> Iterator[str]:  # type: ignore[no-untyped-def]
    with bare_server(engine, smollm2, "--parallel", "1", ctx=2048) as url:
        yield url


@pytest.fixture()
def point_py(tmp_path: Path) -> Path:
    path = tmp_path / "point.py"
    path.write_text(POINT_PY)
    return path


def test_every_workload_against_llama_server(server: str, point_py: Path, tmp_path: Path) -> None:
    out = tmp_path / "wl.json"
    res = run_cli(
        "bench",
        "speed",
        "--url",
        server,
        "--workload",
        "copy,edit,json,agent",
        "--workload-file",
        str(point_py),
        "--repeat",
        "1",
        "--gen-tokens",
        "40",
        "-o",
        str(out),
        "--report",
    )
    assert res.returncode == 0, res.stderr
    run = load_run(out)
    assert run.complete
    recs = [r for r in run.records if r.kind != "calibration"]
    turns = len(load_recording().turns())
    assert [r.kind for r in recs] == ["copy", "edit", "json"] + ["agent"] * turns
    for r in recs:
        assert r.ok, r.error
        assert r.tokens_source == "usage" and r.timings and r.completion_tokens
        assert r.kind == "agent" or r.text  # an agent turn may end at once (the model's EOS)
        assert r.draft_n is None and r.agreement is None  # no speculation, no reference
        assert r.e2e_ms is not None and (r.kind == "agent" or r.ttf_token_ms is not None)
    assert recs[0].cell["item"] == "point.py" and not recs[0].cache_hit
    assert recs[1].cell["item"] == "point.py#rename0"
    # the agent replay: each turn's prompt extends the last, and from turn 2 on the engine's prompt
    # cache serves all of the previous turn's prompt
    agent = [r for r in recs if r.kind == "agent"]
    assert [r.cell["turn"] for r in agent] == list(range(1, turns + 1))
    assert not agent[0].cache_hit and (agent[0].cached_tokens or 0) < (agent[0].prompt_tokens or 0) / 2
    for prev, cur in itertools.pairwise(agent):
        assert (cur.prompt_tokens or 0) > (prev.prompt_tokens or 0)
        assert (cur.cached_tokens or 0) > (prev.cached_tokens or 0)
        assert (cur.cached_tokens or 0) >= (prev.prompt_tokens or 0) - 2, (prev, cur)
        assert cur.timings["cache_n"] == cur.cached_tokens  # type: ignore[index]
    turn_rows = run.summary["agent_turns"]
    assert [t["turn"] for t in turn_rows] == list(range(1, turns + 1))
    assert all(t["cached_fraction"] > 0.5 for t in turn_rows[1:] if t["turn"] != 3)  # turn 3 reads a file
    text = (out.with_suffix("") / "report.md").read_text()
    assert "### Workloads" in text and "### Agent turns" in text and "| copy | 1 | 1 | 1 | 0 |" in text
    for png in ("decode-per-workload.png", "agent-cached-per-turn.png"):
        assert (out.with_suffix("") / png).stat().st_size > 5000


def test_copy_with_ngram_mod_drafts_and_agrees_with_the_reference(
    engine,
    smollm2,
    server: str,  # type: ignore[no-untyped-def]
    point_py: Path,
    tmp_path: Path,
) -> None:
    base = tmp_path / "base.json"
    res = run_cli(
        "bench",
        "speed",
        "--url",
        server,
        "--workload",
        "copy",
        "--workload-file",
        str(point_py),
        "--repeat",
        "1",
        "--gen-tokens",
        "200",
        "-o",
        str(base),
        "--label",
        "no speculation",
    )
    assert res.returncode == 0, res.stderr
    (ref,) = [r for r in load_run(base).records if r.kind == "copy"]
    assert ref.ok and ref.finish_reason == "stop" and ref.draft_n is None
    with bare_server(engine, smollm2, "--parallel", "1", "--spec-type", "ngram-mod", ctx=2048) as url:
        spec = tmp_path / "mod.json"
        res = run_cli(
            "bench",
            "speed",
            "--url",
            url,
            "--workload",
            "copy",
            "--workload-file",
            str(point_py),
            "--repeat",
            "1",
            "--gen-tokens",
            "200",
            "-o",
            str(spec),
            "--reference",
            str(base),
            "--label",
            "ngram-mod",
        )
        assert res.returncode == 0, res.stderr
    run = load_run(spec)
    (rec,) = [r for r in run.records if r.kind == "copy"]
    assert rec.ok and rec.draft_n and rec.draft_n > 0 and rec.draft_accepted is not None
    assert rec.timings["draft_n"] == rec.draft_n  # type: ignore[index]
    assert rec.agreement == 1.0 and rec.exact_match is True and rec.text == ref.text, (rec.text, ref.text)
    assert rec.reference == "no speculation"
    assert any("agreement: 1 output(s) compared with no speculation" in n for n in run.notes)
    rep = run_cli("bench", "report", str(base), str(spec), "-o", str(tmp_path / "rep"))
    assert rep.returncode == 0, rep.stderr
    assert "### workloads (workload, concurrency)" in rep.stdout and "| ('copy', 1) |" in rep.stdout
    assert (tmp_path / "rep" / "decode-per-workload.png").stat().st_size > 5000


def test_sweep_over_speculation_runs_the_baseline_and_compares(
    engine,
    smollm2,
    state_home,  # type: ignore[no-untyped-def]
    point_py: Path,
    tmp_path: Path,
) -> None:
    path = two_worker_spec(tmp_path, smollm2, name="benchspec", ctx_size=2048)
    path.write_text(f'engine = "{engine.root}"\n' + path.read_text())
    out = tmp_path / "sweep.json"
    res = run_cli(
        "bench",
        "sweep",
        "-c",
        str(path),
        "--set",
        "speculation=ngram-mod",
        "--workload",
        "copy,agent",
        "--workload-file",
        str(point_py),
        "--gen-tokens",
        "160",
        "--repeat",
        "1",
        "-o",
        str(out),
        "--report",
    )
    assert res.returncode == 0, res.stderr
    run = load_run(out)
    assert [p.values for p in run.points] == [{"speculation": "none"}, {"speculation": "ngram-mod"}]
    base, mod = run.points
    assert base.error is None and mod.error is None
    assert "--spec-type" not in base.server["cluster"]["head_argv"]
    argv = mod.server["cluster"]["head_argv"]
    assert argv[argv.index("--spec-type") + 1] == "ngram-mod"
    assert mod.server["cluster"]["server"]["speculation"] == ["ngram-mod"]
    assert [r.id for r in base.records] == [r.id for r in mod.records]  # the same prompts at each point
    copy = next(r for r in mod.records if r.kind == "copy")
    assert copy.ok and (copy.draft_n or 0) > 0 and copy.agreement == 1.0 and copy.exact_match
    # the agent replay through the gateway: tools and history pass, the cache serves earlier turns
    agent = [r for r in mod.records if r.kind == "agent"]
    assert agent and all(r.ok for r in agent) and all(r.agreement is not None for r in agent)
    for prev, cur in itertools.pairwise(agent):
        assert (cur.cached_tokens or 0) > (prev.cached_tokens or 0)
    assert read_state(cluster_state_dir(load_spec(path))) is None
    text = (out.with_suffix("") / "report.md").read_text()
    assert "### Decode per workload and setting" in text and "| none | copy | 1 | 1 | 0 |" in text
    assert "| ngram-mod | copy | 1 | 1 | 0 |" in text and "baseline" in text
    assert list(out.with_suffix("").glob("sweep-workloads-*.png"))
