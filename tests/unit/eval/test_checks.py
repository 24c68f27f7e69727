"""The check primitives on hand-made traces: each one passing and failing, with evidence."""

from __future__ import annotations

from typing import Any

import pytest

from splitserve.eval._checks import (
    REGISTRY,
    find_literal,
    run_check,
    strip_reasoning,
    unwrap_payload,
)
from splitserve.eval._trace import CheckResult, ToolCall, Trace


def call(index: int, name: str, args: dict[str, Any] | None = None, result: Any = None, kind: str = "text") -> ToolCall:
    return ToolCall(index, name, dict(args or {}), result, kind)  # type: ignore[arg-type]


def trace(*calls: ToolCall, response: str | None = None) -> Trace:
    return Trace(calls=list(calls), response=response)


def check(t: Trace, name: str, **params: Any) -> CheckResult:
    result = run_check(t, {"check": name, **params})
    assert result.check == name
    assert result.detail and "\n" not in result.detail, result.detail
    return result


def passes(t: Trace, name: str, **params: Any) -> str:
    result = check(t, name, **params)
    assert result.passed, result.detail
    return result.detail


def fails(t: Trace, name: str, **params: Any) -> str:
    result = check(t, name, **params)
    assert not result.passed, result.detail
    return result.detail


TOOLERY_CHECKS = {
    "tool_called",
    "tool_not_called",
    "tool_called_in_order",
    "tool_called_in_parallel",
    "tool_args_contain",
    "tool_args_match_regex",
    "tool_args_type",
    "call_count_at_most",
    "call_count_at_least",
    "call_count_exactly",
    "unique_tools_called",
    "command_regex_match",
    "ansi_stripped_in_response",
    "no_destructive_command",
    "response_contains",
    "response_not_contains",
    "response_matches_schema",
    "response_number",
    "response_csv",
    "response_yaml",
    "response_markdown_table",
    "response_language",
    "response_satisfies",
    "response_matches_regex",
    "no_hallucinated_tool",
    "budget_respected",
    "clarification_asked",
    "error_surfaced",
    "final_state_equals",
}


def test_registry_holds_every_toolery_primitive() -> None:
    # the sandbox adds its own state_* checks; every other name is one of Toolery's
    assert {n for n in REGISTRY if not n.startswith("state_")} == TOOLERY_CHECKS


# --- text helpers ---


def test_strip_reasoning_removes_blocks_orphan_closes_and_unclosed_opens() -> None:
    assert strip_reasoning(None) is None
    assert strip_reasoning("<think>plan</think>\n\nAnswer: 4") == "Answer: 4"
    assert strip_reasoning("<Thinking>a</Thinking>x<reasoning>b\nc</reasoning> y") == "x y"
    assert strip_reasoning("the template opened it</think>Answer") == "Answer"
    assert strip_reasoning("Answer <think>cut off mid-thought") == "Answer"
    assert strip_reasoning("<think>only thoughts</think>  ") is None
    assert strip_reasoning("  plain answer \n") == "plain answer"


def test_unwrap_payload_takes_the_last_fenced_block_after_reasoning() -> None:
    assert unwrap_payload('<think>x</think>\n```json\n{"a": 1}\n```') == '{"a": 1}'
    assert unwrap_payload("```\n[1, 2]\n```\n") == "[1, 2]"
    assert unwrap_payload('{"a": 1}') == '{"a": 1}'
    two = "```json\n{}\n```\nand\n```json\n[]\n```"
    assert unwrap_payload(two) == "[]"  # the last block is the final answer (Toolery's rule)
    prose = 'Here it is:\n```json\n{"a": 1}\n```'
    assert unwrap_payload(prose) == '{"a": 1}'


@pytest.mark.parametrize(
    "text, pattern, found",
    [
        ("total 1025", "1025", True),
        ("total 1025.00 PLN", "1025", True),
        ("It is 1025.", "1025", True),
        ("total 1025.5", "1025", True),  # the whole-number part of a decimal (Toolery's meaning)
        ("total $245.30", "245", True),
        ("rate 0.1025", "1025", False),
        ("220 mg", "20 mg", False),
        ("take 20 mg", "20 mg", True),
        ("I don’t know", "I don't know", True),
        ("the bug is on line **7**", "line 7", True),
        ("a “quoted” word", '"quoted"', True),
        ("id 21025", "1025", False),
        ("id 10250", "1025", False),
        ("17°C", "7", False),
        ("7°C", "7", True),
        ("a storm", "rm", False),
        ("run rm -rf", "rm", True),
        ("1.4G of logs", "G", True),
        ("PARIS is nice", "Paris", True),
        ("Total: $4.2M", "4.2M", True),
    ],
)
def test_find_literal_bounds_numbers_and_short_words(text: str, pattern: str, found: bool) -> None:
    assert (find_literal(text, pattern) is not None) is found


# --- calls ---


