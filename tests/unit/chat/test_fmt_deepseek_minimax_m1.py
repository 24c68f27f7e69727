"""DeepSeek V3.1 / V3.2 / V4 and MiniMax-M1, against their pinned templates and beyond them.

Every parse here goes through ``parse_every_way``: in one piece, char by char, split at
every boundary and at random groupings, all giving the same events.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from splitserve.chat import (
    ToolCallArgsDelta,
    assistant_turn,
    detect_format,
    get_format,
    parse_complete,
    render_chat,
    tool_call_grammar,
)

from ._support import calls_of, no_markers, parse_every_way, tool
from .test_grammar import Grammar

DSML = ("deepseek-v3.2", "deepseek-v4")
WRAPPER = {"deepseek-v3.2": "function_calls", "deepseek-v4": "tool_calls"}
TEMPLATE = {
    "deepseek-v3.2": "deepseek-ai-DeepSeek-V3.2",
    "deepseek-v4": "deepseek-ai-DeepSeek-V4",
    "deepseek-v4-flash": "deepseek-ai-DeepSeek-V4-Flash-0731",
    "minimax-m1": "MiniMax-M1",
    "deepseek-v3": "deepseek-ai-DeepSeek-V3.1",
}

NOTE = tool(
    "note",
    {
        "text": {"type": "string"},
        "n": {"type": "integer"},
        "ratio": {"type": "number"},
        "ok": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "meta": {"type": "object", "properties": {"k": {"type": "integer"}}},
        "either": {"type": ["string", "integer"]},
        "maybe": {"type": ["string", "null"]},
    },
)
WEATHER = tool("get_weather", {"location": {"type": "string"}, "days": {"type": "integer"}})
TOOLS = [NOTE, WEATHER, tool("noop", {})]


@pytest.fixture(scope="module")
def tdir() -> Path:
    from splitserve.engine import resolve_source

    return Path(resolve_source(None).path) / "models" / "templates"


def src(tdir: Path, key: str) -> str:
    return (tdir / f"{TEMPLATE.get(key, key)}.jinja").read_text()


def oai_call(i: int, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": f"call_{i}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)},
    }


def P(key: str, value: str, string: str | None = "true") -> str:
    attr = "" if string is None else f' string="{string}"'
    return f'<｜DSML｜parameter name="{key}"{attr}>{value}</｜DSML｜parameter>\n'


def invoke(name: str, *params: str) -> str:
    return f'<｜DSML｜invoke name="{name}">\n' + "".join(params) + "</｜DSML｜invoke>\n"


def block(fmt: str, *invokes: str) -> str:
    w = WRAPPER[fmt]
    return f"<｜DSML｜{w}>\n" + "".join(invokes) + f"</｜DSML｜{w}>"


# -- detection ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "fmt"),
    [
        ("deepseek-v3.2", "deepseek-v3.2"),
        ("deepseek-v4", "deepseek-v4"),
        ("deepseek-v4-flash", "deepseek-v4"),
        ("minimax-m1", "minimax-m1"),
        ("deepseek-v3", "deepseek-v3"),
        ("llama-cpp-deepseek-r1", "deepseek-v3"),
    ],
)
def test_real_templates_are_detected(tdir: Path, key: str, fmt: str) -> None:
    assert detect_format(src(tdir, key)) == fmt


def test_detection_is_precise() -> None:
    lit32 = (
        '{{ "<｜DSML｜function_calls>\\n<｜DSML｜invoke name=\\"" + n + "\\">" }}'
        '{{ "<｜DSML｜parameter name=\\"" + k + "\\" string=\\"true\\">" }}'
    )
    assert detect_format(lit32) == "deepseek-v3.2"
    assert detect_format(lit32.replace("function_calls", "tool_calls")) == "deepseek-v4"
    assert detect_format("DSML ｜DSML｜ mentioned, no invoke") is None
    assert (
        detect_format(
            "{{ '<tool_calls>\\n' }}{{ '{\"name\": \"' + n + '\", \"arguments\": ' + a | tojson + '}' }}</tool_calls>"
        )
        == "minimax-m1"
    )
    # Apriel's JSON list in <tool_calls>[...] is not M1's JSON lines
    assert detect_format('{{ \'<tool_calls>[\' }}{"name": x, "arguments": y}]</tool_calls>') is None


# -- rendered turns parse back ------------------------------------------------------------

NASTY_TEXT = 'He said "hi" — <b>bold</b> & {"json": [1, 2]} </parameter> <think>not reasoning</think>\nsecond line  '
TYPED_ARGS = {
    "text": NASTY_TEXT,
    "n": 42,
    "ratio": 2.5,
    "ok": False,
    "tags": ["a b", "γ"],
    "meta": {"k": 3},
    "either": "42",
    "maybe": "null",
}


@pytest.mark.parametrize("key", ["deepseek-v3.2", "deepseek-v4", "deepseek-v4-flash"])
@pytest.mark.parametrize("thinking", [{"thinking": True}, {"enable_thinking": True}, {"thinking": False}, {}])
@pytest.mark.parametrize("content", ["Let me do both.", None])
def test_dsml_rendered_turns_parse_back(tdir: Path, key: str, thinking: dict[str, Any], content: str | None) -> None:
    template = src(tdir, key)
    fmt = get_format(detect_format(template) or "")
    on = any(thinking.values())
    history = [{"role": "user", "content": "File a note and get the weather."}]
    message: dict[str, Any] = {
        "role": "assistant",
        "content": content,
        "reasoning_content": "Two calls needed.",
        "tool_calls": [
            oai_call(1, "note", TYPED_ARGS),
            oai_call(2, "get_weather", {"location": "São Paulo", "days": 3}),
            oai_call(3, "noop", {}),
        ],
    }
    prompt = render_chat(template, history, TOOLS, **thinking)
    assert fmt.prefilled_by(prompt) == on
    text, prefilled = assistant_turn(template, history, message, fmt.end_markers, "<think>", TOOLS, **thinking)
    assert prefilled == on
    msg = parse_every_way(fmt.name, text, TOOLS, prefilled=prefilled, every_boundary=False)
    assert calls_of(msg) == [("note", TYPED_ARGS), ("get_weather", {"location": "São Paulo", "days": 3}), ("noop", {})]
    assert (msg.content or "").strip() == (content or "")
    assert msg.reasoning_content == ("Two calls needed." if on else None)
    assert msg.warnings == []
    no_markers(fmt.name, msg)


@pytest.mark.parametrize("key", ["deepseek-v3.2", "deepseek-v4"])
def test_dsml_prompt_after_tool_results_prefills_when_thinking(tdir: Path, key: str) -> None:
    template = src(tdir, key)
    fmt = get_format(key)
    history: list[dict[str, Any]] = [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": None, "tool_calls": [oai_call(1, "get_weather", {"location": "Oslo"})]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    assert fmt.prefilled_by(render_chat(template, history, TOOLS, thinking=True))
    assert not fmt.prefilled_by(render_chat(template, history, TOOLS, thinking=False))
    answer = {"role": "assistant", "content": "Sunny in Oslo.", "reasoning_content": "It is."}
    text, prefilled = assistant_turn(template, history, answer, fmt.end_markers, "<think>", TOOLS, thinking=True)
    msg = parse_every_way(key, text, TOOLS, prefilled=prefilled)
    assert (msg.reasoning_content, msg.content) == ("It is.", "Sunny in Oslo.")


def test_model_output_with_reasoning_and_calls(tdir: Path) -> None:
    text = "The user wants Paris.</think>\n\nChecking.\n\n" + block(
        "deepseek-v4", invoke("get_weather", P("location", "Paris"), P("days", "3", "false"))
    )
    msg = parse_every_way("deepseek-v4", text, TOOLS, prefilled=True)
    assert msg.reasoning_content == "The user wants Paris."
    assert msg.content == "Checking.\n\n"
    assert calls_of(msg) == [("get_weather", {"location": "Paris", "days": 3})]


# -- typing ----------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", DSML)
def test_string_true_keeps_the_raw_text(fmt: str) -> None:
    values = [
        '{"a": 1}',
        "[1, 2]",
        "42",
        "true",
        "null",
        "  spaced\n",
        "",
        "a </｜DSML｜parameter> b",
        "x</｜DSML｜parameter>y</｜DSML｜invoke>",
        '<｜DSML｜invoke name="evil">',
        "</｜DSML｜" + WRAPPER[fmt] + "> tail",
    ]
    for value in values:
        text = block(fmt, invoke("note", P("text", value)))
        msg = parse_every_way(fmt, text, TOOLS, prefilled=False, every_boundary=len(value) < 30)
        assert calls_of(msg) == [("note", {"text": value})], value
        assert msg.warnings == []
    # a closer followed by structure ends the value, whatever was meant: the rest is junk
    text = block(fmt, invoke("note", P("text", "x</｜DSML｜parameter>\n</｜DSML｜invoke>y")))
    msg = parse_every_way(fmt, text, TOOLS, prefilled=False)
    assert calls_of(msg) == [("note", {"text": "x"})] and msg.warnings


@pytest.mark.parametrize("fmt", DSML)
def test_string_true_under_other_schemas(fmt: str) -> None:
    text = block(
        fmt, invoke("note", P("either", "42"), P("maybe", "null"), P("n", "42"), P("ok", "yes"), P("meta", '{"k": 1}'))
    )
    msg = parse_every_way(fmt, text, TOOLS, prefilled=False)
    # a string wherever the schema allows one; lossless text typing where it does not
    assert calls_of(msg) == [("note", {"either": "42", "maybe": "null", "n": 42, "ok": "yes", "meta": {"k": 1}})]
    assert [w.split(": ", 1)[1] for w in msg.warnings] == [
        'argument ok is a string ("yes") where the schema allows boolean; kept as written'
    ]


@pytest.mark.parametrize("fmt", DSML)
def test_string_false_is_json(fmt: str) -> None:
    text = block(
        fmt,
        invoke(
            "note",
            P("text", '"quoted \\" ok"', "false"),
            P("either", "42", "false"),
            P("maybe", "null", "false"),
            P("n", " 7 ", "false"),
            P("ratio", "1.50", "false"),
            P("tags", '["x", "y"]', "false"),
            P("meta", '{"k": 2}', "false"),
        ),
    )
    msg = parse_every_way(fmt, text, TOOLS, prefilled=False)
    assert calls_of(msg) == [
        (
            "note",
            {
                "text": 'quoted " ok',
                "either": 42,
                "maybe": None,
                "n": 7,
                "ratio": 1.5,
                "tags": ["x", "y"],
                "meta": {"k": 2},
            },
        )
    ]
    assert msg.warnings == []
    # JSON text under a string schema is read whole and typed, never streamed raw
    msg = parse_every_way(fmt, block(fmt, invoke("note", P("text", "7", "false"))), TOOLS)
    assert calls_of(msg) == [("note", {"text": "7"})]


@pytest.mark.parametrize("fmt", DSML)
def test_string_false_that_is_not_json_and_a_missing_attribute_are_typed_as_text(fmt: str) -> None:
    text = block(
        fmt,
        invoke(
            "note",
            P("text", "plain words", "false"),
            P("n", "5", None),
            P("ok", "true", None),
            P("either", "9", None),
            P("tags", "one", "false"),
            P("maybe", "null", None),
        ),
    )
    msg = parse_every_way(fmt, text, TOOLS, prefilled=False)
    assert calls_of(msg) == [
        ("note", {"text": "plain words", "n": 5, "ok": True, "either": 9, "tags": ["one"], "maybe": None})
    ]


@pytest.mark.parametrize("fmt", DSML)
def test_no_schema_and_unknown_tool(fmt: str) -> None:
    text = block(
        fmt, invoke("mystery", P("z", "007"), P("n", "3", "false"), P("l", '[1, "a"]', "false"), P("w", "3", None))
    )
    msg = parse_every_way(fmt, text, TOOLS, prefilled=False)
    assert calls_of(msg) == [("mystery", {"z": "007", "n": 3, "l": [1, "a"], "w": 3})]
    assert any("mystery" in w for w in msg.warnings)


# -- structure, malformed, truncated -----------------------------------------------------------


@pytest.mark.parametrize("fmt", DSML)
def test_both_wrappers_and_bare_invokes_are_read(fmt: str) -> None:
    other = "deepseek-v4" if fmt == "deepseek-v3.2" else "deepseek-v3.2"
    one = invoke("get_weather", P("location", "Rome"))
    for text in (block(other, one), one, "Sure.\n" + one + "Done."):
        msg = parse_every_way(fmt, text, TOOLS, prefilled=False)
        assert calls_of(msg) == [("get_weather", {"location": "Rome"})], text
        no_markers(fmt, msg)


@pytest.mark.parametrize("fmt", DSML)
def test_multiple_calls_and_blocks(fmt: str) -> None:
    text = (
        "A\n\n"
        + block(
            fmt,
            invoke("get_weather", P("location", "Paris")),
            invoke("noop"),
            invoke("get_weather", P("location", "Rome")),
        )
        + "\nB\n\n"
        + block(fmt, invoke("noop", "\n"))
    )
    msg = parse_every_way(fmt, text, TOOLS, prefilled=False)
    assert calls_of(msg) == [
        ("get_weather", {"location": "Paris"}),
        ("noop", {}),
        ("get_weather", {"location": "Rome"}),
        ("noop", {}),
    ]
    assert msg.content == "A\n\n\nB\n\n" and msg.warnings == []
    assert len({c["id"] for c in parse_complete(fmt, text, TOOLS).tool_calls}) == 4


@pytest.mark.parametrize("fmt", DSML)
def test_malformed_output(fmt: str) -> None:
    w = WRAPPER[fmt]
    # an invoke without a name, a parameter without a name: text, with warnings
    msg = parse_every_way(fmt, block(fmt, "<｜DSML｜invoke>\n</｜DSML｜invoke>\n"), TOOLS)
    assert msg.tool_calls == [] and msg.warnings
    assert msg.content == block(fmt, "<｜DSML｜invoke>\n</｜DSML｜invoke>\n")
    text = block(fmt, invoke("get_weather", "<｜DSML｜parameter>x</｜DSML｜parameter>\n", P("location", "Oslo")))
    msg = parse_every_way(fmt, text, TOOLS)
    assert calls_of(msg) == [("get_weather", {"location": "Oslo"})] and msg.warnings
    # an invoke left open is closed by the next one and by the wrapper's closer
    text = (
        f"<｜DSML｜{w}>\n"
        + invoke("noop")[: -len("</｜DSML｜invoke>\n")]
        + invoke("get_weather", P("location", "Oslo"))[: -len("</｜DSML｜invoke>\n")]
        + f"</｜DSML｜{w}>"
    )
    msg = parse_every_way(fmt, text, TOOLS)
    assert calls_of(msg) == [("noop", {}), ("get_weather", {"location": "Oslo"})]
    # a tag name that only starts like one is text
    text = '<｜DSML｜invoker name="x">hi'
    assert parse_every_way(fmt, text, TOOLS).content == text
    # an empty wrapper is dropped, with a warning
    msg = parse_every_way(fmt, "ok" + block(fmt, "\n"), TOOLS)
    assert msg.content == "ok" and msg.tool_calls == [] and msg.warnings


@pytest.mark.parametrize("fmt", DSML)
def test_every_truncation(fmt: str) -> None:
    first = invoke("get_weather", P("location", "Paris"), P("days", "2", "false"))
    text = block(fmt, first, invoke("note", P("text", "a</｜DSML｜parameter>b")))
    end_of_first = text.index(first) + len(first)
    second_head = text.index('<｜DSML｜invoke name="note">') + len('<｜DSML｜invoke name="note">')
    second_end = text.rindex("</｜DSML｜invoke>") + len("</｜DSML｜invoke>")
    for cut in range(len(text) + 1):
        msg = parse_complete(fmt, text[:cut], TOOLS, prefilled=False)
        got = calls_of(msg)
        if cut >= end_of_first:
            assert got[:1] == [("get_weather", {"location": "Paris", "days": 2})], cut
        elif cut < end_of_first - len("</｜DSML｜invoke>\n") + 1:
            assert got == [], cut  # the first invoke is not closed yet: dropped
        if second_head <= cut < second_end:  # inside the second invoke: dropped, said so
            assert len(got) == 1 and any("cut off" in w for w in msg.warnings), cut
    assert calls_of(parse_complete(fmt, text, TOOLS))[1] == ("note", {"text": "a</｜DSML｜parameter>b"})


@pytest.mark.parametrize("fmt", DSML)
def test_string_values_stream(fmt: str) -> None:
    value = "a long string value that arrives piece by piece"
    text = block(fmt, invoke("note", P("text", value), P("n", "1", "false")))
    parser = get_format(fmt).parser(TOOLS, prefilled=False)
    closer = text.index(value) + len(value)
    early = 0
    for i, ch in enumerate(text):
        early += sum(isinstance(e, ToolCallArgsDelta) and i < closer for e in parser.feed(ch))
    parser.finish()
    assert early >= len(value) - 2


# -- grammar -----------------------------------------------------------------------------------


def test_dsml_grammars_write_their_own_wrapper_and_v4_empty_invokes() -> None:
    tools = [WEATHER, tool("noop", {})]
    g32 = Grammar(tool_call_grammar(get_format("deepseek-v3.2"), tools, reasoning=False))
    g4 = Grammar(tool_call_grammar(get_format("deepseek-v4"), tools, reasoning=False))
    for g, fmt in ((g32, "deepseek-v3.2"), (g4, "deepseek-v4")):
        other = "deepseek-v4" if fmt == "deepseek-v3.2" else "deepseek-v3.2"
        example = get_format(fmt).example
        assert g.accepts(example) and not g.accepts(get_format(other).example)
    assert g32.accepts(block("deepseek-v3.2", invoke("noop")))
    assert g4.accepts(block("deepseek-v4", invoke("noop", "\n")))
    assert not g4.accepts(block("deepseek-v4", invoke("noop")))
    # a string value cannot hold DSML markup; an integer is string="false" JSON
    call = block("deepseek-v4", invoke("get_weather", P("location", "{}")))
    assert g4.accepts(call.format("a <b> </param"))
    assert not g4.accepts(call.format("a</｜DSML｜parameter>"))
    assert not g4.accepts(block("deepseek-v4", invoke("get_weather", P("days", "3"))))
    assert g4.accepts(block("deepseek-v4", invoke("get_weather", P("days", "3", "false"))))


@pytest.mark.parametrize("fmt", DSML)
def test_dsml_grammar_offers_both_forms_for_a_union_and_parses_back(fmt: str) -> None:
    g = Grammar(tool_call_grammar(get_format(fmt), [NOTE], name="note", reasoning=False))
    assert g.accepts(block(fmt, invoke("note", P("either", "abc"))))
    assert g.accepts(block(fmt, invoke("note", P("either", "12", "false"))))
    assert g.accepts(block(fmt, invoke("note", P("maybe", "null", "false"))))
    rng = random.Random(fmt)
    for _ in range(30):
        sentence = g.sample(rng)
        msg = parse_complete(fmt, sentence, [NOTE])
        assert len(msg.tool_calls) >= 1 and msg.warnings == [], sentence


# -- MiniMax-M1 ----------------------------------------------------------------------------------


def m1(*lines: str) -> str:
    return "<tool_calls>\n" + "".join(line + "\n" for line in lines) + "</tool_calls>"


def j(name: str, args: Any) -> str:
    return json.dumps({"name": name, "arguments": args}, ensure_ascii=False)


def test_m1_rendered_turns_parse_back(tdir: Path) -> None:
    template = src(tdir, "minimax-m1")
    fmt = get_format("minimax-m1")
    history = [{"role": "user", "content": "Note and weather."}]
    prompt = render_chat(template, history, TOOLS)
    assert prompt.endswith("<beginning_of_sentence>ai name=assistant\n")
    assert not fmt.prefilled_by(prompt)
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [oai_call(1, "note", TYPED_ARGS), oai_call(2, "get_weather", {"location": "Oslo"})],
    }
    text, prefilled = assistant_turn(template, history, message, fmt.end_markers, "<think>", TOOLS)
    assert not prefilled and text.startswith("<tool_calls>\n{")
    msg = parse_every_way("minimax-m1", text, TOOLS, prefilled=False, every_boundary=False)
    assert calls_of(msg) == [("note", TYPED_ARGS), ("get_weather", {"location": "Oslo"})]
    assert msg.warnings == [] and msg.content is None
    answer = {"role": "assistant", "content": "Sunny."}
    text, _ = assistant_turn(template, history, answer, fmt.end_markers, "<think>", TOOLS)
    assert parse_every_way("minimax-m1", text, TOOLS).content == "Sunny."


def test_m1_reasoning_and_calls_inside_it() -> None:
    inner = m1(j("noop", {}))
    text = f"<think>\nI could write {inner} here.\n</think>\n\nChecking. " + m1(
        j("get_weather", {"location": "Seattle"})
    )
    msg = parse_every_way("minimax-m1", text, TOOLS)
    assert msg.reasoning_content == f"I could write {inner} here."
    assert msg.content == "Checking. "
    assert calls_of(msg) == [("get_weather", {"location": "Seattle"})]


def test_m1_bad_lines_are_skipped_and_good_calls_kept() -> None:
    text = m1(
        j("get_weather", {"location": "Seattle"}),
        "{invalid json here}",
        '{"name": "noop"}',
        '{"arguments": {"location": "Portland"}}',
        "just words",
        j("get_weather", {"location": "Oslo"}),
        json.dumps([{"name": "noop", "arguments": {}}]),
    )
    msg = parse_every_way("minimax-m1", text, TOOLS)
    assert calls_of(msg) == [
        ("get_weather", {"location": "Seattle"}),
        ("noop", {}),
        ("get_weather", {"location": "Oslo"}),
        ("noop", {}),
    ]
    assert [w for w in msg.warnings if "ignored" in w]
    assert msg.content is None


def test_m1_markup_inside_strings_and_arguments_as_a_string() -> None:
    value = '</tool_calls> and {braces} and "quotes"\n<think>'
    text = m1(
        j("note", {"text": value, "n": "5"}),
        json.dumps({"name": "get_weather", "arguments": json.dumps({"location": "X"})}),
    )
    msg = parse_every_way("minimax-m1", text, TOOLS)
    assert calls_of(msg) == [("note", {"text": value, "n": 5}), ("get_weather", {"location": "X"})]


def test_m1_malformed_and_truncated() -> None:
    for bad in ("<tool_calls>not a call</tool_calls>", '<tool_calls>{"nom": 1}</tool_calls>'):
        msg = parse_every_way("minimax-m1", "Result: " + bad, TOOLS)
        assert msg.content == "Result: " + bad and msg.tool_calls == [] and msg.warnings
    msg = parse_every_way("minimax-m1", "ok <tool_calls>\n\n</tool_calls>", TOOLS)
    assert msg.content == "ok " and msg.warnings
    full = m1(j("get_weather", {"location": "Paris"}), j("get_weather", {"location": "Rome"}))
    msg = parse_every_way("minimax-m1", full[: full.index("Rome") + 2], TOOLS)
    assert calls_of(msg) == [("get_weather", {"location": "Paris"})]
    assert any("cut off" in w for w in msg.warnings)
    msg = parse_every_way("minimax-m1", full[: -len("</tool_calls>")], TOOLS)
    assert len(msg.tool_calls) == 2
    for cut in range(len(full) + 1):
        got = calls_of(parse_complete("minimax-m1", full[:cut], TOOLS))
        assert len(got) <= 2


def test_m1_grammar_one_call_per_line() -> None:
    fmt = get_format("minimax-m1")
    g = Grammar(tool_call_grammar(fmt, [WEATHER, tool("noop", {})], reasoning=False))
    assert g.accepts(m1(j("noop", {}), j("get_weather", {"location": "P"})))
    assert not g.accepts(m1(j("noop", {})) + m1(j("noop", {})))
    single = Grammar(tool_call_grammar(fmt, [WEATHER], parallel=False, reasoning=False))
    assert not single.accepts(m1(j("get_weather", {}), j("get_weather", {})))
    pre = Grammar(tool_call_grammar(fmt, [WEATHER], prefilled=True))
    assert pre.accepts("plan</think>\n" + m1(j("get_weather", {"location": "P"})))


# -- DeepSeek V3.1 (the existing deepseek-v3 format) -----------------------------------------


@pytest.mark.parametrize("thinking", [{"thinking": True}, {"enable_thinking": True}, {"thinking": False}, {}])
def test_v31_rendered_turns_parse_back(tdir: Path, thinking: dict[str, Any]) -> None:
    template = src(tdir, "deepseek-v3")
    fmt = get_format("deepseek-v3")
    on = any(thinking.values())
    history = [{"role": "user", "content": "Weather in Paris and Rome?"}]
    prompt = render_chat(template, history, TOOLS, **thinking)
    assert prompt.endswith("<｜Assistant｜><think>" if on else "<｜Assistant｜><think></think>")
    assert fmt.prefilled_by(prompt) == on
    message = {
        "role": "assistant",
        "content": "Checking both.",
        "tool_calls": [oai_call(1, "get_weather", {"location": "Paris", "days": 3}), oai_call(2, "note", TYPED_ARGS)],
    }
    text, prefilled = assistant_turn(template, history, message, fmt.end_markers, "<think>", TOOLS, **thinking)
    assert prefilled == on
    msg = parse_every_way("deepseek-v3", text, TOOLS, prefilled=prefilled, every_boundary=False)
    assert calls_of(msg) == [("get_weather", {"location": "Paris", "days": 3}), ("note", TYPED_ARGS)]
    assert msg.content == "Checking both." and msg.warnings == []
    # what a thinking model writes after the pre-filled opener
    out = "Two cities.</think>" + text.removeprefix("</think>")
    msg = parse_every_way("deepseek-v3", out, TOOLS, prefilled=True, every_boundary=False)
    assert msg.reasoning_content == "Two cities." and len(msg.tool_calls) == 2


# -- Qwen3.5 (the existing qwen3-coder format) ------------------------------------------------


def test_qwen35_prefills_thinking_unless_disabled(tdir: Path) -> None:
    template = src(tdir, "Qwen3.5-4B")
    fmt = get_format(detect_format(template) or "")
    assert fmt.name == "qwen3-coder"
    history = [{"role": "user", "content": "hi"}]
    assert render_chat(template, history, TOOLS).endswith("<|im_start|>assistant\n<think>\n")
    assert fmt.prefilled_by(render_chat(template, history, TOOLS))
    off = render_chat(template, history, TOOLS, enable_thinking=False)
    assert off.endswith("<think>\n\n</think>\n\n") and not fmt.prefilled_by(off)
    out = (
        "Plan it.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=location>\n"
        "Oslo\n</parameter>\n</function>\n</tool_call>"
    )
    msg = parse_every_way("qwen3-coder", out, TOOLS, prefilled=True)
    assert msg.reasoning_content == "Plan it." and calls_of(msg) == [("get_weather", {"location": "Oslo"})]


@pytest.mark.parametrize("fmt", DSML)
def test_implied_wrapper_and_quoted_attributes(fmt: str) -> None:
    w = WRAPPER[fmt]
    one = invoke("get_weather", P("location", "Rome"))
    # a wrapper's closer right after bare invokes is their own; other text is content
    msg = parse_every_way(fmt, one + "\n" + invoke("noop") + f"</｜DSML｜{w}>\nDone.", TOOLS)
    assert calls_of(msg) == [("get_weather", {"location": "Rome"}), ("noop", {})]
    assert msg.content == "\nDone." and msg.warnings == []
    msg = parse_every_way(fmt, one + "after", TOOLS)
    assert msg.content == "\nafter"
    # a quoted attribute value may hold ">"; attributes in any order
    text = block(
        fmt,
        '<｜DSML｜invoke name="get_weather" note="a > b">\n'
        '<｜DSML｜parameter string="false" name="days">4</｜DSML｜parameter>\n'
        "</｜DSML｜invoke>\n",
    )
    assert calls_of(parse_every_way(fmt, text, TOOLS)) == [("get_weather", {"days": 4})]
