"""`eval run` end to end against scripted agents (an OpenAI-compatible test endpoint).

The oracle plays each scenario's ideal moves and must score 100%; the do-nothing agent
scores near 0; each flawed agent is classified as its failure cause; `compare` finds the
flips of a flawed variant and no difference between two runs of one agent.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import serve_app
from splitserve.eval import load_suite
from splitserve.eval._agents import agent_app
from splitserve.eval._records import read_records
from splitserve.eval._run import RunOptions, run

FIXTURES = Path(__file__).parent.parent / "fixtures" / "eval" / "toolery"


def trials(run_dir: Path) -> list[dict]:
    return [r for r in read_records(run_dir) if r["type"] == "trial"]


def run_agent(tmp: Path, suite: str, scenarios, policy: str = "oracle", flaws=None, **kw) -> Path:
    with serve_app(agent_app(scenarios, policy, flaws)) as url:
        opts = RunOptions(suite=suite, url=url, out=tmp, concurrency=kw.pop("concurrency", 4), **kw)
        run(opts, scenarios)
    return tmp


@pytest.fixture(scope="module")
def fixtures_suite():
    suite = load_suite(str(FIXTURES))
    assert not suite.problems, suite.problems
    return suite


def test_oracle_passes_every_toolery_format_fixture(tmp_path: Path, fixtures_suite) -> None:
    out = run_agent(tmp_path / "run", str(FIXTURES), fixtures_suite.scenarios, trials=2)
    got = trials(out)
    assert len(got) == 2 * len(fixtures_suite.scenarios)
    failed = [(t["scenario"], t["cause"], t["evidence"]) for t in got if t["verdict"] != "pass"]
    assert failed == []
    lines = [json.loads(x) for x in (out / "run.jsonl").read_text().splitlines()]
    assert lines[0]["type"] == "run" and lines[0]["decode_tps"] > 0 and lines[-1]["type"] == "end"
    first = next(t for t in got if t["scenario"] == "fx-hard-01-tdd-gated")
    roles = [m["role"] for m in first["messages"]]
    assert roles[:2] == ["user", "assistant"] and roles.count("tool") == 4
    assert [c["name"] for c in first["calls"]] == ["run_tests", "read_file", "edit_file", "run_tests"]
    assert first["calls"][-1]["result"] == "4 passed, 0 failed"  # the if_tool_called gate opened
    assert (out / "inspect").is_dir() and any((out / "inspect").iterdir())


def test_null_agent_fails_the_fixtures(tmp_path: Path, fixtures_suite) -> None:
    got = trials(run_agent(tmp_path / "run", "fx", fixtures_suite.scenarios, "null"))
    passed = [t["scenario"] for t in got if t["verdict"] == "pass"]
    assert passed == []
    assert {t["cause"] for t in got} <= {"missing_call", "wrong_answer"}


@pytest.mark.parametrize(("policy", "scenario", "cause"), [
    ("loop", "fx-hard-01-tdd-gated", "loop"),
    ("no_edit", "fx-hard-01-tdd-gated", "no_follow_through"),
    ("ignore_error", "fx-medium-01-retry-after-503", "no_retry_after_error"),
    ("memory", "fx-easy-01-parallel-weather", "missing_call"),
    ("leak_reasoning", "fx-medium-02-json-report", "format_violation"),
    ("unknown_tool", "fx-hard-02-injection", "hallucinated_tool"),
])
def test_each_flawed_agent_gets_its_cause(tmp_path: Path, fixtures_suite, policy: str, scenario: str,
                                           cause: str) -> None:
    chosen = [s for s in fixtures_suite.scenarios if s.id == scenario]
    (got,) = trials(run_agent(tmp_path / "run", "fx", chosen, policy))
    assert (got["verdict"], got["cause"]) == ("fail", cause), got["evidence"]
    assert got["evidence"]
