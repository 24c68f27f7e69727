"""``template check``: render canonical conversations and check each renders as expected.

Every canonical conversation ends with an assistant turn. A template passes a conversation
when (1) it renders without error, (2) every user text and tool result appears in the
prompt, and (3) the text it writes for the final assistant turn, read back with the
template's tool-call format, gives that turn's content, reasoning and tool calls (names and
arguments): what the model sees in its history is what it would be parsed as writing. The
reasoning conversations render with the thinking switches on and off (``THINKING``), so a
generation prompt that pre-fills the opener is exercised too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ._errors import TemplateError
from ._format import ToolCallFormat
from ._registry import parse_complete
from ._render import assistant_turn, render_chat

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a place.",
            "parameters": {
                "type": "object",
                "required": ["location"],
                "properties": {
                    "location": {"type": "string"},
                    "days": {"type": "integer"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the web.",
            "parameters": {
                "type": "object",
                "required": ["query"],
                "properties": {
                    "query": {"type": "string"},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "filters": {
                        "type": "object",
                        "properties": {"min_score": {"type": "number"}, "exact": {"type": "boolean"}},
                    },
                },
            },
        },
    },
]


def _call(cid: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


_WEATHER = _call("call_1", "get_weather", {"location": "Paris", "days": 3})
_SEARCH = _call(
    "call_2",
    "search",
    {"query": "llama.cpp rpc", "tags": ["gguf", "rpc"], "filters": {"min_score": 0.5, "exact": True}},
)

CONVERSATIONS: dict[str, tuple[list[dict[str, Any]], bool]] = {
    # name: (messages, uses tools)
    "plain chat": (
        [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "What is 2+2?"},
            {"role": "assistant", "content": "4."},
        ],
        False,
    ),
    "single tool call": (
        [
            {"role": "user", "content": "Weather in Paris for 3 days?"},
            {"role": "assistant", "content": None, "tool_calls": [_WEATHER]},
        ],
        True,
    ),
    "call, result, answer": (
        [
            {"role": "user", "content": "Weather in Paris for 3 days?"},
            {"role": "assistant", "content": None, "tool_calls": [_WEATHER]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21C"},
            {"role": "assistant", "content": "Sunny, 21 degrees."},
        ],
        True,
    ),
    "parallel calls": (
        [
            {"role": "user", "content": "Weather in Paris, and search for llama.cpp rpc."},
            {"role": "assistant", "content": None, "tool_calls": [_WEATHER, _SEARCH]},
        ],
        True,
    ),
    "reasoning on": (
        [
            {"role": "user", "content": "What is 2+2?"},
            {"role": "assistant", "reasoning_content": "Add two and two.", "content": "4."},
        ],
        False,
    ),
    "reasoning off": ([{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4."}], False),
}

# The thinking switches templates read (Qwen3: enable_thinking; DeepSeek V3.1: thinking;
# MiniMax-M3: thinking_mode); a template ignores the ones it does not know.
THINKING = {
    "reasoning on": {"enable_thinking": True, "thinking": True, "thinking_mode": "enabled"},
    "reasoning off": {"enable_thinking": False, "thinking": False, "thinking_mode": "disabled"},
}


@dataclass
class CheckResult:
    """The outcome for one canonical conversation."""

    name: str
    ok: bool
    problems: list[str] = field(default_factory=list)
    rendered: str = ""
    notes: list[str] = field(default_factory=list)


def _texts(message: dict[str, Any]) -> list[str]:
    content = message.get("content")
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [p.get("text", "") for p in content if isinstance(p, dict)]
    return []


def _check_one(
    name: str,
    template: str,
    fmt: ToolCallFormat | None,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    kwargs: dict[str, Any],
) -> CheckResult:
    result = CheckResult(name, True)
    try:
        result.rendered = render_chat(template, messages, tools, add_generation_prompt=False, **kwargs)
    except TemplateError as exc:
        return CheckResult(name, False, [str(exc)])
    for message in messages:
        if message["role"] in ("user", "tool"):
            for text in _texts(message):
                if text and text not in result.rendered:
                    result.problems.append(f"the {message['role']} text {text!r} is missing")
    if fmt is None:
        result.ok = not result.problems
        return result
    *history, last = messages
    try:
        text, prefilled = assistant_turn(
            template, history, last, fmt.end_markers, fmt.reasoning.open if fmt.reasoning else None, tools, **kwargs
        )
    except TemplateError as exc:
        return CheckResult(name, False, [str(exc)])
    parsed = parse_complete(fmt, text, tools, prefilled=prefilled)
    want_calls = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in last.get("tool_calls") or []]
    got_calls = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in parsed.tool_calls]
    if got_calls != want_calls:
        result.problems.append(f"tool calls read back as {got_calls}, expected {want_calls}")
    want_content = (last.get("content") or "").strip()
    if (parsed.content or "").strip() != want_content:
        result.problems.append(f"content read back as {parsed.content!r}, expected {want_content!r}")
    if fmt.reasoning is None:
        result.ok = not result.problems
        return result
    want_reasoning = (last.get("reasoning_content") or "").strip()
    got_reasoning = (parsed.reasoning_content or "").strip()
    if want_reasoning and want_reasoning not in result.rendered:
        result.notes.append("the template does not render reasoning of this turn (by design for many templates)")
    elif want_reasoning and got_reasoning != want_reasoning:
        result.problems.append(f"reasoning read back as {got_reasoning!r}, expected {want_reasoning!r}")
    if not want_reasoning and got_reasoning:
        result.problems.append(f"reasoning {got_reasoning!r} appeared in a turn without any")
    result.ok = not result.problems
    return result


def check_template(
    template: str, fmt: ToolCallFormat | None, kwargs: dict[str, Any] | None = None
) -> list[CheckResult]:
    """Check every canonical conversation; ``fmt`` None checks rendering only."""
    out = []
    for name, (messages, uses_tools) in CONVERSATIONS.items():
        variables = {**THINKING.get(name, {}), **(kwargs or {})}
        out.append(_check_one(name, template, fmt, messages, TOOLS if uses_tools else None, variables))
    return out
