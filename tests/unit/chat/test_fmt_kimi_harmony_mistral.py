"""kimi-k2, kimi-k3, gpt-oss (harmony) and mistral: the real templates, and what each format
does beyond the conformance matrix (which every one of them also runs, see _support).

Every parse here goes through ``parse_every_way``: one piece, char by char, split at every
boundary and at random groupings, all giving the same events.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from splitserve.chat import (
    ToolCallArgsDelta,
    ToolCallStart,
    assistant_turn,
    check_template,
    detect_format,
    get_format,
    parse_complete,
    render_chat,
    tool_call_grammar,
)
from splitserve.chat._fmt_gpt_oss import parse_header
from splitserve.chat._fmt_kimi_k2 import name_from_id

from ._support import calls_of, no_markers, parse_every_way, tool
from .test_grammar import Grammar

WEATHER = tool("get_weather", {"location": {"type": "string"}, "days": {"type": "integer"}})
NOTE = tool(
    "note",
    {
        "text": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "n": {"type": "integer"},
        "ok": {"type": "boolean"},
        "code": {"type": "string"},
        "maybe": {"type": ["string", "null"]},
    },
)
TOOLS = [WEATHER, NOTE, tool("noop", {})]
for _t in TOOLS:  # gpt-oss's template writes every tool's description
    _t["function"]["description"] = "A tool."
NOTE_ARGS = {
    "text": 'say "hi"\nnaïve 🚀 </x> [ARGS] {"a": [1]}',
    "tags": ["a b", "γ"],
    "n": 42,
    "ok": False,
    "code": "007",
    "maybe": "null",
}
PARIS = ("get_weather", {"location": "Paris", "days": 3})


@pytest.fixture(scope="module")
def tdir() -> Path:
    from splitserve.engine import resolve_source

    return Path(resolve_source(None).path) / "models" / "templates"


def _call(cid: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": cid,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)},
    }


def _in_marker(text: str, cut: int) -> bool:
    """Whether ``cut`` falls inside a ``<|...|>`` special token of ``text``."""
    start = text.rfind("<|", 0, cut + 1)
    return 0 <= start < cut and text.find("|>", start) + 2 > cut


def _turn(template: str, message: dict[str, Any], fmt: str, **kwargs: Any) -> tuple[str, bool]:
    f = get_format(fmt)
    return assistant_turn(
        template,
        [{"role": "user", "content": "Weather and a note?"}],
        message,
        f.end_markers,
        f.reasoning.open if f.reasoning else None,
        TOOLS,
        **kwargs,
    )


def parse(fmt: str, text: str, tools: list[dict[str, Any]] | None = None, **kw: Any) -> Any:
    return parse_every_way(fmt, text, TOOLS if tools is None else tools, every_boundary=len(text) < 400, **kw)


def test_names_and_aliases() -> None:
    assert get_format("kimi_k2").name == "kimi-k2"
    assert get_format("openai").name == get_format("harmony").name == "gpt-oss"
    assert get_format("mistral").name == "mistral"
    assert get_format("kimi-k3").reasoning.prefilled_default  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("name", "fmt"),
    [
        ("moonshotai-Kimi-K2", "kimi-k2"),
        ("Kimi-K2-Instruct", "kimi-k2"),
        ("Kimi-K2-Thinking", "kimi-k2"),
        ("Kimi-K3", "kimi-k3"),
        ("openai-gpt-oss-120b", "gpt-oss"),
        ("Mistral-Small-3.2-24B-Instruct-2506", "mistral"),
        ("unsloth-mistral-Devstral-Small-2507", "mistral"),
        ("mistralai-Ministral-3-14B-Reasoning-2512", "mistral"),
        ("mistralai-Mistral-Nemo-Instruct-2407", "mistral"),
        ("llm-jp-llm-jp-4.1-8b-thinking", None),
    ],
)  # harmony dialect: left out on purpose
def test_real_templates_are_detected(tdir: Path, name: str, fmt: str | None) -> None:
    assert detect_format((tdir / f"{name}.jinja").read_text()) == fmt


# -- kimi-k2 --------------------------------------------------------------------------------

K2_BEGIN, K2_END = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"


def k2_call(call_id: str, args: str) -> str:
    return f"<|tool_call_begin|>{call_id}<|tool_call_argument_begin|>{args}<|tool_call_end|>"


def test_kimi_k2_template_turn_parses_back(tdir: Path) -> None:
    template = (tdir / "moonshotai-Kimi-K2.jinja").read_text()
    message = {
        "role": "assistant",
        "content": "On it.",
        "tool_calls": [_call("a", *PARIS), _call("b", "note", NOTE_ARGS)],
    }
    text, prefilled = _turn(template, message, "kimi-k2")
    assert "functions.note:1<|tool_call_argument_begin|>" in text and not prefilled
    msg = parse("kimi-k2", text, prefilled=False)
    assert msg.content == "On it." and calls_of(msg) == [PARIS, ("note", NOTE_ARGS)]
    assert msg.warnings == []
    no_markers("kimi-k2", msg)


@pytest.mark.parametrize("name", ["Kimi-K2-Instruct", "Kimi-K2-Thinking"])
def test_kimi_k2_instruct_and_thinking_templates(tdir: Path, name: str) -> None:
    """Both queue call ids with ``list.append`` (the renderer allows it, as llama.cpp does);
    K2-Thinking writes the reasoning of the turns after the last answer."""
    template = (tdir / f"{name}.jinja").read_text()
    assert "tool_response_queue.ids.append" in template
    assert all(r.ok for r in check_template(template, get_format("kimi-k2")))
    message = {
        "role": "assistant",
        "content": "On it.",
        "reasoning_content": "Two calls.",
        "tool_calls": [_call("a", *PARIS), _call("b", "note", NOTE_ARGS)],
    }
    text, prefilled = _turn(template, message, "kimi-k2")
    msg = parse("kimi-k2", text, prefilled=prefilled)
    assert msg.content == "On it." and calls_of(msg) == [PARIS, ("note", NOTE_ARGS)]
    thinking = name == "Kimi-K2-Thinking"
    assert msg.reasoning_content == ("Two calls." if thinking else None)
    assert msg.warnings == []


def test_kimi_k2_thinking_output() -> None:
    text = (
        "<think>\nThe user wants Paris.\n</think>\n\nChecking."
        + K2_BEGIN
        + k2_call("functions.get_weather:0", '{"location": "Paris", "days": 3}')
        + k2_call("functions.get_weather:1 ", '{"location": "Rome"}')
        + K2_END
    )
    msg = parse("kimi-k2", text, prefilled=False)
    assert msg.reasoning_content == "The user wants Paris." and msg.content == "Checking."
    assert calls_of(msg) == [PARIS, ("get_weather", {"location": "Rome"})]


def test_kimi_k2_ids_name_the_function() -> None:
    assert name_from_id("functions.get_weather:0") == "get_weather"
    assert name_from_id(" functions.mcp.fs.read:12 ") == "mcp.fs.read"  # dots kept
    assert name_from_id("functions.a:b:3") == "a:b"  # only the trailing counter goes
    assert name_from_id("get_weather:0") == "get_weather"  # no prefix
    assert name_from_id("functions.get_weather") == "get_weather"  # no counter
    assert name_from_id("0") == name_from_id("functions.:1") == name_from_id("  ") == ""
    # the id handed out is the id factory's, never Kimi's
    msg = parse_complete(
        "kimi-k2", K2_BEGIN + k2_call("functions.noop:7", "{}") + K2_END, TOOLS, id_factory=lambda i: f"call_{i}"
    )
    assert [c["id"] for c in msg.tool_calls] == ["call_0"]


def test_kimi_k2_spellings_and_shapes() -> None:
    singular = "<|tool_call_section_begin|>" + k2_call("functions.noop:0", "{}") + "<|tool_call_section_end|>"
    assert calls_of(parse("kimi-k2", singular, prefilled=False)) == [("noop", {})]
    bare = "Sure." + k2_call("functions.noop:0", " {} ") + " then."  # no section around it
    msg = parse("kimi-k2", bare, prefilled=False)
    assert calls_of(msg) == [("noop", {})] and msg.content == "Sure. then."
    # a bare call that is not one ends there too: what follows is content again
    msg = parse("kimi-k2", "A" + k2_call("functions.noop:0", "{x}") + "B", prefilled=False)
    assert msg.tool_calls == [] and msg.content == "AB"
    assert [w for w in msg.warnings if "empty" in w] == []
    msg = parse("kimi-k2", "A<|tool_call_begin|>functions.noop:0<|tool_call_end|>B", prefilled=False)
    assert (
        msg.tool_calls == []
        and msg.content == ("A<|tool_call_begin|>functions.noop:0<|tool_call_end|>B")
        and msg.warnings
    )
    nameless = K2_BEGIN + k2_call("0", "{}") + k2_call("functions.noop:1", "{}") + K2_END
    msg = parse("kimi-k2", nameless, prefilled=False)
    assert calls_of(msg) == [("noop", {})]
    assert any("not a call was ignored" in w for w in msg.warnings)


def test_kimi_k2_malformed_and_truncated() -> None:
    good = k2_call("functions.get_weather:0", '{"location": "Paris", "days": 3}')
    bad = k2_call("functions.get_weather:1", '{"location": Rome}')
    msg = parse("kimi-k2", K2_BEGIN + bad + good + K2_END, prefilled=False)
    assert calls_of(msg) == [PARIS] and msg.dropped_calls == 1
    assert any("not a JSON object" in w for w in msg.warnings)
    msg = parse("kimi-k2", "A" + K2_BEGIN + K2_END + "B", prefilled=False)
    assert msg.content == "AB" and any("empty" in w for w in msg.warnings)
    text = "Hi." + K2_BEGIN + good + k2_call("functions.noop:1", "{}") + K2_END
    for cut in range(len(text) + 1):
        msg = parse_complete("kimi-k2", text[:cut], TOOLS, prefilled=False)
        got = calls_of(msg)
        assert got == [PARIS, ("noop", {})][: len(got)], cut
        if cut >= text.index("<|tool_call_begin|>functions.noop"):
            assert got[:1] == [PARIS], cut
        if cut >= 3 and not _in_marker(text, cut):  # tokens are never cut in half
            assert msg.content == "Hi.", cut


# -- kimi-k3 --------------------------------------------------------------------------------


def k3_arg(key: str, kind: str, value: str) -> str:
    return f'<|open|>argument key="{key}" type="{kind}"<|sep|>{value}<|close|>argument<|sep|>'


def k3_call(name: str, body: str, index: int = 1) -> str:
    return f'<|open|>call tool="{name}" index="{index}"<|sep|>{body}<|close|>call<|sep|>'


K3_TOOLS = ("<|open|>tools<|sep|>", "<|close|>tools<|sep|>")
K3_TAIL = "<|close|>message<|sep|><|end_of_msg|>"


@pytest.mark.parametrize("thinking", [True, False])
def test_kimi_k3_template_turn_parses_back(tdir: Path, thinking: bool) -> None:
    template = (tdir / "Kimi-K3.jinja").read_text()
    message = {
        "role": "assistant",
        "content": "On it.",
        "reasoning_content": "Two calls.",
        "tool_calls": [_call("a", *PARIS), _call("b", "note", NOTE_ARGS)],
    }
    prompt = render_chat(template, [{"role": "user", "content": "x"}], TOOLS, thinking=thinking)
    assert get_format("kimi-k3").prefilled_by(prompt) == thinking
    text, prefilled = _turn(template, message, "kimi-k3", thinking=thinking)
    assert prefilled == thinking and 'type="array"<|sep|>["a b", "γ"]' in text
    msg = parse("kimi-k3", text, prefilled=prefilled)
    assert msg.content == "On it." and calls_of(msg) == [PARIS, ("note", NOTE_ARGS)]
    assert msg.reasoning_content == ("Two calls." if thinking else None)
    assert msg.warnings == []
    no_markers("kimi-k3", msg)


def test_kimi_k3_types_decide_where_the_schema_does_not() -> None:
    body = (
        k3_arg("maybe", "string", "null")
        + k3_arg("code", "number", "7")
        + k3_arg("n", "string", "42")
        + k3_arg("free", "string", "007")
        + k3_arg("num", "number", "007")
        + k3_arg("nil", "null", "null")
        + k3_arg("obj", "object", '{"a": [1]}')
        + k3_arg("a&quot;b&amp;c", "boolean", "true")
    )
    msg = parse("kimi-k3", K3_TOOLS[0] + k3_call("note", body) + K3_TOOLS[1], prefilled=False)
    assert calls_of(msg) == [
        (
            "note",
            {
                "maybe": "null",  # the type says string: not null
                "code": "7",  # a string schema: its text
                "n": 42,  # an integer schema: coerced from the text
                "free": "007",
                "num": "007",
                "nil": None,
                "obj": {"a": [1]},  # no schema
                'a"b&c': True,
            },
        )
    ]  # attributes unescaped


def test_kimi_k3_json_block_and_lenient_structure() -> None:
    block = '<|open|>json type="object"<|sep|>{"location": "Paris", "days": 3}<|close|>json<|sep|>'
    msg = parse("kimi-k3", K3_TOOLS[0] + k3_call("get_weather", block) + K3_TOOLS[1], prefilled=False)
    assert calls_of(msg) == [PARIS]
    # an unclosed value is closed by the next argument; a call outside the section is taken;
    # the message closer and <|end_of_msg|> are dropped; unknown tags are content
    loose = (
        '<|open|>call tool="get_weather" index="1"<|sep|><|open|>argument key="location" '
        'type="string"<|sep|>Paris'
        + k3_arg("days", "number", "3")
        + "<|close|>call<|sep|>"
        + "<|open|>aside<|sep|>"
        + K3_TAIL
    )
    msg = parse("kimi-k3", loose, prefilled=False)
    assert calls_of(msg) == [PARIS] and msg.content == "<|open|>aside<|sep|>"


def test_kimi_k3_malformed_and_truncated() -> None:
    msg = parse("kimi-k3", "A" + K3_TOOLS[0] + "junk" + K3_TOOLS[1], prefilled=False)
    assert msg.content == "A" + K3_TOOLS[0] + "junk" + K3_TOOLS[1] and msg.warnings
    text = (
        "<|open|>response<|sep|>Hi.<|close|>response<|sep|>"
        + K3_TOOLS[0]
        + k3_call("get_weather", k3_arg("location", "string", "Paris") + k3_arg("days", "number", "3"))
        + k3_call("noop", "", 2)
        + K3_TOOLS[1]
        + K3_TAIL
    )
    second = text.index('<|open|>call tool="noop"')
    for cut in range(len(text) + 1):
        msg = parse_complete("kimi-k3", text[:cut], TOOLS, prefilled=False)
        got = calls_of(msg)
        assert got == [PARIS, ("noop", {})][: len(got)], cut
        if cut >= second:
            assert got[:1] == [PARIS], cut
        no_markers("kimi-k3", msg) if cut == len(text) else None


# -- gpt-oss --------------------------------------------------------------------------------

ANALYSIS = "<|channel|>analysis<|message|>"
START = "<|start|>assistant"


def harmony(name: str, args: str, recipient_first: bool = False) -> str:
    if recipient_first:
        return f" to=functions.{name}<|channel|>commentary json<|message|>{args}"
    return f"<|channel|>commentary to=functions.{name} <|constrain|>json<|message|>{args}"


def test_gpt_oss_template_turns_parse_back(tdir: Path) -> None:
    template = (tdir / "openai-gpt-oss-120b.jinja").read_text()
    text, _ = _turn(template, {"role": "assistant", "tool_calls": [_call("a", *PARIS)]}, "gpt-oss")
    assert text.startswith(" to=functions.get_weather<|channel|>commentary json<|message|>")
    msg = parse("gpt-oss", text)
    assert calls_of(msg) == [PARIS] and msg.content is None and msg.warnings == []
    text, _ = _turn(
        template,
        {"role": "assistant", "thinking": "Two calls.", "tool_calls": [_call("b", "note", NOTE_ARGS)]},
        "gpt-oss",
    )
    msg = parse("gpt-oss", text)
    assert msg.reasoning_content == "Two calls." and calls_of(msg) == [("note", NOTE_ARGS)]
    text, _ = _turn(template, {"role": "assistant", "thinking": "Easy.", "content": "4."}, "gpt-oss")
    msg = parse("gpt-oss", text)
    assert (msg.reasoning_content, msg.content, msg.tool_calls) == ("Easy.", "4.", [])
    no_markers("gpt-oss", msg)
    # the template writes one call per message, and only tool_calls[0] of a turn
    failed = [r.name for r in check_template(template, get_format("gpt-oss")) if not r.ok]
    assert failed == ["parallel calls"]


def test_gpt_oss_raw_outputs() -> None:
    """What llama-server returns after the ``<|start|>assistant`` generation prompt; the
    end-of-generation ``<|call|>`` / ``<|return|>`` may or may not be there."""
    call = harmony("get_weather", '{"location": "Paris", "days": 3}')
    for end in ("", "<|call|>"):
        msg = parse("gpt-oss", f"{ANALYSIS}The user wants the weather.<|end|>{START}{call}{end}")
        assert msg.reasoning_content == "The user wants the weather."
        assert calls_of(msg) == [PARIS] and msg.content is None and msg.warnings == []
    for shape in (
        harmony("noop", "{}", recipient_first=True),
        " to=functions.noop<|channel|>analysis <|constrain|>json<|message|>{}",
        "<|channel|>analysis to=functions.noop<|message|> {} ",
    ):
        assert calls_of(parse("gpt-oss", shape)) == [("noop", {})], shape
    msg = parse("gpt-oss", f"{ANALYSIS}  Easy.\n\n<|end|>\n{START}<|channel|>final<|message|>4, not 5.<|return|>")
    assert (msg.reasoning_content, msg.content) == ("Easy.", "4, not 5.")


def test_gpt_oss_channels_recipients_and_preambles() -> None:
    text = (
        "<|channel|>commentary to=assistant"
        + ANALYSIS
        + "plan<|end|>"
        + START
        + "<|channel|>commentary<|message|>Checking both.<|end|>"
        + START
        + harmony("mcp.fs.read", '{"path": "/"}')
        + "<|call|>"
        + START
        + " to=python<|channel|>commentary code<|message|>print(1)<|call|>"
        + START
        + ANALYSIS
        + "more plan<|end|>"
        + START
        + harmony("noop", "{}")
        + "<|end|>"
        + START
        + "<|channel|>commentary to=assistant<|channel|>final<|message|>Done."
    )
    msg = parse("gpt-oss", text)
    assert msg.reasoning_content == "plan\n\nmore plan"  # two messages, two paragraphs
    assert msg.content == "Checking both.\n\nDone."
    assert calls_of(msg) == [("mcp.fs.read", {"path": "/"}), ("noop", {})]
    assert [w for w in msg.warnings if "mcp" not in w] == [
        "a message to 'python' (not one of the request's functions) was dropped"
    ]


def test_gpt_oss_headers() -> None:
    assert parse_header(" to=functions.f<|channel|>commentary json", False) == ("commentary", "functions.f", None)
    assert parse_header("assistant<|channel|>commentary to=functions.a.b <|constrain|>json", True) == (
        "commentary",
        "functions.a.b",
        "assistant",
    )
    assert parse_header("<|channel|>commentary to=assistant<|channel|>analysis", False) == ("analysis", None, None)
    assert parse_header("user", True) is None
    assert parse_header("to=do list", False) is None


def test_gpt_oss_malformed_and_truncated() -> None:
    plain = "to=do: milk, eggs"  # prose that starts like a header is content
    assert parse("gpt-oss", plain).content == plain
    msg = parse("gpt-oss", "<|channel|>final<|message|>Hi<|end|><|start|>user<|message|>x")
    assert msg.content == "Hi<|start|>user<|message|>x" and msg.warnings
    msg = parse("gpt-oss", harmony("get_weather", '{"location": Paris}') + "<|call|>")
    assert msg.tool_calls == [] and msg.dropped_calls == 1
    assert msg.content == harmony("get_weather", '{"location": Paris}')
    long_header = "<|channel|>commentary " + "x" * 600 + "<|message|>hi"
    msg = parse("gpt-oss", long_header)
    assert msg.content == long_header and "512" in msg.warnings[0]
    text = (
        ANALYSIS
        + "plan<|end|>"
        + START
        + harmony("get_weather", '{"location": "Paris", "days": 3}')
        + "<|call|>"
        + START
        + harmony("noop", "{}")
    )
    second = text.rindex(START)
    for cut in range(len(text) + 1):
        msg = parse_complete("gpt-oss", text[:cut], TOOLS)
        got = calls_of(msg)
        assert got == [PARIS, ("noop", {})][: len(got)], cut
        if cut >= second:
            assert got[:1] == [PARIS], cut
        if not _in_marker(text, cut):  # tokens are never cut in half
            no_markers("gpt-oss", msg)


def test_gpt_oss_arguments_stream() -> None:
    text = harmony("get_weather", '{"location": "Paris, the capital of France"}')
    parser = get_format("gpt-oss").parser(TOOLS)
    seen = []
    for ch in text:
        seen += [type(e) for e in parser.feed(ch)]
    assert seen.count(ToolCallStart) == 1 and seen.count(ToolCallArgsDelta) > 20


def test_gpt_oss_grammar_offers_analysis_first() -> None:
    g = Grammar(tool_call_grammar(get_format("gpt-oss"), TOOLS, name="noop", parallel=False))
    call = harmony("noop", "{}")
    assert g.accepts(call) and g.accepts(call + "<|call|>")
    assert g.accepts(f"{ANALYSIS}thinking<|end|>{START}{call}")
    assert not g.accepts(f"{ANALYSIS}a<|call|>b<|end|>{START}{call}")  # no marker inside
    msg = parse_complete("gpt-oss", f"{ANALYSIS}thinking<|end|>{START}{call}", TOOLS)
    assert msg.reasoning_content == "thinking" and calls_of(msg) == [("noop", {})]


# -- mistral --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "Mistral-Small-3.2-24B-Instruct-2506",
        "unsloth-mistral-Devstral-Small-2507",
        "mistralai-Ministral-3-14B-Reasoning-2512",
        "mistralai-Mistral-Nemo-Instruct-2407",
    ],
)
def test_mistral_template_turns_parse_back(tdir: Path, name: str) -> None:
    template = (tdir / f"{name}.jinja").read_text()
    message = {
        "role": "assistant",
        "content": None,  # 9 alphanumerics: Small 3.2 and Nemo
        "tool_calls": [_call("abcdefgh1", *PARIS), _call("abcdefgh2", "note", NOTE_ARGS)],
    }
    text, _ = _turn(template, message, "mistral")
    assert text.startswith("[TOOL_CALLS]")
    msg = parse("mistral", text)
    assert calls_of(msg) == [PARIS, ("note", NOTE_ARGS)] and msg.warnings == []
    assert msg.content is None
    no_markers("mistral", msg)


def test_mistral_reasoning_and_content() -> None:
    text = (
        "[THINK]Use [TOOL_CALLS]get_weather[ARGS]{} maybe.[/THINK]Checking."
        '[TOOL_CALLS]get_weather[ARGS]{"location": "Paris", "days": 3}'
    )
    msg = parse("mistral", text, prefilled=False)
    assert msg.reasoning_content == "Use [TOOL_CALLS]get_weather[ARGS]{} maybe."
    assert (msg.content, calls_of(msg)) == ("Checking.", [PARIS])


def test_mistral_list_form_streams_and_ignores_ids() -> None:
    text = (
        '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"location": "Paris, the '
        'capital of France"}, "id": "abcdefgh1"}, {"arguments": {}, "name": "noop"}]'
    )
    msg = parse("mistral", text)
    assert calls_of(msg) == [("get_weather", {"location": "Paris, the capital of France"}), ("noop", {})]
    parser = get_format("mistral").parser(TOOLS, prefilled=False)
    deltas_before_close = 0
    for i, ch in enumerate(text):
        events = parser.feed(ch)
        if i < text.index("France"):
            deltas_before_close += sum(isinstance(e, ToolCallArgsDelta) for e in events)
    assert deltas_before_close > 20
    single = '[TOOL_CALLS]{"name": "noop", "arguments": "{}"}'
    assert calls_of(parse("mistral", single)) == [("noop", {})]


def test_mistral_markers_in_strings_are_data_and_call_ids_skipped() -> None:
    args = {"location": "[TOOL_CALLS]x[ARGS]{} and [CALL_ID]"}
    text = f"[TOOL_CALLS]get_weather[CALL_ID]a1b2c3d4e[ARGS]{json.dumps(args)}"
    assert calls_of(parse("mistral", text)) == [("get_weather", args)]


@pytest.mark.parametrize(
    "text",
    [
        "[TOOL_CALLS]get weather[ARGS]{}",  # a space in the name
        "[TOOL_CALLS][ARGS]{}",  # no name
        "[TOOL_CALLS]get_weather{}",  # no [ARGS]
        "[TOOL_CALLS]get_weather[CALL_ID]a b[ARGS]{}",  # not an id
        '[TOOL_CALLS]get_weather[ARGS]{"location": Paris}',  # not JSON
        '[TOOL_CALLS][{"nom": 1}]',  # not a call object
        "[TOOL_CALLS]",
    ],
)
def test_mistral_not_a_call_is_content(text: str) -> None:
    msg = parse("mistral", "Result: " + text)
    assert msg.tool_calls == [] and msg.content == "Result: " + text and msg.warnings


def test_mistral_lists_and_truncation() -> None:
    msg = parse("mistral", '[TOOL_CALLS][{"name": "noop", "arguments": {}}, 42]')
    assert calls_of(msg) == [("noop", {})] and msg.content == ", 42]" and msg.warnings
    msg = parse("mistral", "[TOOL_CALLS][]")
    assert msg.tool_calls == [] and msg.content is None and msg.warnings
    text = '[TOOL_CALLS]get_weather[ARGS]{"location": "Paris", "days": 3}[TOOL_CALLS]noop[ARGS]{}'
    for form in (
        text,
        '[TOOL_CALLS][{"name": "get_weather", "arguments": {"location": '
        '"Paris", "days": 3}}, {"name": "noop", "arguments": {}}]',
    ):
        second = form.index("noop") - 12
        for cut in range(len(form) + 1):
            msg = parse_complete("mistral", form[:cut], TOOLS, prefilled=False)
            got = calls_of(msg)
            assert got == [PARIS, ("noop", {})][: len(got)], (form, cut)
            if cut >= second:
                assert got[:1] == [PARIS], (form, cut)


# -- all four -------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["kimi-k2", "kimi-k3", "gpt-oss", "mistral"])
def test_grammar_sentences_stream_like_batch(fmt: str) -> None:
    """Forced calls sampled from each grammar parse the same streamed char by char."""
    f = get_format(fmt)
    g = Grammar(tool_call_grammar(f, TOOLS, reasoning=False))
    rng = random.Random(fmt)
    for _ in range(5):
        sentence = g.sample(rng)
        msg = parse_every_way(fmt, sentence, TOOLS, prefilled=False, every_boundary=False)
        assert msg.tool_calls and msg.warnings == [] and msg.content is None, sentence


def test_mistral_issues_call_ids_its_templates_accept_in_a_history() -> None:
    import re as _re

    from splitserve.chat import assistant_turn, get_format, parse_complete
    from splitserve.engine import resolve_source

    fmt = get_format("mistral")
    msg = parse_complete(fmt, '[TOOL_CALLS]get_weather[ARGS]{"location": "Paris"}')
    (call,) = msg.tool_calls
    assert _re.fullmatch(r"[A-Za-z0-9]{9}", call["id"]), call["id"]
    template = (resolve_source(None).path / "models/templates/Mistral-Small-3.2-24B-Instruct-2506.jinja").read_text()
    history: list[dict[str, Any]] = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": "sunny"},
    ]
    text, _ = assistant_turn(template, history, {"role": "assistant", "content": "Sunny."})
    assert text.startswith("Sunny.")  # the history with this id rendered
