"""`eval run` end to end against scripted agents (an OpenAI-compatible test endpoint).

The oracle plays each scenario's ideal moves and must score 100%; the do-nothing agent
scores near 0; each flawed agent is classified as its failure cause; `compare` finds the
flips of a flawed variant and no difference between two runs of one agent.
"""

from __future__ import annotations

import json
from collections import Counter
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


@pytest.fixture(scope="module")
def builtin_suite():
    return load_suite("builtin")


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


@pytest.mark.parametrize(
    ("policy", "scenario", "cause"),
    [
        ("loop", "fx-hard-01-tdd-gated", "loop"),
        ("no_edit", "fx-hard-01-tdd-gated", "no_follow_through"),
        ("ignore_error", "fx-medium-01-retry-after-503", "no_retry_after_error"),
        ("memory", "fx-easy-01-parallel-weather", "missing_call"),
        ("leak_reasoning", "fx-medium-02-json-report", "format_violation"),
        ("unknown_tool", "fx-hard-02-injection", "hallucinated_tool"),
    ],
)
def test_each_flawed_agent_gets_its_cause(
    tmp_path: Path, fixtures_suite, policy: str, scenario: str, cause: str
) -> None:
    chosen = [s for s in fixtures_suite.scenarios if s.id == scenario]
    (got,) = trials(run_agent(tmp_path / "run", "fx", chosen, policy))
    assert (got["verdict"], got["cause"]) == ("fail", cause), got["evidence"]
    assert got["evidence"]


def one_per_path(scenarios: list) -> list:
    """The first scenario of each category with each workspace shape (none, or which of files,
    hidden tests, tables, pages and failing-once tools it seeds): each distinct path the runner
    takes a built-in trial through. That every one of the suite's scenarios passes by the oracle
    and fails when nothing is done is tests/unit/eval/test_builtin.py's, scenario by scenario,
    with the same scripted agent, workspaces and grading."""
    chosen: dict[tuple[str, tuple[str, ...]], object] = {}
    for s in scenarios:
        shape = tuple(sorted(k for k, v in (s.sandbox or {}).items() if v and k != "kind"))
        chosen.setdefault((s.category, shape), s)
    return list(chosen.values())


def test_builtin_suite_oracle_null_and_flaws(tmp_path: Path, builtin_suite) -> None:
    assert len(builtin_suite.scenarios) >= 300
    scenarios = one_per_path(builtin_suite.scenarios)
    assert len({s.category for s in scenarios}) == 11 and sum(bool(s.sandbox) for s in scenarios) >= 12
    oracle = trials(run_agent(tmp_path / "oracle", "builtin", scenarios, concurrency=8))
    assert len(oracle) == len(scenarios)
    failed = [(t["scenario"], t["cause"], t["evidence"]) for t in oracle if t["verdict"] != "pass"]
    assert failed == []
    null = trials(run_agent(tmp_path / "null", "builtin", scenarios, "null", concurrency=8))
    assert sum(t["verdict"] == "pass" for t in null) <= 0.05 * len(null)
    causes = Counter(t["cause"] for t in null)
    assert "wrong_tool" not in causes  # nothing was called, so nothing was the wrong tool


def test_compare_finds_the_flawed_scenarios_and_no_difference_between_equal_runs(tmp_path: Path, builtin_suite) -> None:
    from splitserve.eval._report import write_compare

    # Three whole runs: the scenarios without a workspace, and the workspace ones of the flawed
    # category (the oracle/null test above plays each workspace shape; a git repo and a
    # pytest run per trial would make this test several times slower and tell nothing more).
    scenarios = [s for s in builtin_suite.scenarios if not s.sandbox or s.category == "error_recovery"]
    flawed = {s.id: "memory" for s in scenarios if s.category in ("parallel_fanout", "error_recovery")}
    assert len(flawed) >= 30
    a = run_agent(tmp_path / "a", "builtin", scenarios, concurrency=8)
    b = run_agent(tmp_path / "b", "builtin", scenarios, flaws=flawed, concurrency=8)
    a2 = run_agent(tmp_path / "a2", "builtin", scenarios, concurrency=8)
    write_compare(a, b, tmp_path / "ab")
    got = json.loads((tmp_path / "ab" / "compare.json").read_text())
    total = got["total"]
    assert total["significant"] is True and total["delta_pp"] < -5
    assert sorted(f["scenario"] for f in total["flips_down"]) == sorted(flawed)
    assert total["flips_up"] == []
    assert "missing_call" in (tmp_path / "ab" / "compare.md").read_text()
    write_compare(a, a2, tmp_path / "aa")
    same = json.loads((tmp_path / "aa" / "compare.json").read_text())["total"]
    assert same["significant"] is False and same["delta_pp"] == 0
    assert same["flips_down"] == same["flips_up"] == []