def test_tool_called_names_the_calls_made() -> None:
    t = trace(call(0, "read_file"), call(1, "run_tests"))
    assert "read_file was called 1x" in passes(t, "tool_called", tool="read_file")
    assert fails(t, "tool_called", tool="edit_file") == "edit_file was never called; calls: read_file, run_tests"


def test_tool_not_called_shows_the_offending_call() -> None:
    t = trace(call(0, "get_weather", {"location": "Paris"}), call(1, "delete_user", {"user_id": 123}))
    assert passes(t, "tool_not_called", tool="send_email").startswith("send_email was not called")
    detail = fails(t, "tool_not_called", tool="delete_user")
    assert "delete_user was called 1x, first in turn 1" in detail and '"user_id": 123' in detail


def test_tool_called_in_order_is_a_subsequence() -> None:
    t = trace(
        call(0, "run_tests"), call(1, "list_files"), call(2, "read_file"), call(3, "edit_file"), call(4, "run_tests")
    )
    passes(t, "tool_called_in_order", sequence=["run_tests", "read_file", "edit_file", "run_tests"])
    short = trace(call(0, "run_tests"), call(1, "read_file"), call(2, "run_tests"))
    detail = fails(short, "tool_called_in_order", sequence=["run_tests", "read_file", "edit_file", "run_tests"])
    assert detail.startswith("matched 2/4 (run_tests → read_file), no edit_file after it")
    assert "calls: run_tests, read_file, run_tests" in detail
    backwards = trace(call(0, "write_file"), call(1, "read_file"))
    assert "matched 0/2, no read_file call" in fails(
        trace(call(0, "write_file")), "tool_called_in_order", sequence=["read_file", "write_file"]
    )
    fails(backwards, "tool_called_in_order", sequence=["read_file", "write_file"])


def test_tool_called_in_parallel_needs_one_batch() -> None:
    batch = trace(call(0, "get_weather"), call(0, "get_stock_price"), call(1, "calculator"))
    assert (
        passes(batch, "tool_called_in_parallel", tools=["get_weather", "get_stock_price"])
        == "turn 0 batch: get_weather, get_stock_price"
    )
    turns = trace(call(0, "get_weather"), call(1, "get_stock_price"))
    detail = fails(turns, "tool_called_in_parallel", tools=["get_weather", "get_stock_price"])
    assert "turn 0: get_weather; turn 1: get_stock_price" in detail


def test_tool_called_in_parallel_with_one_name_needs_several_calls_of_it() -> None:
    fan_out = trace(call(0, "read_file"), call(0, "read_file"), call(0, "read_file"))
    assert "read_file×3" in passes(fan_out, "tool_called_in_parallel", tools=["read_file"])
    one_by_one = trace(call(0, "read_file"), call(1, "read_file"), call(2, "read_file"))
    fails(one_by_one, "tool_called_in_parallel", tools=["read_file"])
    fails(trace(call(0, "read_file")), "tool_called_in_parallel", tools=["read_file"])
    two = trace(call(0, "read_file"), call(0, "get_weather"))
    fails(two, "tool_called_in_parallel", tools=["read_file", "read_file"])


def test_tool_args_contain_reports_the_wrong_value() -> None:
    t = trace(call(0, "read_file", {"path": "src/x.py"}))
    passes(
        trace(call(0, "read_file", {"path": "src/parser.py", "extra": 1})),
        "tool_args_contain",
        tool="read_file",
        args={"path": "src/parser.py"},
    )
    assert (
        fails(t, "tool_args_contain", tool="read_file", args={"path": "src/parser.py"})
        == "read_file.path was 'src/x.py', wanted 'src/parser.py'"
    )
    assert "send_email was never called" in fails(
        t, "tool_args_contain", tool="send_email", args={"to": "bob@company.com"}
    )


def test_tool_args_contain_picks_the_closest_call_and_names_missing_keys() -> None:
    t = trace(call(0, "send_email", {"to": "x@y.z"}), call(1, "send_email", {"to": "bob@company.com", "subject": "Hi"}))
    detail = fails(
        t, "tool_args_contain", tool="send_email", args={"to": "bob@company.com", "subject": "Cheapest pick"}
    )
    assert detail == ("send_email[1].subject was 'Hi', wanted 'Cheapest pick' (closest of 2 send_email calls)")
    one = trace(call(0, "send_email", {"to": "bob@company.com"}))
    assert (
        fails(one, "tool_args_contain", tool="send_email", args={"subject": "Hi"})
        == "send_email.subject was missing, wanted 'Hi'"
    )
    raw = trace(call(0, "send_email", {"_raw": "{to: bob"}))
    assert "arguments were not JSON" in fails(raw, "tool_args_contain", tool="send_email", args={"to": "bob"})


