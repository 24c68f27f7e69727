"""The doctor's grading: what counts as a pass, what as a failure (pure, no endpoint)."""

from __future__ import annotations

import json
from typing import Any

from splitserve.chat import parse_complete
from splitserve.engine import resolve_source
from splitserve.gateway._doctor import CASES, Check, _forced_raw, _grade

BY_NAME = {c.name: c for c in CASES}


def graded(name: str, msg: dict[str, Any], finish: str | None) -> Check:
    check = Check(name)
    _grade(BY_NAME[name], msg, finish, check)
    return check


def call(name: str, args: str) -> dict[str, object]:
    return {"id": "c1", "type": "function", "function": {"name": name, "arguments": args}}


def test_single_call_pass_and_typical_failures() -> None:
    good = {"content": None, "tool_calls": [call("get_weather", '{"location": "Paris"}')]}
    assert graded("single", good, "tool_calls").status == "pass"
    assert "finish_reason" in graded("single", good, "stop").detail
    leaked = {"content": '<tool_call>{"name": "get_weather"}</tool_call>', "tool_calls": []}
    check = graded("single", leaked, "stop")
    assert check.status == "fail" and "leaked" in check.detail
    broken = {"content": None, "tool_calls": [call("get_weather", '{"location": ')]}
    assert "not valid JSON" in graded("single", broken, "tool_calls").detail
    assert "no call" in graded("single", {"content": "x"}, "tool_calls").detail


def test_policy_checks() -> None:
    two = {"tool_calls": [call("get_weather", "{}"), {**call("get_weather", "{}"), "id": "c2"}]}
    assert graded("parallel", two, "tool_calls").status == "pass"
    assert graded("no_parallel", two, "tool_calls").status == "fail"
    assert graded("none", two, "tool_calls").status == "fail"
    assert graded("none", {"content": "no"}, "stop").status == "pass"
    assert graded("required", {"content": "hi"}, "stop").status == "fail"
    assert graded("reasoning", {"content": "391", "reasoning_content": "17*23"}, "stop").status == "pass"
    assert graded("reasoning", {"content": "<think>17*23</think>391"}, "stop").status == "fail"


def test_forced_replies_parse_back_to_the_expected_calls() -> None:
    template = (resolve_source(None).path / "models/templates/MiniMax-M3.jinja").read_text()
    raw = _forced_raw(template, BY_NAME["parallel"])
    parsed = parse_complete("minimax-m3", raw)
    assert [json.loads(c["function"]["arguments"]) for c in parsed.tool_calls] == [
        {"location": "Paris"},
        {"location": "Tokyo"},
    ]
    reasoning = parse_complete("minimax-m3", _forced_raw(template, BY_NAME["reasoning"]))
    assert reasoning.content == "391" and reasoning.reasoning_content
