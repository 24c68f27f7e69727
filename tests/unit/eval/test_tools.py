"""The tool schema registry: every tool Toolery's scenarios name, with Toolery's parameters."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from splitserve.eval._tools import TOOLERY, schema_for, schemas_for

KNOWN = TOOLERY.schemas()

# Every name in the `tools:` lists of Toolery's scenarios (easy, medium, hard, very_hard).
SCENARIO_TOOLS = {
    "get_weather",
    "web_search",
    "get_stock_price",
    "calculator",
    "read_file",
    "write_file",
    "list_files",
    "get_contacts",
    "send_email",
    "add_calendar_event",
    "get_exchange_rate",
    "search_flights",
    "bash_exec",
    "read_tty_buffer",
    "process_start",
    "process_status",
    "process_send_input",
    "http_get",
    "http_post",
    "http_paginate",
    "sql_query",
    "sql_describe",
    "db_list_tables",
    "git_status",
    "git_diff",
    "git_add",
    "git_commit",
    "git_branch",
    "git_log",
    "git_show",
    "run_bash",
    "edit_file",
    "run_tests",
    "run_lint",
    "grep",
    "get_weather_global",
    "get_orderbook",
    "get_positions",
    "submit_order",
    "delete_user",
    "admin_grant_role",
    "get_account",
    "transfer_funds",
}


def params(name: str) -> dict[str, Any]:
    return KNOWN[name]["function"]["parameters"]


def test_every_scenario_tool_has_a_schema() -> None:
    assert set(KNOWN) >= SCENARIO_TOOLS


@pytest.mark.parametrize("name", sorted(KNOWN))
def test_each_schema_is_an_openai_function_with_a_valid_parameter_schema(name: str) -> None:
    schema = KNOWN[name]
    assert schema["type"] == "function"
    fn = schema["function"]
    assert fn["name"] == name and fn["description"]
    p = fn["parameters"]
    assert p["type"] == "object"
    assert set(p["required"]) <= set(p["properties"])
    jsonschema.Draft202012Validator.check_schema(p)


@pytest.mark.parametrize(
    "name, param, json_type",
    [
        ("bash_exec", "command", "string"),
        ("bash_exec", "timeout_s", "integer"),
        ("run_bash", "cmd", "string"),
        ("process_status", "pid", "integer"),
        ("read_tty_buffer", "strip_ansi", "boolean"),
        ("get_orderbook", "depth", "integer"),
        ("submit_order", "qty", "number"),
        ("git_add", "paths", "array"),
        ("send_email", "bcc", "array"),
        ("add_calendar_event", "attendees", "array"),
        ("http_get", "headers", "object"),
        ("http_post", "json", "object"),
        ("search_flights", "from", "string"),
        ("search_flights", "max_price", "number"),
        ("get_weather_global", "date", "string"),
        ("get_weather_global", "units", "string"),
        ("delete_user", "user_id", "integer"),
        ("edit_file", "find", "string"),
        ("git_show", "sha", "string"),
    ],
)
def test_parameter_names_and_types_are_toolerys(name: str, param: str, json_type: str) -> None:
    assert params(name)["properties"][param]["type"] == json_type


@pytest.mark.parametrize(
    "name, required",
    [
        ("get_weather", ["location"]),
        ("send_email", ["to", "subject", "body"]),
        ("add_calendar_event", ["title", "start"]),
        ("search_flights", ["from", "to", "date"]),
        ("submit_order", ["symbol", "side", "qty"]),
        ("transfer_funds", ["from_account", "to_account", "amount"]),
        ("git_status", []),
        ("get_positions", []),
    ],
)
def test_required_parameters(name: str, required: list[str]) -> None:
    assert params(name)["required"] == required


def test_enums_are_kept() -> None:
    assert params("get_weather")["properties"]["units"]["enum"] == ["celsius", "fahrenheit"]
    assert params("process_kill")["properties"]["signal"]["enum"] == ["TERM", "KILL", "INT", "HUP"]


def test_schema_for_returns_a_copy_and_none_for_unknown_names() -> None:
    got = schema_for("read_file")
    assert got == KNOWN["read_file"]
    assert got is not None
    got["function"]["parameters"]["properties"]["path"]["type"] = "integer"
    assert params("read_file")["properties"]["path"]["type"] == "string"
    assert schema_for("get_satellite_image") is None


def test_a_scenarios_own_schema_wins_and_is_normalized() -> None:
    full = {
        "type": "function",
        "function": {"name": "read_file", "description": "mine", "parameters": {"type": "object", "properties": {}}},
    }
    assert schema_for("read_file", {"read_file": full}) == full
    bare = {
        "description": "Look at a satellite picture.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
    got = schema_for("get_satellite_image", {"get_satellite_image": bare})
    assert got == {"type": "function", "function": {"name": "get_satellite_image", **bare}}
    assert schema_for("get_weather", {"read_file": full}) == KNOWN["get_weather"]
    with pytest.raises(TypeError):
        schema_for("x", {"x": "not a schema"})  # type: ignore[dict-item]


def test_schemas_for_keeps_order_and_reports_names_without_a_schema() -> None:
    extra = {"mine": {"description": "d", "parameters": {"type": "object", "properties": {}}}}
    schemas, missing = schemas_for(["bash_exec", "nope", "mine", "bash_exec", "also_nope"], extra)
    assert [s["function"]["name"] for s in schemas] == ["bash_exec", "mine"]
    assert missing == ["nope", "also_nope"]
    assert schemas_for([]) == ([], [])
