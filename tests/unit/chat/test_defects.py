"""Regressions for parser defects found by running other servers' parser tests against ours.

Each case is parsed in one piece, char by char, split at every boundary and at random
groupings (``parse_every_way``): every way must give the same events. The cases are our
own, in the spirit of vLLM's ``tests/tool_parsers``, SGLang's ``function_call`` tests and
llama.cpp's ``test-chat.cpp``.
"""

from __future__ import annotations

from typing import Any

import pytest

from splitserve.chat import ToolCallStart, _reasoning, get_format
from splitserve.chat._fmt_llama3_json import json_prefix

from ._support import calls_of, ids, no_markers, parse_every_way, tool

WEATHER = tool(
    "get_weather",
    {"city": {"type": "string"}, "state": {"type": "string"}, "unit": {"type": "string"}, "days": {"type": "integer"}},
)
WRITE = tool("write_file", {"path": {"type": "string"}, "content": {"type": "string"}})
TOOLS = [WEATHER, WRITE]


def q_call(name: str, body: str) -> str:
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


def q_param(key: str, value: str) -> str:
    return f"<parameter={key}>\n{value}\n</parameter>\n"


def warned(msg: Any, text: str) -> bool:
    return any(text in w for w in msg.warnings)


# -- 1: qwen3-coder, a parameter left unclosed --------------------------------------------


def test_q1_unclosed_parameter_ends_at_the_next_declared_parameter() -> None:
    text = (
        "Let me check the weather for you:\n<tool_call>\n<function=get_weather>\n"
        "<parameter=city>\nDallas\n<parameter=state>\nTX\n</parameter>\n"
        "<parameter=unit>\nfahrenheit\n</parameter>\n</function>\n</tool_call>"
    )
    msg = parse_every_way("qwen3-coder", text, TOOLS, prefilled=False)
    assert calls_of(msg) == [("get_weather", {"city": "Dallas", "state": "TX", "unit": "fahrenheit"})]
    assert msg.content == "Let me check the weather for you:\n"
    assert warned(msg, "parameter 'city' was not closed; it ends at <parameter=state>")
    no_markers("qwen3-coder", msg)


def test_q1_several_unclosed_parameters_and_a_typed_one() -> None:
    body = "<parameter=city>\nDallas\n<parameter=days>\n3\n<parameter=unit>\nC\n"
    msg = parse_every_way("qwen3-coder", q_call("get_weather", body), TOOLS, prefilled=False)
    assert calls_of(msg) == [("get_weather", {"city": "Dallas", "days": 3, "unit": "C"})]
    assert sum("was not closed" in w for w in msg.warnings) == 3


@pytest.mark.parametrize("tools", [TOOLS, None], ids=["schema", "no-schema"])
def test_q1_unclosed_parameter_ends_at_the_function_closer(tools: Any) -> None:
    text = q_call("get_weather", "<parameter=city>\nDallas\n") + "\nDone."
    msg = parse_every_way("qwen3-coder", text, tools, prefilled=False)
    assert calls_of(msg) == [("get_weather", {"city": "Dallas"})]
    assert msg.content == "\nDone."
    assert warned(msg, "it ends at </function>")


@pytest.mark.parametrize("tools", [TOOLS, None], ids=["schema", "no-schema"])
def test_q1_unclosed_parameter_ends_at_the_block_closer(tools: Any) -> None:
    text = (
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nDallas\n</tool_call>\n"
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n"
        "</function>\n</tool_call>"
    )
    msg = parse_every_way("qwen3-coder", text, tools, prefilled=False)
    assert calls_of(msg) == [("get_weather", {"city": "Dallas"}), ("get_weather", {"city": "Rome"})]
    assert msg.content is None and not warned(msg, "cut off")


