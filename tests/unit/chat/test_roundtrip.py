"""Render -> parse round trip over every pinned llama.cpp chat template.

For each template in the pinned ``models/templates`` folder: an assistant turn with one and
with two tool calls (typed arguments: a string with spaces, quotes, a newline and unicode;
an integer, a number, a boolean, an array and a nested object), content, and reasoning where
the template renders it, is rendered with :func:`assistant_turn` (our HF-compatible renderer,
the tools given as OpenAI schemas) and parsed back with the format :func:`detect_format`
names (pre-filled as ``assistant_turn`` reports). The same calls (names; arguments equal as
typed JSON), content and reasoning must come back, with no parse warning.

Every template is in exactly one group, and each group is asserted:

- in scope: ``detect_format`` claims it; EXPECTED_FORMAT pins which format, so a template
  that loses (or changes) its detection fails; the round trip must pass. A failure here is
  a defect to fix, never to mark xfail or skip;
- AWAITING: templates of formats being added; in scope (and round-tripped) as soon as a
  format claims them, and they fail if claimed by any other format;
- OUT_OF_SCOPE: ``detect_format`` must not claim it, and what its reason says is checked:
  a template that "writes no tool calls" renders none; one written in a format we do not
  support renders that format's marker.

Per-template adjustments (ADJUST) say how a template must be driven (a role it refuses, a
single call at a time, content it does not write beside calls); each one is checked to be
still needed, so a stale adjustment fails too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from splitserve.chat import TemplateError, assistant_turn, detect_format, get_format, parse_complete
from splitserve.chat._check import THINKING
from splitserve.engine import resolve_source

TDIR = Path(resolve_source(None).path) / "models" / "templates"
TEMPLATES = sorted(p.stem for p in TDIR.glob("*.jinja"))

# -- the conversation ----------------------------------------------------------------------

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "write_note",
            "description": "File a note.",
            "parameters": {
                "type": "object",
                "required": ["text"],
                "properties": {
                    "text": {"type": "string"},
                    "ref": {"type": "string"},
                    "pad": {"type": "string"},
                    "count": {"type": "integer"},
                    "ratio": {"type": "number"},
                    "urgent": {"type": "boolean"},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "meta": {
                        "type": "object",
                        "properties": {
                            "owner": {"type": "string"},
                            "level": {"type": "integer"},
                            "flags": {"type": "object", "properties": {"ok": {"type": "boolean"}}},
                        },
                    },
                },
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a place.",
            "parameters": {
                "type": "object",
                "required": ["location"],
                "properties": {"location": {"type": "string"}, "days": {"type": "integer"}},
            },
        },
    },
]
NOTE_ARGS: dict[str, Any] = {
    "text": 'He said "hi there" \u2014 na\u00efve caf\u00e9 \u2615 \U0001d11e\nsecond line,  two  spaces',
    "ref": "007",
    "pad": "  padded  ",  # a number-like string; edge spaces
    "count": 42,
    "ratio": 2.5,
    "urgent": True,
    "tags": ["alpha beta", "\u03b3"],
    "meta": {"owner": "Zo\u00eb O'Neil", "level": 3, "flags": {"ok": False}},
}
WEATHER_ARGS: dict[str, Any] = {"location": "S\u00e3o Paulo, BR", "days": 3}
# Ids of 9 alphanumeric characters: the Mistral templates refuse any other; none cares else.
CALLS = [("callnote1", "write_note", NOTE_ARGS), ("callwthr2", "get_weather", WEATHER_ARGS)]
SYSTEM = "You are terse."
USER = "File a note, then tell me the weather in S\u00e3o Paulo."
CONTENT = "Let me do both."
REASONING = "The user wants a note filed first; then the weather in S\u00e3o Paulo, 3 days."

# case: (number of calls, with reasoning); the reasoning cases render with the thinking
# switches on, the others with them off (the template check's THINKING switches).
CASES: dict[str, tuple[int, bool]] = {
    "1 call": (1, False),
    "2 calls": (2, False),
    "1 call + reasoning": (1, True),
    "2 calls + reasoning": (2, True),
}


@dataclass(frozen=True)
class Adjust:
    """How one template must be driven; every field is checked to be still needed."""

    system: bool = True  # False: the template refuses a system message, or renders it so
    # that the turn cannot be told apart (asserted)
    single_call: str = ""  # "raises": it refuses parallel calls; "drops": it writes the first
    # call only (asserted either way; the two-call cases are then not round-tripped)
    content_as_reasoning: bool = False  # it writes a turn's content as reasoning (asserted)
    content_dropped: bool = False  # no content is written beside the calls (asserted)
    content_or_calls: bool = False  # calls are written only for a turn without content (asserted)
    # end-of-turn tokens the model stops on that its format does not list (asserted written);
    # unused: a format missing its templates' end token is a defect (template check fails too)
    end_markers: tuple[str, ...] = ()
    reasoning_key: str = "reasoning_content"  # the message field the template reads reasoning from
    kwargs: tuple[tuple[str, Any], ...] = ()  # template variables it needs
    tools: bool = True  # False: its tool renderer cannot type our schemas; render without


_LLAMA3 = Adjust(
    single_call="raises",  # raise_exception("... only supports single tool-calls")
    content_dropped=True,
)  # writes the call's JSON only

ADJUST: dict[str, Adjust] = {
    **dict.fromkeys(
        ["meta-llama-Llama-3.1-8B-Instruct", "meta-llama-Llama-3.2-3B-Instruct", "meta-llama-Llama-3.3-70B-Instruct"],
        _LLAMA3,
    ),
    # Hermes 2 Pro / 3 write the <tool_call> blocks and no content beside them
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use": Adjust(content_dropped=True),
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use": Adjust(content_dropped=True),
    # writes the calls, closes the turn, then writes the content as a turn of its own
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": Adjust(content_dropped=True),
    # `{% if message['role'] == 'assistant' and message['content'] is none %}` (Llama-8B) and
    # `... and not message['content'] %}` (llama.cpp's R1) write the calls; a turn with content
    # gets its content only
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B": Adjust(content_or_calls=True),
    "llama-cpp-deepseek-r1": Adjust(content_or_calls=True),
    # `{%- elif 'tool_calls' in message %}` writes the calls alone, never the content
    "MiniMax-M1": Adjust(content_dropped=True),
    # `{%- if message.get('tool_calls') %}` writes [TOOL_CALLS]... alone, never the content
    "Mistral-Small-3.2-24B-Instruct-2506": Adjust(content_dropped=True),
    # it writes the system message into the last message when that is a user turn
    # (`loop.last and system_message is defined`): the prompt and the answered history differ
    # from that user turn on, so the answer cannot be cut out of the rendering
    # and, `{%- elif (message.tool_calls is defined ...) %}`, writes the calls, never the content
    "mistralai-Mistral-Nemo-Instruct-2407": Adjust(system=False, content_dropped=True),
    # harmony reads reasoning from `thinking`, writes only `message.tool_calls[0]` (no raise),
    # and writes a turn's content, beside calls, as the analysis (reasoning); content and
    # thinking together it refuses
    "openai-gpt-oss-120b": Adjust(reasoning_key="thinking", single_call="drops", content_as_reasoning=True),
    # -- out of scope, driven only to check the reason -------------------------------------
    "google-gemma-2-2b-it": Adjust(system=False),  # raise_exception('System role not supported')
    # its json_to_python_type reads .additionalProperties of every object schema
    "CohereForAI-c4ai-command-r-plus-tool_use": Adjust(tools=False),
    # renders `functions` (a JSON string) and `datetime` into its system prompt
    "fireworks-ai-llama-3-firefunction-v2": Adjust(
        kwargs=(("functions", json.dumps([t["function"] for t in TOOLS])), ("datetime", "2025-01-01"))
    ),
}

# -- the groups --------------------------------------------------------------------------

EXPECTED_FORMAT: dict[str, str] = {
    "Bielik-11B-v3.0-Instruct": "hermes",
    "MiMo-VL": "hermes",
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use": "hermes",
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use": "hermes",
    "Qwen-QwQ-32B": "hermes",
    "Qwen-Qwen2.5-7B-Instruct": "hermes",
    "Qwen-Qwen3-0.6B": "hermes",
    "Reka-Edge": "hermes",
    "ibm-granite-granite-4.0": "hermes",
    "ibm-granite-granite-4.1": "hermes",
    "MiniMax-M2": "minimax-m2",
    "MiniMax-M3": "minimax-m3",
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": "qwen3-coder",
    "Qwen3-Coder": "qwen3-coder",
    "Qwen3.5-4B": "qwen3-coder",
    "StepFun3.5-Flash": "qwen3-coder",  # Qwen3-Coder's XML; a step-3.5 format may claim it
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B": "deepseek-v3",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": "deepseek-v3",
    "deepseek-ai-DeepSeek-V3.1": "deepseek-v3",
    "llama-cpp-deepseek-r1": "deepseek-v3",
    "deepseek-ai-DeepSeek-V3.2": "deepseek-v3.2",
    "deepseek-ai-DeepSeek-V4": "deepseek-v4",
    "deepseek-ai-DeepSeek-V4-Flash-0731": "deepseek-v4",
    "MiniMax-M1": "minimax-m1",
    "meta-llama-Llama-3.1-8B-Instruct": "llama3-json",
    "meta-llama-Llama-3.2-3B-Instruct": "llama3-json",
    "meta-llama-Llama-3.3-70B-Instruct": "llama3-json",
    # -- the formats added alongside this test ---------------------------------------------
    "GLM-4.6": "glm-4.5",
    "inclusionai-ling-3.0-flash": "glm-4.5",
    "poolside-Laguna-XS-2.1": "glm-4.5",
    "poolside-Laguna-XS.2": "glm-4.5",
    "GLM-4.7-Flash": "glm-4.7",
    "Spark2.5": "glm-4.7",
    "poolside-Laguna-S-2.1": "glm-4.7",
    "ByteDance-Seed-OSS": "seed-oss",
    "Kimi-K2-Instruct": "kimi-k2",
    "Kimi-K2-Thinking": "kimi-k2",
    "moonshotai-Kimi-K2": "kimi-k2",
    "Kimi-K3": "kimi-k3",
    "openai-gpt-oss-120b": "gpt-oss",
    "Mistral-Small-3.2-24B-Instruct-2506": "mistral",
    "mistralai-Mistral-Nemo-Instruct-2407": "mistral",
    "mistralai-Ministral-3-14B-Reasoning-2512": "mistral",
    "unsloth-mistral-Devstral-Small-2507": "mistral",
}

# Templates whose formats are being added: {template: format names that may claim it}. Each
# is round-tripped as soon as one does (and fails if another format claims it); move it to
# EXPECTED_FORMAT when its format lands. None at present: GLM, Seed-OSS, Kimi, gpt-oss,
# Mistral, DeepSeek DSML and MiniMax-M1 have landed. (A step-3.5 format, should one come,
# would take StepFun3.5-Flash from qwen3-coder above.)
AWAITING: dict[str, tuple[str, ...]] = {}

NO_CALLS = "writes no tool calls"
# {template: (reason, the marker its assistant turn writes; None: no call is written)}. Every
# reason but NO_CALLS names a tool-call format no registered format parses.
OUT_OF_SCOPE: dict[str, tuple[str, str | None]] = {
    "HuggingFaceTB-SmolLM3-3B": (NO_CALLS, None),
    "LFM2-8B-A1B": (NO_CALLS, None),
    "LFM2.5-Instruct": (NO_CALLS, None),
    "google-gemma-2-2b-it": (NO_CALLS, None),
    "ibm-granite-granite-3.3-2B-Instruct": (NO_CALLS, None),
    "microsoft-Phi-3.5-mini-instruct": (NO_CALLS, None),
    "llama-cpp-rwkv-world": (NO_CALLS, None),
    "Apertus-8B-Instruct": ("Apertus <|tools_prefix|>[{name: args}]", "<|tools_prefix|>["),
    "Apriel-1.6-15b-Thinker-fixed": ("Apriel <tool_calls>[JSON list]", "<tool_calls>["),
    "unsloth-Apriel-1.5": ("Apriel <tool_calls>[JSON list]", "<tool_calls>["),
    "Cohere2MoE": ("Command R7B <|START_ACTION|>[...]", "<|START_ACTION|>["),
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use": ("Command R7B <|START_ACTION|>[...]", "<|START_ACTION|>["),
    "CohereForAI-c4ai-command-r-plus-tool_use": ("Command R+ Action: ```json [...]```", "Action:\n```json\n["),
    "GigaChat3-10B-A1.8B": ("GigaChat 3 'function call' turn", "function call<|role_sep|>"),
    "GigaChat3.1-10B-A1.8B": ("GigaChat 3.1 <|function_call|>{JSON}", "<|function_call|>{"),
    "LFM2.5-8B-A1B": ("LFM2 <|tool_call_start|>[pythonic calls]", "<|tool_call_start|>[write_note("),
    "NVIDIA-Nemotron-Nano-v2": ("Nemotron Nano 2 <TOOLCALL>[JSON list]", "<TOOLCALL>["),
    "fireworks-ai-llama-3-firefunction-v2": ("FireFunction v2 functools[JSON list]", " functools["),
    "google-gemma-4-31B-it": ("Gemma 4 <|tool_call>call:name{...}", "<|tool_call>call:write_note{"),
    "google-gemma-4-31B-it-interleaved": ("Gemma 4 <|tool_call>call:name{...}", "<|tool_call>call:write_note{"),
    "meetkai-functionary-medium-v3.1": ("Functionary 3.1 <function=name>{JSON}</function>", "<function=write_note>{"),
    # it joins the arguments as a string ('...' + arguments): the mapping it gets joins as JSON
    "meetkai-functionary-medium-v3.2": ("Functionary 3.2 >>>name\\n{JSON}", ">>>write_note\n{"),
    # gpt-oss's detect leaves it out on purpose (its tokenizer writes a space after every token)
    "llm-jp-llm-jp-4.1-8b-thinking": (
        "LLM-jp harmony dialect, commentary <|constrain|> json",
        "<|channel|>commentary <|constrain|> json",
    ),
    "muse-glimmer": ("Muse <atem:function_calls>", "<atem:function_calls>"),
    "openbmb-MiniCPM5-1B": (
        'MiniCPM 5 <function name="..."><param name="...">',
        '<function name="write_note"><param name=',
    ),
    "tencent-Hy3": ("Hunyuan 3 <tool_calls:opensource>", "<tool_calls:opensource>"),
    "upstage-Solar-Open-100B": ("Solar Open <|tool_call:begin|>id<|tool_call:name|>...", "<|tool_call:begin|>"),
}


# Claimed by their format (the model writes it), but the template cannot write an assistant
# turn with calls from an OpenAI history: {template: (reason, what its source does)}.
HISTORY_LIMITS: dict[str, tuple[str, str]] = {
    # the original template: calls are written only when content is None, and the renderer
    # gives a null content as "" (as llama.cpp's engine does; other templates print "None"
    # or fail). llama.cpp ships the fixed variant as DeepSeek-R1-Distill-Qwen-32B.
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B": (
        "writes calls only when content is None",
        "message['content'] is none",
    ),
}


# -- helpers -------------------------------------------------------------------------------


def _source(name: str) -> str:
    return (TDIR / f"{name}.jinja").read_text(encoding="utf-8")


def _typed(value: Any) -> str:
    """A canonical JSON text: 42, 42.0 and true differ here, unlike in Python's ==."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def _message(adj: Adjust, calls: int, reasoning: bool, content: str | None) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {"id": cid, "type": "function", "function": {"name": fn, "arguments": json.dumps(args, ensure_ascii=False)}}
            for cid, fn, args in CALLS[:calls]
        ],
    }
    if reasoning:
        message[adj.reasoning_key] = REASONING
    return message


