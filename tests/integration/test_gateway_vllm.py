"""The gateway in front of a server speaking vLLM's API (a FakeEngine served in vLLM's HTTP shape,
splitserve.engine._fake_http), through :class:`splitserve.engine.VllmBackend`:
splitserve renders the chat template (read from the model folder's tokenizer_config.json, as
for a real vLLM model) and parses the tool calls, streamed and not, as the official ``openai``
client sees them; plain ``/v1/completions`` is relayed with the engine's own model name."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from helpers import serve_app
from splitserve.engine import FakeEngine, VllmBackend, backend_for, split_engine_url
from splitserve.engine._fake_http import by_prompt, vllm_app
from splitserve.gateway import GatewayConfig
from splitserve.gateway import create_app as gateway_app

TEMPLATE = """\
{%- if tools %}<|im_start|>system
# Tools

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{%- for tool in tools %}
{{ tool | tojson }}
{%- endfor %}
</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call><|im_end|>
{% endif %}
{%- for message in messages %}
{%- if message.role == "tool" %}<|im_start|>user
<tool_response>
{{ message.content }}
</tool_response><|im_end|>
{% elif message.role == "assistant" and message.tool_calls %}<|im_start|>assistant
{%- for tc in message.tool_calls %}
<tool_call>
{"name": "{{ tc.function.name }}", "arguments": {{ tc.function.arguments | tojson }}}
</tool_call>
{%- endfor %}<|im_end|>
{% else %}<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""

CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n</tool_call>'
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                "required": ["city", "days"],
            },
        },
    }
]


def reply(prompt: str) -> str:
    """A model that calls get_weather when it has the tool and no answer yet."""
    if "<tool_response>" in prompt:
        return "It is sunny in Paris for the next 2 days."
    if "get_weather" in prompt:
        return CALL
    return "Hello from vLLM."


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("Qwen-fake")
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"chat_template": TEMPLATE, "bos_token": None, "eos_token": "<|im_end|>"})
    )
    return folder


@pytest.fixture(scope="module")
def fake_vllm(model_dir: Path) -> Iterator[tuple[str, FakeEngine]]:
    engine = FakeEngine(by_prompt(reply))
    with serve_app(vllm_app(engine, str(model_dir), max_model_len=8192)) as url:
        yield url, engine


@pytest.fixture(scope="module")
def gateway(fake_vllm: tuple[str, FakeEngine]) -> Iterator[str]:
    url, _ = fake_vllm
    backend = backend_for(f"vllm+{url}")
    assert isinstance(backend, VllmBackend)
    app = gateway_app(GatewayConfig(engine_url=url), backend=backend)
    with serve_app(app) as gw:
        yield gw


def client(gw: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gw}/v1", api_key="none", max_retries=0)


def test_engine_urls_pick_the_backend() -> None:
    assert split_engine_url("vllm+http://127.0.0.1:8080") == ("vllm", "http://127.0.0.1:8080")
    assert split_engine_url("sglang+https://h:1") == ("sglang", "https://h:1")
    assert split_engine_url("http://127.0.0.1:8080") == ("llama.cpp", "http://127.0.0.1:8080")
    assert type(backend_for("http://127.0.0.1:8080")).__name__ == "LlamaCppBackend"


def test_chat_whole_and_streamed(gateway: str, fake_vllm: tuple[str, FakeEngine], model_dir: Path) -> None:
    c = client(gateway)
    whole = c.chat.completions.create(
        model="anything", messages=[{"role": "user", "content": "Hi there"}], max_tokens=64, temperature=0
    )
    assert whole.choices[0].message.content == "Hello from vLLM."
    assert whole.choices[0].finish_reason == "stop"
    assert whole.usage is not None and whole.usage.completion_tokens == len("Hello from vLLM.")
    sent = fake_vllm[1].bodies[-1]
    # splitserve rendered the prompt; the engine got its own model name and OpenAI fields
    assert sent["prompt"].endswith("<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n")
    assert sent["model"] == str(model_dir) and sent["max_tokens"] == 64 and sent["temperature"] == 0
    assert sent["stream"] is True and "cache_prompt" not in sent and "n_predict" not in sent

    pieces = [
        ch.choices[0].delta.content or ""
        for ch in c.chat.completions.create(
            model="anything", messages=[{"role": "user", "content": "Hi"}], max_tokens=64, stream=True
        )
        if ch.choices
    ]
    assert "".join(pieces) == "Hello from vLLM." and len([p for p in pieces if p]) > 3  # token by token

    cut = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}], max_tokens=5)
    assert cut.choices[0].message.content == "Hello" and cut.choices[0].finish_reason == "length"


def test_tool_calls_parsed_by_splitserve_whole_and_streamed(gateway: str, fake_vllm: tuple[str, FakeEngine]) -> None:
    c = client(gateway)
    messages: list[Any] = [{"role": "user", "content": "Weather in Paris for 2 days?"}]
    whole = c.chat.completions.create(model="m", messages=messages, tools=TOOLS, max_tokens=200)
    choice = whole.choices[0]
    assert choice.finish_reason == "tool_calls" and not choice.message.content
    (call,) = choice.message.tool_calls or []
    assert call.function.name == "get_weather"  # type: ignore[union-attr]
    assert json.loads(call.function.arguments) == {"city": "Paris", "days": 2}  # type: ignore[union-attr]
    assert "<tools>" in fake_vllm[1].bodies[-1]["prompt"]  # the tools rendered by splitserve

    names, args, finish = [], "", None
    for ch in c.chat.completions.create(model="m", messages=messages, tools=TOOLS, max_tokens=200, stream=True):
        if not ch.choices:
            continue
        for tc in ch.choices[0].delta.tool_calls or []:
            if tc.function and tc.function.name:
                names.append(tc.function.name)
            if tc.function and tc.function.arguments:
                args += tc.function.arguments
        finish = ch.choices[0].finish_reason or finish
    assert names == ["get_weather"] and json.loads(args) == {"city": "Paris", "days": 2} and finish == "tool_calls"

    messages += [
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": '{"sky": "sunny"}'},
    ]
    answer = c.chat.completions.create(model="m", messages=messages, tools=TOOLS, max_tokens=200)
    assert answer.choices[0].message.content == "It is sunny in Paris for the next 2 days."
    assert '<tool_response>\n{"sky": "sunny"}\n</tool_response>' in fake_vllm[1].bodies[-1]["prompt"]


def test_completions_are_relayed_with_the_engines_model_name(
    gateway: str, fake_vllm: tuple[str, FakeEngine], model_dir: Path
) -> None:
    c = client(gateway)
    done = c.completions.create(model="gateway-name", prompt="Once upon", max_tokens=8)
    assert done.choices[0].text == "Hello fr" and done.choices[0].finish_reason == "length"
    assert fake_vllm[1].bodies[-1]["model"] == str(model_dir)
    streamed = "".join(
        ch.choices[0].text
        for ch in c.completions.create(model="x", prompt="Hi", max_tokens=4, stream=True)
        if ch.choices
    )
    assert len(streamed) == 4


def test_models_lists_the_served_model(gateway: str, model_dir: Path) -> None:
    (card,) = client(gateway).models.list().data
    assert card.id == model_dir.name
