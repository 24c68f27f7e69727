"""The gateway in front of a real llama-server (SmolLM2, CPU), driven by the official openai client.

Tool calls: SmolLM2 never calls tools by itself, so the test-only ``force_output`` hook
turns a raw MiniMax-M3 reply into a one-literal GBNF grammar; the engine then writes
exactly that text token by token (real token boundaries) and the gateway must return the
structured call, streamed and not.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageFunctionToolCall, ChatCompletionMessageParam, ChatCompletionToolParam

from helpers import bare_server, died_message, free_ports, serve_app
from splitserve.engine import resolve_source
from splitserve.gateway import GatewayConfig, KeyRing, create_app

pytestmark = [pytest.mark.engine]

NS = "]<]minimax[>["
M3_CALL = (
    f"<mm:think>The user wants the weather.</mm:think>I'll check.{NS}<tool_call>\n"
    f'{NS}<invoke name="get_weather">\n{NS}<location>Paris{NS}</location>\n'
    f"{NS}<days>3{NS}</days>\n{NS}</invoke>\n{NS}</tool_call>"
)
M3_TWO = (
    f'{NS}<tool_call>\n{NS}<invoke name="get_weather">\n{NS}<location>Paris{NS}</location>\n'
    f'{NS}</invoke>\n{NS}<invoke name="get_time">\n{NS}<city>Tokyo{NS}</city>\n'
    f"{NS}</invoke>\n{NS}</tool_call>"
)
TOOLS: list[ChatCompletionToolParam] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"location": {"type": "string"}, "days": {"type": "integer"}},
            },
        },
    },
    {
        "type": "function",
        "function": {"name": "get_time", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
    },
]
ASK: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Weather in Paris?"}]


def function_calls(calls: Sequence[object] | None) -> list[ChatCompletionMessageFunctionToolCall]:
    """A message's tool calls, each checked to be a function call (not a custom tool call)."""
    out = []
    for call in calls or []:
        assert isinstance(call, ChatCompletionMessageFunctionToolCall), call
        out.append(call)
    return out


@contextmanager
def running_gateway(config: GatewayConfig) -> Iterator[str]:
    """The gateway under uvicorn in a thread on a free loopback port; yields the base URL."""
    with serve_app(create_app(config)) as url:
        config.port = int(url.rsplit(":", 1)[1])
        yield url


@pytest.fixture(scope="module")
def engine_url(engine, smollm2) -> Iterator[str]:  # type: ignore[no-untyped-def]
    # one thread: on a shared, oversubscribed CI box two spinning threads are several times slower
    with bare_server(engine, smollm2, "--parallel", "2", "-t", "1", "--metrics", ctx=4096) as url:
        yield url


@pytest.fixture(scope="module")
def plain(engine_url: str) -> Iterator[str]:
    """The gateway with the model's own ChatML template (no tool format: plain)."""
    with running_gateway(GatewayConfig(engine_url=engine_url)) as url:
        yield url


@pytest.fixture(scope="module")
def m3(engine_url: str) -> Iterator[str]:
    """The gateway rendering MiniMax-M3's template and parsing its format, test hooks on."""
    template = (resolve_source(None).path / "models/templates/MiniMax-M3.jinja").read_text()
    cfg = GatewayConfig(engine_url=engine_url, chat_template=template, model_format="minimax-m3", test_hooks=True)
    with running_gateway(cfg) as url:
        yield url


def client(url: str, key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=300)


def model_id(url: str) -> str:
    return client(url).models.list().data[0].id


# -- plain chat ---------------------------------------------------------------------------


def test_models_health_and_deep_health(plain: str) -> None:
    models = client(plain).models.list().data
    assert [m.id for m in models] == ["SmolLM2-135M-Instruct.Q4_1"]
    assert httpx.get(f"{plain}/health").json()["status"] == "ok"
    deep = httpx.get(f"{plain}/health?deep=1", timeout=120).json()
    assert deep["deep"]["tokens"] == 1


