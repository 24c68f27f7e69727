"""Test support: writing calls in each format, and running a parser every way it can be fed."""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from splitserve.chat import (
    ContentDelta,
    ReasoningDelta,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
    coalesce,
    get_format,
)
from splitserve.chat._events import MessageAssembler, ParsedMessage
from splitserve.chat._fmt_deepseek_v3 import CALL_BEGIN, CALL_END, CALLS_BEGIN, CALLS_END, SEP

NS = "]<]minimax[>["


def _m3_value(v: Any) -> str:
    if isinstance(v, dict):
        return "".join(f"{NS}<{k}>{_m3_value(x)}{NS}</{k}>" for k, x in v.items() if x is not None)
    if isinstance(v, list):
        return "".join(f"{NS}<item>{_m3_value(x)}{NS}</item>" for x in v)
    if v is None:
        return ""
    if isinstance(v, bool):
        return json.dumps(v)
    return str(v)


def _py_str(v: Any) -> str:
    if isinstance(v, (dict, list)):
        return json.dumps(v, ensure_ascii=False)
    return str(v)


@dataclass(frozen=True)
class Syntax:
    """How one format writes calls; ``raw`` args are written verbatim (XML formats)."""

    name: str
    call: Callable[[str, dict[str, Any]], str]
    wrap: Callable[[list[str]], str]
    false_prefixes: tuple[str, ...]
    xml: bool  # arguments are text typed by the schema
    think: tuple[str, str] | None
    multi_in_wrapper: bool = True

    def one(self, name: str, args: dict[str, Any]) -> str:
        return self.wrap([self.call(name, args)])

    def many(self, calls: list[tuple[str, dict[str, Any]]]) -> str:
        return self.wrap([self.call(n, a) for n, a in calls])


def _m2_call(name: str, args: dict[str, Any]) -> str:
    body = "".join(
        f'<parameter name="{k}">{v if isinstance(v, str) else json.dumps(v)}</parameter>\n' for k, v in args.items()
    )
    return f'<invoke name="{name}">\n{body}</invoke>\n'


def _glm_call(sep: str) -> Callable[[str, dict[str, Any]], str]:
    """GLM: strings raw, other values as JSON (``tojson``); 4.5/4.6 put ``sep`` = newline
    after the name and after every tag, 4.7 nothing."""

    def call(name: str, args: dict[str, Any]) -> str:
        body = "".join(
            f"<arg_key>{k}</arg_key>{sep}<arg_value>"
            f"{v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}"
            f"</arg_value>{sep}"
            for k, v in args.items()
        )
        return f"<tool_call>{name}{sep}{body}</tool_call>"

    return call


def _seed_call(name: str, args: dict[str, Any]) -> str:
    """Seed-OSS: values flush against their tags, non-strings as Python's ``str()``."""
    body = "".join(f"<parameter={k}>{v}</parameter>\n" for k, v in args.items())
    return f"<function={name}>\n{body}</function>\n"


def _dsml_call(v4: bool) -> Callable[[str, dict[str, Any]], str]:
    """DeepSeek V3.2 / V4 DSML: strings raw with string="true", others JSON with "false";
    V4 writes an empty line in an invoke without parameters."""

    def call(name: str, args: dict[str, Any]) -> str:
        body = "".join(
            f'<｜DSML｜parameter name="{k}" string="true">{v}</｜DSML｜parameter>\n'
            if isinstance(v, str)
            else f'<｜DSML｜parameter name="{k}" string="false">{json.dumps(v, ensure_ascii=False)}'
            "</｜DSML｜parameter>\n"
            for k, v in args.items()
        )
        empty = "\n" if v4 and not args else ""
        return f'<｜DSML｜invoke name="{name}">\n{body}{empty}</｜DSML｜invoke>\n'

    return call


def _kimi_k2_call(name: str, args: dict[str, Any]) -> str:
    return (
        f"<|tool_call_begin|>functions.{name}:0<|tool_call_argument_begin|>"
        f"{json.dumps(args, ensure_ascii=False)}<|tool_call_end|>"
    )


def _k3_type(v: Any) -> str:
    return (
        "boolean"
        if isinstance(v, bool)
        else "null"
        if v is None
        else "number"
        if isinstance(v, (int, float))
        else "string"
        if isinstance(v, str)
        else "object"
        if isinstance(v, dict)
        else "array"
    )


