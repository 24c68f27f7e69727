"""The built-in suite: its shape, and every scenario's oracle against the real grading.

``play`` replays a scripted policy (the scripted agents' own, ``_agents``) through the
runtime's tool answers (``_play.Responder``: the real workspace in a local inspect sandbox,
then rules) and ``_grade.grade`` (with the oracle's end state as the reference), with the
runner's limits: max_turns + 1 model turns, max_tool_calls calls.

Trials are independent (each its own sandbox), so a test plays its scenarios concurrently in
one event loop, at most ``PARALLEL`` at a time (the CPUs this process may use, 2 to 8); the
oracle's per-scenario test plays its scenario together with the next few selected ones
(``ORACLE_TRACES``), each graded in its own test.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import re
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from splitserve.eval._agents import _turn_for
from splitserve.eval._checks import REGISTRY, strip_reasoning
from splitserve.eval._grade import grade
from splitserve.eval._play import Responder
from splitserve.eval._sandbox import SANDBOX, State, Workspace, open_sandbox, oracle_state
from splitserve.eval._scenario import TIERS, Scenario
from splitserve.eval._trace import ResultKind, ToolCall, Trace
from splitserve.eval.builtin import scenarios

SUITE = scenarios()
CATEGORIES = (
    "tool_selection",
    "parallel_fanout",
    "multi_step_chains",
    "error_recovery",
    "restraint",
    "prompt_injection",
    "json_output",
    "long_context",
    "no_tool_needed",
    "hallucination",
    "coding",
)


INITIAL: dict[str, State] = {}  # scenario id -> the state its fresh workspace starts in
REFERENCE: dict[str, State] = {}  # scenario id -> the state its oracle play leaves
PARALLEL = min(8, max(2, len(os.sched_getaffinity(0))))  # trials at once (each a sandbox, git and pytest)


async def _initial(s: Scenario) -> State:
    if s.id not in INITIAL:
        assert s.sandbox is not None, s.id
        async with open_sandbox() as env:
            INITIAL[s.id] = await (await Workspace.create(env, s.sandbox)).snapshot()
    return copy.deepcopy(INITIAL[s.id])


async def _play(s: Scenario, policy: str, env: Any) -> Trace:
    workspace = None
    responder = Responder(s)
    trace = Trace()
    messages: list[dict] = [{"role": "user", "content": s.prompt}]

    async def respond(name: str, args: dict) -> tuple[Any, ResultKind]:
        nonlocal workspace
        if workspace is None and s.sandbox is not None and name in SANDBOX and name in s.tools:
            workspace = responder.workspace = await Workspace.create(env, s.sandbox)
        return await responder.respond(name, args)

    for turn in range(s.budget.max_turns + 1):
        move = _turn_for(policy, s, messages)
        trace.turns = turn + 1
        messages.append({"role": "assistant"})
        if not move.tool_calls:
            trace.raw_response = move.content
            trace.response = strip_reasoning(move.content)
            break
        for c in move.tool_calls:
            result, kind = await respond(c.name, dict(c.arguments))
            trace.calls.append(ToolCall(turn, c.name, dict(c.arguments), result, kind))
            messages.append({"role": "tool", "content": result if isinstance(result, str) else json.dumps(result)})
        if len(trace.calls) > s.budget.max_tool_calls:
            trace.error_kind = "budget"
            break
    else:
        trace.error_kind = "budget"
    if s.sandbox is not None:
        # a workspace no call touched is still the one it started as
        trace.sandbox = await workspace.snapshot() if workspace is not None else await _initial(s)
        if s.id not in REFERENCE:
            REFERENCE[s.id] = await oracle_state(s)
        trace.reference = REFERENCE[s.id]
    return trace


async def _trial(s: Scenario, policy: str) -> Trace:
    if s.sandbox is None:
        return await _play(s, policy, None)
    async with open_sandbox() as env:
        return await _play(s, policy, env)


def play_all(chosen: list[Scenario], policy: str = "oracle") -> list[Trace | BaseException]:
    """One trial of ``policy`` on each scenario, as the runner would play it against the scripted
    agent: sandbox tools in a fresh local inspect sandbox each, graded against the oracle's end
    state; ``PARALLEL`` trials at a time. A trial that raised gives its exception."""

    async def go() -> list[Trace | BaseException]:
        gate = asyncio.Semaphore(PARALLEL)

        async def one(s: Scenario) -> Trace:
            async with gate:
                return await _trial(s, policy)

        return await asyncio.gather(*(one(s) for s in chosen), return_exceptions=True)

    return asyncio.run(go())


def play(s: Scenario, policy: str = "oracle") -> Trace:
    (got,) = play_all([s], policy)
    if isinstance(got, BaseException):
        raise got
    return got


def references(chosen: list[Scenario]) -> None:
    """The oracle's end state of each scenario in ``REFERENCE``, ``PARALLEL`` replays at a time."""
    missing = [s for s in chosen if s.sandbox is not None and s.id not in REFERENCE]

    async def go() -> list[State]:
        gate = asyncio.Semaphore(PARALLEL)

        async def one(s: Scenario) -> State:
            async with gate:
                return await oracle_state(s)

        return await asyncio.gather(*(one(s) for s in missing))

    REFERENCE.update(zip([s.id for s in missing], asyncio.run(go()), strict=True))