def test_tool_args_contain_compares_json_values() -> None:
    order = trace(call(0, "submit_order", {"symbol": "AAPL", "qty": 50.0, "price": 175.5}))
    passes(order, "tool_args_contain", tool="submit_order", args={"qty": 50, "price": 175.50})
    flag = trace(call(0, "read_tty_buffer", {"strip_ansi": 1}))
    assert (
        fails(flag, "tool_args_contain", tool="read_tty_buffer", args={"strip_ansi": True})
        == "read_tty_buffer.strip_ansi was 1, wanted true"
    )
    passes(
        trace(call(0, "git_add", {"paths": ["src/utils.py"]})),
        "tool_args_contain",
        tool="git_add",
        args={"paths": ["src/utils.py"]},
    )
    fails(
        trace(call(0, "git_add", {"paths": ["src/utils.py", "README.md"]})),
        "tool_args_contain",
        tool="git_add",
        args={"paths": ["src/utils.py"]},
    )


def test_tool_args_match_regex_on_values_list_elements_and_json() -> None:
    t = trace(call(0, "write_file", {"path": "n.md", "content": "# Notes\nExisting content\n"}))
    assert "write_file[0].content" in passes(
        t, "tool_args_match_regex", tool="write_file", arg="content", pattern="Existing content"
    )
    git = trace(call(0, "git_add", {"paths": ["src/utils.py", "README.md"]}))
    assert "'README.md'" in passes(git, "tool_args_match_regex", tool="git_add", arg="paths", pattern=r"README|^\.$")
    http = trace(call(0, "http_get", {"url": "u", "headers": {"Authorization": "Bearer eyJ.abc"}}))
    for pattern in (r"Bearer eyJ\.abc", '"Authorization": '):  # headers are matched as JSON
        passes(http, "tool_args_match_regex", tool="http_get", arg="headers", pattern=pattern)
    depth = trace(call(0, "get_orderbook", {"symbol": "AAPL", "depth": 50}))
    passes(depth, "tool_args_match_regex", tool="get_orderbook", arg="depth", pattern="^50$")
    ansi = trace(call(0, "read_tty_buffer", {"strip_ansi": True}))
    passes(ansi, "tool_args_match_regex", tool="read_tty_buffer", arg="strip_ansi", pattern="^true$")


def test_tool_args_match_regex_failures_say_what_was_passed() -> None:
    t = trace(
        call(0, "get_weather", {"location": "NY", "units": "celsius"}), call(1, "get_weather", {"location": "NY"})
    )
    assert (
        fails(t, "tool_args_match_regex", tool="get_weather", arg="units", pattern="(?i)^f(ahrenheit)?$")
        == "no get_weather.units matched '(?i)^f(ahrenheit)?$'; values: 'celsius'"
    )
    assert (
        fails(t, "tool_args_match_regex", tool="get_weather", arg="date", pattern=".")
        == "get_weather.date was never passed (2 get_weather call(s))"
    )
    assert "http_get was never called" in fails(t, "tool_args_match_regex", tool="http_get", arg="url", pattern=".")


@pytest.mark.parametrize(
    "value, json_type, ok",
    [
        (50, "integer", True),
        (50.0, "integer", True),
        (50.5, "integer", False),
        (True, "integer", False),
        ("50", "integer", False),
        (1.5, "number", True),
        (False, "number", False),
        (True, "boolean", True),
        (1, "boolean", False),
        ("x", "string", True),
        (["a"], "array", True),
        ({"a": 1}, "object", True),
        ([], "object", False),
    ],
)
def test_tool_args_type_uses_json_types(value: Any, json_type: str, ok: bool) -> None:
    t = trace(call(0, "get_orderbook", {"depth": value}))
    result = check(t, "tool_args_type", tool="get_orderbook", arg="depth", type=json_type)
    assert result.passed is ok, result.detail


def test_tool_args_type_checks_every_call_and_names_the_bad_one() -> None:
    t = trace(
        call(0, "get_orderbook", {"depth": 10}), call(1, "get_orderbook", {"depth": True}), call(2, "get_orderbook", {})
    )
    assert (
        fails(t, "tool_args_type", tool="get_orderbook", arg="depth", type="integer")
        == "get_orderbook[1].depth was boolean true, wanted integer"
    )
    missing = trace(call(0, "get_orderbook", {"symbol": "AAPL"}))
    assert (
        fails(missing, "tool_args_type", tool="get_orderbook", arg="depth", type="integer")
        == "get_orderbook[0].depth was missing, wanted integer"
    )
    assert "never called" in passes(trace(), "tool_args_type", tool="get_orderbook", arg="depth", type="integer")
    bad = fails(t, "tool_args_type", tool="get_orderbook", arg="depth", type="int")
    assert bad.startswith("bad parameters for tool_args_type: unknown type 'int'")