def test_q1_function_closer_at_the_end_of_output_keeps_the_call() -> None:
    text = "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</function>"
    msg = parse_every_way("qwen3-coder", text, TOOLS, prefilled=False)
    assert calls_of(msg) == [("get_weather", {"city": "Oslo"})]
    assert not warned(msg, "cut off")


def test_q1_closers_followed_by_prose_are_data() -> None:
    value = "close it with </function> and then </tool_call> as usual"
    text = q_call("write_file", q_param("content", value) + q_param("path", "a.md"))
    for tools in (TOOLS, None):
        msg = parse_every_way("qwen3-coder", text, tools, prefilled=False)
        assert calls_of(msg) == [("write_file", {"content": value, "path": "a.md"})]
        assert not warned(msg, "was not closed")


def test_q1_without_a_schema_a_parameter_opener_in_a_value_stays_data() -> None:
    """No schema to tell a parameter from data: the closer rule decides, as before."""
    value = "<parameter=x>\ninner\n</parameter>"
    text = q_call("mystery", q_param("doc", value))
    msg = parse_every_way("qwen3-coder", text, None, prefilled=False)
    assert calls_of(msg) == [("mystery", {"doc": value})]


def test_q1_cut_off_inside_an_unclosed_value_drops_the_call() -> None:
    text = (
        q_call("get_weather", q_param("city", "Paris")) + "\n<tool_call>\n<function=get_weather>\n<parameter=city>\nRo"
    )
    msg = parse_every_way("qwen3-coder", text, TOOLS, prefilled=False)
    assert calls_of(msg) == [("get_weather", {"city": "Paris"})]
    assert warned(msg, "cut off")


# -- 2: qwen3-coder, tool-call markup inside a string value ------------------------------

NESTED = q_call("get_weather", q_param("city", "Paris") + q_param("days", "3"))


@pytest.mark.parametrize("tools", [TOOLS, None], ids=["schema", "no-schema"])
def test_q2_a_whole_tool_call_inside_a_value_is_data(tools: Any) -> None:
    value = f"Example output:\n{NESTED}\nend of file"
    text = "Writing the fixture.\n" + q_call("write_file", q_param("path", "fixture.txt") + q_param("content", value))
    msg = parse_every_way("qwen3-coder", text, tools, prefilled=False, every_boundary=False)
    assert calls_of(msg) == [("write_file", {"path": "fixture.txt", "content": value})]
    assert msg.content == "Writing the fixture.\n"


def test_q2_a_value_that_is_exactly_a_tool_call_then_another_real_call() -> None:
    text = (
        q_call("write_file", q_param("content", NESTED) + q_param("path", "t.xml"))
        + "\n"
        + q_call("get_weather", q_param("city", "Rome"))
    )
    msg = parse_every_way("qwen3-coder", text, TOOLS, prefilled=False, every_boundary=False)
    assert calls_of(msg) == [("write_file", {"content": NESTED, "path": "t.xml"}), ("get_weather", {"city": "Rome"})]


def test_q2_parameter_markup_the_tool_does_not_declare_is_data() -> None:
    value = "end each value with\n</parameter>\n<parameter=next_key>\nand go on"
    text = q_call("write_file", q_param("content", value) + q_param("path", "a.md"))
    msg = parse_every_way("qwen3-coder", text, TOOLS, prefilled=False)
    assert calls_of(msg) == [("write_file", {"content": value, "path": "a.md"})]
    assert msg.warnings == []


def test_q2_the_values_own_name_inside_it_is_data() -> None:
    value = "usage: <parameter=content>\ntext\n</parameter>"
    text = q_call("write_file", q_param("content", value) + q_param("path", "u.txt"))
    msg = parse_every_way("qwen3-coder", text, TOOLS, prefilled=False)
    assert calls_of(msg) == [("write_file", {"content": value, "path": "u.txt"})]


