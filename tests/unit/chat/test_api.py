"""The public API of splitserve.chat: exported names, the registry, one-shot parsing."""

from __future__ import annotations

import json

import pytest

from splitserve import chat
from splitserve.chat import UnknownFormatError, get_format, list_formats, parse_complete
from splitserve.chat._events import MessageAssembler, ParsedMessage

FORMATS = [
    "minimax-m3",
    "minimax-m3-hybrid",
    "minimax-m2",
    "hermes",
    "qwen3-coder",
    "llama3-json",
    "deepseek-v3",
    "glm-4.5",
    "glm-4.7",
    "seed-oss",
    "deepseek-v3.2",
    "deepseek-v4",
    "minimax-m1",
    "kimi-k2",
    "kimi-k3",
    "gpt-oss",
    "mistral",
]


def test_exported_members() -> None:
    # sorted as ruff's RUF022 sorts it (isort-style): SCREAMING_CASE constants first, then the rest
    assert sorted(chat.__all__, key=lambda n: (not n.isupper(), n)) == chat.__all__
    for name in chat.__all__:
        assert hasattr(chat, name), name
        assert not name.startswith("_")
    public = {n for n in dir(chat) if not n.startswith("_") and n[0].isupper()}
    assert public <= set(chat.__all__)


def test_registry() -> None:
    assert sorted(f.name for f in list_formats()) == sorted(FORMATS)
    for name in FORMATS:
        fmt = get_format(name)
        assert fmt.name == name and fmt.description and fmt.example
        # every format's example parses to one call
        msg = parse_complete(fmt, fmt.example, prefilled=False)
        assert [c["function"]["name"] for c in msg.tool_calls] == ["get_weather"], name
    with pytest.raises(UnknownFormatError, match="known: minimax-m3-hybrid, minimax-m3, "):
        get_format("minimax-m9")


def test_prefilled_by_prompt() -> None:
    assert get_format("minimax-m2").prefilled_by("...]~b]ai\n<think>\n")
    assert not get_format("minimax-m3").prefilled_by("...]~b]ai\n")
    assert get_format("minimax-m3").prefilled_by("...]~b]ai\n<mm:think>")
    assert not get_format("llama3-json").prefilled_by("<think>")


def test_parse_complete_shape() -> None:
    msg = parse_complete(
        "hermes", 'Hi<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>', id_factory=lambda i: f"id{i}"
    )
    assert isinstance(msg, ParsedMessage)
    assert msg.to_openai() == {
        "content": "Hi",
        "reasoning_content": None,
        "tool_calls": [{"id": "id0", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}],
    }
    assert json.loads(msg.tool_calls[0]["function"]["arguments"]) == {"a": 1}


def test_assembler_drops_unended_and_invalid_calls() -> None:
    a = MessageAssembler()
    a.add(
        [
            chat.ToolCallStart(0, "a", "f"),
            chat.ToolCallArgsDelta(0, "{}"),
            chat.ToolCallEnd(0),
            chat.ToolCallStart(1, "b", "g"),
            chat.ToolCallArgsDelta(1, '{"x": '),
        ]
    )
    msg = a.result()
    assert [c["id"] for c in msg.tool_calls] == ["a"] and msg.dropped_calls == 1
    b = MessageAssembler()
    b.add([chat.ToolCallStart(0, "a", "f"), chat.ToolCallArgsDelta(0, "{oops"), chat.ToolCallEnd(0)])
    assert b.result().tool_calls == [] and b.result().warnings
