"""GLM-4.5/4.6/4.7, Seed-OSS, Step-3.5 and MiMo: detection, the templates' own turns, edge cases.

The conformance matrix (test_conformance, test_grammar, test_fuzz) runs over ``glm-4.5``,
``glm-4.7`` and ``seed-oss`` through their Syntax entries; this file holds what is specific
to them and to the real templates: what each pinned template writes for an assistant turn
parses back (streamed one character at a time, and at every split, the same as in one
piece), reasoning with thinking on and off, malformed and truncated output, values holding
the format's own markup, and the grammar accepting what the template writes.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from splitserve.chat import (
    assistant_turn,
    detect_format,
    get_format,
    list_formats,
    parse_complete,
    render_chat,
    tool_call_grammar,
)
from splitserve.chat._fmt_glm import detects_glm45, detects_glm47, is_glm
from splitserve.chat._fmt_seed_oss import detects as detects_seed
from splitserve.chat._fmt_seed_oss import python_literal

from ._support import calls_of, parse_every_way, tool
from .test_grammar import Grammar


@pytest.fixture(scope="module")
def tdir() -> Path:
    from splitserve.engine import resolve_source

    return Path(resolve_source(None).path) / "models" / "templates"


def _t(tdir: Path, name: str) -> str:
    return (tdir / f"{name}.jinja").read_text()


WEATHER = tool("get_weather", {"location": {"type": "string"}, "days": {"type": "integer"}})
NOTE = tool(
    "note",
    {
        "text": {"type": "string"},
        "n": {"type": "integer"},
        "ok": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "meta": {"type": "object", "properties": {"owner": {"type": "string"}, "level": {"type": "integer"}}},
    },
)
TOOLS = [WEATHER, NOTE, tool("noop", {})]
NOTE_ARGS = {
    "text": 'two\nlines, "quoted" & <tagged> — café',
    "n": 7,
    "ok": True,
    "tags": ["a b", "γ"],
    "meta": {"owner": "Zoë O'Neil", "level": 2},
}


# -- detection --------------------------------------------------------------------------------

FAMILY = {
    "GLM-4.6": "glm-4.5",
    "GLM-4.7-Flash": "glm-4.7",
    # other models' templates that write GLM's calls
    "Spark2.5": "glm-4.7",
    "poolside-Laguna-S-2.1": "glm-4.7",
    "poolside-Laguna-XS-2.1": "glm-4.5",
    "poolside-Laguna-XS.2": "glm-4.5",
    "inclusionai-ling-3.0-flash": "glm-4.5",
    "ByteDance-Seed-OSS": "seed-oss",
    "StepFun3.5-Flash": "qwen3-coder",  # exactly Qwen3-Coder's syntax (see the docs)
    "MiMo-VL": "hermes",  # Qwen 2.5's <tool_call>{json}</tool_call>
}


@pytest.mark.parametrize(("name", "fmt"), FAMILY.items())
def test_real_templates_are_detected(tdir: Path, name: str, fmt: str) -> None:
    assert detect_format(_t(tdir, name)) == fmt


def test_detectors_claim_only_their_templates(tdir: Path) -> None:
    """No other pinned template is claimed by the GLM or Seed detectors, and GLM-4.7's
    detector (asked first) never claims a GLM-4.5-style template."""
    for path in sorted(tdir.glob("*.jinja")):
        text = path.read_text()
        want = FAMILY.get(path.stem)
        assert detects_glm47(text) == (want == "glm-4.7"), path.stem
        assert detects_glm45(text) == (want in ("glm-4.5", "glm-4.7")), path.stem
        assert detects_seed(text) == (want == "seed-oss"), path.stem


def test_detection_on_minimal_templates() -> None:
    glm46 = (
        "{% for tc in m.tool_calls %}{{ '\\n<tool_call>' + tc.name }}\n{% for k, v in "
        "tc.arguments.items() %}\n<arg_key>{{ k }}</arg_key>\n<arg_value>{{ v }}"
        "</arg_value>\n{% endfor %}\n</tool_call>{% endfor %}"
    )
    glm47 = (
        "{% for tc in m.tool_calls %}{{- '<tool_call>' + tc.name -}}{% for k, v in "
        "tc.arguments.items() %}<arg_key>{{ k }}</arg_key><arg_value>{{ v }}</arg_value>"
        "{% endfor %}</tool_call>{% endfor %}"
    )
    assert detect_format(glm46) == "glm-4.5" and detect_format(glm47) == "glm-4.7"
    assert not is_glm("<tool_call>{{ x }}</tool_call>")  # no arg tags: not GLM
    seed = "<seed:tool_call>\n<function={{ n }}>\n<parameter={{ k }}>{{ v }}</parameter>"
    assert detect_format(seed) == "seed-oss"
    assert detect_format("<seed:tool_call>{{ json }}</seed:tool_call>") is None


def test_aliases_are_vllm_parser_names() -> None:
    assert get_format("glm45").name == "glm-4.5"
    assert get_format("glm-4.6").name == "glm-4.5"
    assert get_format("glm47").name == "glm-4.7"
    assert get_format("seed_oss").name == "seed-oss"
    names = [f.name for f in list_formats()]
    assert names.index("glm-4.7") < names.index("glm-4.5") < names.index("hermes")
    assert names.index("seed-oss") < names.index("qwen3-coder")


# -- the templates' own turns parse back ------------------------------------------------------


def _call(cid: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": cid,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)},
    }


TURNS: dict[str, dict[str, Any]] = {
    "one call": {"role": "assistant", "content": None, "tool_calls": [_call("c1", "note", NOTE_ARGS)]},
    "content, reasoning, two calls": {
        "role": "assistant",
        "content": "Let me check.",
        "reasoning_content": "Plan: both.",
        "tool_calls": [_call("c1", "get_weather", {"location": "São Paulo", "days": 3}), _call("c2", "noop", {})],
    },
    "reasoning and an answer": {"role": "assistant", "content": "Sunny.", "reasoning_content": "Look it up."},
}


@pytest.mark.parametrize("turn", TURNS)
@pytest.mark.parametrize(
    "name",
    [
        "GLM-4.6",
        "GLM-4.7-Flash",
        "ByteDance-Seed-OSS",
        "StepFun3.5-Flash",
        "MiMo-VL",
        "Spark2.5",
        "poolside-Laguna-XS.2",
        "inclusionai-ling-3.0-flash",
    ],
)
@pytest.mark.parametrize("thinking", [True, False])
def test_rendered_turn_parses_back(tdir: Path, name: str, turn: str, thinking: bool) -> None:
    template = _t(tdir, name)
    fmt = get_format(detect_format(template) or "")
    message = dict(TURNS[turn])
    if not thinking:  # no reasoning with thinking off (GLM-4.6 would render it anyway)
        message.pop("reasoning_content", None)
    history = [{"role": "user", "content": "File a note, then the weather."}]
    text, prefilled = assistant_turn(
        template,
        history,
        message,
        fmt.end_markers,
        fmt.reasoning.open if fmt.reasoning else None,
        TOOLS,
        enable_thinking=thinking,
    )
    msg = parse_every_way(fmt.name, text, TOOLS, prefilled=prefilled)
    want = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message.get("tool_calls", [])]
    assert calls_of(msg) == want, text
    assert (msg.content or "").strip() == (message["content"] or ""), text
    if message.get("reasoning_content") and message["reasoning_content"] in text:
        assert msg.reasoning_content == message["reasoning_content"], text
    else:
        assert msg.reasoning_content is None, text
    assert msg.warnings == [], text


def test_what_the_glm_templates_write(tdir: Path) -> None:
    """The exact text, so a change in the pinned templates (or the renderer) is noticed."""
    history = [{"role": "user", "content": "hi"}]
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [_call("c1", "get_weather", {"location": "Paris", "days": 3})],
    }
    text, _ = assistant_turn(_t(tdir, "GLM-4.6"), history, message, get_format("glm-4.5").end_markers, "<think>", TOOLS)
    assert text == ("\n<think></think>\n" + get_format("glm-4.5").example)
    text, _ = assistant_turn(
        _t(tdir, "GLM-4.7-Flash"), history, message, get_format("glm-4.7").end_markers, "<think>", TOOLS
    )
    assert text == "</think>" + get_format("glm-4.7").example
    text, _ = assistant_turn(
        _t(tdir, "ByteDance-Seed-OSS"), history, message, get_format("seed-oss").end_markers, "<seed:think>", TOOLS
    )
    assert text == get_format("seed-oss").example


@pytest.mark.parametrize(
    ("name", "fmt"), [("GLM-4.6", "glm-4.5"), ("GLM-4.7-Flash", "glm-4.7"), ("ByteDance-Seed-OSS", "seed-oss")]
)
def test_the_grammar_accepts_what_the_template_writes(tdir: Path, name: str, fmt: str) -> None:
    f = get_format(fmt)
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [_call("c1", "get_weather", {"location": "Paris", "days": 3}), _call("c2", "noop", {})],
    }
    text, _ = assistant_turn(
        _t(tdir, name),
        [{"role": "user", "content": "hi"}],
        message,
        f.end_markers,
        f.reasoning.open if f.reasoning else None,
        TOOLS,
    )
    calls = text[text.index("<") :] if fmt == "seed-oss" else text[text.index("<tool_call>") :]
    # the templates put a newline between blocks (GLM-4.6, Seed); the grammar writes them
    # back to back, since a newline there would be content
    calls = calls.replace("</tool_call>\n<tool_call>", "</tool_call><tool_call>")
    calls = calls.replace("</seed:tool_call>\n<seed:tool_call>", "</seed:tool_call><seed:tool_call>")
    g = Grammar(tool_call_grammar(f, TOOLS, reasoning=False))
    assert g.accepts(calls), calls


def test_glm47_grammar_is_compact_and_glm45_is_not() -> None:
    for fmt, newline in (("glm-4.7", False), ("glm-4.5", True)):
        g = Grammar(tool_call_grammar(get_format(fmt), [WEATHER], reasoning=False))
        rng = random.Random(fmt)
        for _ in range(20):
            sentence = g.sample(rng)
            head = sentence[: sentence.index("<arg_value>") if "<arg_value>" in sentence else len(sentence)]
            assert ("\n" in head) == newline, sentence
            assert calls_of(parse_complete(fmt, sentence, [WEATHER], prefilled=False))


# -- reasoning --------------------------------------------------------------------------------


def _prompt(tdir: Path, name: str, **kw: Any) -> str:
    return render_chat(_t(tdir, name), [{"role": "user", "content": "hi"}], TOOLS, **kw)


def test_glm46_reasoning_on_and_off(tdir: Path) -> None:
    f = get_format("glm-4.5")
    assert not f.reasoning.prefilled_default  # type: ignore[union-attr]
    on = _prompt(tdir, "GLM-4.6")
    off = _prompt(tdir, "GLM-4.6", enable_thinking=False)
    assert on.endswith("<|assistant|>") and off.endswith("<|assistant|>\n<think></think>")
    assert not f.prefilled_by(on) and not f.prefilled_by(off)
    call = f.example
    msg = parse_every_way("glm-4.5", f"\n<think>Plan it.</think>\nSure.\n{call}", TOOLS, prefilled=f.prefilled_by(on))
    assert (msg.reasoning_content, msg.content) == ("Plan it.", "Sure.\n")
    assert calls_of(msg) == [("get_weather", {"location": "Paris", "days": 3})]
    msg = parse_every_way("glm-4.5", f"\nSure.\n{call}", TOOLS, prefilled=f.prefilled_by(off))
    assert msg.reasoning_content is None and msg.content == "\nSure.\n"
    # GLM-4.6 with thinking on may also answer with an empty block
    msg = parse_every_way("glm-4.5", "\n<think></think>\nHi.", TOOLS, prefilled=False)
    assert (msg.reasoning_content, msg.content) == (None, "Hi.")


def test_glm47_reasoning_on_and_off(tdir: Path) -> None:
    f = get_format("glm-4.7")
    on = _prompt(tdir, "GLM-4.7-Flash")
    off = _prompt(tdir, "GLM-4.7-Flash", enable_thinking=False)
    assert on.endswith("<|assistant|><think>") and off.endswith("<|assistant|></think>")
    assert f.prefilled_by(on) and not f.prefilled_by(off)
    msg = parse_every_way("glm-4.7", "Plan it.</think>Sure." + f.example, TOOLS, prefilled=True)
    assert (msg.reasoning_content, msg.content) == ("Plan it.", "Sure.")
    assert calls_of(msg) == [("get_weather", {"location": "Paris", "days": 3})]
    # by default (no prompt to look at) GLM-4.7 output starts inside the reasoning
    assert parse_complete("glm-4.7", "Plan.</think>Hi.").reasoning_content == "Plan."
    msg = parse_every_way("glm-4.7", "Sure." + f.example, TOOLS, prefilled=False)
    assert msg.reasoning_content is None and msg.content == "Sure."
    # the prompt opened the reasoning, but the model calls at once: the call ends it
    msg = parse_every_way("glm-4.7", f.example, TOOLS, prefilled=True)
    assert msg.reasoning_content is None and msg.content is None
    assert calls_of(msg) == [("get_weather", {"location": "Paris", "days": 3})]


def test_seed_reasoning_and_thinking_budget(tdir: Path) -> None:
    f = get_format("seed-oss")
    prompt = _prompt(tdir, "ByteDance-Seed-OSS")
    assert prompt.endswith("<seed:bos>assistant\n") and not f.prefilled_by(prompt)
    zero = _prompt(tdir, "ByteDance-Seed-OSS", thinking_budget=0)
    assert zero.endswith("</seed:think>") and not f.prefilled_by(zero)
    text = (
        "<seed:think>Budget check.<seed:cot_budget_reflect>used 10</seed:cot_budget_reflect>"
        "\nDone.</seed:think>Let me look.\n\n" + f.example
    )
    msg = parse_every_way("seed-oss", text, TOOLS, prefilled=False)
    assert msg.reasoning_content == ("Budget check.<seed:cot_budget_reflect>used 10</seed:cot_budget_reflect>\nDone.")
    assert msg.content == "Let me look.\n\n"
    assert calls_of(msg) == [("get_weather", {"location": "Paris", "days": 3})]
    # <think> is not Seed's marker: it stays content
    assert parse_complete("seed-oss", "<think>x</think>y").content == "<think>x</think>y"


def test_step35_prefills_think_and_reads_as_qwen3_coder(tdir: Path) -> None:
    f = get_format("qwen3-coder")
    prompt = _prompt(tdir, "StepFun3.5-Flash")
    assert prompt.endswith("<|im_start|>assistant\n<think>\n") and f.prefilled_by(prompt)
    text = (
        "Need the weather.\n</think>\n<tool_call>\n<function=get_weather>\n"
        "<parameter=location>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n"
        "</function>\n</tool_call>"
    )
    msg = parse_every_way("qwen3-coder", text, TOOLS, prefilled=True)
    assert msg.reasoning_content == "Need the weather."
    assert calls_of(msg) == [("get_weather", {"location": "Paris", "days": 3})]


# -- malformed and truncated ------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["glm-4.5", "glm-4.7"])
def test_glm_malformed(fmt: str) -> None:
    def p(text: str):  # type: ignore[no-untyped-def]
        return parse_every_way(fmt, text, TOOLS, prefilled=False)

    # a head that is not a name: the block is content, with a warning
    msg = p("See <tool_call>get the weather</tool_call> ok")
    assert msg.tool_calls == [] and msg.content == "See <tool_call>get the weather</tool_call> ok"
    assert msg.warnings
    # an empty block is dropped with a warning
    msg = p("a<tool_call>\n</tool_call>b")
    assert (msg.content, msg.tool_calls) == ("ab", []) and msg.warnings
    # a key with no value, and a value with no key, are ignored with a warning
    msg = p(
        "<tool_call>get_weather<arg_key>days</arg_key>oops<arg_value>9</arg_value>"
        "<arg_key>location</arg_key><arg_value>Oslo</arg_value></tool_call>"
    )
    assert calls_of(msg) == [("get_weather", {"location": "Oslo"})]
    assert any("not a call was ignored" in w for w in msg.warnings)
    # a zero-argument call, with and without the newline GLM-4.6 writes
    assert calls_of(p("<tool_call>noop</tool_call><tool_call>noop\n</tool_call>")) == [("noop", {}), ("noop", {})]
    # a call left open when the next one starts is closed there
    msg = p("<tool_call>get_weather<arg_key>location</arg_key><arg_value>Rome</arg_value><tool_call>noop</tool_call>")
    assert calls_of(msg) == [("get_weather", {"location": "Rome"}), ("noop", {})]
    # whitespace GLM never writes is tolerated anywhere between the tags
    msg = p("<tool_call>\n  get_weather \n <arg_key> days </arg_key>\n\n <arg_value>4</arg_value>  \n</tool_call>")
    assert calls_of(msg) == [("get_weather", {"days": 4})] and msg.warnings == []


@pytest.mark.parametrize("fmt", ["glm-4.5", "glm-4.7", "seed-oss"])
def test_truncation_drops_only_the_open_call(fmt: str) -> None:
    f = get_format(fmt)
    first = f.example
    sep = "" if fmt == "glm-4.7" else "\n"
    second = first.replace("Paris", "Rome").replace("3", "4")
    text = first + sep + second

    # Seed's call is complete at its </function> (a block never closed keeps its calls);
    # GLM's only at its </tool_call>
    def done(call: str) -> int:
        return call.index("</function>") + len("</function>") if fmt == "seed-oss" else len(call)

    for cut in range(len(text) + 1):
        msg = parse_complete(fmt, text[:cut], TOOLS, prefilled=False)
        got = calls_of(msg)
        if cut >= len(first) + len(sep) + done(second):
            assert len(got) == 2, cut
        elif cut >= done(first):
            assert got == [("get_weather", {"location": "Paris", "days": 3})], cut
        else:
            assert got == [], cut
        assert msg.dropped_calls == 0 or any("cut off" in w for w in msg.warnings)
    # the end of output inside the second call's value: dropped, with a warning
    msg = parse_every_way(fmt, text[: text.index("Rome") + 2], TOOLS, prefilled=False)
    assert calls_of(msg) == [("get_weather", {"location": "Paris", "days": 3})]
    assert any("cut off" in w for w in msg.warnings)


def test_seed_malformed() -> None:
    def p(text: str):  # type: ignore[no-untyped-def]
        return parse_every_way("seed-oss", text, TOOLS, prefilled=False)

    # a <function=...> outside the wrapper is accepted; a wrapper never closed keeps its calls
    msg = p("<function=get_weather>\n<parameter=location>Oslo</parameter>\n</function>")
    assert calls_of(msg) == [("get_weather", {"location": "Oslo"})]
    msg = p("<seed:tool_call>\n<function=noop>\n</function>\n")
    assert calls_of(msg) == [("noop", {})]
    msg = p("ok<seed:tool_call>no call here</seed:tool_call>")
    assert msg.tool_calls == [] and msg.content == "ok<seed:tool_call>no call here</seed:tool_call>"
    assert msg.warnings
    # several invokes in one block are several calls
    msg = p(
        "<seed:tool_call>\n<function=noop>\n</function>\n<function=get_weather>\n"
        "<parameter=days>2</parameter>\n</function>\n</seed:tool_call>"
    )
    assert calls_of(msg) == [("noop", {}), ("get_weather", {"days": 2})]


# -- values holding the format's own markup ---------------------------------------------------

GLM_VALUES = [
    "a</arg_value>b",
    "</arg_value>",
    "x </arg_value> y",
    "<arg_key>k</arg_key>",
    "<tool_call>f</tool_call>",
    "</tool_call>",
    "<arg_value>",
    "<think>no</think>",
    "\n  padded  \n",
    "",
]


@pytest.mark.parametrize("fmt", ["glm-4.5", "glm-4.7"])
@pytest.mark.parametrize("value", GLM_VALUES)
def test_glm_values_with_markup_survive(fmt: str, value: str) -> None:
    sep = "\n" if fmt == "glm-4.5" else ""
    text = (
        f"<tool_call>note{sep}<arg_key>text</arg_key>{sep}<arg_value>{value}</arg_value>"
        f"{sep}<arg_key>n</arg_key>{sep}<arg_value>1</arg_value>{sep}</tool_call>"
    )
    msg = parse_every_way(fmt, "<think>r</think>" + text, TOOLS, prefilled=False)
    assert calls_of(msg) == [("note", {"text": value, "n": 1})]
    assert msg.reasoning_content == "r" and msg.content is None


SEED_VALUES = [
    "a</parameter>b",
    "</parameter>",
    "<parameter=n>",
    "</function>",
    "<seed:tool_call>",
    "x</seed:tool_call>y",
    "<function=noop>",
    "<seed:think>no</seed:think>",
    "\nnewlines kept\n",
    "",
]


@pytest.mark.parametrize("value", SEED_VALUES)
def test_seed_values_with_markup_survive(value: str) -> None:
    text = (
        "<seed:tool_call>\n<function=note>\n"
        f"<parameter=text>{value}</parameter>\n<parameter=n>1</parameter>\n"
        "</function>\n</seed:tool_call>"
    )
    msg = parse_every_way("seed-oss", "<seed:think>r</seed:think>" + text, TOOLS, prefilled=False)
    assert calls_of(msg) == [("note", {"text": value, "n": 1})]
    assert msg.reasoning_content == "r" and msg.content is None


# -- Seed's values: Python's str() of them ----------------------------------------------------


def test_seed_python_literals_follow_the_schema() -> None:
    text = (
        "<seed:tool_call>\n<function=note>\n<parameter=text>{'a': 1}</parameter>\n"
        "<parameter=ok>False</parameter>\n<parameter=tags>['x', \"it's\"]</parameter>\n"
        "<parameter=meta>{'owner': 'Zoë', 'level': '3'}</parameter>\n"
        "</function>\n</seed:tool_call>"
    )
    msg = parse_every_way("seed-oss", text, TOOLS, prefilled=False)
    assert calls_of(msg) == [
        ("note", {"text": "{'a': 1}", "ok": False, "tags": ["x", "it's"], "meta": {"owner": "Zoë", "level": 3}})
    ]
    assert msg.warnings == []
    # JSON is read as JSON; without a schema a literal is inferred, True stays text
    text = (
        '<seed:tool_call>\n<function=mystery>\n<parameter=j>{"a": [1, null]}</parameter>\n'
        "<parameter=p>[1, (2, 3), None, True]</parameter>\n<parameter=t>True</parameter>\n"
        "</function>\n</seed:tool_call>"
    )
    msg = parse_every_way("seed-oss", text, TOOLS, prefilled=False)
    assert calls_of(msg) == [("mystery", {"j": {"a": [1, None]}, "p": [1, [2, 3], None, True], "t": "True"})]
    # not a literal (or one JSON cannot hold): kept as written, a warning where it misfits
    text = (
        "<seed:tool_call>\n<function=note>\n<parameter=meta>{'owner': nope}</parameter>\n"
        "<parameter=tags>[{1, 2}]</parameter>\n</function>\n</seed:tool_call>"
    )
    msg = parse_every_way("seed-oss", text, TOOLS, prefilled=False)
    assert calls_of(msg) == [("note", {"meta": "{'owner': nope}", "tags": ["[{1, 2}]"]})]
    assert any("argument meta is a string" in w for w in msg.warnings)


def test_python_literal() -> None:
    assert python_literal("{'a': (1, 2.5), 'b': None}") == (True, {"a": [1, 2.5], "b": None})
    assert python_literal("[float('nan')]") == (False, None)
    assert python_literal("{1: 'x'}") == (False, None)  # keys must be strings
    assert python_literal("'text'") == (False, None)
    assert python_literal("[" * 5000 + "]" * 5000) == (False, None)