def test_chat_stream_equals_non_stream_and_usage_is_real(plain: str) -> None:
    c, m = client(plain), model_id(plain)
    kw = dict(model=m, messages=[{"role": "user", "content": "Name a colour."}], max_tokens=6, temperature=0, seed=1)
    whole = c.chat.completions.create(**kw)  # type: ignore[call-overload]
    assert whole.choices[0].finish_reason == "length"
    assert whole.usage.completion_tokens == 6 and whole.usage.prompt_tokens > 10
    chunks = list(
        c.chat.completions.create(
            **kw,
            stream=True,  # type: ignore[call-overload]
            stream_options={"include_usage": True},
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == whole.choices[0].message.content and text
    finals = [ch.choices[0].finish_reason for ch in chunks if ch.choices]
    assert finals[-1] == "length" and set(finals[:-1]) == {None}
    usage = chunks[-1].usage
    assert usage.completion_tokens == 6
    # the same prompt again hit the engine's prompt cache
    assert usage.prompt_tokens_details.cached_tokens >= usage.prompt_tokens - 2


def test_engine_sampling_fields_pass_through(plain: str) -> None:
    c, m = client(plain), model_id(plain)
    r = c.chat.completions.create(
        model=m,
        messages=[{"role": "user", "content": "Count."}],
        max_tokens=12,
        extra_body={"grammar": 'root ::= "1, 2, 3"', "top_k": 1},
    )
    assert r.choices[0].message.content == "1, 2, 3" and r.choices[0].finish_reason == "stop"


def test_response_format_json_schema_is_enforced_by_the_engine(plain: str) -> None:
    c, m = client(plain), model_id(plain)
    schema = {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}},
        "required": ["ok"],
        "additionalProperties": False,
    }
    r = c.chat.completions.create(
        model=m,
        messages=[{"role": "user", "content": "Answer in JSON."}],
        max_tokens=40,
        response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": schema}},
    )
    assert isinstance(json.loads(r.choices[0].message.content or "")["ok"], bool)


def test_completions_pass_through(plain: str) -> None:
    c, m = client(plain), model_id(plain)
    r = c.completions.create(model=m, prompt="The sky is", max_tokens=3)
    assert r.choices[0].text and r.usage and r.usage.completion_tokens == 3
    parts = list(c.completions.create(model=m, prompt="The sky is", max_tokens=3, stream=True))
    assert "".join(p.choices[0].text for p in parts if p.choices)


# -- tool calls through the MiniMax-M3 format --------------------------------------------


def test_forced_m3_call_non_streamed(m3: str) -> None:
    c = client(m3)
    r = c.chat.completions.create(
        model=model_id(m3),
        messages=ASK,
        tools=TOOLS,
        max_tokens=300,
        extra_body={"force_output": M3_CALL},
    )
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "I'll check."
    assert (choice.message.model_extra or {})["reasoning_content"] == "The user wants the weather."
    (call,) = choice.message.tool_calls or []
    assert (
        isinstance(call, ChatCompletionMessageFunctionToolCall)
        and call.function.name == "get_weather"
        and call.type == "function"
    )
    assert json.loads(call.function.arguments) == {"location": "Paris", "days": 3}
    assert r.usage and r.usage.completion_tokens > 20  # the literal really went through the sampler


def test_forced_m3_call_streamed_shape(m3: str) -> None:
    c = client(m3)
    chunks = list(
        c.chat.completions.create(
            model=model_id(m3),
            messages=ASK,
            tools=TOOLS,
            max_tokens=300,
            stream=True,
            extra_body={"force_output": M3_CALL},
        )
    )
    deltas = [ch.choices[0].delta for ch in chunks if ch.choices]
    tool_deltas = [tc for d in deltas for tc in (d.tool_calls or [])]
    first = tool_deltas[0]
    assert first.id and first.type == "function" and first.function and first.function.name == "get_weather"
    assert all(t.id is None and t.function is not None and t.function.name is None for t in tool_deltas[1:])
    args = "".join((t.function and t.function.arguments) or "" for t in tool_deltas)
    assert json.loads(args) == {"location": "Paris", "days": 3}
    assert len(tool_deltas) >= 3  # arguments arrived in pieces, as the tokens did
    content = "".join(d.content or "" for d in deltas)
    reasoning = "".join((d.model_extra or {}).get("reasoning_content") or "" for d in deltas)
    assert content == "I'll check." and reasoning == "The user wants the weather."
    assert NS not in content and "mm:think" not in content + reasoning
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_parallel_calls_and_parallel_false_and_named_choice(m3: str) -> None:
    c, m = client(m3), model_id(m3)
    both = c.chat.completions.create(
        model=m,
        messages=ASK,
        tools=TOOLS,
        max_tokens=300,
        extra_body={"force_output": M3_TWO},
    )
    names = [t.function.name for t in function_calls(both.choices[0].message.tool_calls)]
    assert names == ["get_weather", "get_time"]
    ids = {t.id for t in both.choices[0].message.tool_calls or []}
    assert len(ids) == 2
    one = c.chat.completions.create(
        model=m,
        messages=ASK,
        tools=TOOLS,
        max_tokens=300,
        parallel_tool_calls=False,
        extra_body={"force_output": M3_TWO},
    )
    assert [t.function.name for t in function_calls(one.choices[0].message.tool_calls)] == ["get_weather"]
    named = c.chat.completions.create(
        model=m,
        messages=ASK,
        tools=TOOLS,
        max_tokens=300,
        tool_choice={"type": "function", "function": {"name": "get_time"}},
        extra_body={"force_output": M3_TWO},
    )
    (call,) = named.choices[0].message.tool_calls or []
    assert (
        isinstance(call, ChatCompletionMessageFunctionToolCall)
        and call.function.name == "get_time"
        and json.loads(call.function.arguments) == {"city": "Tokyo"}
    )
    none = c.chat.completions.create(
        model=m,
        messages=ASK,
        tools=TOOLS,
        max_tokens=300,
        tool_choice="none",
        extra_body={"force_output": M3_CALL},
    )
    assert not none.choices[0].message.tool_calls
    assert none.choices[0].finish_reason == "stop"
    assert (none.model_extra or {})["splitserve"]["warnings"]