def test_q2_declared_names_inside_a_nested_call_are_data() -> None:
    inner = q_call("write_file", q_param("path", "inner.txt") + q_param("content", "hi"))
    value = f"<tool_call> blocks look like\n{inner}"
    text = q_call("write_file", q_param("content", value) + q_param("path", "doc.md"))
    msg = parse_every_way("qwen3-coder", text, TOOLS, prefilled=False, every_boundary=False)
    assert calls_of(msg) == [("write_file", {"content": value, "path": "doc.md"})]


def test_q2_an_opener_in_prose_that_is_never_closed_does_not_swallow_the_call() -> None:
    for value in ("wrap calls in <tool_call> tags", "call <function=f> like this", 'text.find("<function=") >= 0'):
        text = q_call("write_file", q_param("content", value) + q_param("path", "x"))
        msg = parse_every_way("qwen3-coder", text, TOOLS, prefilled=False)
        assert calls_of(msg) == [("write_file", {"content": value, "path": "x"})], value


def test_q2_hermes_style_markup_inside_a_value_is_data() -> None:
    value = '<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>'
    text = q_call("write_file", q_param("content", value))
    msg = parse_every_way("qwen3-coder", text, TOOLS, prefilled=False)
    assert calls_of(msg) == [("write_file", {"content": value})]


def test_q2_nested_markup_streams_as_part_of_the_value() -> None:
    value = f"{NESTED}\n" + "tail " * 8
    text = q_call("write_file", q_param("content", value))
    parser = get_format("qwen3-coder").parser(TOOLS, prefilled=False, id_factory=ids)
    before_close = 0
    closer = text.rindex("</parameter>")
    for i, ch in enumerate(text):
        before_close += sum(1 for e in parser.feed(ch) if type(e).__name__ == "ToolCallArgsDelta" and i < closer)
    parser.finish()
    assert before_close >= 20  # a string value still streams though it holds markup


# -- 3: qwen3-coder (and minimax-m2), a call without the block opener -------------------


def test_q3_the_closer_of_an_implied_block_is_dropped() -> None:
    text = "<function=get_weather>\n<parameter=city>\nDallas\n</parameter>\n</function>\n</tool_call>"
    msg = parse_every_way("qwen3-coder", text, TOOLS, prefilled=False)
    assert calls_of(msg) == [("get_weather", {"city": "Dallas"})]
    assert msg.content is None and msg.warnings == []


def test_q3_text_before_and_several_calls_in_an_implied_block() -> None:
    one = "<function=get_weather>\n<parameter=city>\n{}\n</parameter>\n</function>\n"
    text = "I'll check the weather for you.\n\n" + one.format("Dallas") + one.format("Rome") + "</tool_call>"
    msg = parse_every_way("qwen3-coder", text, TOOLS, prefilled=False)
    assert calls_of(msg) == [("get_weather", {"city": "Dallas"}), ("get_weather", {"city": "Rome"})]
    assert msg.content == "I'll check the weather for you.\n\n"
    no_markers("qwen3-coder", msg)


def test_q3_a_closer_elsewhere_in_prose_stays_content() -> None:
    call = "<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</function>"
    msg = parse_every_way("qwen3-coder", call + "\nDone. </tool_call> ends a block.", TOOLS, prefilled=False)
    assert calls_of(msg) == [("get_weather", {"city": "Oslo"})]
    assert msg.content == "\nDone. </tool_call> ends a block."
    msg = parse_every_way("qwen3-coder", "A block ends with </tool_call>.", TOOLS, prefilled=False)
    assert msg.content == "A block ends with </tool_call>."


def test_q3_minimax_m2_implied_block_closer_is_dropped() -> None:
    text = (
        'Sure.\n<invoke name="get_weather">\n<parameter name="city">Oslo</parameter>\n</invoke>\n</minimax:tool_call>'
    )
    msg = parse_every_way("minimax-m2", text, TOOLS, prefilled=False)
    assert calls_of(msg) == [("get_weather", {"city": "Oslo"})]
    assert msg.content == "Sure.\n"