def _kimi_k3_call(name: str, args: dict[str, Any]) -> str:
    """Kimi K3 as its template writes it: strings raw, other values as JSON, typed."""
    body = "".join(
        f'<|open|>argument key="{k}" type="{_k3_type(v)}"<|sep|>'
        f"{v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}"
        "<|close|>argument<|sep|>"
        for k, v in args.items()
    )
    return f'<|open|>call tool="{name}" index="1"<|sep|>{body}<|close|>call<|sep|>'


_HARMONY_START = "<|start|>assistant"


def _harmony_call(name: str, args: dict[str, Any]) -> str:
    return (
        f"{_HARMONY_START}<|channel|>commentary to=functions.{name} <|constrain|>json"
        f"<|message|>{json.dumps(args, ensure_ascii=False)}<|call|>"
    )


def _harmony_wrap(calls: list[str]) -> str:
    """Messages back to back; the first without <|start|>assistant, which the generation
    prompt wrote (as llama-server returns the output)."""
    text = "".join(calls)
    return text[len(_HARMONY_START) :] if text.startswith(_HARMONY_START) else text


SYNTAXES: dict[str, Syntax] = {
    "minimax-m3": Syntax(
        "minimax-m3",
        lambda n, a: (
            f'{NS}<invoke name="{n}">'
            + "".join(f"{NS}<{k}>{_m3_value(v)}{NS}</{k}>" for k, v in a.items() if v is not None)
            + f"{NS}</invoke>\n"
        ),
        lambda calls: f"{NS}<tool_call>\n" + "".join(calls) + f"{NS}</tool_call>",
        ("]<]mini", f"{NS}<tool_ca", "]"),
        True,
        ("<mm:think>", "</mm:think>"),
    ),
    "minimax-m2": Syntax(
        "minimax-m2",
        _m2_call,
        lambda calls: "<minimax:tool_call>\n" + "".join(calls) + "</minimax:tool_call>",
        ("<minimax:tool_ca", "<minimax:", "<"),
        True,
        ("<think>", "</think>"),
    ),
    "minimax-m3-hybrid": Syntax(
        "minimax-m3-hybrid",
        _m2_call,
        lambda calls: "<minimax:tool_call>\n" + "".join(calls) + "</minimax:tool_call>",
        ("<minimax:tool_ca", "<inv"),
        True,
        ("<mm:think>", "</mm:think>"),
    ),
    "qwen3-coder": Syntax(
        "qwen3-coder",
        lambda n, a: (
            f"<function={n}>\n"
            + "".join(f"<parameter={k}>\n{_py_str(v)}\n</parameter>\n" for k, v in a.items())
            + "</function>\n"
        ),
        lambda calls: "<tool_call>\n" + "".join(calls) + "</tool_call>",
        ("<tool_ca", "<function", "<"),
        True,
        ("<think>", "</think>"),
    ),
    "hermes": Syntax(
        "hermes",
        lambda n, a: "<tool_call>\n" + json.dumps({"name": n, "arguments": a}, ensure_ascii=False) + "\n</tool_call>",
        lambda calls: "\n".join(calls),
        ("<tool_ca", "<tool_call"[:-1], "<"),
        False,
        ("<think>", "</think>"),
        multi_in_wrapper=False,
    ),
    "llama3-json": Syntax(
        "llama3-json",
        lambda n, a: json.dumps({"name": n, "parameters": a}, ensure_ascii=False),
        lambda calls: "; ".join(calls),
        ("<|python_ta",),
        False,
        None,
        multi_in_wrapper=False,
    ),
    "deepseek-v3": Syntax(
        "deepseek-v3",
        lambda n, a: f"{CALL_BEGIN}{n}{SEP}{json.dumps(a, ensure_ascii=False)}{CALL_END}",
        lambda calls: CALLS_BEGIN + "".join(calls) + CALLS_END,
        ("<｜tool▁calls", "<｜tool", "<"),
        False,
        ("<think>", "</think>"),
    ),
    "deepseek-v3.2": Syntax(
        "deepseek-v3.2",
        _dsml_call(False),
        lambda calls: "<｜DSML｜function_calls>\n" + "".join(calls) + "</｜DSML｜function_calls>",
        ("<｜DSML｜function_ca", "<｜DSML", "<"),
        True,
        ("<think>", "</think>"),
    ),
    "deepseek-v4": Syntax(
        "deepseek-v4",
        _dsml_call(True),
        lambda calls: "<｜DSML｜tool_calls>\n" + "".join(calls) + "</｜DSML｜tool_calls>",
        ("<｜DSML｜tool_ca", "<｜DSML｜inv", "<"),
        True,
        ("<think>", "</think>"),
    ),
    "minimax-m1": Syntax(
        "minimax-m1",
        lambda n, a: json.dumps({"name": n, "arguments": a}, ensure_ascii=False),
        lambda calls: "<tool_calls>\n" + "\n".join(calls) + "\n</tool_calls>",
        ("<tool_ca", "<tool_calls", "<"),
        False,
        ("<think>", "</think>"),
    ),
    "glm-4.5": Syntax(
        "glm-4.5",
        _glm_call("\n"),
        lambda calls: "\n".join(calls),
        ("<tool_ca", "<tool_call", "<"),
        True,
        ("<think>", "</think>"),
        multi_in_wrapper=False,
    ),
    "glm-4.7": Syntax(
        "glm-4.7",
        _glm_call(""),
        lambda calls: "".join(calls),
        ("<tool_ca", "<tool_call", "<"),
        True,
        ("<think>", "</think>"),
        multi_in_wrapper=False,
    ),
    "seed-oss": Syntax(
        "seed-oss",
        _seed_call,
        lambda calls: "<seed:tool_call>\n" + "".join(calls) + "</seed:tool_call>",
        ("<seed:tool_ca", "<seed:", "<"),
        True,
        ("<seed:think>", "</seed:think>"),
    ),
    "kimi-k2": Syntax(
        "kimi-k2",
        _kimi_k2_call,
        lambda calls: "<|tool_calls_section_begin|>" + "".join(calls) + "<|tool_calls_section_end|>",
        ("<|tool_calls_sec", "<|tool", "<"),
        False,
        ("<think>", "</think>"),
    ),
    "kimi-k3": Syntax(
        "kimi-k3",
        _kimi_k3_call,
        lambda calls: "<|open|>tools<|sep|>" + "".join(calls) + "<|close|>tools<|sep|>",
        ("<|open|>too", "<|open|>tools", "<|"),
        True,
        ("<|open|>think<|sep|>", "<|close|>think<|sep|>"),
    ),
    # gpt-oss has no think markers for the reasoning matrix: its analysis channel is read by
    # the tool parser (no pre-fill, no splitter); test_fmt_kimi_harmony_mistral covers it.
    "gpt-oss": Syntax(
        "gpt-oss", _harmony_call, _harmony_wrap, ("<|chan", "<|start", "<|"), False, None, multi_in_wrapper=False
    ),
    "mistral": Syntax(
        "mistral",
        lambda n, a: f"[TOOL_CALLS]{n}[ARGS]{json.dumps(a, ensure_ascii=False)}",
        lambda calls: "".join(calls),
        ("[TOOL_CA", "[TOOL_CALLS]", "[TOOL_CALLS]get_wea", "["),
        False,
        ("[THINK]", "[/THINK]"),
        multi_in_wrapper=False,
    ),
}