def _turn(
    name: str, message: dict[str, Any], reasoning: bool, markers: tuple[str, ...] = (), opener: str | None = None
) -> tuple[str, bool]:
    adj = ADJUST.get(name, Adjust())
    history = ([{"role": "system", "content": SYSTEM}] if adj.system else []) + [{"role": "user", "content": USER}]
    kwargs = {**THINKING["reasoning on" if reasoning else "reasoning off"], **dict(adj.kwargs)}
    return assistant_turn(_source(name), history, message, markers, opener, TOOLS if adj.tools else None, **kwargs)


def _supports_reasoning(name: str) -> bool:
    """The template reads the reasoning field (it is then expected to render it)."""
    return ADJUST.get(name, Adjust()).reasoning_key in _source(name)


def _round_trip(name: str, fmt_name: str, case: str) -> list[str]:
    """The problems of one case, each with what came back and what was expected."""
    fmt = get_format(fmt_name)
    adj = ADJUST.get(name, Adjust())
    calls, reasoning = CASES[case]
    content = None if adj.content_or_calls or adj.content_as_reasoning else CONTENT
    message = _message(adj, calls, reasoning, content)
    opener = fmt.reasoning.open if fmt.reasoning else None
    if adj.single_call == "raises" and calls > 1:
        with pytest.raises(TemplateError, match="single tool-calls"):
            _turn(name, message, reasoning, fmt.end_markers, opener)
        return []
    if adj.single_call == "drops" and calls > 1:
        text, _ = _turn(name, message, reasoning, fmt.end_markers, opener)
        assert CALLS[0][1] in text and CALLS[1][1] not in text, f"{name}: single_call is stale"
        return []
    try:
        text, prefilled = _turn(name, message, reasoning, fmt.end_markers, opener)
    except TemplateError as exc:
        return [f"{case}: {exc}"]
    for marker in adj.end_markers:
        assert marker in text, f"{name}: the adjustment end_markers={marker!r} is stale"
        text = text[: text.index(marker)]
    if adj.content_dropped:
        assert CONTENT not in text, f"{name}: content_dropped is stale, the content is written"
        content = None
    want_reasoning = REASONING if reasoning and _supports_reasoning(name) else None
    if reasoning and want_reasoning is None:
        assert REASONING not in text, f"{name}: renders reasoning its source does not name"

    parsed = parse_complete(fmt, text, TOOLS, prefilled=prefilled)
    problems = []
    want = [(fn, _typed(args)) for _, fn, args in CALLS[:calls]]
    got = [(c["function"]["name"], _typed(json.loads(c["function"]["arguments"]))) for c in parsed.tool_calls]
    if got != want:
        problems.append(f"{case}: tool calls\n    got  {got}\n    want {want}")
    if (parsed.content or "").strip() != (content or ""):
        problems.append(f"{case}: content got {parsed.content!r}, want {content!r}")
    if (parsed.reasoning_content or "").strip() != (want_reasoning or ""):
        problems.append(f"{case}: reasoning got {parsed.reasoning_content!r}, want {want_reasoning!r}")
    if parsed.warnings:
        problems.append(f"{case}: warnings {parsed.warnings}")
    if problems:
        problems.append(f"{case}: rendered turn (prefilled={prefilled}) {text!r}")
    return problems