def test_truncated_call_is_length_not_tool_calls(m3: str) -> None:
    c = client(m3)
    r = c.chat.completions.create(
        model=model_id(m3),
        messages=ASK,
        tools=TOOLS,
        max_tokens=30,
        extra_body={"force_output": M3_CALL},
    )
    assert r.choices[0].finish_reason == "length"
    assert not r.choices[0].message.tool_calls


def test_multi_turn_history_with_tool_results_renders(m3: str) -> None:
    c = client(m3)
    history: list[ChatCompletionMessageParam] = ASK + [
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
        {"role": "tool", "tool_call_id": "call_1", "content": '{"sky": "sunny"}'},
    ]
    r = c.chat.completions.create(
        model=model_id(m3),
        messages=history,
        tools=TOOLS,
        max_tokens=32,
        extra_body={"force_output": "It is sunny."},
    )
    assert r.choices[0].message.content == "It is sunny." and r.choices[0].finish_reason == "stop"


# -- errors, provoked for real -------------------------------------------------------------


def test_error_statuses(plain: str, engine_url: str) -> None:
    c, m = client(plain), model_id(plain)
    bad = httpx.post(f"{plain}/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"
    with pytest.raises(openai.BadRequestError) as err:
        c.chat.completions.create(model=m, messages=[{"role": "user", "content": "x"}], temperature=5)
    assert err.value.body["param"] == "temperature"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as err:
        c.chat.completions.create(
            model=m,
            messages=[
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "{oops"}}],
                },
                {"role": "user", "content": "x"},
            ],
        )
    assert err.value.body["param"] == "messages.0.tool_calls.0.function.arguments"  # type: ignore[index]
    # any model name is served, as llama-server does (agents hard-code names), under our id
    other = c.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}], max_tokens=1)
    assert other.model == m
    with running_gateway(GatewayConfig(engine_url=engine_url, strict_model_names=True)) as strict:
        with pytest.raises(openai.NotFoundError) as nf:
            client(strict).chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])
        assert nf.value.body["code"] == "model_not_found"  # type: ignore[index]
    big = httpx.post(
        f"{plain}/v1/chat/completions",
        content=b"x" * (9 * 1024 * 1024),
        headers={"content-type": "application/json"},
        timeout=60,
    )
    assert big.status_code == 413 and big.json()["error"]["code"] == "request_too_large"
    with pytest.raises(openai.BadRequestError) as err:  # longer than the engine's context
        c.chat.completions.create(model=m, messages=[{"role": "user", "content": "word " * 3000}], max_tokens=2)
    assert "engine refused" in str(err.value)


def test_engine_down_is_503_with_retry_after() -> None:
    (dead,) = free_ports(1)
    with running_gateway(GatewayConfig(engine_url=f"http://127.0.0.1:{dead}")) as url:
        r = httpx.post(
            f"{url}/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "x"}]}
        )
        assert r.status_code == 503 and int(r.headers["retry-after"]) > 0
        assert r.json()["error"]["code"] == "engine_unavailable"
        h = httpx.get(f"{url}/health")
        assert h.status_code == 503 and "retry-after" in h.headers