FORMATS = list(SYNTAXES)

# Markers that must never reach content or reasoning (in a well-formed output).
MARKERS = {
    "minimax-m3": [f"{NS}<tool_call>", f"{NS}<invoke", f"{NS}</invoke>", "<mm:think>", "</mm:think>"],
    "minimax-m2": ["<minimax:tool_call>", "</minimax:tool_call>", "<invoke name=", "<think>", "</think>"],
    "minimax-m3-hybrid": ["<minimax:tool_call>", "</minimax:tool_call>", "<invoke name=", "<mm:think>", "</mm:think>"],
    "qwen3-coder": ["<tool_call>", "</tool_call>", "<function=", "<think>", "</think>"],
    "hermes": ["<tool_call>", "</tool_call>", "<think>", "</think>"],
    "llama3-json": ["<|python_tag|>"],
    "deepseek-v3": [CALLS_BEGIN, CALL_BEGIN, SEP, CALL_END, CALLS_END, "<think>", "</think>"],
    "deepseek-v3.2": [
        "<｜DSML｜function_calls>",
        "</｜DSML｜function_calls>",
        "<｜DSML｜invoke",
        "</｜DSML｜invoke>",
        "<｜DSML｜parameter",
        "</｜DSML｜parameter>",
        "<think>",
        "</think>",
    ],
    "deepseek-v4": [
        "<｜DSML｜tool_calls>",
        "</｜DSML｜tool_calls>",
        "<｜DSML｜invoke",
        "</｜DSML｜invoke>",
        "<｜DSML｜parameter",
        "</｜DSML｜parameter>",
        "<think>",
        "</think>",
    ],
    "minimax-m1": ["<tool_calls>", "</tool_calls>", "<think>", "</think>"],
    "glm-4.5": [
        "<tool_call>",
        "</tool_call>",
        "<arg_key>",
        "</arg_key>",
        "<arg_value>",
        "</arg_value>",
        "<think>",
        "</think>",
    ],
    "glm-4.7": [
        "<tool_call>",
        "</tool_call>",
        "<arg_key>",
        "</arg_key>",
        "<arg_value>",
        "</arg_value>",
        "<think>",
        "</think>",
    ],
    "seed-oss": ["<seed:tool_call>", "</seed:tool_call>", "<function=", "<parameter=", "<seed:think>", "</seed:think>"],
    "kimi-k2": [
        "<|tool_calls_section_begin|>",
        "<|tool_calls_section_end|>",
        "<|tool_call_begin|>",
        "<|tool_call_argument_begin|>",
        "<|tool_call_end|>",
        "<think>",
        "</think>",
    ],
    "kimi-k3": ["<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"],
    "gpt-oss": [
        "<|start|>",
        "<|channel|>",
        "<|message|>",
        "<|constrain|>",
        "<|end|>",
        "<|call|>",
        "<|return|>",
        "to=functions.",
    ],
    "mistral": ["[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "[THINK]", "[/THINK]"],
}


def ids(index: int) -> str:
    return f"call_{index}"


def run(
    fmt: str, pieces: list[str], tools: list[dict[str, Any]] | None = None, prefilled: bool | None = None
) -> list[Any]:
    parser = get_format(fmt).parser(tools, prefilled=prefilled, id_factory=ids)
    events: list[Any] = []
    for piece in pieces:
        events.extend(parser.feed(piece))
    events.extend(parser.finish())
    return events


def assemble(events: list[Any]) -> ParsedMessage:
    a = MessageAssembler()
    a.add(events)
    return a.result()


def check_shape(events: list[Any]) -> None:
    """Invariants of every event stream: start first, fragments form JSON, nothing after end."""
    started: dict[int, list[str]] = {}
    ended: set[int] = set()
    for ev in events:
        if isinstance(ev, ToolCallStart):
            assert ev.index not in started, "a call started twice"
            assert ev.index == len(started), "call indexes are consecutive"
            assert ev.id and ev.name
            started[ev.index] = []
        elif isinstance(ev, ToolCallArgsDelta):
            assert ev.index in started and ev.index not in ended
            assert ev.text
            started[ev.index].append(ev.text)
        elif isinstance(ev, ToolCallEnd):
            assert ev.index in started and ev.index not in ended
            ended.add(ev.index)
            assert isinstance(json.loads("".join(started[ev.index])), dict)
        elif isinstance(ev, (ContentDelta, ReasoningDelta)):
            assert ev.text


def splits(text: str, rng: random.Random, groupings: int = 8) -> list[list[str]]:
    """Every way we feed a text: one piece, char by char, random groupings."""
    ways = [[text], list(text)]
    for _ in range(groupings):
        cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(1, 12))))
        if not cuts:
            continue
        bounds = [0, *cuts, len(text)]
        ways.append([text[a:b] for a, b in itertools.pairwise(bounds)])
    return ways