# -- the tests -----------------------------------------------------------------------------


def test_every_template_is_in_exactly_one_group() -> None:
    groups = [set(EXPECTED_FORMAT), set(AWAITING), set(OUT_OF_SCOPE)]
    assert len(TEMPLATES) > 60, TDIR
    assert sorted(set().union(*groups) - set(TEMPLATES)) == []  # no stale names
    assert sorted(set(TEMPLATES) - set().union(*groups)) == []  # a new template: classify it
    assert sum(map(len, groups)) == len(set().union(*groups))  # disjoint
    assert sorted(set(ADJUST) - set(TEMPLATES)) == []


@pytest.mark.parametrize("name", TEMPLATES)
def test_round_trip(name: str) -> None:
    detected = detect_format(_source(name))
    if name in OUT_OF_SCOPE:
        assert detected is None, (
            f"{name} is out of scope ({OUT_OF_SCOPE[name][0]}) yet detect_format claims it as {detected!r}"
        )
        return  # its reason is checked by test_out_of_scope
    if name in EXPECTED_FORMAT:
        assert detected == EXPECTED_FORMAT[name]
    else:
        assert detected in (None, *AWAITING[name]), (
            f"{name} awaits {AWAITING[name]} but detect_format claims it as {detected!r}"
        )
    if detected is None:
        return  # in scope as soon as its format lands
    if name in HISTORY_LIMITS:
        reason, source_says = HISTORY_LIMITS[name]
        assert source_says in _source(name), reason
        text, _ = _turn(name, _message(ADJUST.get(name, Adjust()), 1, False, None), False)
        assert "write_note" not in text, f"{name} now writes its calls: test its round trip"
        return
    problems = [p for case in CASES for p in _round_trip(name, detected, case)]
    assert not problems, f"{name} ({detected}):\n" + "\n".join(problems)


