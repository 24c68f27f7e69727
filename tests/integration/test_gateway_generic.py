"""Tool calls through the gateway for a model whose template has no tool support (SmolLM2).

SmolLM2's own ChatML template renders no tools and no tool turns (the ``plain`` format).
The gateway then describes the tools in the system message, rewrites the history, reads
the output as ``hermes`` and, for ``required`` / a named choice, forces the call with
hermes' grammar: the official client gets structured calls from a real llama-server.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from test_gateway import client, engine_url, model_id, plain  # noqa: F401 - fixtures
from test_gateway_required import assert_streamed_call, assert_structured_call

pytestmark = [pytest.mark.engine]

# enums keep a 135M model's argument values short
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather.",
            "parameters": {
                "type": "object",
                "properties": {"location": {"type": "string", "enum": ["Paris", "London", "Tokyo"]}},
                "required": ["location"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "Local time.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "enum": ["Oslo", "Lima"]}},
                "required": ["city"],
            },
        },
    },
]
NAMES = {"get_weather", "get_time"}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def create(url: str, messages: list[dict[str, Any]] = ASK, **kw: Any) -> Any:
    return client(url).chat.completions.create(
        model=model_id(url),
        messages=messages,  # type: ignore[arg-type]
        tools=TOOLS,
        temperature=0,
        **kw,
    )  # type: ignore[arg-type]


def test_the_template_is_served_as_plain(plain: str) -> None:  # noqa: F811
    (m,) = client(plain).models.list().data
    assert m.model_extra["meta"]["format"] == "plain"  # type: ignore[index]


def test_required_gives_a_structured_call(plain: str) -> None:  # noqa: F811
    assert_structured_call(create(plain, tool_choice="required", max_tokens=60), NAMES)


def test_required_streamed(plain: str) -> None:  # noqa: F811
    assert_streamed_call(list(create(plain, tool_choice="required", max_tokens=60, stream=True)), NAMES)


def test_named_choice_calls_that_function(plain: str) -> None:  # noqa: F811
    r = create(
        plain,
        tool_choice={"type": "function", "function": {"name": "get_time"}},
        parallel_tool_calls=False,
        max_tokens=60,
    )
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls or []
    assert call.function.name == "get_time"
    assert json.loads(call.function.arguments)["city"] in ("Oslo", "Lima")


def test_multi_turn_with_a_tool_result_is_answered(plain: str) -> None:  # noqa: F811
    history: list[dict[str, Any]] = ASK + [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"location": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 24 degrees."},
    ]
    r = create(plain, history, max_tokens=40)
    choice = r.choices[0]
    assert choice.message.content, choice
    # the result reached the model (the 135M model mostly echoes it back, in its tags)
    assert "24" in choice.message.content
    assert choice.finish_reason in ("stop", "length", "tool_calls")
    assert r.usage.prompt_tokens > 100  # the tool description and the rewritten turns were sent


def test_none_gives_no_calls(plain: str) -> None:  # noqa: F811
    r = create(plain, tool_choice="none", max_tokens=20)
    choice = r.choices[0]
    assert not choice.message.tool_calls and choice.finish_reason in ("stop", "length")
    assert choice.message.content
