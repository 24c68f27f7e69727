"""``bench.tune``, the library call behind ``splitserve tune``, driven without the command line: the
events it tells (point started, measured, failed, ruled out, budget spent, report written, best
found) and the files it writes, on the bench fakes (a fake restarter whose score is a function of
the point, the fake server)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from splitserve._errors import ClusterError
from splitserve.bench import (
    BestFound,
    BestSpecWritten,
    PointFailed,
    PointMeasured,
    PointRuledOut,
    PointStarted,
    ReportWritten,
    SpeedOptions,
    TuneEvent,
    TuneRequest,
    TuneStarted,
    TuneWarning,
    load_run,
    plan_for,
    prepare_tune,
    tune,
)
from splitserve.bench._tune_job import BudgetSpent, TuneResult
from splitserve.cluster import load_spec

from .test_tune import FakeRestarter, LandscapeServer, small_planner, small_score, spec_file

AXES = ["speculation=none,ngram-mod", "threads=1,2,4", "ubatch=128,512,2048"]


def request(tmp_path: Path, **kw: Any) -> TuneRequest:
    opts = SpeedOptions(prompt_tokens=[20], gen_tokens=4, concurrency=[1], repeat=2)
    return TuneRequest(
        spec_file(tmp_path), opts, plan_for(opts), "chat", axes=AXES, cores=(4, 4), out=tmp_path / "t.json", **kw
    )


def run(
    tmp_path: Path, restarter_kw: dict[str, Any] | None = None, **kw: Any
) -> tuple[TuneResult, list[TuneEvent], FakeRestarter]:
    req = request(tmp_path, **kw)
    events: list[TuneEvent] = []
    plan = dataclasses.replace(prepare_tune(req, events.append), check=small_planner)  # type: ignore[arg-type]  # a plain function stands in for the PlannerCheck
    server = LandscapeServer()
    restarter = FakeRestarter(server, small_score, **(restarter_kw or {}))
    result = tune(req, events.append, plan=plan, restarter=restarter, transport=server.transport())
    return result, events, restarter


def kinds(events: list[TuneEvent]) -> list[str]:
    return [type(e).__name__ for e in events]


def test_tune_tells_every_point_and_the_best_and_writes_the_run_spec_and_report(tmp_path: Path) -> None:
    result, events, restarter = run(tmp_path)
    started = [e for e in events if isinstance(e, PointStarted)]
    assert isinstance(events[0], TuneStarted) and events[0].path == tmp_path / "t.json"
    assert (
        events[0].size == 18
        and events[0].budget is not None
        and [a.name for a in events[0].axes]
        == [
            "speculation",
            "threads",
            "ubatch",
        ]
    )
    # every restart is told before its figure, in order, numbered
    body = kinds(events)[1 : kinds(events).index("ReportWritten")]
    assert [k for k in body if k != "PointRuledOut"] == ["PointStarted", "PointMeasured"] * len(restarter.started)
    assert [e.run for e in started] == list(range(1, len(restarter.started) + 1))
    assert [e.point for e in started] == restarter.started == [p.values for p in load_run(result.path).points]
    # what the planner rules out is told once and never started
    ruled = [e for e in events if isinstance(e, PointRuledOut)]
    assert ruled and all("will not fit" in e.why and "threads=4" in e.label for e in ruled)
    assert [e.n for e in ruled] == list(range(1, len(ruled) + 1))
    assert not any(small_planner(p) for p in restarter.started)
    measured = [e for e in events if isinstance(e, PointMeasured)]
    assert all(e.unit == "t/s" and e.step.measurement.ok for e in measured)
    # the end: the files, then the best point and the spec that holds it
    assert kinds(events)[-3:] == ["ReportWritten", "BestFound", "BestSpecWritten"]
    written, best, spec = events[-3], events[-2], events[-1]
    assert isinstance(written, ReportWritten) and isinstance(best, BestFound) and isinstance(spec, BestSpecWritten)
    assert written.run_path == result.path and written.report == result.report and result.report.is_file()
    assert best.point == result.search.best == {"speculation": "ngram-mod", "threads": 4, "ubatch": 512}
    assert best.score == pytest.approx(15.0) and best.start_score == pytest.approx(10.0)
    assert best.runs == len(restarter.started) and best.size == 18 and best.stopped == "converged"
    assert spec.path == result.best_spec == tmp_path / "t.toml"
    assert spec.changes == result.changes == {"speculation": "ngram-mod", "threads": 4}
    assert load_spec(spec.path).server.speculation == ["ngram-mod"]
    assert restarter.finished == 1 and not result.interrupted


def test_failed_points_and_the_spent_budget_are_told(tmp_path: Path) -> None:
    result, events, restarter = run(tmp_path, {"fail_on": {"speculation": "ngram-mod"}}, budget_runs=4)
    failed = [e for e in events if isinstance(e, PointFailed)]
    assert len(restarter.started) == 4 and result.search.runs == 4
    assert failed and all("did not start: llama-server exited during load" in e.error for e in failed)
    assert all(e.step.point["speculation"] == "ngram-mod" for e in failed)
    spent = [e for e in events if isinstance(e, BudgetSpent)]
    assert spent == [BudgetSpent(4, 4)]
    assert kinds(events).index("BudgetSpent") < kinds(events).index("ReportWritten")
    assert result.search.best is not None and result.search.best["speculation"] == "none"


def test_no_point_measured_raises_after_the_run_and_report_are_written(tmp_path: Path) -> None:
    events: list[TuneEvent] = []
    req = request(tmp_path)
    server = LandscapeServer()
    # no point's values hold a port: every point (the start first) fails to start
    restarter = FakeRestarter(server, small_score, fail_on={"port": None})
    with pytest.raises(ClusterError, match="tune: no point could be measured"):
        tune(req, events.append, restarter=restarter, transport=server.transport())
    assert "ReportWritten" in kinds(events) and "BestFound" not in kinds(events)
    assert (tmp_path / "t.json").is_file() and not (tmp_path / "t.toml").exists()


def test_an_interrupt_is_a_result_with_no_best_spec(tmp_path: Path) -> None:
    result, events, restarter = run(tmp_path, {"interrupt_at": 3})
    assert result.interrupted and restarter.finished == 1
    assert kinds(events)[-1] == "ReportWritten" and result.best_spec is None
    assert load_run(result.path).interrupted


def test_prepare_warns_of_prefill_figures_on_the_agent_workload(tmp_path: Path) -> None:
    events: list[TuneEvent] = []
    req = dataclasses.replace(request(tmp_path), workload="agent", metric="prefill")
    plan = prepare_tune(req, events.append)
    assert [type(e) for e in events] == [TuneWarning] and "prompt cache" in events[0].text  # type: ignore[union-attr]
    assert plan.metric.name == "prefill" and plan.axes[0].name == "ubatch"  # ubatch first for prefill
    assert not (tmp_path / "t.json").exists()


def test_the_command_renders_the_events_as_before(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    import splitserve.bench._cluster as cluster_mod
    import splitserve.bench._tune as tune_mod
    import splitserve.cli._tune  # noqa: F401  (registers tune)
    from splitserve.cli._app import app

    server = LandscapeServer()
    monkeypatch.setattr(cluster_mod, "ClusterRestarter", lambda *_a, **_k: FakeRestarter(server, small_score))
    client = tune_mod.BenchClient
    monkeypatch.setattr(tune_mod, "BenchClient", lambda t, transport, **k: client(t, transport=server.transport(), **k))
    spec = spec_file(tmp_path).source_file
    args = ["tune", "-c", str(spec), "--prompt-tokens", "20", "--gen-tokens", "4", "-o", str(tmp_path / "t.json")]
    axes = ["--set", "speculation=none,ngram-mod", "--set", "threads=4", "--set", "ubatch=512"]
    r = CliRunner().invoke(app, [*args, *axes])
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines() == [
        f"run written to {tmp_path / 't.json'}",
        f"report written to {tmp_path / 't' / 'report.md'}",
        "best: speculation=none, threads=4, ubatch=512: 10.00 t/s (start 10.00); 3 run(s), grid of 2 points, "
        "0 ruled out; stopped: budget",
        f"best spec written to {tmp_path / 't.toml'} (threads = 4)",
    ]
    assert r.stderr.splitlines()[1:] == [
        "tune: a grid of 2 points over speculation (2), threads (1), ubatch (1); at most 3 runs; "
        "metric decode t/s (server), workload chat",
        "run 1/3: speculation=none, threads=4, ubatch=512: restarting",
        "  10.00 t/s (10.00–10.00, n=2): start",
        "run 2/3: speculation=none, threads=4, ubatch=512: restarting",
        "  10.00 t/s (10.00–10.00, n=2): start re-measured",
        "run 3/3: speculation=ngram-mod, threads=4, ubatch=512: restarting",
        "  15.00 t/s (15.00–15.00, n=2): ahead: confirming",
    ]
    assert r.stderr.startswith("note: the model's headers could not be read")