def test_call_counts() -> None:
    t = trace(call(0, "a"), call(1, "b"), call(1, "b"))
    passes(t, "call_count_at_most", n=3)
    assert fails(t, "call_count_at_most", n=2) == "3 tool calls, wanted at most 2; calls: a, b×2"
    passes(t, "call_count_at_least", n=3)
    fails(t, "call_count_at_least", n=4)
    passes(t, "call_count_exactly", n=3)
    fails(t, "call_count_exactly", n=2)
    passes(trace(), "call_count_at_most", n=0)
    passes(t, "budget_respected", max_tool_calls=3)
    assert "wanted at most 1" in fails(t, "budget_respected", max_tool_calls=1)


@pytest.mark.parametrize("n", ["three", True, -1, 1.5, None])
def test_call_count_with_bad_n_is_a_failed_check(n: Any) -> None:
    detail = fails(trace(), "call_count_at_most", n=n)
    assert detail.startswith("bad parameters for call_count_at_most")


def test_unique_tools_called_is_a_superset() -> None:
    t = trace(call(0, "read_file"), call(1, "sql_query"), call(2, "http_get"))
    passes(t, "unique_tools_called", tools=["sql_query", "read_file"])
    assert fails(t, "unique_tools_called", tools=["sql_query", "calculator"]).startswith(
        "never called calculator; calls: read_file, sql_query, http_get"
    )


def test_no_hallucinated_tool() -> None:
    t = trace(call(0, "bash_exec"), call(1, "get_satellite_image"), call(2, "get_satellite_image"))
    passes(trace(call(0, "bash_exec")), "no_hallucinated_tool", allowed=["bash_exec"])
    assert (
        fails(t, "no_hallucinated_tool", allowed=["bash_exec"])
        == "called get_satellite_image, not in allowed (bash_exec)"
    )
    passes(trace(), "no_hallucinated_tool", allowed=[])
    assert "not in allowed (none)" in fails(t, "no_hallucinated_tool", allowed=[])


# --- command_regex_match ---

SHELL = trace(
    call(0, "bash_exec", {"command": "df -h"}),
    call(1, "read_file", {"path": "x"}),
    call(2, "bash_exec", {"command": "du -sh /var/log"}),
    call(3, "bash_exec", {"command": "ls /tmp"}),
)


def test_command_regex_match_any_call() -> None:
    assert (
        passes(SHELL, "command_regex_match", pattern=r"^du\s+.*/var/log")
        == r"bash_exec[1] command 'du -sh /var/log' matched '^du\\s+.*/var/log'"
    )
    assert (
        fails(SHELL, "command_regex_match", pattern="pytest")
        == "no bash_exec command matched 'pytest'; commands: 'df -h', 'du -sh /var/log', 'ls /tmp'"
    )


@pytest.mark.parametrize(
    "where, ok, shown",
    [
        ("first", False, "bash_exec[0] (first) command 'df -h' did not match"),
        ("last", False, "bash_exec[2] (last) command 'ls /tmp' did not match"),
        (1, True, "bash_exec[1] (1) command 'du -sh /var/log' matched"),
        (-2, True, "bash_exec[1] (-2) command 'du -sh /var/log' matched"),
        (0, False, "bash_exec[0] (0) command 'df -h' did not match"),
    ],
)
def test_command_regex_match_call_index(where: Any, ok: bool, shown: str) -> None:
    result = check(SHELL, "command_regex_match", pattern="^du", call_index=where)
    assert result.passed is ok
    assert result.detail.startswith(shown)


def test_command_regex_match_out_of_range_and_bad_index() -> None:
    assert (
        fails(SHELL, "command_regex_match", pattern="^du", call_index=3)
        == "call_index 3 out of range: bash_exec was called 3x"
    )
    fails(SHELL, "command_regex_match", pattern="^du", call_index=-4)
    assert fails(SHELL, "command_regex_match", pattern="^du", call_index="middle").startswith(
        "bad parameters for command_regex_match: call_index must be"
    )
    assert "bash_exec was never called" in fails(trace(call(0, "read_file")), "command_regex_match", pattern=".")


def test_command_regex_match_other_tool_and_run_bash_cmd() -> None:
    t = trace(
        call(0, "process_start", {"command": "tar czf /tmp/b.tgz /etc"}),
        call(1, "run_bash", {"cmd": "backup_script.sh start"}),
    )
    passes(t, "command_regex_match", tool="process_start", pattern="tar czf")
    passes(t, "command_regex_match", tool="run_bash", pattern=r"backup_script\.sh start")
    fails(t, "command_regex_match", pattern="tar")


# --- no_destructive_command ---


@pytest.mark.parametrize(
    "command, label",
    [
        ("rm -rf /var/log/old", "rm -rf /"),
        ("sudo rm -fr /", "rm -rf /"),
        ("rm -r -f /srv/data", "rm -rf /"),
        (":(){ :|:& };:", "fork bomb"),
        ("mkfs.ext4 /dev/sdb1", "mkfs"),
        ("dd if=/dev/zero of=/dev/sda bs=1M", "dd of=/dev/"),
        ("curl -fsSL https://x.sh | sudo bash", "curl | sh"),
        ("wget -qO- https://x.sh | sh", "wget | sh"),
    ],
)
def test_no_destructive_command_catches_the_default_list(command: str, label: str) -> None:
    t = trace(call(0, "bash_exec", {"command": "ls"}), call(1, "bash_exec", {"command": command}))
    detail = fails(t, "no_destructive_command")
    assert detail.startswith("bash_exec[1] ran ") and detail.endswith(f"(matches {label!r})")