def parse_every_way(
    fmt: str,
    text: str,
    tools: list[dict[str, Any]] | None = None,
    prefilled: bool | None = None,
    every_boundary: bool = True,
    seed: int = 0,
) -> ParsedMessage:
    """Parse in one piece, streamed char by char, split at every boundary and at random
    groupings; assert every way gives the same coalesced events; return the message."""
    rng = random.Random(seed)
    reference = run(fmt, [text], tools, prefilled)
    check_shape(reference)
    want = coalesce(reference)
    ways = splits(text, rng)
    if every_boundary:
        ways += [[text[:i], text[i:]] for i in range(1, len(text))]
    for pieces in ways:
        events = run(fmt, pieces, tools, prefilled)
        check_shape(events)
        got = coalesce(events)
        assert got == want, f"split {pieces!r} differs:\n{got}\n!=\n{want}"
    return assemble(reference)


def calls_of(msg: ParsedMessage) -> list[tuple[str, Any]]:
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in msg.tool_calls]


def no_markers(fmt: str, msg: ParsedMessage) -> None:
    for marker in MARKERS[fmt]:
        assert marker not in (msg.content or ""), f"{marker!r} leaked into content"
        assert marker not in (msg.reasoning_content or ""), f"{marker!r} leaked into reasoning"


def tool(name: str, properties: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": name, "parameters": {"type": "object", "properties": properties, **extra}},
    }