def test_engine_loading_is_503_with_retry_after(engine, smollm2, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A real llama-server that is still loading (a large context takes seconds to set up)."""
    import os
    import subprocess

    (port,) = free_ports(1)
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    log = tmp_path / "llama-server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                str(engine.server),
                "-m",
                str(smollm2),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "-c",
                "65536",
                "-t",
                "1",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    engine_url = f"http://127.0.0.1:{port}"
    try:
        with running_gateway(GatewayConfig(engine_url=engine_url)) as url:
            seen: list[httpx.Response] = []
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                try:
                    state = httpx.get(f"{engine_url}/health", timeout=5).status_code
                except httpx.HTTPError:
                    time.sleep(0.02)
                    continue
                if state != 503:
                    break
                # The engine may finish loading between /health and this request: then it
                # answers (one token, so it is quick) and the next /health ends the loop.
                seen.append(
                    httpx.post(
                        f"{url}/v1/chat/completions",
                        json={"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 1},
                        timeout=60,
                    )
                )
            loading = [r for r in seen if r.status_code == 503]
            assert loading, "never caught the engine loading" + (
                f"; {died_message('llama-server', proc.returncode, log)}" if proc.poll() is not None else ""
            )
            r = loading[0]
            assert r.headers["retry-after"] == "2" and "not ready" in r.json()["error"]["message"]
    finally:
        proc.kill()
        proc.wait()


def test_auth_required_and_keys_file(engine_url: str, tmp_path: Path) -> None:
    from splitserve.gateway import add_key

    keys_file = tmp_path / "keys.txt"
    key = add_key(keys_file, "alice")
    assert key not in keys_file.read_text()
    with running_gateway(GatewayConfig(engine_url=engine_url, keys=KeyRing.build(None, keys_file))) as url:
        with pytest.raises(openai.AuthenticationError):
            client(url, "sk-wrong").models.list()
        assert [m.id for m in client(url, key).models.list().data]
        assert httpx.get(f"{url}/health").status_code == 200  # open for load balancers


def test_per_key_queue_full_is_429(engine_url: str) -> None:
    cfg = GatewayConfig(engine_url=engine_url, max_concurrent=1, max_queue=0)
    with running_gateway(cfg) as url:
        m = model_id(url)
        body = {
            "model": m,
            "messages": [{"role": "user", "content": "Tell a story."}],
            "max_tokens": 200,
            "ignore_eos": True,
            "stream": True,
        }
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=300) as held:
            assert held.status_code == 200
            lines = held.iter_lines()  # keep it: a dropped iterator closes the response
            next(lines)
            second = httpx.post(f"{url}/v1/chat/completions", json={**body, "stream": False})
            assert second.status_code == 429 and second.headers["retry-after"] == "1"
            assert second.json()["error"]["type"] == "rate_limit_error"


def test_client_disconnect_cancels_the_engine_request(engine_url: str) -> None:
    with running_gateway(GatewayConfig(engine_url=engine_url)) as url:
        m = model_id(url)
        body = {
            "model": m,
            "messages": [{"role": "user", "content": "Tell a long story."}],
            "max_tokens": 1000,
            "ignore_eos": True,
            "stream": True,
            "id_slot": 0,
        }
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=300) as r:
            lines = r.iter_lines()
            seen = [next(lines) for _ in range(6)]
            assert any('"content"' in s for s in seen)
        # the engine's slot 0 stops long before 1000 tokens
        deadline = time.monotonic() + 120
        while True:
            slot = httpx.get(f"{engine_url}/slots").json()[0]
            if not slot["is_processing"]:
                break
            assert time.monotonic() < deadline, "the engine kept generating after the disconnect"
            time.sleep(0.2)
        assert slot["next_token"][0]["n_decoded"] < 1000
        metrics = httpx.get(f"{url}/metrics").text
        assert "splitserve_client_disconnects_total 1.0" in metrics


def test_metrics_count_requests_and_tokens(plain: str) -> None:
    c, m = client(plain), model_id(plain)
    c.chat.completions.create(model=m, messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
    text = httpx.get(f"{plain}/metrics").text
    assert 'splitserve_requests_total{endpoint="chat",status="200"}' in text
    assert 'splitserve_tokens_total{kind="completion"}' in text
    assert "splitserve_time_to_first_token_seconds_bucket" in text
    assert "splitserve_queue_depth" in text and "splitserve_parse_warnings_total" in text
    # a normally finished answer is no disconnect; the engine's own metrics are relayed
    assert "splitserve_client_disconnects_total 0.0" in text
    assert "llamacpp:prompt_tokens_total" in text and "splitserve_engine_metrics_up 1.0" in text
    assert 'splitserve_request_success_total{finished_reason="length",model_name=' in text