# -- 4: llama3-json, the python tag and invalid JSON ---------------------------------------


def test_l4_text_before_the_python_tag_is_content_and_the_call_parses() -> None:
    text = 'Let me look that up. <|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris", "days": 2}}'
    msg = parse_every_way("llama3-json", text, TOOLS)
    assert calls_of(msg) == [("get_weather", {"city": "Paris", "days": 2})]
    assert msg.content == "Let me look that up. "
    no_markers("llama3-json", msg)


def test_l4_several_calls_after_a_python_tag_in_mid_text() -> None:
    text = (
        'Two lookups.\n<|python_tag|> {"name": "get_weather", "parameters": {"city": "A"}};'
        ' {"name": "get_weather", "parameters": {"city": "B"}}\nDone.'
    )
    msg = parse_every_way("llama3-json", text, TOOLS)
    assert calls_of(msg) == [("get_weather", {"city": "A"}), ("get_weather", {"city": "B"})]
    assert msg.content == "Two lookups.\n\nDone."


def test_l4_json_in_prose_without_the_tag_is_still_prose() -> None:
    text = 'Here is JSON: {"name": "get_weather", "parameters": {}}'
    msg = parse_every_way("llama3-json", text, TOOLS)
    assert msg.content == text and msg.tool_calls == []


@pytest.mark.parametrize(
    "body",
    [
        '{"name": "invalidTool", "parameters": {invalid json}',  # never balances
        '{"name": "get_weather", "parameters": {"city": "Paris"} and more',
        '{"name": "get_weather", "parameters": {"city": Paris}}',  # balances
        '{"name": get_weather}',
    ],
)
@pytest.mark.parametrize("tag", ["", "<|python_tag|>"])
def test_l4_invalid_json_stays_content_with_an_accurate_warning(body: str, tag: str) -> None:
    msg = parse_every_way("llama3-json", tag + body, TOOLS)
    assert msg.tool_calls == []
    assert msg.content == tag + body
    assert msg.warnings and not warned(msg, "cut off")


def test_l4_a_json_call_cut_off_is_still_dropped_as_cut_off() -> None:
    for text in (
        '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Par',
        'Ok <|python_tag|>{"name": "get_weather", "parameters": {"days": 1',
        '{"name": "get_weather", "parameters": {"city": "Paris"}',
    ):
        msg = parse_every_way("llama3-json", text, TOOLS)
        assert msg.tool_calls == [] and warned(msg, "cut off"), text
        assert (msg.content or "").strip() in ("", "Ok"), text


def test_l4_a_python_tag_without_json_is_content_with_a_warning() -> None:
    text = 'Running it. <|python_tag|>brave_search.call(query="paris")'
    msg = parse_every_way("llama3-json", text, TOOLS)
    assert msg.content == text and msg.tool_calls == []
    assert warned(msg, "not a JSON tool call")


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("{", True),
        ('{"a": tr', True),
        ('{"a": 1.', True),
        ('{"a": -', True),
        ('{"a": [1, {"b": "x\\u00', True),
        ('{"a": []}', True),
        ('{"a": "x"} y', False),
        ("{invalid", False),
        ('{"a": Paris', False),
        ('{"a": 1,}', False),
        ('{"a" 1', False),
        ('{"a": [1 2]', False),
    ],
)
def test_l4_json_prefix(text: str, ok: bool) -> None:
    assert json_prefix(text) is ok


# -- 5: minimax-m2, extra attributes on the tags --------------------------------------------