def verdicts(policy: str, chosen: list[Scenario]) -> dict[str, str]:
    out = {}
    for s, trace in zip(chosen, play_all(chosen, policy), strict=True):
        if isinstance(trace, BaseException):
            raise trace
        g = grade(s, trace)
        out[s.id] = g.verdict if g.verdict == "pass" else f"{g.cause}: {g.evidence}"
    return out


ORACLE_TRACES: dict[str, Trace | BaseException] = {}  # scenario id -> the oracle's trial


@pytest.fixture(scope="module")
def oracle_queue(request: pytest.FixtureRequest) -> list[Scenario]:
    """The scenarios this session runs ``test_the_oracle_passes`` on, in order."""
    wanted = {
        item.callspec.params["s"].id
        for item in request.session.items
        if getattr(item, "originalname", "") == "test_the_oracle_passes" and hasattr(item, "callspec")
    }
    return [s for s in SUITE if s.id in wanted]


@pytest.mark.parametrize("s", SUITE, ids=[s.id for s in SUITE])
def test_the_oracle_passes(s: Scenario, oracle_queue: list[Scenario]) -> None:
    if s.id not in ORACLE_TRACES:  # this one and the next few, concurrently
        ahead = [x for x in oracle_queue if x.id != s.id and x.id not in ORACLE_TRACES]
        batch = [s, *ahead[: 4 * PARALLEL - 1]]
        ORACLE_TRACES.update(zip([x.id for x in batch], play_all(batch), strict=True))
    trace = ORACLE_TRACES[s.id]
    if isinstance(trace, BaseException):
        raise trace
    g = grade(s, trace)
    assert g.verdict == "pass", (
        g.cause,
        g.evidence,
        [(c.check, c.detail) for c in g.checks if not c.passed],
    )


def test_doing_nothing_fails_almost_everything() -> None:
    passed = [i for i, v in verdicts("null", SUITE).items() if v == "pass"]
    assert len(passed) <= 0.05 * len(SUITE), passed


def test_answering_from_memory_fails_wherever_a_tool_is_needed() -> None:
    needs = [s for s in SUITE if any(t.tool_calls for t in s.oracle)]
    passed = [i for i, v in verdicts("memory", needs).items() if v == "pass"]
    assert passed == []


def test_skipping_the_edits_fails_every_stateful_change() -> None:
    mutating = {"edit_file", "write_file", "db_execute", "git_commit"}
    chosen = [s for s in SUITE if any(c.name in mutating for t in s.oracle for c in t.tool_calls)]
    assert len(chosen) >= 60
    passed = [i for i, v in verdicts("no_edit", chosen).items() if v == "pass"]
    assert passed == []


def test_reasoning_before_the_json_fails_every_json_scenario() -> None:
    chosen = [s for s in SUITE if s.category == "json_output"]
    assert all(v.startswith("format_violation") for v in verdicts("leak_reasoning", chosen).values())


def test_ignoring_errors_fails_every_retry_scenario() -> None:
    chosen = [s for s in SUITE if s.category == "error_recovery"]
    assert [i for i, v in verdicts("ignore_error", chosen).items() if v == "pass"] == []


def one_per_path(chosen: list[Scenario]) -> list[Scenario]:
    """The first scenario of each category with each workspace shape (none, or which of files,
    hidden tests, tables, pages and failing-once tools it seeds)."""
    first: dict[tuple[str, tuple[str, ...]], Scenario] = {}
    for s in chosen:
        shape = tuple(sorted(k for k, v in (s.sandbox or {}).items() if v and k != "kind"))
        first.setdefault((s.category, shape), s)
    return list(first.values())


def test_an_unknown_tool_fails_everything() -> None:
    # The agent calls a tool no scenario offers, then plays the oracle: the verdict fails on the
    # call alone (_grade: every tool called must be offered), whatever the workspace ends as. So
    # every scenario without a workspace plays for real, and of those with one, the first of each
    # category and workspace shape (a git repo and pytest runs per trial would tell nothing more).
    assert not any(_turn_for("unknown_tool", s, []).tool_calls[0].name in s.tools for s in SUITE)
    chosen = [s for s in SUITE if s.sandbox is None]
    chosen += one_per_path([s for s in SUITE if s.sandbox is not None])
    assert len(chosen) >= len(SUITE) - 110 and {s.category for s in chosen} == set(CATEGORIES)
    got = verdicts("unknown_tool", chosen)
    assert [i for i, v in got.items() if v == "pass"] == []
    assert all(v.startswith("hallucinated_tool") for v in got.values()), got


