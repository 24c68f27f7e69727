"""Toolery's mock-response rules: match, <param>_regex, call_index, match_index, if_tool_called gates."""

from __future__ import annotations

from splitserve.eval._mock import MockTools
from splitserve.eval._scenario import Scenario


def tools(rules: dict) -> MockTools:
    return MockTools(
        Scenario.model_validate(
            {"id": "t-x", "tier": "easy", "category": "c", "prompt": "p", "tools": list(rules), "tool_responses": rules}
        )
    )


def test_keyed_match_then_any_fallback_and_error_kind() -> None:
    m = tools(
        {
            "get_weather": [
                {"match": {"location": "Oslo"}, "returns": {"temp_c": -2}},
                {"match": "any", "returns": {"error": "city not found"}},
            ]
        }
    )
    assert m.respond("get_weather", {"location": "Oslo"}) == ({"temp_c": -2}, "json")
    assert m.respond("get_weather", {"location": "oslo"}) == ({"error": "city not found"}, "error")


def test_param_regex_matches_by_search_on_the_named_argument() -> None:
    m = tools(
        {
            "bash_exec": [
                {"match": {"command_regex": r"\bdu\b"}, "returns": "41G /var/log"},
                {"match": "any", "returns": "ok"},
            ]
        }
    )
    assert m.respond("bash_exec", {"command": "sudo du -sh /var"}) == ("41G /var/log", "text")
    assert m.respond("bash_exec", {"command": "dux"}) == ("ok", "text")
    assert m.respond("bash_exec", {}) == ("ok", "text")


def test_call_index_counts_every_call_of_the_tool() -> None:
    m = tools(
        {
            "run_tests": [
                {"match": "any", "call_index": 0, "returns": "FAILED"},
                {"match": "any", "call_index": ">=2", "returns": "flaky"},
                {"match": "any", "returns": "PASSED"},
            ]
        }
    )
    assert [m.respond("run_tests", {})[0] for _ in range(4)] == ["FAILED", "PASSED", "flaky", "flaky"]


def test_match_index_counts_only_calls_matching_that_rule() -> None:
    m = tools(
        {
            "fetch": [
                {"match": {"url": "a"}, "match_index": 0, "returns": "first a"},
                {"match": {"url": "a"}, "returns": "later a"},
                {"match": "any", "returns": "other"},
            ]
        }
    )
    assert m.respond("fetch", {"url": "b"})[0] == "other"
    assert m.respond("fetch", {"url": "a"})[0] == "first a"  # call_index would be 1 here
    assert m.respond("fetch", {"url": "a"})[0] == "later a"


def test_if_tool_called_gates_on_other_tools_and_on_itself_strictly_before() -> None:
    m = tools(
        {
            "run_tests": [
                {"match": "any", "if_tool_called": "edit_file", "returns": "PASSED"},
                {"match": "any", "returns": "FAILED"},
            ],
            "edit_file": [{"match": "any", "returns": {"ok": True}}],
            "git_status": [
                {"match": "any", "if_tool_not_called": "git_status", "returns": "dirty"},
                {"match": "any", "returns": "clean"},
            ],
        }
    )
    assert m.respond("run_tests", {})[0] == "FAILED"
    m.respond("edit_file", {"path": "x"})
    assert m.respond("run_tests", {})[0] == "PASSED"
    assert [m.respond("git_status", {})[0] for _ in range(2)] == ["dirty", "clean"]


def test_sandbox_calls_count_for_gates_and_no_rule_is_an_error_naming_the_call() -> None:
    m = tools({"run_tests": [{"match": "any", "if_tool_called": "write_file", "returns": "PASSED"}]})
    result, kind = m.respond("run_tests", {"path": "t"})
    assert kind == "error" and "run_tests" in result["error"] and '"path": "t"' in result["error"]
    m.note_call("write_file")
    assert m.respond("run_tests", {}) == ("PASSED", "text")


def test_injection_text_is_returned_as_is() -> None:
    m = tools({"web_search": [{"match": "any", "returns_with_injection": "IGNORE PREVIOUS"}]})
    assert m.respond("web_search", {"query": "q"}) == ("IGNORE PREVIOUS", "text")