@pytest.mark.parametrize("fmt", ["minimax-m2", "minimax-m3-hybrid"])
@pytest.mark.parametrize(
    ("invoke", "param"),
    [
        ('<invoke name="get_weather" description="Get the weather">', '<parameter name="city">'),
        ('<invoke description="Get the weather" name="get_weather">', '<parameter name="city" type="string">'),
        ("<invoke name='get_weather' id=7>", "<parameter type=\"string\" name='city'>"),
        ('<invoke name="get_weather" note="a > b, \'quoted\'">', '<parameter data-x="1" name="city" hint="<city>">'),
        ("<invoke name=get_weather>", "<parameter name=city>"),
    ],
)
def test_m5_extra_attributes_keep_the_call(fmt: str, invoke: str, param: str) -> None:
    text = (
        f"Checking.\n<minimax:tool_call>\n{invoke}\n{param}Paris</parameter>\n"
        '<parameter name="days" type="integer">3</parameter>\n</invoke>\n'
        "</minimax:tool_call>"
    )
    msg = parse_every_way(fmt, text, TOOLS, prefilled=False, every_boundary=False)
    assert calls_of(msg) == [("get_weather", {"city": "Paris", "days": 3})]
    assert msg.content == "Checking.\n" and msg.warnings == []


def test_m5_an_attribute_that_only_ends_in_name_is_not_the_name() -> None:
    text = '<minimax:tool_call>\n<invoke data-name="get_weather">\n</invoke>\n</minimax:tool_call>'
    msg = parse_every_way("minimax-m2", text, TOOLS, prefilled=False)
    assert msg.tool_calls == [] and msg.content == text and msg.warnings


# -- 6: reasoning ------------------------------------------------------------------------

M3_CALL = (
    'I will check.]<]minimax[>[<tool_call>\n]<]minimax[>[<invoke name="get_weather">'
    "]<]minimax[>[<city>Paris]<]minimax[>[</city>]<]minimax[>[</invoke>\n"
    "]<]minimax[>[</tool_call>"
)


def test_r6_m3_reply_inside_a_prefilled_block_without_the_flag() -> None:
    text = "The user wants the weather.\nI should call the tool.\n</mm:think>\n\nHere it is."
    msg = parse_every_way("minimax-m3", text, TOOLS)  # prefilled=None: unknown
    assert msg.reasoning_content == "The user wants the weather.\nI should call the tool."
    assert msg.content == "Here it is."
    no_markers("minimax-m3", msg)


def test_r6_m3_prefilled_reasoning_then_a_call_without_the_flag() -> None:
    msg = parse_every_way("minimax-m3", "Need the tool.</mm:think>\n" + M3_CALL, TOOLS, every_boundary=False)
    assert msg.reasoning_content == "Need the tool."
    assert calls_of(msg) == [("get_weather", {"city": "Paris"})]
    assert msg.content == "I will check."


@pytest.mark.parametrize("fmt", ["minimax-m3", "minimax-m3-hybrid", "qwen3-coder", "hermes", "deepseek-v3"])
def test_r6_unknown_start_decides_by_the_output(fmt: str) -> None:
    spec = get_format(fmt).reasoning
    assert spec is not None and not spec.prefilled_default
    op, cl = spec.open, spec.close
    cases = [
        (f"thinking\n{cl}\n\nAnswer.", "thinking", "Answer."),  # a closer: it was reasoning
        ("Just an answer.", None, "Just an answer."),  # the end of output: content
        (f"{op}\nplanned\n{cl}\nAnswer.", "planned", "Answer."),  # an opener: as ever
        (f"  {cl}Direct.", None, "Direct."),  # a stray leading closer: dropped
    ]
    for text, reasoning, content in cases:
        msg = parse_every_way(fmt, text)
        assert (msg.reasoning_content, msg.content) == (reasoning, content), text


