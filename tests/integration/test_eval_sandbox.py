"""`eval run` on the workspace scenarios end to end against the scripted oracle: each sample
gets its own inspect_ai sandbox, every tool call is a tool event in inspect's own log (read
back with ``read_eval_log``), and the oracle passes by its final state."""

from __future__ import annotations

from pathlib import Path

from inspect_ai.log import list_eval_logs, read_eval_log

from helpers import serve_app
from splitserve.eval import load_suite
from splitserve.eval._agents import agent_app
from splitserve.eval._records import read_records
from splitserve.eval._run import RunOptions, run


def test_workspace_scenarios_pass_and_inspects_log_holds_every_tool_call(tmp_path: Path) -> None:
    suite = load_suite("builtin").scenarios
    chosen = [s for s in suite if s.category == "coding"][::4] + [s for s in suite if (s.sandbox or {}).get("db")][:2]
    with serve_app(agent_app(chosen, "oracle")) as url:
        run(RunOptions(suite="builtin", url=url, out=tmp_path / "run", concurrency=4), chosen)
    trials = {r["scenario"]: r for r in read_records(tmp_path / "run") if r["type"] == "trial"}
    assert {sid: (t["verdict"], t["evidence"]) for sid, t in trials.items()} == {s.id: ("pass", "") for s in chosen}
    for t in trials.values():
        assert any(c["check"] == "state_matches_oracle" and c["passed"] for c in t["checks"])
    (log_info,) = list_eval_logs(str(tmp_path / "run" / "inspect"))
    log = read_eval_log(log_info, resolve_attachments=True)
    assert log.samples is not None and len(log.samples) == len(chosen)
    for sample in log.samples:
        sid = str(sample.id).split("#")[0]
        events = [e for e in sample.events if e.event == "tool"]
        assert [e.function for e in events] == [c["name"] for c in trials[sid]["calls"]], sid
        assert all(e.error is None for e in events)
        for event, call in zip(events, trials[sid]["calls"], strict=True):
            if isinstance(call["result"], str):
                assert str(event.result) == call["result"]
    coding = next(s for s in log.samples if "-code-" in str(s.id))
    run_tests = [e for e in coding.events if e.event == "tool" and e.function == "run_tests"]
    assert "passed" in str(run_tests[-1].result)  # real pytest output
    (end,) = [e for e in coding.events if e.event == "info" and e.source == "splitserve: workspace at the end"]
    edited = next(e.arguments["path"] for e in coding.events if e.event == "tool" and e.function == "edit_file")
    assert isinstance(end.data, dict)
    assert f"b/{edited}" in str(end.data["workspace_diff"]) and "passed" in str(end.data["hidden_tests"])
