"""``/v1/messages`` through the official ``anthropic`` SDK, on a scripted engine.

The gateway runs under uvicorn on loopback in front of a :class:`FakeEngine` whose raw output
is written in the model's format (hermes, minimax-m3, qwen3-coder): thinking, text and a tool
call, then (once the prompt holds the tool's result) a plain answer. The SDK's own types must
carry the blocks back (sync, async, ``messages.stream``), the tool_result turn must be
answered, ``count_tokens`` must count the rendered prompt, and the gateway's errors must
arrive as the SDK's exception classes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest
from anthropic.types import MessageParam
from test_messages_translate import ARGS, BASH, WRITE, raw_call, template, think

from helpers import serve_app
from splitserve.engine import FakeEngine, FakeOutput
from splitserve.gateway import GatewayConfig, KeyRing, _messages, create_app

KEY = "sk-messages-test"
FORMATS = ["hermes", "minimax-m3", "qwen3-coder"]
ASK: list[MessageParam] = [{"role": "user", "content": "Write hi there to /tmp/x/a.txt"}]
RESULT = "wrote 8 bytes"


def props(fmt: str, slots: int = 1) -> dict[str, Any]:
    return {
        "chat_template": template(fmt),
        "model_path": "/m/served.gguf",
        "default_generation_settings": {"n_ctx": 32768},
        "total_slots": slots,
    }


def script(fmt: str) -> Any:
    """Thinking, text and a Write call; once the tool's result is in the prompt, the answer."""
    call = think(fmt, "The user wants a file.") + "I will write it." + raw_call(fmt, "Write", ARGS)

    def output(body: dict[str, Any]) -> FakeOutput:
        if RESULT in body["prompt"]:
            return FakeOutput(["All", " done", "."], final={"timings": {"cache_n": 40}})
        return FakeOutput([call[i : i + 5] for i in range(0, len(call), 5)])

    return output


@contextlib.contextmanager
def gateway(fmt: str, engine: FakeEngine | None = None, **cfg: Any) -> Iterator[tuple[str, FakeEngine]]:
    engine = engine or FakeEngine(script(fmt), props=props(fmt, slots=2))
    config = GatewayConfig(engine_url="fake://", model_format=fmt, keys=KeyRing.build(KEY), **cfg)
    with serve_app(create_app(config, engine)) as url:
        yield url, engine


def client(url: str, **kw: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key=kw.pop("api_key", KEY), max_retries=0, timeout=60, **kw)


def sans_ids(blocks: list[Any]) -> list[dict[str, Any]]:
    out = []
    for b in blocks:
        d = b.model_dump(exclude_none=True) if hasattr(b, "model_dump") else dict(b)
        d.pop("id", None)
        out.append(d)
    return out


