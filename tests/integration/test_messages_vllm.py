"""``/v1/messages`` on the vLLM backend: the gateway in front of a FakeEngine served in vLLM's
HTTP shape (splitserve.engine._fake_http), driven by the official ``anthropic`` SDK: a tool
call, the tool_result turn, a stream equal to the whole answer, count_tokens."""

from __future__ import annotations

from typing import Any

import anthropic
from test_gateway_vllm import fake_vllm, gateway, model_dir  # noqa: F401 - fixtures

from splitserve.engine import FakeEngine

TOOL: Any = {
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city", "days"],
    },
}
ASK: Any = [{"role": "user", "content": "Weather in Paris?"}]


def client(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key="none", max_retries=0, timeout=60)


def test_messages_tool_loop_on_vllm(gateway: str, fake_vllm: tuple[str, FakeEngine]) -> None:  # noqa: F811
    c = client(gateway)
    first = c.messages.create(model="claude-x", max_tokens=200, messages=ASK, tools=[TOOL])
    assert first.stop_reason == "tool_use"
    (use,) = [b for b in first.content if b.type == "tool_use"]
    assert use.name == "get_weather" and use.input == {"city": "Paris", "days": 2}
    sent = fake_vllm[1].bodies[-1]
    assert "get_weather" in sent["prompt"] and sent["max_tokens"] == 200
    history: Any = [
        *ASK,
        {"role": "assistant", "content": [b.model_dump() for b in first.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny"}]},
    ]
    second = c.messages.create(model="claude-x", max_tokens=200, messages=history, tools=[TOOL])
    assert second.stop_reason == "end_turn"
    assert second.content[0].type == "text" and second.content[0].text == "It is sunny in Paris for the next 2 days."
    assert second.usage.output_tokens == len(second.content[0].text)
    with c.messages.stream(model="claude-x", max_tokens=200, messages=history, tools=[TOOL]) as s:
        streamed = s.get_final_message()
    assert [b.model_dump() for b in streamed.content] == [b.model_dump() for b in second.content]
    n = c.messages.count_tokens(model="claude-x", messages=history, tools=[TOOL]).input_tokens
    assert n > len("Weather in Paris?")
