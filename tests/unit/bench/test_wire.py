"""``bench speed --api messages|responses``: the bench's client in an agent's own wire API.

The requests it builds (from the chat body the bench makes) and the events it reads back, on
constructed streams; then the real gateway over the scripted engine answering the same raw
model output on /v1/chat/completions, /v1/messages and /v1/responses: the client must read
the same text, reasoning, tool calls, finish reason and token counts from all three; and a
whole ``bench speed`` agent replay over each API."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from splitserve.bench import Target
from splitserve.bench._client import BenchClient
from splitserve.bench._stream import DONE, StreamTimer, StreamTrace
from splitserve.bench._wire import MessagesChunks, ResponsesChunks, to_messages, to_responses
from splitserve.engine import FakeEngine, FakeOutput, resolve_source
from splitserve.gateway import GatewayConfig, create_app

WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
HISTORY: list[dict[str, Any]] = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Weather in Oslo?"},
    {
        "role": "assistant",
        "content": "Checking.",
        "reasoning_content": "I need the tool.",
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "-3 C, snow"},
    {"role": "user", "content": "And tomorrow?"},
]
CHAT = {
    "model": "m",
    "messages": HISTORY,
    "tools": [WEATHER],
    "max_tokens": 64,
    "stream": True,
    "stream_options": {"include_usage": True},
    "temperature": 0,
    "seed": 0,
    "ignore_eos": True,
}


def test_a_chat_body_as_an_anthropic_messages_request() -> None:
    body = to_messages(CHAT)
    assert body["system"] == "You are terse."
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assistant = body["messages"][1]["content"]
    assert [b["type"] for b in assistant] == ["thinking", "text", "tool_use"]
    assert assistant[2] == {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Oslo"}}
    # the tool result and the next question are one user turn, the result first
    assert body["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "call_1", "content": "-3 C, snow"},
        {"type": "text", "text": "And tomorrow?"},
    ]
    assert body["tools"] == [
        {"name": "get_weather", "description": "Weather of a city", "input_schema": WEATHER["function"]["parameters"]}
    ]
    assert (body["max_tokens"], body["stream"], body["temperature"]) == (64, True, 0)
    assert body["ignore_eos"] is True and body["seed"] == 0  # the engine's fields pass on
    assert "stream_options" not in body and "tool_calls" not in json.dumps(body)


def test_a_chat_body_as_a_stateless_responses_request() -> None:
    body = to_responses(CHAT)
    assert body["instructions"] == "You are terse." and body["store"] is False
    assert [i["type"] for i in body["input"]] == [
        "message",
        "reasoning",
        "message",
        "function_call",
        "function_call_output",
        "message",
    ]
    assert body["input"][3] == {
        "type": "function_call",
        "call_id": "call_1",
        "name": "get_weather",
        "arguments": '{"city": "Oslo"}',
    }
    assert body["input"][4] == {"type": "function_call_output", "call_id": "call_1", "output": "-3 C, snow"}
    assert body["tools"][0]["type"] == "function" and body["tools"][0]["name"] == "get_weather"
    assert body["max_output_tokens"] == 64 and "max_tokens" not in body


def timed(reader: MessagesChunks | ResponsesChunks, events: list[dict[str, Any]]) -> tuple[StreamTrace, bool]:
    """The trace the timer makes of ``events`` and whether the reader saw the stream's end."""
    timer = StreamTimer()
    done = False
    for n, ev in enumerate(events):
        chunk = reader.feed(ev)
        if chunk is DONE:
            done = True
            break
        if chunk is not None:
            timer.feed(chunk, float(n))
    trace = timer.finish(float(len(events)))
    return trace, done


def test_messages_events_read_as_chat_chunks() -> None:
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": {"usage": {"input_tokens": 7, "cache_read_input_tokens": 30}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "hm"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "ping"},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Sure."}},
        {"type": "content_block_stop", "index": 1},
        {
            "type": "content_block_start",
            "index": 2,
            "content_block": {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}},
        },
        {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": '{"city": '}},
        {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": '"Oslo"}'}},
        {"type": "content_block_stop", "index": 2},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 12}},
        {"type": "message_stop"},
    ]
    tr, done = timed(MessagesChunks(), events)
    assert tr.usage is not None
    assert done and (tr.reasoning, tr.content) == ("hm", "Sure.")
    assert tr.tool_calls == [{"id": "toolu_1", "name": "get_weather", "arguments": '{"city": "Oslo"}'}]
    assert tr.finish_reason == "tool_calls"
    assert tr.usage["prompt_tokens"] == 37 and tr.usage["completion_tokens"] == 12  # input + cache reads
    assert tr.usage["prompt_tokens_details"]["cached_tokens"] == 30
    assert tr.first_reasoning == 2.0 and tr.first_content == 6.0 and tr.first_chunk == 0.0
    # the counts known only at the end (message_start says 0): message_delta's, cumulative, win
    late: list[dict[str, Any]] = [
        {"type": "message_start", "message": {"usage": {"input_tokens": 0}}},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "max_tokens"},
            "usage": {"input_tokens": 5, "cache_read_input_tokens": 20, "output_tokens": 3},
        },
    ]
    tr, done = timed(MessagesChunks(), late)
    assert tr.usage is not None
    assert (tr.usage["prompt_tokens"], tr.usage["prompt_tokens_details"]["cached_tokens"]) == (25, 20)
    assert tr.finish_reason == "length" and not done
    err = MessagesChunks().feed({"type": "error", "error": {"type": "overloaded_error", "message": "busy"}})
    assert err == {"error": {"message": "busy"}}