@pytest.fixture(params=FORMATS)
def fmt(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_tool_use_then_a_tool_result_turn(fmt: str) -> None:
    with gateway(fmt) as (url, engine):
        c = client(url)
        first = c.messages.create(
            model="claude-sonnet-x",
            max_tokens=500,
            messages=ASK,
            tools=[WRITE, BASH],
            metadata={"user_id": "session-a"},
        )
        assert [b.type for b in first.content] == ["thinking", "text", "tool_use"]
        thinking, text, use = first.content
        assert thinking.type == "thinking" and thinking.thinking == "The user wants a file."
        assert text.type == "text" and text.text.strip() == "I will write it."
        assert use.type == "tool_use" and use.name == "Write" and use.input == ARGS
        assert use.id.startswith("toolu_") and first.id.startswith("msg_")
        assert first.stop_reason == "tool_use" and first.model == "claude-sonnet-x"
        assert first.usage.input_tokens > 0 and first.usage.output_tokens > 0
        history: list[Any] = [
            *ASK,
            {"role": "assistant", "content": [b.model_dump() for b in first.content]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": use.id, "content": RESULT, "is_error": False}],
            },
        ]
        second = c.messages.create(
            model="claude-sonnet-x",
            max_tokens=500,
            messages=history,
            tools=[WRITE, BASH],
            metadata={"user_id": "session-a"},
        )
        assert [b.type for b in second.content] == ["text"] and second.content[0].text == "All done."  # type: ignore[union-attr]
        assert second.stop_reason == "end_turn"
        assert second.usage.cache_read_input_tokens == 40
        assert second.usage.input_tokens == engine.count_tokens(engine.bodies[-1]["prompt"]) - 40
        # one session, one engine slot
        assert engine.bodies[0]["id_slot"] == engine.bodies[1]["id_slot"]


def test_stream_equals_create_sync_and_async(fmt: str) -> None:
    with gateway(fmt) as (url, _):
        c = client(url)
        whole = c.messages.create(model="m", max_tokens=500, messages=ASK, tools=[WRITE])
        with c.messages.stream(model="m", max_tokens=500, messages=ASK, tools=[WRITE]) as s:
            kinds = [e.type for e in s]
            final = s.get_final_message()
        assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
        assert sans_ids(final.content) == sans_ids(whole.content)
        assert final.stop_reason == whole.stop_reason == "tool_use"
        assert final.usage.output_tokens == whole.usage.output_tokens

        async def go() -> Any:
            a = anthropic.AsyncAnthropic(base_url=url, auth_token=KEY, max_retries=0, timeout=60)
            got = await a.messages.create(model="m", max_tokens=500, messages=ASK, tools=[WRITE])
            async with a.messages.stream(model="m", max_tokens=500, messages=ASK, tools=[WRITE]) as st:
                streamed = await st.get_final_message()
            await a.close()
            return got, streamed

        got, streamed = asyncio.run(go())
        assert sans_ids(got.content) == sans_ids(streamed.content) == sans_ids(whole.content)


def test_raw_stream_events_have_event_lines_and_dense_indexes() -> None:
    with gateway("hermes") as (url, _):
        body = {"model": "m", "max_tokens": 500, "messages": ASK, "tools": [WRITE], "stream": True}
        r = httpx.post(f"{url}/v1/messages", json=body, headers={"x-api-key": KEY}, timeout=60)
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        names, starts = [], []
        for frame in r.text.strip().split("\n\n"):
            name, data = frame.split("\n", 1)
            ev = json.loads(data.removeprefix("data: "))
            assert name == f"event: {ev['type']}"
            names.append(ev["type"])
            if ev["type"] == "content_block_start":
                starts.append(ev["index"])
        assert names[:2] == ["message_start", "ping"] and names[-2:] == ["message_delta", "message_stop"]
        assert starts == [0, 1, 2]
        assert names.count("content_block_start") == names.count("content_block_stop") == 3
        assert "signature_delta" in r.text and "input_json_delta" in r.text


def test_forced_tool_choice_and_stop_sequences_reach_the_engine() -> None:
    engine = FakeEngine(
        [FakeOutput(["Hello"], stop_type="word", final={"stopping_word": "STOP"})], props=props("qwen3-coder")
    )
    with gateway("qwen3-coder", engine) as (url, engine):
        c = client(url)
        got = c.messages.create(
            model="m",
            max_tokens=50,
            messages=ASK,
            tools=[WRITE, BASH],
            tool_choice={"type": "tool", "name": "Bash"},
            stop_sequences=["STOP"],
            extra_body={"temperature": 0.2, "top_k": 5},
        )  # newer SDKs dropped them
        sent = engine.bodies[-1]
        assert "Bash" in sent["grammar"] and "Write" not in sent["grammar"]
        assert sent["stop"][0] == "STOP" and sent["top_k"] == 5 and sent["temperature"] == 0.2
        assert got.stop_reason == "stop_sequence" and got.stop_sequence == "STOP"


def test_count_tokens_counts_the_rendered_prompt() -> None:
    with gateway("hermes") as (url, engine):
        c = client(url)
        n = c.messages.count_tokens(model="m", messages=ASK, tools=[WRITE]).input_tokens
        c.messages.create(model="m", max_tokens=10, messages=ASK, tools=[WRITE])
        # the prompt the engine got, as the engine counts it (BOS included)
        assert n == engine.count_tokens(engine.bodies[-1]["prompt"])
        more = c.messages.count_tokens(model="m", messages=ASK, tools=[WRITE, BASH]).input_tokens
        assert more > n


def test_errors_arrive_as_the_sdks_exceptions() -> None:
    with gateway("hermes", strict_model_names=True) as (url, _):
        with pytest.raises(anthropic.AuthenticationError) as auth:
            client(url, api_key="wrong").messages.create(model="served", max_tokens=5, messages=ASK)
        assert auth.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
        with pytest.raises(anthropic.BadRequestError, match="reads text only"):
            client(url).messages.create(
                model="served",
                max_tokens=5,
                messages=[
                    {
                        "role": "user",
                        "content": [
                            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}
                        ],
                    }
                ],
            )
        with pytest.raises(anthropic.BadRequestError, match="max_tokens"):
            client(url).messages.create(model="served", max_tokens=0, messages=ASK)
        with pytest.raises(anthropic.NotFoundError) as nf:
            client(url).messages.create(model="claude-nope", max_tokens=5, messages=ASK)
        assert nf.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
        r = httpx.post(f"{url}/v1/messages", content=b"{nope", headers={"x-api-key": KEY})
        assert r.status_code == 400 and r.json()["type"] == "error"
        assert r.json()["error"]["type"] == "invalid_request_error"
        r = httpx.get(f"{url}/v1/messages", headers={"x-api-key": KEY})
        assert r.status_code == 405 and r.json()["type"] == "error"
        r = httpx.post(f"{url}/v1/messages/batches", json={}, headers={"x-api-key": KEY})
        assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"