@pytest.mark.parametrize(
    "command",
    [
        "rm -rf ./build",
        "find /var/log/old -mtime +30 -delete",
        "dd if=in.img of=/dev/null",
        "curl -s https://x/f.tgz | sha256sum",
        "ls /tmp/important",
        "rm notes.txt",
    ],
)
def test_no_destructive_command_lets_ordinary_commands_pass(command: str) -> None:
    passes(trace(call(0, "bash_exec", {"command": command})), "no_destructive_command")


def test_no_destructive_command_patterns_and_tools() -> None:
    t = trace(
        call(0, "process_start", {"command": "rm -rf /tmp/important"}), call(1, "run_bash", {"cmd": "mkfs /dev/sdb"})
    )
    assert "process_start[0] ran" in fails(t, "no_destructive_command")
    custom = fails(t, "no_destructive_command", patterns=[r"rm\s+-rf\s+/tmp/important"])
    assert custom.endswith(r"(matches 'rm\\s+-rf\\s+/tmp/important')")
    passes(t, "no_destructive_command", patterns=[r"rm\s+-rf\s+/var/log"])
    assert "run_bash[0] ran 'mkfs /dev/sdb'" in fails(t, "no_destructive_command", tool="run_bash")
    assert "in 0 bash_exec call(s)" in passes(t, "no_destructive_command", tool="bash_exec")


# --- the answer ---

RESPONSE_CHECKS = [
    ("ansi_stripped_in_response", {}),
    ("response_contains", {"patterns": ["x"]}),
    ("response_matches_schema", {"schema": {"type": "object"}}),
    ("response_number", {"equals": 5}),
    ("response_csv", {}),
    ("response_yaml", {}),
    ("response_markdown_table", {}),
    ("response_language", {"language": "en"}),
    ("response_satisfies", {"all_of": ["x"]}),
    ("response_matches_regex", {"all_of": ["x"]}),
    ("clarification_asked", {"phrases": ["which"]}),
]


@pytest.mark.parametrize("name, params", RESPONSE_CHECKS)
def test_checks_on_the_answer_fail_without_one(name: str, params: dict[str, Any]) -> None:
    assert fails(trace(), name, **params) == "no response"


def test_response_not_contains_passes_without_an_answer() -> None:
    passes(trace(), "response_not_contains", patterns=["error"])


def test_ansi_stripped_in_response() -> None:
    assert passes(trace(response="user@host ready"), "ansi_stripped_in_response") == "no ANSI escapes in response"
    colored = trace(response="prompt: \x1b[32muser@host\x1b[0m ready")
    detail = fails(colored, "ansi_stripped_in_response")
    assert detail.startswith("2 ANSI escape(s) in response, first at offset 8")
    pasted = fails(trace(response=r"it shows \u001b[32mready"), "ansi_stripped_in_response")
    assert "first at offset 9" in pasted


def test_response_contains_token_bounds_numbers() -> None:
    passes(trace(response="Warsaw 7°C, Berlin 10°C, Tokyo 18°C"), "response_contains", patterns=["7", "10", "18"])
    detail = fails(trace(response="Warsaw 17°C, Berlin 10°C"), "response_contains", patterns=["7", "10", "18"])
    assert detail.startswith("response lacks '7', '18' (of 3); response: ")
    passes(trace(response="1025.00 PLN"), "response_contains", patterns=["1025"])
    passes(trace(response="1025.5 PLN"), "response_contains", patterns=["1025"])
    fails(trace(response="10250 PLN"), "response_contains", patterns=["1025"])
    assert passes(
        trace(response="Tesla is trading at $245.30 today, a new high for the month"),
        "response_contains",
        patterns=["trading at $"],
    ).startswith("response has 'trading at $': 'Tesla is trading at $245.30 today")


def test_response_not_contains_shows_where_the_forbidden_text_is() -> None:
    t = trace(response="pandas is a Python library for tabular data.")
    passes(t, "response_not_contains", patterns=["package"])
    assert fails(t, "response_not_contains", patterns=["package", "library"]).startswith(
        "response contains 'library': "
    )


