"""Markdown tables, PNG plots and comparisons with ratios, from run files."""

from __future__ import annotations

from pathlib import Path

import pytest

from splitserve._errors import UsageError
from splitserve.bench import ContextOptions, SpeedOptions, Target, load_run, run_speed
from splitserve.bench._records import BenchRun, SweepPoint
from splitserve.bench._report import render_markdown, write_report
from splitserve.bench._run import run_context

from .fakes import FakeServer

PNG = b"\x89PNG\r\n\x1a\n"


def speed_run(tmp_path: Path, name: str, label: str) -> BenchRun:
    opts = SpeedOptions(prompt_tokens=[20, 40], gen_tokens=3, concurrency=[1, 2], repeat=1)
    run, _ = run_speed(
        Target(url="http://fake:1"),
        opts,
        tmp_path / f"{name}.json",
        label=label,
        transport=FakeServer(slots=2).transport(),
    )
    return run


def test_single_speed_report_has_every_cell_and_a_plot(tmp_path: Path) -> None:
    run = speed_run(tmp_path, "a", "cpu")
    md, plots = write_report([run], tmp_path / "rep", decode_bound=400.0)
    text = md.read_text()
    assert "| 20 | 1 |" in text and "| 40 | 2 |" in text
    assert "prefill t/s (server)" in text and "ITL p99 ms" in text and "TTF reasoning ms" in text
    assert "of the bound" in text
    assert [p.name for p in plots] == ["throughput-vs-concurrency.png"]
    assert plots[0].read_bytes().startswith(PNG)
    assert "](throughput-vs-concurrency.png)" in text


def test_two_runs_side_by_side_with_ratios(tmp_path: Path) -> None:
    a, b = speed_run(tmp_path, "a", "one"), speed_run(tmp_path, "b", "two")
    # make b's server twice as fast at decode
    for r in b.records:
        if r.timings:
            r.timings["predicted_ms"] /= 2
    text = render_markdown([a, b])
    assert "## Comparison" in text and "two / one" in text
    assert "2.00×" in text


def test_context_report_shows_grid_and_reasons(tmp_path: Path) -> None:
    opts = ContextOptions(lengths=[100, 200], depths=[0.5], control=True, max_tokens=4)
    run, _ = run_context(
        Target(url="http://fake:1"), opts, tmp_path / "c.json", transport=FakeServer(answer="no idea").transport()
    )
    md, plots = write_report([run], tmp_path / "rep")
    text = md.read_text()
    assert "Grid (rows: length, columns: depth)" in text and "| 100 | MISS | MISS |" in text
    assert "not found (answered 'no idea')" in text
    assert {p.name.split("-")[0] for p in plots} == {"prefill", "retrieval"}


def test_engine_and_sweep_runs_render(tmp_path: Path) -> None:
    eng = BenchRun(
        kind="engine",
        id="e1",
        engine_rows=[
            {"test": "pp512", "n_prompt": 512, "n_gen": 0, "avg_ts": 1000.0, "stddev_ts": 5.0, "n_ubatch": 512},
            {"test": "tg128", "n_prompt": 0, "n_gen": 128, "avg_ts": 50.0, "stddev_ts": 1.0, "n_ubatch": 512},
        ],
    )
    speed = speed_run(tmp_path, "s", "http")
    text = render_markdown([speed, eng])
    assert "| pp512 | 512 |" in text and "## Serving path cost" in text and "vs llama-bench tg 50.0 t/s" in text
    sweep = BenchRun(
        kind="sweep",
        id="sw",
        points=[
            SweepPoint(values={"ubatch": 512}, records=[r for r in speed.records if r.kind == "speed"]),
            SweepPoint(values={"ubatch": 1024}, error="port in use"),
        ],
    )
    md, plots = write_report([sweep], tmp_path / "sw")
    out = md.read_text()
    assert "| 512 | 20 | 1 | – | – | – | – | 1,500.0 |" in out, out
    assert "start failed: port in use" in out
    assert plots and plots[0].name.startswith("sweep-")


def test_load_run_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no such run file"):
        load_run(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"kind": "nonsense", "id": "x"}')
    with pytest.raises(UsageError, match=r"bad.json: not a bench run file \(kind"):
        load_run(bad)
