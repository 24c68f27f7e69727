"""What ``splitserve tune`` leaves to the library besides the search: the request of its options
(``tune_request``: the metric by its own name, exactly one workload) and ``tune --report``
(``rewrite_tune_report``: the report folder and best spec beside the run file)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from splitserve._errors import UsageError
from splitserve.bench import SpeedOptions, parse_workloads, plan_for, rewrite_tune_report, tune_request

from .test_tune import spec_file, tune


def options(workload: str) -> SpeedOptions:
    opts = SpeedOptions(prompt_tokens=[20], gen_tokens=4, concurrency=[1], repeat=2)
    opts.workloads = parse_workloads(workload)
    return opts


def test_the_request_names_the_metric_and_the_one_workload(tmp_path: Path) -> None:
    opts = options("chat")
    out = tmp_path / "t.json"
    req = tune_request(
        spec_file(tmp_path), opts, plan_for(opts), workload="chat", metric=" Prefill", axes=[], out=out, label="A"
    )
    assert (req.metric, req.workload, req.axes, req.out, req.label) == ("prefill", "chat", None, out, "A")
    assert (req.grid, req.confirm, req.min_gain, req.budget_runs) == (False, True, 0.02, None)
    req = tune_request(spec_file(tmp_path), opts, plan_for(opts), workload="chat", axes=["threads=1,2"], grid=True)
    assert (req.metric, req.axes, req.grid) == ("decode", ["threads=1,2"], True)


def test_a_request_refuses_an_unknown_metric_and_several_workloads(tmp_path: Path) -> None:
    opts = options("chat")
    with pytest.raises(UsageError, match="--metric 'speed': use one of decode"):
        tune_request(spec_file(tmp_path), opts, plan_for(opts), workload="chat", metric="speed")
    two = options("chat,copy")
    with pytest.raises(UsageError, match="--workload chat,copy: tune optimizes for one workload"):
        tune_request(spec_file(tmp_path), two, plan_for(two), workload="chat,copy")


def test_the_report_of_a_tune_run_is_rewritten_beside_it(tmp_path: Path) -> None:
    _run, path, _res, _r = tune(tmp_path, "tune")
    md = rewrite_tune_report(path)
    assert md == path.with_suffix("") / "report.md" and md.is_file()
    data = json.loads(path.read_text())
    del data["summary"]["tune"]
    other = tmp_path / "bench.json"
    other.write_text(json.dumps(data))
    with pytest.raises(UsageError, match=r"bench\.json: not a tune run"):
        rewrite_tune_report(other)
