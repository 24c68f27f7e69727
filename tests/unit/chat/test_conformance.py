"""The conformance matrix (shared/research/tool-calling.md, groups A-F and H) for every format.

Every case is parsed in one piece, char by char, split at every character boundary and at
random groupings (``parse_every_way``); all ways must give the same events.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from splitserve.chat import (
    ParseWarning,
    ToolCallArgsDelta,
    ToolCallStart,
    coalesce,
    get_format,
    parse_complete,
)

from ._support import (
    FORMATS,
    SYNTAXES,
    assemble,
    calls_of,
    ids,
    no_markers,
    parse_every_way,
    run,
    tool,
)

WEATHER = tool("get_weather", {"location": {"type": "string"}, "days": {"type": "integer"}})
TOOLS = [WEATHER, tool("noop", {})]
XML = [f for f in FORMATS if SYNTAXES[f].xml]


def syn(fmt: str):  # type: ignore[no-untyped-def]
    return SYNTAXES[fmt]


def parse(fmt: str, text: str, tools=TOOLS, **kw):  # type: ignore[no-untyped-def]
    msg = parse_every_way(fmt, text, tools, **kw)
    return msg


# -- A: detection -------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_plain_text_is_content(fmt: str) -> None:
    msg = parse(fmt, "Hello! No tools needed; 2 < 3 & {braces} are fine.", prefilled=False)
    assert msg.content == "Hello! No tools needed; 2 < 3 & {braces} are fine."
    assert msg.tool_calls == [] and msg.reasoning_content is None and msg.warnings == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_text_before_and_after_a_call(fmt: str) -> None:
    call = syn(fmt).one("get_weather", {"location": "Paris", "days": 3})
    before = "" if fmt == "llama3-json" else "Let me check.\n"  # Llama 3: calls lead the reply
    msg = parse(fmt, before + call + "\nDone.", prefilled=False)
    assert msg.content is not None
    assert msg.content.strip().startswith(before.strip() or "Done.")
    assert msg.content.strip().endswith("Done.")
    assert calls_of(msg) == [("get_weather", {"location": "Paris", "days": 3})]
    no_markers(fmt, msg)


def test_a_llama3_json_after_prose_is_prose() -> None:
    text = 'Here is JSON: {"name": "get_weather", "parameters": {}}'
    msg = parse("llama3-json", text)
    assert msg.content == text and msg.tool_calls == []


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f != "llama3-json"])
def test_a_text_between_calls(fmt: str) -> None:
    s = syn(fmt)
    text = s.one("get_weather", {"location": "Paris"}) + "\nand then\n" + s.one("get_weather", {"location": "Rome"})
    msg = parse(fmt, text, prefilled=False)
    assert "and then" in (msg.content or "")
    assert [c[1]["location"] for c in calls_of(msg)] == ["Paris", "Rome"]
    no_markers(fmt, msg)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_false_prefix_at_end_is_text(fmt: str) -> None:
    for prefix in syn(fmt).false_prefixes:
        text = "The answer is 4 " + prefix
        msg = parse(fmt, text, prefilled=False)
        assert msg.content == text, prefix
        assert msg.tool_calls == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_marker_quoted_in_prose_stays_text(fmt: str) -> None:
    quoted = {
        "minimax-m3": "the token ]<]minimax[>[ starts tags, and ]<]minimax[>[ alone too",
        "llama3-json": 'A call looks like {name: ...}, or like {"a": 1}',
    }.get(fmt, "Calls are wrapped in tags such as <tool_call or <invoke or <function")
    msg = parse(fmt, quoted, prefilled=False)
    assert msg.content == quoted and msg.tool_calls == []


# -- B: structure -------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_b_several_calls_in_one_wrapper_and_in_several(fmt: str) -> None:
    s = syn(fmt)
    calls = [
        ("get_weather", {"location": "Paris", "days": 1}),
        ("get_weather", {"location": "Rome", "days": 2}),
        ("noop", {}),
    ]
    msg = parse(fmt, s.many(calls), prefilled=False)
    assert calls_of(msg) == calls
    ids = [c["id"] for c in msg.tool_calls]
    assert len(set(ids)) == 3
    if fmt != "llama3-json":
        msg2 = parse(fmt, "\n".join(s.one(n, a) for n, a in calls), prefilled=False)
        assert calls_of(msg2) == calls
    # the same function twice gets distinct random ids by default
    real = parse_complete(fmt, s.many(calls[:2]), TOOLS, prefilled=False)
    assert len({c["id"] for c in real.tool_calls}) == 2


@pytest.mark.parametrize("fmt", FORMATS)
def test_b_zero_argument_call(fmt: str) -> None:
    msg = parse(fmt, syn(fmt).one("noop", {}), prefilled=False)
    assert calls_of(msg) == [("noop", {})]
    assert msg.tool_calls[0]["function"]["arguments"] == "{}"


def test_b_whitespace_only_bodies_and_between_token_and_tag() -> None:
    ns = "]<]minimax[>["
    text = (
        f'{ns}<tool_call>\n  {ns}  <invoke name="noop">\n \n{ns}</invoke>\n'
        f'{ns} <invoke name="get_weather">{ns}\n<location>Oslo{ns}\t</location>'
        f"{ns}</invoke>{ns}</tool_call>"
    )
    msg = parse("minimax-m3", text, prefilled=False)
    assert calls_of(msg) == [("noop", {}), ("get_weather", {"location": "Oslo"})]
    m2 = '<minimax:tool_call>\n<invoke name="noop">\n   \n</invoke>\n</minimax:tool_call>'
    assert calls_of(parse("minimax-m2", m2, prefilled=False)) == [("noop", {})]
    assert calls_of(parse("qwen3-coder", "<tool_call>\n<function=noop>\n\n</function>\n</tool_call>")) == [("noop", {})]


def test_b_empty_wrapper_is_dropped_with_a_warning() -> None:
    msg = parse("minimax-m2", "ok<minimax:tool_call>\n\n</minimax:tool_call>", prefilled=False)
    assert msg.content == "ok" and msg.tool_calls == [] and msg.warnings


# -- C: types -----------------------------------------------------------------------------

TYPED = tool(
    "typed",
    {
        "s": {"type": "string"},
        "i": {"type": "integer"},
        "n": {"type": "number"},
        "b": {"type": "boolean"},
        "e": {"type": "string", "enum": ["a", "b"]},
        "ns": {"type": ["string", "null"]},
        "ni": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        "arr": {"type": "array", "items": {"type": "integer"}},
        "obj": {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "string"}}},
        "nested": {
            "type": "object",
            "properties": {
                "rows": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "id": {"type": "integer"},
                            "ok": {"type": "boolean"},
                            "tags": {"type": "array", "items": {"type": "string"}},
                        },
                    },
                }
            },
        },
        "ref": {"$ref": "#/$defs/Point"},
        "all": {
            "allOf": [
                {"type": "object", "properties": {"a": {"type": "integer"}}},
                {"properties": {"b": {"type": "boolean"}}},
            ]
        },
        "one": {"oneOf": [{"type": "integer"}, {"type": "array", "items": {"type": "integer"}}]},
        "extra": {"type": "object", "additionalProperties": {"type": "integer"}},
        "pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]},
        "ea": {"type": "array"},
        "eo": {"type": "object"},
        "es": {"type": "string"},
    },
    **{"$defs": {"Point": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}}}}},
)

TYPED_VALUES = {
    "s": "007",
    "i": 42,
    "n": 2.5,
    "b": False,
    "e": "b",
    "ns": "null",
    "arr": [1, 2, 3],
    "obj": {"x": 1, "y": "3"},
    "nested": {"rows": [{"id": 1, "ok": True, "tags": ["a", "b"]}, {"id": 2, "ok": False, "tags": []}]},
    "ref": {"x": 1.5, "y": -2},
    "all": {"a": 1, "b": True},
    "one": [4, 5],
    "extra": {"p": 1, "q": 2},
    "pair": ["x", 9],
    "ea": [],
    "eo": {},
    "es": "",
}


@pytest.mark.parametrize("fmt", FORMATS)
def test_c_schema_types_round_trip(fmt: str) -> None:
    values = dict(TYPED_VALUES)
    if SYNTAXES[fmt].xml:
        values["ns"] = "3"  # as text, the string "null" and null are the same: null wins
    msg = parse(fmt, syn(fmt).one("typed", values), [TYPED], prefilled=False, every_boundary=False)
    assert calls_of(msg) == [("typed", values)]


@pytest.mark.parametrize("fmt", XML)
def test_c_strings_stay_strings_and_booleans_only_from_true_false(fmt: str) -> None:
    s = syn(fmt)
    raw = {"s": "3", "es": "null", "e": "a", "b": "yes", "i": "seven", "ni": "null", "ns": "null"}
    if fmt == "minimax-m3":
        raw.pop("ns")
    msg = parse(fmt, s.one("typed", raw), [TYPED], prefilled=False, every_boundary=False)
    ((_, args),) = calls_of(msg)
    assert args["s"] == "3" and args["es"] == "null" and args["e"] == "a"
    assert args["b"] == "yes"  # not a boolean word: kept as the raw string
    assert args["i"] == "seven"  # not an integer: kept, nothing lost
    assert args["ni"] is None
    # DSML: string="true"; Kimi K3: type="string" (the type tells "null" from null)
    if fmt not in ("minimax-m3", "deepseek-v3.2", "deepseek-v4", "kimi-k3"):
        assert args["ns"] is None  # nullable string: null is null
    # what does not fit its schema is kept, and a warning names it
    assert any("argument i is a string" in w for w in msg.warnings)
    assert any("argument b is a string" in w for w in msg.warnings)
    assert not any(f"argument {k} " in w for k in ("s", "es", "e", "ni") for w in msg.warnings)


@pytest.mark.parametrize("fmt", XML)
def test_c_no_schema_infers_and_unknown_tool_is_kept_with_a_warning(fmt: str) -> None:
    raw = {"n": 3, "f": 1.5, "t": True, "z": "007", "w": "words", "l": [1, "a"]}
    msg = parse(fmt, syn(fmt).one("mystery", raw), TOOLS, prefilled=False, every_boundary=False)
    ((_, args),) = calls_of(msg)
    if fmt in ("qwen3-coder", "seed-oss"):
        raw["t"] = "True"  # str(True); without a schema it stays text
    if fmt == "minimax-m3":
        raw["l"] = [1, "a"]
    assert args == raw
    assert any("mystery" in w for w in msg.warnings)


@pytest.mark.parametrize("fmt", XML)
def test_c_duplicate_keys_become_a_list(fmt: str) -> None:
    s = syn(fmt)
    if fmt == "minimax-m3":
        text = s.wrap(
            [
                f'{"]<]minimax[>["}<invoke name="typed">'
                + "".join(f"]<]minimax[>[<arr>{v}]<]minimax[>[</arr>" for v in (1, 2))
                + "]<]minimax[>[<s>a]<]minimax[>[</s>]<]minimax[>[<s>b]<]minimax[>[</s>"
                "]<]minimax[>[</invoke>"
            ]
        )
    elif fmt == "qwen3-coder":
        text = s.wrap(
            [
                (
                    "<function=typed>\n<parameter=arr>\n1\n</parameter>\n<parameter=arr>\n2\n"
                    "</parameter>\n<parameter=s>\na\n</parameter>\n<parameter=s>\nb\n"
                    "</parameter>\n</function>\n"
                )
            ]
        )
    elif fmt in ("glm-4.5", "glm-4.7"):
        text = s.wrap(
            [
                (
                    "<tool_call>typed\n<arg_key>arr</arg_key>\n<arg_value>1</arg_value>\n"
                    "<arg_key>arr</arg_key><arg_value>2</arg_value><arg_key>s</arg_key>\n"
                    "<arg_value>a</arg_value>\n<arg_key>s</arg_key><arg_value>b</arg_value>"
                    "</tool_call>"
                )
            ]
        )
    elif fmt == "seed-oss":
        text = s.wrap(
            [
                (
                    "<function=typed>\n<parameter=arr>1</parameter>\n<parameter=arr>2"
                    "</parameter>\n<parameter=s>a</parameter>\n<parameter=s>b</parameter>\n"
                    "</function>\n"
                )
            ]
        )
    elif fmt == "kimi-k3":
        a = '<|open|>argument key="{}" type="{}"<|sep|>{}<|close|>argument<|sep|>'
        text = s.wrap(
            [
                '<|open|>call tool="typed" index="1"<|sep|>'
                + a.format("arr", "number", 1)
                + a.format("arr", "number", 2)
                + a.format("s", "string", "a")
                + a.format("s", "string", "b")
                + "<|close|>call<|sep|>"
            ]
        )
    elif fmt in ("deepseek-v3.2", "deepseek-v4"):
        p = '<｜DSML｜parameter name="{}" string="{}">{}</｜DSML｜parameter>\n'
        text = s.wrap(
            [
                '<｜DSML｜invoke name="typed">\n'
                + p.format("arr", "false", 1)
                + p.format("arr", "false", 2)
                + p.format("s", "true", "a")
                + p.format("s", "true", "b")
                + "</｜DSML｜invoke>\n"
            ]
        )
    else:
        text = s.wrap(
            [
                (
                    '<invoke name="typed">\n<parameter name="arr">1</parameter>\n'
                    '<parameter name="arr">2</parameter>\n<parameter name="s">a</parameter>\n'
                    '<parameter name="s">b</parameter>\n</invoke>\n'
                )
            ]
        )
    msg = parse(fmt, text, [TYPED], prefilled=False, every_boundary=False)
    ((_, args),) = calls_of(msg)
    assert args == {"arr": [1, 2], "s": "a"}  # a string schema keeps the first, with a warning
    assert any("twice" in w for w in msg.warnings)


@pytest.mark.parametrize("fmt", ["hermes", "llama3-json", "deepseek-v3", "kimi-k2", "gpt-oss", "mistral"])
def test_c_json_formats_coerce_only_where_the_schema_disallows_the_type(fmt: str) -> None:
    values = {"s": "007", "i": "42", "b": True, "n": "2.5", "arr": ["1", 2]}
    msg = parse(fmt, syn(fmt).one("typed", values), [TYPED], prefilled=False, every_boundary=False)
    assert calls_of(msg) == [("typed", {"s": "007", "i": 42, "b": True, "n": 2.5, "arr": [1, 2]})]


JSON = [f for f in FORMATS if not SYNTAXES[f].xml]
STRINGS = tool(
    "strings",
    {k: {"type": "string"} for k in ("zip", "flag", "ref", "big", "note")}
    | {
        "addr": {
            "type": "object",
            "properties": {"zip": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}}},
        },
        "code": {"type": "string", "enum": ["1", "2"]},
    },
)


def _json_call(fmt: str, name: str, args_text: str, args_first: bool = False) -> str:
    """A call in a JSON format whose arguments object is written verbatim (``args_text``)."""
    text = syn(fmt).one(name, {"__ARGS__": 0})
    if args_first:  # the shape that is read whole, not streamed
        key = "arguments" if fmt == "hermes" else "parameters"
        text = text.replace(
            json.dumps({"name": name, key: {"__ARGS__": 0}}), f'{{"{key}": {{"__ARGS__": 0}}, "name": "{name}"}}'
        )
    return text.replace('{"__ARGS__": 0}', args_text)


# These write the name outside the arguments JSON: they have no arguments-first shape.
NAME_OUTSIDE = ("deepseek-v3", "kimi-k2", "gpt-oss", "mistral")


@pytest.mark.parametrize(
    ("fmt", "args_first"), [(f, False) for f in JSON] + [(f, True) for f in JSON if f not in NAME_OUTSIDE]
)
def test_c_json_number_or_boolean_under_a_string_schema_keeps_its_text(fmt: str, args_first: bool) -> None:
    """A JSON number or boolean under a string schema becomes its text as written, never "".

    (An audit found ``"zip": 7`` coming out as ``"zip": ""``.) ``null`` under a string schema
    that does not allow null stays null, with a warning naming it; the rest fits, no warning.
    """
    args = (
        '{"zip": 7, "flag": true, "ref": 1.50, "big": -2e3, "note": null,'
        ' "addr": {"zip": 94110, "tags": [1, false]}, "code": 2}'
    )
    msg = parse(fmt, _json_call(fmt, "strings", args, args_first), [STRINGS], prefilled=False)
    assert calls_of(msg) == [
        (
            "strings",
            {
                "zip": "7",
                "flag": "true",
                "ref": "1.50",
                "big": "-2e3",
                "note": None,
                "addr": {"zip": "94110", "tags": ["1", "false"]},
                "code": "2",
            },
        )
    ]
    assert [w for w in msg.warnings if "argument" in w] == [
        "tool call 0: argument note is null where the schema allows string; kept as written"
    ]


@pytest.mark.parametrize("fmt", FORMATS)
def test_c_xml_and_json_formats_agree_on_numbers_under_a_string_schema(fmt: str) -> None:
    values: dict[str, Any] = {"zip": 7, "ref": 2.5, "flag": True}
    want = {"zip": "7", "ref": "2.5", "flag": "True" if fmt in ("qwen3-coder", "seed-oss") else "true"}
    msg = parse(fmt, syn(fmt).one("strings", values), [STRINGS], prefilled=False)
    assert calls_of(msg) == [("strings", want)]
    assert msg.warnings == []


@pytest.mark.parametrize("fmt", JSON)
def test_c_json_values_that_do_not_fit_are_kept_with_a_warning(fmt: str) -> None:
    args = '{"s": {"a": 1}, "i": 2.5, "b": 1, "e": "c", "arr": [1, "x"], "ni": 3}'
    msg = parse(fmt, _json_call(fmt, "typed", args), [TYPED], prefilled=False, every_boundary=False)
    assert calls_of(msg) == [("typed", {"s": {"a": 1}, "i": 2.5, "b": 1, "e": "c", "arr": [1, "x"], "ni": 3})]
    problems = sorted(w.split(": argument ")[1] for w in msg.warnings if ": argument " in w)
    assert problems == [
        'arr[1] is a string ("x") where the schema allows integer; kept as written',
        "b is an integer (1) where the schema allows boolean; kept as written",
        'e ("c") is not one of the schema\'s enum values; kept as written',
        "i is a number (2.5) where the schema allows integer; kept as written",
        's is an object ({"a": 1}) where the schema allows string; kept as written',
    ]


JSON_SCALARS = st.one_of(
    st.integers(-(10**20), 10**20),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(st.sampled_from(list('ab7 "\\\n{}é')), max_size=6),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    fmt=st.sampled_from(JSON),
    value=JSON_SCALARS,
    other=JSON_SCALARS,
    args_first=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_c_json_scalars_under_a_string_schema_property(
    fmt: str, value: Any, other: Any, args_first: bool, seed: int
) -> None:
    """Any JSON scalar under a string schema: kept (as its text where it is a number or a
    boolean), the same in one piece and at every split, a warning exactly for null."""
    if fmt in NAME_OUTSIDE:
        args_first = False
    args = json.dumps({"zip": value, "note": other}, ensure_ascii=False)
    text = _json_call(fmt, "strings", args, args_first)
    msg = parse_every_way(fmt, text, [STRINGS], prefilled=False, seed=seed)

    def want(v: Any) -> Any:
        return v if v is None or isinstance(v, str) else json.dumps(v)

    assert calls_of(msg) == [("strings", {"zip": want(value), "note": want(other)})]
    nulls = sorted(k for k, v in (("zip", value), ("note", other)) if v is None)
    assert sorted(w.split("argument ")[1].split()[0] for w in msg.warnings) == nulls


# -- D: fidelity --------------------------------------------------------------------------

NASTY = [
    "a </parameter> b",
    "x < y && y > z",
    "&amp; &lt;tag&gt; &#39;",
    "say \"hi\" and 'bye'",
    "back\\slash \\n not a newline",
    "line one\nline two\n\n  indented",
    "naïve 日本語 🚀",
    "</location> and </invoke> inside",
    "<think>not reasoning</think>",
    '{"json": [1, 2]}',
    "  padded  ",
    "</tool_call> in a value",
]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("value", NASTY)
def test_d_values_survive_exactly(fmt: str, value: str) -> None:
    tools = [tool("write", {"text": {"type": "string"}, "file-name.v2": {"type": "string"}})]
    args = {"text": value, "file-name.v2": "a-b.c"}
    lead = "" if fmt == "llama3-json" else "ok "
    msg = parse(fmt, lead + syn(fmt).one("write", args), tools, prefilled=False, every_boundary=len(value) < 25)
    assert calls_of(msg) == [("write", args)]


# -- E: malformed and truncated -----------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_e_cut_off_call_is_dropped_and_earlier_calls_kept(fmt: str) -> None:
    s = syn(fmt)
    full = s.many([("get_weather", {"location": "Paris", "days": 1}), ("get_weather", {"location": "Rome", "days": 2})])
    cut = full.index("Rome") + 2  # inside the second call's first parameter
    msg = parse(fmt, full[:cut], prefilled=False)
    assert calls_of(msg) == [("get_weather", {"location": "Paris", "days": 1})]
    assert any("cut off" in w for w in msg.warnings)
    no_markers(fmt, msg) if fmt != "llama3-json" else None


@pytest.mark.parametrize("fmt", FORMATS)
def test_e_every_truncation_keeps_the_complete_calls_before_it(fmt: str) -> None:
    s = syn(fmt)
    first = s.one("get_weather", {"location": "Paris", "days": 1})
    text = first + ("; " if fmt == "llama3-json" else "\n") + s.one("noop", {})
    for cut in range(len(text) + 1):
        msg = parse_complete(fmt, text[:cut], TOOLS, prefilled=False)
        got = calls_of(msg)
        if cut >= len(text):
            assert len(got) == 2
        elif cut >= len(first):
            assert got[:1] == [("get_weather", {"location": "Paris", "days": 1})], cut
        assert len(got) <= 2


@pytest.mark.parametrize("fmt", [f for f in FORMATS if SYNTAXES[f].multi_in_wrapper])
def test_e_wrapper_never_closed_keeps_complete_calls(fmt: str) -> None:
    s = syn(fmt)
    text = s.one("get_weather", {"location": "Paris"})
    closer = {
        "minimax-m3": "]<]minimax[>[</tool_call>",
        "deepseek-v3": "<｜tool▁calls▁end｜>",
        "qwen3-coder": "</tool_call>",
        "seed-oss": "</seed:tool_call>",
        "deepseek-v3.2": "</｜DSML｜function_calls>",
        "deepseek-v4": "</｜DSML｜tool_calls>",
        "minimax-m1": "</tool_calls>",
        "kimi-k2": "<|tool_calls_section_end|>",
        "kimi-k3": "<|close|>tools<|sep|>",
    }.get(fmt, "</minimax:tool_call>")
    assert text.endswith(closer)
    msg = parse(fmt, text[: -len(closer)], prefilled=False)
    assert calls_of(msg) == [("get_weather", {"location": "Paris"})]


@pytest.mark.parametrize("fmt", FORMATS)
def test_e_orphan_closers_and_garbage_never_raise(fmt: str) -> None:
    s = syn(fmt)
    good = s.one("get_weather", {"location": "Paris"})
    for text in [
        "</invoke></tool_call></minimax:tool_call></parameter>",
        "]<]minimax[>[</invoke>]<]minimax[>[</tool_call> stray",
        "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        "</function></tool_call>",
        good.replace("get_weather", "get_weather", 1) + good[: len(good) // 2],
    ]:
        msg = parse_complete(fmt, text, TOOLS, prefilled=False)
        assert isinstance(msg.content, (str, type(None)))


@pytest.mark.parametrize("fmt", [f for f in FORMATS if SYNTAXES[f].multi_in_wrapper])
def test_e_garbage_in_the_wrapper_is_ignored_with_a_warning(fmt: str) -> None:
    s = syn(fmt)
    text = s.wrap(["some junk text\n", s.call("get_weather", {"location": "Paris"}), "more junk"])
    msg = parse(fmt, text, prefilled=False)
    assert calls_of(msg) == [("get_weather", {"location": "Paris"})]
    assert msg.warnings


@pytest.mark.parametrize("fmt", FORMATS)
def test_e_a_block_with_no_valid_call_is_content(fmt: str) -> None:
    bad = {
        "minimax-m3": "]<]minimax[>[<tool_call>not a call]<]minimax[>[</tool_call>",
        "minimax-m2": "<minimax:tool_call>not a call</minimax:tool_call>",
        "minimax-m3-hybrid": "<minimax:tool_call>not a call</minimax:tool_call>",
        "qwen3-coder": "<tool_call>not a call</tool_call>",
        "hermes": '<tool_call>{"nom": 1}</tool_call>',
        "llama3-json": '{"answer": 42}',
        "deepseek-v3": "<｜tool▁calls▁begin｜>not a call<｜tool▁calls▁end｜>",
        "glm-4.5": "<tool_call>not a call</tool_call>",
        "glm-4.7": "<tool_call>not a call</tool_call>",
        "seed-oss": "<seed:tool_call>not a call</seed:tool_call>",
        "deepseek-v3.2": "<｜DSML｜function_calls>not a call</｜DSML｜function_calls>",
        "deepseek-v4": "<｜DSML｜tool_calls>not a call</｜DSML｜tool_calls>",
        "minimax-m1": "<tool_calls>not a call</tool_calls>",
        "kimi-k2": "<|tool_calls_section_begin|>not a call<|tool_calls_section_end|>",
        "kimi-k3": "<|open|>tools<|sep|>not a call<|close|>tools<|sep|>",
        # no terminator: it is structure, not kept (the message's text is)
        "gpt-oss": "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>not a call",
        "mistral": "[TOOL_CALLS]not a call",
    }[fmt]
    msg = parse(fmt, "Result: " + bad, prefilled=False)
    assert msg.tool_calls == []
    assert msg.content == "Result: " + bad
    if fmt != "llama3-json":
        assert msg.warnings


def test_e_mismatched_tags_m3() -> None:
    ns = "]<]minimax[>["
    tools = [tool("f", {"o": {"type": "object", "properties": {"a": {"type": "integer"}}}, "s": {"type": "string"}})]
    # </o> closes the still-open <a>; a closer for nothing open inside a string is data
    text = (
        f'{ns}<tool_call>{ns}<invoke name="f">{ns}<o>{ns}<a>1{ns}</o>'
        f"{ns}<s>x{ns}</b>y{ns}</s>{ns}</invoke>{ns}</tool_call>"
    )
    msg = parse("minimax-m3", text, tools, prefilled=False)
    assert calls_of(msg) == [("f", {"o": {"a": 1}, "s": f"x{ns}</b>y"})]


# -- F: reasoning -------------------------------------------------------------------------

REASONING = [f for f in FORMATS if SYNTAXES[f].think]


@pytest.mark.parametrize("fmt", REASONING)
def test_f_reasoning_opener_present_absent_prefilled(fmt: str) -> None:
    op, cl = syn(fmt).think  # type: ignore[misc]
    call = syn(fmt).one("get_weather", {"location": "Paris"})
    msg = parse(fmt, f"{op}\nthink hard\n{cl}\n\nAnswer.", prefilled=False)
    assert (msg.reasoning_content, msg.content) == ("think hard", "Answer.")
    msg = parse(fmt, "Just an answer.", prefilled=False)
    assert (msg.reasoning_content, msg.content) == (None, "Just an answer.")
    msg = parse(fmt, f"mid-thought\n{cl}\n\nAnswer.", prefilled=True)
    assert (msg.reasoning_content, msg.content) == ("mid-thought", "Answer.")
    msg = parse(fmt, f"{op}again{cl}Answer.", prefilled=True)  # opener repeated after prefill
    assert (msg.reasoning_content, msg.content) == ("again", "Answer.")
    msg = parse(fmt, f"{op}plan{cl}" + call, prefilled=False)  # call right after the closer
    assert msg.reasoning_content == "plan"
    assert calls_of(msg) == [("get_weather", {"location": "Paris"})]
    no_markers(fmt, msg)


@pytest.mark.parametrize("fmt", REASONING)
def test_f_stray_leading_closer_and_truncated_reasoning(fmt: str) -> None:
    op, cl = syn(fmt).think  # type: ignore[misc]
    msg = parse(fmt, f"{cl}Direct answer.", prefilled=False)
    assert (msg.reasoning_content, msg.content) == (None, "Direct answer.")
    msg = parse(fmt, f"{op}I was thinking and then the tokens ran o", prefilled=False)
    assert msg.reasoning_content == "I was thinking and then the tokens ran o"
    assert msg.content is None


@pytest.mark.parametrize("fmt", REASONING)
def test_f_marker_inside_an_argument_is_data(fmt: str) -> None:
    op, cl = syn(fmt).think  # type: ignore[misc]
    tools = [tool("note", {"text": {"type": "string"}})]
    value = f"{op}x{cl} literally"
    msg = parse(fmt, f"{op}r{cl}" + syn(fmt).one("note", {"text": value}), tools, prefilled=False)
    assert msg.reasoning_content == "r"
    assert calls_of(msg) == [("note", {"text": value})]


# -- H: streaming shape -------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_h_string_arguments_stream_before_the_call_ends(fmt: str) -> None:
    text = syn(fmt).one("get_weather", {"location": "Paris, the capital of France", "days": 3})
    parser = get_format(fmt).parser(TOOLS, prefilled=False)
    seen_start = None
    fragments_before_close = 0
    closer_at = text.index("France") + len("France")
    for i, ch in enumerate(text):
        for ev in parser.feed(ch):
            if isinstance(ev, ToolCallStart):
                seen_start = ev
            if isinstance(ev, ToolCallArgsDelta) and i < closer_at:
                fragments_before_close += 1
    parser.finish()
    assert seen_start is not None and seen_start.name == "get_weather" and seen_start.id
    assert fragments_before_close >= 20  # the string arrived piece by piece


@pytest.mark.parametrize("fmt", ["hermes", "llama3-json"])
def test_h_json_calls_in_other_shapes_are_read_whole(fmt: str) -> None:
    key = "arguments" if fmt == "hermes" else "parameters"
    body = json.dumps({key: {"location": "Paris"}, "name": "get_weather"})
    text = f"<tool_call>{body}</tool_call>" if fmt == "hermes" else body
    parser = get_format(fmt).parser(TOOLS, prefilled=False)
    events = [e for ch in text for e in parser.feed(ch)] + parser.finish()
    assert [type(e).__name__ for e in events] == ["ToolCallStart", "ToolCallArgsDelta", "ToolCallEnd"]
    bad = '<tool_call>{"name": "get_weather", "arguments": {"location": Paris}}</tool_call>'
    msg = parse("hermes", bad)
    assert msg.tool_calls == [] and msg.content == bad and msg.warnings


def test_h_parsers_are_isolated() -> None:
    s = syn("minimax-m3")
    a_text = s.one("get_weather", {"location": "Paris"})
    b_text = "plain " + s.one("get_weather", {"location": "Rome"})
    pa = get_format("minimax-m3").parser(TOOLS, prefilled=False, id_factory=ids)
    pb = get_format("minimax-m3").parser(TOOLS, prefilled=False, id_factory=ids)
    ea, eb = [], []
    for i in range(max(len(a_text), len(b_text))):
        ea += pa.feed(a_text[i : i + 1])
        eb += pb.feed(b_text[i : i + 1])
    ea += pa.finish()
    eb += pb.finish()
    assert coalesce(ea) == coalesce(run("minimax-m3", [a_text], TOOLS, False))
    assert calls_of(assemble(ea)) == [("get_weather", {"location": "Paris"})]
    assert calls_of(assemble(eb)) == [("get_weather", {"location": "Rome"})]


def test_h_feed_after_finish_is_a_warning_not_an_error() -> None:
    parser = get_format("hermes").parser()
    parser.feed("hi")
    parser.finish()
    (warning,) = parser.feed("more")
    assert isinstance(warning, ParseWarning)
    assert "after finish" in warning.message
    assert json.dumps(warning.raw)
