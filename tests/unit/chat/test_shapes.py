"""Output shapes real models produce (as public parser test suites show them; own fixtures)."""

from __future__ import annotations

import pytest

from ._support import NS, calls_of, parse_every_way, tool

TOOLS = [
    tool("get_time", {"city": {"type": "string"}}),
    tool("get_weather", {"city": {"type": "string"}}),
    tool("special_function", {"arg1": {"type": "integer"}}),
    tool("magic_int", {"ref": {"type": "integer"}}),
    tool("amount", {"orig": {"type": "number"}}),
    tool("empty_args", {}),
]

CASES = [
    # MiniMax-M3: adaptive prompt, so a non-thinking turn starts with a bare closer
    ("minimax-m3", False, "</mm:think>Hello, world!\nWhat's up?", None, "Hello, world!\nWhat's up?", []),
    (
        "minimax-m3",
        False,
        "<mm:think>I'm\nthinking</mm:think>Hello, world!\nWhat's up?",
        "I'm\nthinking",
        "Hello, world!\nWhat's up?",
        [],
    ),
    (
        "minimax-m3",
        False,
        (
            f'</mm:think>{NS}<tool_call>\n{NS}<invoke name="special_function">'
            f"{NS}<arg1>1{NS}</arg1>{NS}</invoke>\n{NS}</tool_call>"
        ),
        None,
        None,
        [("special_function", {"arg1": 1})],
    ),
    (
        "minimax-m3",
        False,
        (
            f"<mm:think>Calling both</mm:think>{NS}<tool_call>\n"
            f'{NS}<invoke name="get_time">{NS}<city>Paris{NS}</city>{NS}</invoke>\n'
            f'{NS}<invoke name="get_weather">{NS}<city>Paris{NS}</city>{NS}</invoke>\n'
            f"{NS}</tool_call>"
        ),
        "Calling both",
        None,
        [("get_time", {"city": "Paris"}), ("get_weather", {"city": "Paris"})],
    ),
    (
        "minimax-m3",
        False,
        (
            f"<mm:think>Test</mm:think>Let me call the function.{NS}<tool_call>\n"
            f'{NS}<invoke name="magic_int">{NS}<ref>-14{NS}</ref>{NS}</invoke>\n'
            f'{NS}<invoke name="amount">{NS}<orig>3.14{NS}</orig>{NS}</invoke>\n{NS}</tool_call>'
        ),
        "Test",
        "Let me call the function.",
        [("magic_int", {"ref": -14}), ("amount", {"orig": 3.14})],
    ),
    # MiniMax-M2: the prompt pre-fills <think>\n, so output starts mid-reasoning
    (
        "minimax-m2",
        True,
        (
            "Let's call a tool:\n</think>\n\n<minimax:tool_call>\n"
            '<invoke name="empty_args">\n</invoke>\n</minimax:tool_call>'
        ),
        "Let's call a tool:",
        None,
        [("empty_args", {})],
    ),
    (
        "minimax-m2",
        True,
        (
            "I am thinking about the problem.</think><minimax:tool_call>"
            '<invoke name="get_weather">\n<parameter name="city">Beijing</parameter>\n</invoke>\n'
            "</minimax:tool_call>\nThe weather will be..."
        ),
        "I am thinking about the problem.",
        "\nThe weather will be...",
        [("get_weather", {"city": "Beijing"})],
    ),
    # Qwen3 (hermes) with thinking, DeepSeek V3.1 after reasoning
    (
        "hermes",
        False,
        ('<think>\nok\n</think>\n\n<tool_call>\n{"name": "get_time", "arguments": {"city": "Tokyo"}}\n</tool_call>'),
        "ok",
        None,
        [("get_time", {"city": "Tokyo"})],
    ),
    (
        "deepseek-v3",
        True,
        (
            "REASONING</think>CONTENT<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>"
            'get_time<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁end｜><｜tool▁call▁begin｜>get_weather'
            '<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
        ),
        "REASONING",
        "CONTENT",
        [("get_time", {"city": "Paris"}), ("get_weather", {"city": "Paris"})],
    ),
    (
        "deepseek-v3",
        False,
        (
            "<think>\n</think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function"
            '<｜tool▁sep｜>special_function\n```json\n{"arg1": 1}\n```<｜tool▁call▁end｜>'
            "<｜tool▁calls▁end｜>"
        ),
        None,
        None,
        [("special_function", {"arg1": 1})],
    ),
    (
        "llama3-json",
        False,
        ('<|python_tag|>{"name": "special_function", "parameters": {"arg1": 1}}'),
        None,
        None,
        [("special_function", {"arg1": 1})],
    ),
]


@pytest.mark.parametrize(("fmt", "prefilled", "text", "reasoning", "content", "calls"), CASES)
def test_real_shapes(
    fmt: str,
    prefilled: bool,
    text: str,
    reasoning: str | None,
    content: str | None,
    calls: list[tuple[str, dict[str, object]]],
) -> None:
    msg = parse_every_way(fmt, text, TOOLS, prefilled=prefilled)
    assert msg.reasoning_content == reasoning
    assert msg.content == content
    assert calls_of(msg) == calls
    assert msg.warnings == []