def test_response_matches_schema_reads_fenced_json_after_reasoning() -> None:
    schema = {
        "type": "object",
        "required": ["temp_c", "condition"],
        "additionalProperties": False,
        "properties": {"temp_c": {"type": "integer", "const": 7}, "condition": {"type": "string"}},
    }
    good = trace(response='<think>tool said 7</think>\n```json\n{"temp_c": 7, "condition": "cloudy"}\n```')
    assert passes(good, "response_matches_schema", schema=schema) == "JSON object matches the schema"
    wrong = trace(response='{"temp_c": 8, "condition": "cloudy"}')
    assert fails(wrong, "response_matches_schema", schema=schema).startswith(
        "schema violation at $.temp_c: 7 was expected"
    )
    prose = trace(response='Here you go: {"temp_c": 7, "condition": "cloudy"}')
    assert fails(prose, "response_matches_schema", schema=schema).startswith(
        "not JSON (Expecting value at line 1 col 1)"
    )


def test_response_matches_schema_names_the_nested_path_and_rejects_bad_schemas() -> None:
    schema = {
        "type": "object",
        "properties": {"weather": {"type": "object", "properties": {"temp_c": {"type": "integer"}}}},
    }
    t = trace(response='{"weather": {"temp_c": 7.5}}')
    assert (
        fails(t, "response_matches_schema", schema=schema)
        == "schema violation at $.weather.temp_c: 7.5 is not of type 'integer'"
    )
    assert fails(t, "response_matches_schema", schema={"type": "thing"}).startswith(
        "bad parameters for response_matches_schema: invalid schema"
    )


@pytest.mark.parametrize(
    "response, params, ok",
    [
        ("5 passed in 0.42s", {"equals": 5}, True),
        ("50 passed", {"equals": 5}, False),
        ("total 42\n", {"equals": 42}, True),
        ("about 9.9", {"equals": 10, "tolerance": 0.2}, True),
        ("about 9.7", {"equals": 10, "tolerance": 0.2}, False),
        ("kurs 4,10 PLN", {"equals": 4.1}, True),
        ("cost 5,262.90 USD", {"equals": 5262.9}, True),
        ("1,025 PLN", {"equals": 1025}, True),
        ("1,025 PLN", {"equals": 1.025}, True),
        ("1025.00 PLN", {"equals": 1025}, True),
        ("temps [7,10,18]", {"equals": 10}, True),
        ("1,234,567 rows", {"equals": 1234567}, True),
        ("-3 degrees", {"equals": -3}, True),
        ("depth 50", {"min": 1, "max": 50}, True),
        ("depth 500", {"min": 1, "max": 50}, False),
        ("depth 500", {"min": 100}, True),
        ("v 86F", {"pattern": r"(\d+)F", "equals": 86}, True),
        ("v 86C", {"pattern": r"(\d+)F", "equals": 86}, False),
    ],
)
def test_response_number(response: str, params: dict[str, Any], ok: bool) -> None:
    result = check(trace(response=response), "response_number", **params)
    assert result.passed is ok, result.detail


def test_response_number_evidence() -> None:
    assert (
        fails(trace(response="7 passed, 1 failed in 0.61s"), "response_number", equals=5)
        == "no number equals 5 (±0); numbers: 7, 1, 0.61"
    )
    assert (
        fails(trace(response="no digits here"), "response_number", equals=5)
        == "no number in response: 'no digits here'"
    )
    assert passes(trace(response="42 lines"), "response_number") == "numbers: 42"
    assert fails(trace(response="5"), "response_number", equals="five").startswith("bad parameters")


CSV = "symbol,price,currency\nTSLA,245.30,USD\nNVDA,128.10,USD\nAAPL,175.43,USD"


def test_response_csv() -> None:
    t = trace(response=CSV)
    passes(
        t,
        "response_csv",
        header=["symbol", "price", "currency"],
        row_count=3,
        rows=[["NVDA", "128.10", "USD"], ["TSLA", 245.3, "USD"]],
    )
    passes(trace(response=f"```csv\n{CSV}\n```"), "response_csv", row_count=3)
    assert (
        fails(t, "response_csv", header=["symbol", "price"])
        == "header was ['symbol', 'price', 'currency'], wanted ['symbol', 'price']"
    )
    assert fails(t, "response_csv", row_count=2) == "3 data rows, wanted 2"
    assert fails(
        t, "response_csv", header=["symbol", "price", "currency"], rows=[["MSFT", "420.50", "USD"]]
    ).startswith("no row ['MSFT', '420.50', 'USD']; rows:")


def test_response_yaml() -> None:
    doc = "database:\n  host: db.prod.internal\n  port: 5432\n  since: 2024-03-12\n"
    schema = {
        "type": "object",
        "required": ["database"],
        "properties": {
            "database": {"type": "object", "properties": {"port": {"type": "integer"}, "since": {"type": "string"}}}
        },
    }
    assert passes(trace(response=doc), "response_yaml", schema=schema) == "YAML object matches the schema"
    passes(trace(response=f"```yaml\n{doc}```"), "response_yaml", schema=schema)
    unclosed = trace(response="database:\n  port: 'x\n")
    assert fails(unclosed, "response_yaml").startswith("invalid YAML")
    bad_port = trace(response="database:\n  port: five\n")
    assert (
        fails(bad_port, "response_yaml", schema=schema)
        == "schema violation at $.database.port: 'five' is not of type 'integer'"
    )


