"""``/v1/messages`` on the real engine: llama-server (CPU) with SmolLM2 behind the gateway,
through the official ``anthropic`` SDK, in the hermes (Qwen2.5's template), minimax-m3 and
qwen3-coder formats.

SmolLM2 never calls a tool by itself, so the call is forced with ``tool_choice`` ``tool``
(named) or ``any``: the gateway's call grammar makes the model write a valid call, which must
come back as a ``tool_use`` block with a ``toolu_`` id and a typed input, streamed and not;
the tool_result turn is then answered in text. ``count_tokens`` must equal the prompt the
engine evaluated, the second turn must be served partly from the prompt cache, and errors
(a wrong key, a prompt beyond the context) must arrive as the SDK's exceptions.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import pytest
from anthropic.types import MetadataParam
from test_gateway import engine_url, running_gateway  # noqa: F401 - fixture
from test_gateway_required import templates

from splitserve.engine import resolve_source
from splitserve.gateway import GatewayConfig, KeyRing

pytestmark = [pytest.mark.engine, pytest.mark.slow]

KEY = "sk-messages-engine"
TOOL: Any = {
    "name": "get_weather",
    "description": "Get the weather",
    "input_schema": {
        "type": "object",
        "properties": {
            "location": {"type": "string", "enum": ["Paris", "London", "Tokyo"]},
            "days": {"type": "integer", "enum": [1, 2, 3]},
        },
        "required": ["location", "days"],
    },
}
OTHER: Any = {
    "name": "get_time",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}},
        "required": ["city"],
    },
}
ASK: Any = [{"role": "user", "content": "What is the weather in Paris?"}]
# thinking off: the 135M model rambles in the optional reasoning branch (as in the chat tests)
# (temperature in the body: newer SDKs no longer take it as an argument)
GEN: Any = {"max_tokens": 200, "extra_body": {"temperature": 0}, "thinking": {"type": "disabled"}}


def all_templates() -> dict[str, str]:
    root = resolve_source(None).path / "models/templates"
    return {**templates(), "qwen3-coder": (root / "Qwen3-Coder.jinja").read_text()}


@pytest.fixture(scope="module", params=["hermes", "minimax-m3", "qwen3-coder"])
def gw(request: pytest.FixtureRequest, engine_url: str) -> Iterator[str]:  # noqa: F811
    fmt = request.param
    cfg = GatewayConfig(
        engine_url=engine_url, chat_template=all_templates()[fmt], model_format=fmt, keys=KeyRing.build(KEY)
    )
    with running_gateway(cfg) as url:
        yield url


def client(url: str, key: str = KEY) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key=key, max_retries=0, timeout=600)


def the_call(message: Any) -> Any:
    uses = [b for b in message.content if b.type == "tool_use"]
    assert len(uses) == 1, message.content
    use = uses[0]
    assert use.name == "get_weather" and use.id.startswith("toolu_")
    # typed by the schema and within its enums (an XML format writes the integer as text; its
    # grammar allows only the enum's literals, as the JSON formats' does)
    assert use.input["location"] in ("Paris", "London", "Tokyo") and use.input["days"] in (1, 2, 3)
    assert isinstance(use.input["days"], int)
    assert message.stop_reason == "tool_use"
    return use


def test_a_forced_call_streamed_and_not_then_the_tool_result_turn(gw: str) -> None:
    c = client(gw)
    meta: MetadataParam = {"user_id": "engine-session"}
    whole = c.messages.create(
        model="any",
        messages=ASK,
        tools=[TOOL, OTHER],
        metadata=meta,
        tool_choice={"type": "tool", "name": "get_weather"},
        **GEN,
    )
    use = the_call(whole)
    with c.messages.stream(
        model="any",
        messages=ASK,
        tools=[TOOL, OTHER],
        metadata=meta,
        tool_choice={"type": "tool", "name": "get_weather"},
        **GEN,
    ) as s:
        streamed = s.get_final_message()
    # a valid call streamed too; not asserted equal: the second request is served from the
    # prompt cache, and llama.cpp's logits then differ in the last bits (the CPU decides which
    # of two close digits wins). tests/unit/gateway/test_messages_sdk.py holds stream == create.
    the_call(streamed)
    history: Any = [
        *ASK,
        {"role": "assistant", "content": [b.model_dump() for b in whole.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "Sunny, 21 C"}]},
    ]
    answer = c.messages.create(
        model="any",
        messages=history,
        tools=[TOOL, OTHER],
        metadata=meta,
        tool_choice={"type": "none"},
        **{**GEN, "max_tokens": 24},
    )
    assert answer.stop_reason in ("end_turn", "max_tokens")
    assert [b.type for b in answer.content] == ["text"] and answer.content[0].text.strip()  # type: ignore[union-attr]
    # the history's prefix was served from the engine's prompt cache
    assert (answer.usage.cache_read_input_tokens or 0) > 0
    total = answer.usage.input_tokens + (answer.usage.cache_read_input_tokens or 0)
    assert (
        c.messages.count_tokens(
            model="any",
            messages=history,
            tools=[TOOL, OTHER],
            tool_choice={"type": "none"},
            thinking={"type": "disabled"},
        ).input_tokens
        == total
    )


def test_any_forces_some_call(gw: str) -> None:
    got = client(gw).messages.create(
        model="any",
        messages=ASK,
        tools=[TOOL, OTHER],
        tool_choice={"type": "any", "disable_parallel_tool_use": True},
        **GEN,
    )
    uses = [b for b in got.content if b.type == "tool_use"]
    assert len(uses) == 1 and uses[0].name in ("get_weather", "get_time") and got.stop_reason == "tool_use"


def test_engine_errors_as_sdk_exceptions(gw: str) -> None:
    with pytest.raises(anthropic.AuthenticationError):
        client(gw, key="nope").messages.create(model="any", messages=ASK, **GEN)
    long: Any = [{"role": "user", "content": "word " * 6000}]  # beyond the 4096-token context
    with pytest.raises(anthropic.BadRequestError) as err:
        client(gw).messages.create(model="any", messages=long, **GEN)
    assert err.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