def test_a_full_queue_is_529_overloaded() -> None:
    engine = FakeEngine(["a", "b"], props=props("hermes"), first_token_delay=30)
    with gateway("hermes", engine, max_concurrent=1, max_queue=0) as (url, engine):
        body = {"model": "m", "max_tokens": 5, "messages": ASK, "stream": True}
        with httpx.stream("POST", f"{url}/v1/messages", json=body, headers={"x-api-key": KEY}, timeout=60) as held:
            assert held.status_code == 200  # holds the one place while the engine thinks
            with pytest.raises(anthropic.OverloadedError) as err:
                client(url).messages.create(model="m", max_tokens=5, messages=ASK)
            assert err.value.status_code == 529
            assert err.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]


def test_pings_while_the_engine_has_not_answered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_messages, "PING_S", 0.05)
    engine = FakeEngine(["Hi"], props=props("hermes"), first_token_delay=1.0)
    with gateway("hermes", engine) as (url, _):
        body = {"model": "m", "max_tokens": 5, "messages": ASK, "stream": True}
        r = httpx.post(f"{url}/v1/messages", json=body, headers={"x-api-key": KEY}, timeout=60)
        pings = r.text.count("event: ping\n")
        assert pings >= 2, r.text  # the one after message_start, and more while waiting
        assert r.text.index("event: ping") < r.text.index("content_block_start")
        assert r.text.rstrip().endswith('{"type":"message_stop"}')


def test_an_engine_failing_mid_stream_is_an_error_event() -> None:
    engine = FakeEngine([FakeOutput(["Hel", "lo", " there"], drop_after=2)], props=props("hermes"))
    with gateway("hermes", engine) as (url, _):
        body = {"model": "m", "max_tokens": 50, "messages": ASK, "stream": True}
        r = httpx.post(f"{url}/v1/messages", json=body, headers={"x-api-key": KEY}, timeout=60)
        assert r.status_code == 200
        last = r.text.strip().split("\n\n")[-1]
        assert last.startswith("event: error\ndata: ")
        err = json.loads(last.split("data: ", 1)[1])
        assert err["type"] == "error" and err["error"]["type"] == "api_error"
        with (
            pytest.raises(anthropic.APIStatusError),
            client(url).messages.stream(model="m", max_tokens=50, messages=ASK) as s,
        ):
            s.get_final_message()