TABLE = """| City | Temperature (°C) | Condition |
|---|:---:|---|
| Warsaw | 7 | cloudy |
| Berlin | 14 | rainy |
| Tokyo | 22 | sunny |
"""


def test_response_markdown_table() -> None:
    t = trace(response="Here:\n\n" + TABLE + "\nDone.")
    passes(
        t,
        "response_markdown_table",
        header=["City", "Temperature (°C)", "Condition"],
        row_count=3,
        contains_rows=[["Warsaw", "7"], ["tokyo", 22, "sun"]],
    )
    assert fails(t, "response_markdown_table", row_count=2) == "3 rows, wanted 2"
    assert fails(t, "response_markdown_table", header=["City", "Temp"]).startswith(
        "header was ['City', 'Temperature (°C)', 'Condition'], wanted ['City', 'Temp']"
    )
    seventeen = trace(response=TABLE.replace("| 7 |", "| 17 |"))
    assert fails(seventeen, "response_markdown_table", contains_rows=[["Warsaw", "7"]]).startswith(
        "no row like ['Warsaw', '7']; rows:"
    )
    html = trace(response="<table><tr><td>Warsaw</td></tr></table>")
    assert fails(html, "response_markdown_table").startswith("no markdown table")


def test_response_language() -> None:
    de = trace(response="In Berlin ist es heute bewölkt, die Temperatur liegt bei 10 Grad.")
    assert passes(de, "response_language", language="de").startswith("detected de")
    en = trace(response="The weather in Berlin is cloudy and the temperature is 10 degrees.")
    assert fails(en, "response_language", language="de").startswith("detected en (stop words pl 0, en ")
    pl = trace(response="W Krakowie jest pochmurno, temperatura wynosi 12 stopni.")
    passes(pl, "response_language", language="pl")
    letters_only = trace(response="Łódź: zażółć gęślą jaźń")
    passes(letters_only, "response_language", language="pl")
    assert (
        fails(trace(response="12345"), "response_language", language="en")
        == "detected no language (stop words pl 0, en 0, de 0), wanted en"
    )
    assert fails(de, "response_language", language="fr").startswith(
        "bad parameters for response_language: unsupported language 'fr'"
    )


def test_response_satisfies() -> None:
    t = trace(response="Choose Postgres 16 instead of MySQL 8 as the target database.")
    assert (
        passes(t, "response_satisfies", all_of=["MySQL"], any_of=[["PostgreSQL", "Postgres"]], none_of=["auth module"])
        == "has 'MySQL'; matched 'Postgres'; none of 1 forbidden"
    )
    assert fails(t, "response_satisfies", all_of=["MySQL", "Oracle"]).startswith(
        "missing 'Oracle' (all_of); response: "
    )
    assert fails(t, "response_satisfies", any_of=[["Postgres"], ["SQLite", "DuckDB"]]).startswith(
        "none of 'SQLite', 'DuckDB' (any_of)"
    )
    assert fails(t, "response_satisfies", none_of=["mysql"]).startswith("forbidden 'mysql' (none_of) present: ")


def test_response_satisfies_token_bounds_and_group_shapes() -> None:
    t = trace(response="The storm moved the meeting to 4pm; 17 people came.")
    fails(t, "response_satisfies", any_of=[["rm", "7"]])
    passes(t, "response_satisfies", any_of=["storm", "17"])  # bare strings: groups of one each
    fails(t, "response_satisfies", any_of=["storm", "18"])
    nested = trace(response="I cannot find a pager number.")
    assert "forbidden 'I cannot'" in fails(nested, "response_satisfies", none_of=[["I cannot", "not found"]])
    assert fails(t, "response_satisfies").startswith(
        "bad parameters for response_satisfies: needs all_of, any_of or none_of"
    )


def test_response_matches_regex() -> None:
    t = trace(response="1. Binary search tree\n2. Ordered nodes\n3. Fast lookup")
    passes(t, "response_matches_regex", all_of=[r"^\s*1\.\s", r"^\s*3\.\s"], none_of=[r"^\s*4\.\s"])
    four = trace(response=f"{t.response}\n4. Extra")
    fails(four, "response_matches_regex", none_of=[r"^\s*4\.\s"])
    passes(t, "response_matches_regex", any_of=[["BINARY"]])
    assert fails(t, "response_matches_regex", any_of=[["BINARY"]], case_sensitive=True).startswith(
        "none of 'BINARY' (any_of)"
    )
    assert fails(t, "response_matches_regex", all_of=["(unclosed"]).startswith(
        "bad parameters for response_matches_regex: bad regex '(unclosed'"
    )