@pytest.mark.parametrize("fmt", ["qwen3-coder", "minimax-m3-hybrid"])
def test_r6_unknown_start_a_call_means_content(fmt: str) -> None:
    call = {
        "qwen3-coder": q_call("get_weather", q_param("city", "Oslo")),
        "minimax-m3-hybrid": '<minimax:tool_call>\n<invoke name="get_weather">\n'
        '<parameter name="city">Oslo</parameter>\n</invoke>\n'
        "</minimax:tool_call>",
    }[fmt]
    msg = parse_every_way(fmt, "Checking now.\n" + call, TOOLS)
    assert msg.reasoning_content is None and msg.content == "Checking now.\n"
    assert calls_of(msg) == [("get_weather", {"city": "Oslo"})]
    # and the call streams: it starts before the end of output
    parser = get_format(fmt).parser(TOOLS, id_factory=ids)
    started = [e for ch in "Checking now.\n" + call for e in parser.feed(ch) if isinstance(e, ToolCallStart)]
    assert len(started) == 1


def test_r6_an_explicit_flag_keeps_the_old_reading() -> None:
    text = "mid-thought\n</mm:think>\n\nAnswer."
    msg = parse_every_way("minimax-m3", text, TOOLS, prefilled=False)
    assert (msg.reasoning_content, msg.content) == (None, text)
    msg = parse_every_way("minimax-m3", text, TOOLS, prefilled=True)
    assert (msg.reasoning_content, msg.content) == ("mid-thought", "Answer.")


def test_r6_unknown_start_holds_at_most_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_reasoning, "UNKNOWN_LIMIT", 40)
    short = "a" * 30 + "</mm:think>Answer."
    msg = parse_every_way("minimax-m3", short)
    assert (msg.reasoning_content, msg.content) == ("a" * 30, "Answer.")
    long = "a" * 50 + "</mm:think>Answer."  # the closer starts past the limit: content
    msg = parse_every_way("minimax-m3", long)
    assert (msg.reasoning_content, msg.content) == (None, long)


M2_CALL = (
    '<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Paris'
    "</parameter>\n</invoke>\n</minimax:tool_call>"
)


@pytest.mark.parametrize("prefilled", [True, None])
def test_r6_m2_reply_that_starts_with_a_call_while_reasoning_is_assumed_open(prefilled: bool | None) -> None:
    msg = parse_every_way("minimax-m2", "\n" + M2_CALL, TOOLS, prefilled=prefilled)
    assert calls_of(msg) == [("get_weather", {"city": "Paris"})]
    assert msg.reasoning_content is None and msg.content is None
    no_markers("minimax-m2", msg)


def test_r6_m2_assumed_reasoning_then_a_call_without_a_closer() -> None:
    msg = parse_every_way("minimax-m2", "I need the weather.\n\n" + M2_CALL + "\nDone.", TOOLS, prefilled=True)
    assert msg.reasoning_content == "I need the weather."
    assert calls_of(msg) == [("get_weather", {"city": "Paris"})]
    assert msg.content == "\nDone."


@pytest.mark.parametrize("prefilled", [False, True])
def test_r6_markup_inside_explicit_reasoning_stays_reasoning(prefilled: bool) -> None:
    text = f"<think>\nMaybe: {M2_CALL}\n</think>\n\nNo call needed."
    msg = parse_every_way("minimax-m2", text, TOOLS, prefilled=prefilled)
    assert msg.reasoning_content == f"Maybe: {M2_CALL}"
    assert msg.content == "No call needed." and msg.tool_calls == []


@pytest.mark.parametrize("fmt", ["qwen3-coder", "minimax-m3-hybrid", "minimax-m3"])
def test_r6_prefilled_reasoning_ended_by_a_call(fmt: str) -> None:
    call = {
        "qwen3-coder": q_call("get_weather", q_param("city", "Oslo")),
        "minimax-m3-hybrid": M2_CALL.replace("Paris", "Oslo"),
        "minimax-m3": M3_CALL.replace("Paris", "Oslo").replace("I will check.", ""),
    }[fmt]
    msg = parse_every_way(fmt, "Think first.\n" + call, TOOLS, prefilled=True, every_boundary=False)
    assert msg.reasoning_content == "Think first."
    assert calls_of(msg) == [("get_weather", {"city": "Oslo"})]
    no_markers(fmt, msg)
