"""`bench speed` writes its report by default (Markdown and plots beside the run's JSON), in the
folder the live page searches, so the page's "Latest bench" shows figures and plots; with -c the
folder is bench-runs/ beside the spec, whatever folder bench ran in."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

import splitserve.bench
import splitserve.cli._bench as cli_bench
from splitserve.bench import run_path
from splitserve.cli._app import app
from splitserve.gateway._ui import find_runs

from .fakes import FakeServer

ARGS = ["bench", "speed", "--url", "http://fake:1", "--prompt-tokens", "20", "--gen-tokens", "3", "--repeat", "1"]


@pytest.fixture()
def fake_speed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    real = splitserve.bench.run_speed

    def fake_run_speed(*args: Any, **kwargs: Any) -> Any:
        return real(*args, **{**kwargs, "transport": FakeServer(slots=2).transport()})

    monkeypatch.setattr(splitserve.bench, "run_speed", fake_run_speed)
    monkeypatch.setattr(cli_bench, "console", Console(width=200, soft_wrap=True))
    monkeypatch.chdir(tmp_path)


def test_bench_speed_writes_its_report_by_default_where_the_page_finds_it(fake_speed: None, tmp_path: Path) -> None:
    r = CliRunner().invoke(app, ARGS)
    assert r.exit_code == 0, r.output
    (run,) = (tmp_path / "bench-runs").glob("*.json")
    report = run.with_suffix("")
    assert (report / "report.md").is_file() and list(report.glob("*.png"))
    assert f"report written to {Path('bench-runs') / run.stem / 'report.md'}" in r.stdout

    files: dict[str, Path] = {}
    found = find_runs([tmp_path], files)["bench"]
    assert found["images"] and all(files[i["id"]].suffix == ".png" for i in found["images"])
    assert any(line.startswith("|") for line in found["report"]), "the page gets the report's tables"
    assert found["headline"], "and the run's headline figures"


def test_no_report_writes_the_run_alone(fake_speed: None, tmp_path: Path) -> None:
    r = CliRunner().invoke(app, [*ARGS, "--no-report"])
    assert r.exit_code == 0, r.output
    (run,) = (tmp_path / "bench-runs").glob("*.json")
    assert not run.with_suffix("").exists() and "report written" not in r.stdout


def test_with_a_spec_the_runs_go_beside_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    spec = tmp_path / "cluster" / "spec.toml"
    assert run_path(None, "speed", spec).parent == spec.parent / "bench-runs"
    assert run_path(None, "speed").parent == Path("bench-runs")
    assert run_path(tmp_path / "x", "speed", spec).parent == tmp_path / "x"
    assert run_path(tmp_path / "r.json", "speed", spec) == tmp_path / "r.json"