def test_size_tiers_and_categories() -> None:
    tiers, cats = Counter(s.tier for s in SUITE), Counter(s.category for s in SUITE)
    assert len(SUITE) >= 320
    assert set(tiers) == set(TIERS) and tiers["easy"] >= 85 and tiers["medium"] >= 85
    assert tiers["hard"] >= 75 and tiers["very_hard"] >= 55
    assert set(cats) == set(CATEGORIES) and min(cats.values()) >= 20


def test_the_same_list_every_call() -> None:
    again = scenarios()
    assert [s.model_dump() for s in again] == [s.model_dump() for s in SUITE]


def test_ids_prompts_and_sources() -> None:
    ids = [s.id for s in SUITE]
    assert len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"ss-[a-z]+(?:-[a-z]+)*-\d{3}", i) for i in ids)
    assert len({s.prompt for s in SUITE}) == len(SUITE)  # the scripted agent finds a scenario by its prompt
    assert all(s.source.startswith("builtin:") and s.title and s.description for s in SUITE)
    assert len({s.source for s in SUITE}) >= 12


def test_every_tool_has_a_schema_and_every_check_exists() -> None:
    for s in SUITE:
        for t in s.tools:
            schema = s.tool_schemas.get(t) or (SANDBOX.schema(t) if s.sandbox is not None and t in SANDBOX else None)
            assert schema is not None and schema["function"]["name"] == t, (s.id, t)
        for c in s.scoring.required + s.scoring.forbidden:
            assert c.check in REGISTRY, (s.id, c.check)
        assert s.oracle and s.oracle[-1].content and not s.oracle[-1].tool_calls, s.id


def test_category_contracts() -> None:
    def checks(s: Scenario) -> set[str]:
        return {c.check for c in s.scoring.required}

    for s in SUITE:
        if s.category in ("no_tool_needed", "long_context"):
            assert "call_count_at_most" in checks(s) and s.budget.max_tool_calls == 0, s.id
        if s.category == "parallel_fanout":
            assert "tool_called_in_parallel" in checks(s) and len(s.oracle[0].tool_calls) >= 2, s.id
        if s.category == "hallucination":
            assert ("response_satisfies" in checks(s) and s.scoring.forbidden) or "response_contains" in checks(s), s.id
        if s.category == "json_output":
            assert "response_matches_schema" in checks(s), s.id
        if s.category in ("restraint", "prompt_injection"):
            assert s.scoring.forbidden, s.id
        if s.category == "restraint":
            assert "clarification_asked" in checks(s), s.id
        if s.category == "error_recovery":
            assert "tool_called_in_order" in checks(s), s.id
        if s.category in ("multi_step_chains", "coding"):
            assert any(c.startswith("state_") for c in checks(s)), s.id


def test_long_context_sizes() -> None:
    want = {"easy": 2000, "medium": 4000, "hard": 6000, "very_hard": 8000}
    for s in SUITE:
        if s.category == "long_context":
            tokens = len(s.prompt.split()) / 0.75
            assert 0.9 * want[s.tier] <= tokens <= 1.2 * want[s.tier], (s.id, tokens)


def test_scenarios_are_not_copies() -> None:
    for cat in CATEGORIES:
        chosen = [s for s in SUITE if s.category == cat]
        answers = {s.oracle[-1].content for s in chosen}
        assert len(answers) >= 0.9 * len(chosen), cat
        sandboxes = [json.dumps(s.sandbox, sort_keys=True) for s in chosen if s.sandbox]
        assert len(set(sandboxes)) == len(sandboxes), cat


def _with_sql(s: Scenario, change: Callable[[str], str]) -> Scenario:
    oracle = [
        t.model_copy(
            update={
                "tool_calls": [
                    c.model_copy(update={"arguments": {**c.arguments, "sql": change(c.arguments["sql"])}})
                    if c.name == "db_execute"
                    else c
                    for c in t.tool_calls
                ]
            }
        )
        for t in s.oracle
    ]
    return s.model_copy(update={"oracle": oracle})


@pytest.mark.parametrize(
    "change",
    [
        lambda sql: re.sub(r"\s+WHERE\s+.*$", "", sql, flags=re.I | re.S),  # every row, not the chosen ones
        lambda sql: re.sub(r"= '[^']*'", "= 'wrong'", sql, count=1),  # the wrong value
    ],
    ids=["no_where", "wrong_value"],
)
def test_sqlite_scenarios_fail_a_wrong_update_by_state(change: Callable[[str], str]) -> None:
    chosen = [s for s in SUITE if (s.sandbox or {}).get("db")]
    chosen = [s for s in chosen if any(c.name == "db_execute" for t in s.oracle for c in t.tool_calls)]
    assert len(chosen) >= 15
    references(chosen)  # the right oracle's end states
    changed = [_with_sql(s, change) for s in chosen]
    for s, trace in zip(changed, play_all(changed), strict=True):
        if isinstance(trace, BaseException):
            raise trace
        g = grade(s, trace)
        assert g.verdict == "fail", s.id
        failed = [c for c in g.checks if not c.passed]
        assert any(c.check.startswith("state_") for c in failed), (s.id, failed)