@pytest.mark.parametrize("name", sorted(OUT_OF_SCOPE))
def test_out_of_scope(name: str) -> None:
    reason, marker = OUT_OF_SCOPE[name]
    adj = ADJUST.get(name, Adjust())
    message = _message(adj, 2, False, CONTENT)
    text, _ = _turn(name, message, False)
    if marker is None:
        assert reason == NO_CALLS
        for word in ("write_note", "get_weather", "S\u00e3o Paulo", "42"):
            assert word not in text, f"{name} writes {word!r}: {text!r}"
    else:
        assert marker in text, f"{name}: {marker!r} not in {text!r}"


@pytest.mark.parametrize("name", sorted(ADJUST))
def test_adjustments_are_still_needed(name: str) -> None:
    """Each driving adjustment is what its comment says (the others are checked in place)."""
    adj = ADJUST[name]
    source = _source(name)
    history = [{"role": "user", "content": USER}]
    message = _message(adj, 1, False, CONTENT)
    if not adj.system:  # with one, it refuses, or the turn is not told apart from the prompt
        try:
            text, _ = assistant_turn(
                source, [{"role": "system", "content": SYSTEM}, *history], message, tools=TOOLS, **dict(adj.kwargs)
            )
        except TemplateError as exc:
            assert "System role not supported" in str(exc)
        else:
            assert USER in text, text
    if adj.content_as_reasoning:  # the content comes back as the reasoning
        fmt = detect_format(source)
        text, prefilled = assistant_turn(source, history, message, tools=TOOLS)
        assert CONTENT in text, text
        if fmt is not None:
            parsed = parse_complete(fmt, text, TOOLS, prefilled=prefilled)
            assert (parsed.content, (parsed.reasoning_content or "").strip()) == (None, CONTENT)
    if not adj.tools:
        with pytest.raises(TemplateError, match="additionalProperties"):
            assistant_turn(source, history, message, tools=TOOLS, **dict(adj.kwargs))
    if adj.kwargs:
        with pytest.raises(TemplateError, match="is undefined"):
            assistant_turn(source, history, message, tools=TOOLS if adj.tools else None)
    if adj.content_or_calls:  # with content, the calls are not written
        text, _ = assistant_turn(source, history, message, tools=TOOLS)
        assert "write_note" not in text and CONTENT in text, text
