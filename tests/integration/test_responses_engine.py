"""``/v1/responses`` on the real engine: llama-server (CPU build) with SmolLM2-135M behind the
gateway in the Hermes format (Qwen2.5's template), through the official ``openai`` SDK.

SmolLM2 never calls a tool by itself, so calls are forced with ``tool_choice`` (``required``, a
named function, a named custom tool) and structured output with ``text.format``: the gateway's
grammar makes the model write what the SDK must then hand back as ``function_call`` /
``custom_tool_call`` items and a parsed object. The stream's events keep the Responses order
rules (the checker of tests/unit/gateway/test_responses.py); a prompt longer than the
engine's context is ``context_length_exceeded``; a session's second request is served from
the engine's prompt cache.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import httpx
import openai
import pytest
from openai.types.responses import CustomToolParam, FunctionToolParam
from pydantic import BaseModel
from test_gateway import engine_url, running_gateway  # noqa: F401 - fixture
from test_gateway_required import templates

from splitserve.gateway import GatewayConfig, KeyRing

pytestmark = pytest.mark.engine

_UNIT = Path(__file__).resolve().parents[1] / "unit/gateway/test_responses.py"
_spec = importlib.util.spec_from_file_location("unit_test_responses", _UNIT)
assert _spec is not None and _spec.loader is not None
unit = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(unit)

KEY = "sk-responses-test"
ASK = "What is the weather in Paris?"
GEN: dict[str, Any] = {"max_output_tokens": 200, "temperature": 0}


class Weather(BaseModel):
    # enums keep a 135M model's values short
    location: Literal["Paris", "London", "Tokyo"]
    days: Literal[1, 2, 3]


WEATHER: FunctionToolParam = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather forecast of a city",
    "parameters": {**Weather.model_json_schema(), "additionalProperties": False},
    "strict": True,
}
PATCH: CustomToolParam = {"type": "custom", "name": "apply_patch", "description": "Apply a patch to the files"}


@pytest.fixture(scope="module")
def gw(engine_url: str) -> Iterator[str]:  # noqa: F811
    cfg = GatewayConfig(
        engine_url=engine_url, chat_template=templates()["hermes"], model_format="hermes", keys=KeyRing.build(KEY)
    )
    with running_gateway(cfg) as url:
        yield url


def client(gw: str, key: str = KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gw}/v1", api_key=key, max_retries=0, timeout=300)


def test_a_forced_function_call_then_its_output(gw: str) -> None:
    c = client(gw)
    first = c.responses.create(
        model="m",
        input=ASK,
        tools=[WEATHER],
        tool_choice="required",  # type: ignore[list-item]
        parallel_tool_calls=False,
        **GEN,
    )
    calls = [o for o in first.output if o.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather" and calls[0].call_id
    Weather.model_validate_json(calls[0].arguments)
    assert first.status == "completed" and first.usage is not None and first.usage.output_tokens > 0
    history: list[Any] = [
        {"role": "user", "content": ASK},
        *[o.model_dump(exclude_none=True) for o in first.output],
        {"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny, 21 C"},
    ]
    second = c.responses.create(
        model="m",
        input=history,
        tools=[WEATHER],
        tool_choice="none",
        max_output_tokens=24,
        temperature=0,
    )
    assert second.status in ("completed", "incomplete") and second.error is None
    assert [o.type for o in second.output] == ["message"]


def test_a_named_custom_tool_is_a_custom_tool_call(gw: str) -> None:
    r = client(gw).responses.create(
        model="m",
        input="Create hello.txt",
        tools=[PATCH],  # type: ignore[list-item]
        tool_choice={"type": "custom", "name": "apply_patch"},
        **GEN,
    )
    calls = [o for o in r.output if o.type == "custom_tool_call"]
    assert len(calls) == 1 and calls[0].name == "apply_patch" and isinstance(calls[0].input, str)


def test_structured_output_is_parsed(gw: str) -> None:
    r = client(gw).responses.parse(model="m", input=ASK, text_format=Weather, **GEN)
    assert isinstance(r.output_parsed, Weather)


def test_the_stream_keeps_the_order_rules_and_the_sdk_assembles_it(gw: str) -> None:
    body = {
        "model": "m",
        "input": ASK,
        "tools": [WEATHER],
        "tool_choice": {"type": "function", "name": "get_weather"},
        "stream": True,
        **GEN,
    }
    r = httpx.post(f"{gw}/v1/responses", json=body, headers={"authorization": f"Bearer {KEY}"}, timeout=300)
    assert r.status_code == 200
    final = unit.check_stream(unit.parse_sse(r.text))
    (call,) = [o for o in final["output"] if o["type"] == "function_call"]
    Weather.model_validate_json(call["arguments"])
    with client(gw).responses.stream(
        model="m",
        input=ASK,
        tools=[WEATHER],  # type: ignore[list-item]
        tool_choice={"type": "function", "name": "get_weather"},
        **GEN,
    ) as s:
        kinds = [e.type for e in s]
        done = s.get_final_response()
    assert kinds.count("response.function_call_arguments.delta") >= 2  # in pieces, as generated
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert [o.type for o in done.output if o.type == "function_call"] == ["function_call"]


def test_a_prompt_longer_than_the_context_is_context_length_exceeded(gw: str) -> None:
    long = "word " * 6000  # the engine's context is 4096
    with pytest.raises(openai.BadRequestError) as err:
        client(gw).responses.create(model="m", input=long, max_output_tokens=4)
    assert err.value.code == "context_length_exceeded"
    events = list(client(gw).responses.create(model="m", input=long, max_output_tokens=4, stream=True))
    assert events[-1].type == "response.failed"
    assert events[-1].response.error is not None  # type: ignore[union-attr]
    assert events[-1].response.error.code == "context_length_exceeded"  # type: ignore[union-attr]


def test_a_sessions_next_request_is_served_from_the_prompt_cache(gw: str) -> None:
    c = client(gw)
    history: list[Any] = [
        {"role": "developer", "content": "You answer in one short sentence. " * 20},
        {"role": "user", "content": "Name a colour."},
    ]
    first = c.responses.create(
        model="m", input=history, prompt_cache_key="session-1", max_output_tokens=8, temperature=0, store=False
    )
    history += [o.model_dump(exclude_none=True) for o in first.output]
    history.append({"role": "user", "content": "Another one."})
    second = c.responses.create(
        model="m", input=history, prompt_cache_key="session-1", max_output_tokens=8, temperature=0, store=False
    )
    assert first.usage is not None and second.usage is not None
    cached = second.usage.input_tokens_details.cached_tokens
    assert cached >= first.usage.input_tokens - 1, (json.dumps(first.usage.model_dump()), cached)
