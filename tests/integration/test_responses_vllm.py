"""``/v1/responses`` on the vLLM backend: the gateway in front of the server that speaks vLLM's
API (a FakeEngine in vLLM's HTTP shape, splitserve.engine._fake_http) through :class:`~splitserve.engine.VllmBackend`, with the
official ``openai`` SDK and with the real Codex CLI.

The fake's model is scripted (it calls ``get_weather`` while it has the tool and no result,
then answers); splitserve renders the prompt and reads the calls, as it does for llama.cpp. A
prompt beyond vLLM's ``max_model_len`` is ``context_length_exceeded``: a 400 for a whole
answer, ``response.failed`` for a streamed one.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from test_codex import COMMAND, PATCH, items, raw_call, run_codex
from test_gateway_vllm import TEMPLATE

from helpers import serve_app
from splitserve.engine import FakeEngine, VllmBackend, backend_for
from splitserve.engine._fake_http import by_prompt, vllm_app
from splitserve.gateway import GatewayConfig
from splitserve.gateway import create_app as gateway_app

WEATHER: Any = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
ANSWER = "It is sunny in Paris."


def reply(prompt: str) -> str:
    if "42-ok" in prompt and prompt.count("hello.txt") >= 2:
        return "Codex on vLLM: done."
    if "42-ok" in prompt:
        return raw_call("hermes", "apply_patch", {"input": PATCH})
    if "exec_command" in prompt:
        return raw_call("hermes", "exec_command", {"cmd": COMMAND})
    if "<tool_response>" in prompt:
        return ANSWER
    if "get_weather" in prompt:
        return raw_call("hermes", "get_weather", {"city": "Paris"})
    return "Hello from vLLM."


@pytest.fixture(scope="module")
def fake_vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, FakeEngine, str]]:
    """The fake's URL, the engine and the model folder (its served name)."""
    folder = tmp_path_factory.mktemp("Qwen-fake")
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"chat_template": TEMPLATE, "bos_token": None, "eos_token": "<|im_end|>"})
    )
    engine = FakeEngine(by_prompt(reply))
    with serve_app(vllm_app(engine, str(folder), max_model_len=200_000)) as url:
        yield url, engine, str(folder)


def gateway(url: str) -> Any:
    backend = backend_for(f"vllm+{url}")
    assert isinstance(backend, VllmBackend)
    return gateway_app(GatewayConfig(engine_url=url, model_format="hermes"), backend=backend)


@pytest.fixture(scope="module")
def gw(fake_vllm: tuple[str, FakeEngine, str]) -> Iterator[str]:
    with serve_app(gateway(fake_vllm[0])) as url:
        yield url


def client(gw: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gw}/v1", api_key="none", max_retries=0)


def test_a_function_call_and_its_output_whole_and_streamed(gw: str, fake_vllm: tuple[str, FakeEngine, str]) -> None:
    c = client(gw)
    ask: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]
    first = c.responses.create(model="m", input=ask, tools=[WEATHER])
    (fc,) = first.output
    assert fc.type == "function_call" and fc.name == "get_weather"
    assert json.loads(fc.arguments) == {"city": "Paris"}
    assert first.usage is not None and first.usage.output_tokens == len(
        raw_call("hermes", "get_weather", {"city": "Paris"})
    )
    history = [
        *ask,
        fc.model_dump(exclude_none=True),
        {"type": "function_call_output", "call_id": fc.call_id, "output": "sunny"},
    ]
    with c.responses.stream(model="m", input=history, tools=[WEATHER]) as s:
        deltas = [e.delta for e in s if e.type == "response.output_text.delta"]
        final = s.get_final_response()
    assert final.output_text == ANSWER and len(deltas) > 3  # token by token
    sent = fake_vllm[1].bodies[-1]
    assert "<tool_response>\nsunny\n</tool_response>" in sent["prompt"] and sent["stream"] is True


def test_max_output_tokens_and_a_prompt_too_long(fake_vllm: tuple[str, FakeEngine, str]) -> None:
    small = vllm_app(by_prompt(reply), fake_vllm[2], max_model_len=64)
    with serve_app(small) as url, serve_app(gateway(url)) as gw:
        c = client(gw)
        cut = c.responses.create(model="m", input="hi", max_output_tokens=5)
        assert cut.status == "incomplete" and cut.incomplete_details is not None
        assert cut.incomplete_details.reason == "max_output_tokens" and cut.output_text == "Hello"
        with pytest.raises(openai.BadRequestError) as err:
            c.responses.create(model="m", input="word " * 100)
        assert err.value.code == "context_length_exceeded"
        events = list(c.responses.create(model="m", input="word " * 100, stream=True))
        assert [e.type for e in events] == ["response.created", "response.in_progress", "response.failed"]
        failed = events[-1].response  # type: ignore[union-attr]
        assert failed.error is not None and failed.error.code == "context_length_exceeded"
        assert "maximum context length" in failed.error.message


def test_codex_on_the_vllm_backend_runs_the_tools_and_finishes(
    fake_vllm: tuple[str, FakeEngine, str], tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    events, stderr, rc = run_codex(gateway(fake_vllm[0]), tmp_path, work, "Run the check, then write the file.")
    assert rc == 0, stderr[-3000:]
    assert "42-ok" in items(events, "command_execution")[0]["aggregated_output"]
    assert (work / "hello.txt").read_text() == "hello from the patch\n"
    assert items(events, "agent_message")[-1]["text"] == "Codex on vLLM: done."
    assert events[-1]["type"] == "turn.completed"