def test_responses_events_read_as_chat_chunks() -> None:
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": {"id": "resp_1"}},
        {"type": "response.in_progress", "response": {"id": "resp_1"}},
        {"type": "response.output_item.added", "output_index": 0, "item": {"type": "reasoning"}},
        {"type": "response.reasoning_text.delta", "output_index": 0, "content_index": 0, "delta": "hm"},
        {"type": "response.output_item.added", "output_index": 1, "item": {"type": "message"}},
        {"type": "response.output_text.delta", "output_index": 1, "content_index": 0, "delta": "Sure."},
        {
            "type": "response.output_item.added",
            "output_index": 2,
            "item": {"type": "function_call", "call_id": "call_9", "name": "get_weather"},
        },
        {"type": "response.function_call_arguments.delta", "output_index": 2, "delta": '{"city": "Oslo"}'},
        {
            "type": "response.completed",
            "response": {
                "output": [{"type": "reasoning"}, {"type": "message"}, {"type": "function_call"}],
                "usage": {"input_tokens": 37, "output_tokens": 12, "input_tokens_details": {"cached_tokens": 30}},
            },
        },
    ]
    tr, _ = timed(ResponsesChunks(), events)
    assert tr.usage is not None
    assert (tr.reasoning, tr.content) == ("hm", "Sure.")
    assert tr.tool_calls == [{"id": "call_9", "name": "get_weather", "arguments": '{"city": "Oslo"}'}]
    assert tr.finish_reason == "tool_calls"
    assert (tr.usage["prompt_tokens"], tr.usage["completion_tokens"]) == (37, 12)
    assert tr.usage["prompt_tokens_details"]["cached_tokens"] == 30
    incomplete = ResponsesChunks().feed({"type": "response.incomplete", "response": {"output": [], "usage": {}}})
    assert incomplete["choices"][0]["finish_reason"] == "length"
    failed = ResponsesChunks().feed(
        {"type": "response.failed", "response": {"error": {"code": "context_length_exceeded", "message": "too long"}}}
    )
    assert failed == {"error": {"message": "too long"}}


# -- against the gateway over the scripted engine ---------------------------------------------

TOOL_OUTPUT = 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
TEXT_OUTPUT = "It is -3 C and snowing in Oslo."


def gateway(outputs: list[Any]) -> Any:
    template = (resolve_source(None).path / "models/templates/Qwen-Qwen2.5-7B-Instruct.jinja").read_text()
    props = {
        "chat_template": template,
        "model_path": "/models/m.gguf",
        "default_generation_settings": {"n_ctx": 8192},
        "total_slots": 1,
    }
    engine = FakeEngine(outputs, props=props)
    return create_app(GatewayConfig(engine_url="fake://", model_format="hermes"), engine)


def one_request(api: str, output: str) -> Any:
    app = gateway([FakeOutput(tokens=list(output))])

    async def go() -> Any:
        target = Target(url="http://gw", model="m", api=api, ignore_eos=False)  # type: ignore[arg-type]
        async with BenchClient(target, transport=httpx.ASGITransport(app=app)) as client:
            return await client.request("r", "agent", {}, "", 256, keep_text=None, messages=HISTORY, tools=[WEATHER])

    return anyio.run(go)


@pytest.mark.parametrize("output", [TOOL_OUTPUT, TEXT_OUTPUT], ids=["tool-call", "text"])
def test_the_three_apis_read_the_same_answer_from_the_gateway(output: str) -> None:
    recs = {api: one_request(api, output) for api in ("chat", "messages", "responses")}
    for api, rec in recs.items():
        assert rec.error is None and rec.status == 200, (api, rec.error)
        assert rec.completion_tokens == len(output), api  # one token per character
    chat = recs["chat"]
    for api in ("messages", "responses"):
        rec = recs[api]
        assert (rec.text, rec.reasoning) == (chat.text, chat.reasoning), api
        assert [(c["name"], json.loads(c["arguments"])) for c in rec.tool_calls] == [
            (c["name"], json.loads(c["arguments"])) for c in chat.tool_calls
        ], api
        assert rec.finish_reason == chat.finish_reason, api
        assert rec.prompt_tokens and rec.ttf_token_ms is not None and len(rec.token_times_ms) > 1
    if output == TOOL_OUTPUT:
        assert [c["name"] for c in chat.tool_calls] == ["get_weather"] and chat.finish_reason == "tool_calls"


@pytest.mark.parametrize("api", ["messages", "responses"])
def test_bench_speed_replays_the_agent_recording_over_an_agent_api(api: str, tmp_path: Path) -> None:
    from splitserve.bench import SpeedOptions, run_speed

    app = gateway([FakeOutput(tokens=list(TEXT_OUTPUT))])
    target = Target(url="http://gw", api=api, ignore_eos=False)  # type: ignore[arg-type]
    opts = SpeedOptions(workloads=["agent"], concurrency=[1], repeat=1)
    run, path = run_speed(target, opts, tmp_path / "run.json", transport=httpx.ASGITransport(app=app))
    agent = [r for r in run.records if r.kind == "agent"]
    assert len(agent) >= 2 and path.is_file()
    assert all(r.error is None and r.completion_tokens == len(TEXT_OUTPUT) for r in agent), [r.error for r in agent]
    assert run.target["api"] == api