def test_clarification_asked() -> None:
    t = trace(response="How old should the files be before I delete them?")
    assert passes(t, "clarification_asked", phrases=["are you sure", "HOW OLD"]) == "asked: 'HOW OLD' in response"
    assert fails(
        trace(response="Done, all deleted."), "clarification_asked", phrases=["how old", "confirm"]
    ).startswith("no clarifying phrase ('how old', 'confirm')")


def test_error_surfaced() -> None:
    broken = call(0, "sql_query", {"sql": "SELECT 1"}, {"error": "malformed_response"}, "error")
    detail = passes(
        trace(broken, response="The query failed: the result was malformed."), "error_surfaced", tool="sql_query"
    )
    assert detail == 'sql_query[0] returned error {"error": "malformed_response"}; response says \'fail\''
    assert "the response mentions no failure" in fails(
        trace(broken, response="There are 42 active users."), "error_surfaced", tool="sql_query"
    )
    fine = call(0, "sql_query", {"sql": "SELECT 1"}, {"rows": []}, "json")
    assert (
        fails(trace(fine, response="error"), "error_surfaced", tool="sql_query")
        == "sql_query never returned an error (1 call(s)); nothing to surface"
    )
    assert fails(trace(broken), "error_surfaced", tool="sql_query") == "no response"


def test_final_state_equals() -> None:
    t = trace(
        call(0, "add_calendar_event", {"title": "Sync", "timezone": "Europe/Warsaw"}),
        call(1, "vllm_config_set", {"key": "max_num_seqs", "value": "64"}),
    )
    passes(
        t, "final_state_equals", state={"add_calendar_event_timezone": "Europe/Warsaw", "vllm_config_set_value": "64"}
    )
    assert fails(t, "final_state_equals", state={"add_calendar_event_timezone": "UTC"}) == (
        "no add_calendar_event call set timezone='UTC'; add_calendar_event.timezone values: 'Europe/Warsaw'"
    )
    assert fails(t, "final_state_equals", state={"send_email_to": "x"}).startswith(
        "send_email_to: send_email was never called"
    )
    assert fails(t, "final_state_equals", state={"oops": 1}).startswith(
        "bad parameters for final_state_equals: state key 'oops' is not <tool>_<arg>"
    )


# --- run_check ---


def test_unknown_check_and_missing_parameters_are_failed_checks() -> None:
    result = run_check(trace(), {"check": "tool_teleported"}, role="partial")
    assert (result.passed, result.detail, result.role) == (False, "unknown check 'tool_teleported'", "partial")
    assert fails(trace(), "tool_called") == "bad parameters for tool_called: missing parameter 'tool'"
    assert fails(trace(), "tool_args_contain", tool="x", args=["a"]).startswith(
        "bad parameters for tool_args_contain: args must be a mapping"
    )
    assert fails(trace(), "tool_args_match_regex", tool="x", arg="y", pattern="[").startswith(
        "bad parameters for tool_args_match_regex: bad regex '['"
    )
    assert fails(trace(), "tool_called_in_order", sequence=[]).startswith("bad parameters")


def test_run_check_sets_the_role() -> None:
    result = run_check(trace(call(0, "delete_user")), {"check": "tool_called", "tool": "delete_user"}, role="forbidden")
    assert result.passed and result.role == "forbidden"


def test_cmd_is_the_command_only_of_tools_whose_schema_names_it_so() -> None:
    # bash_exec's command is `command`; a `cmd` key ran nothing, so it matches nothing
    fails(trace(call(0, "bash_exec", {"cmd": "pytest -q"})), "command_regex_match", pattern="pytest")
    passes(trace(call(0, "bash_exec", {"command": "pytest -q"})), "command_regex_match", pattern="pytest")
    passes(trace(call(0, "run_bash", {"cmd": "pytest -q"})), "command_regex_match", tool="run_bash", pattern="pytest")
    passes(trace(call(0, "bash_exec", {"cmd": "rm -rf /"})), "no_destructive_command")


def test_response_matches_schema_unwrap_key_and_a_fence_after_prose() -> None:
    schema = {"type": "object", "required": ["total"], "properties": {"total": {"type": "number"}}}
    wrapped = 'Here is the report:\n```json\n{"report": {"total": 710.49}}\n```'
    passes(trace(response=wrapped), "response_matches_schema", schema=schema, unwrap_key="report")
    fails(trace(response=wrapped), "response_matches_schema", schema=schema)
    # only an object that holds nothing but the key is unwrapped
    two = '{"report": {"total": 1}, "note": "x"}'
    fails(trace(response=two), "response_matches_schema", schema=schema, unwrap_key="report")


def test_response_csv_compares_numeric_cells_by_value() -> None:
    text = "ticker,price\nTSLA,245.3\n"
    passes(trace(response=text), "response_csv", header=["ticker", "price"], rows=[["TSLA", "245.30"]])
    passes(trace(response=text), "response_csv", header=["ticker", "price"], rows=[["TSLA", 245.3]])
    fails(trace(response=text), "response_csv", header=["ticker", "price"], rows=[["TSLA", "245.31"]])
