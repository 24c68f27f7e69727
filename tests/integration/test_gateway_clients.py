"""The clients agents are built on, through the gateway: tools, streaming, errors.

The official ``openai`` SDK (sync and async), ``langchain-openai``, ``litellm`` (the
``openai/`` provider with ``api_base``) and the ``openai-agents`` SDK, each against a real
llama-server (SmolLM2, CPU) behind the gateway in the Hermes format. SmolLM2 never calls a
tool by itself, so the calls are forced with ``tool_choice`` "required" or named: the gateway's
call grammar makes the model write a valid call, and each client must hand it back through its
own types (a parsed pydantic model, an ``AIMessage.tool_calls`` entry, a called function).
Errors are real ones from the gateway (a wrong key, a bad field), raised as each client's own
exception classes.

No network beyond loopback: every connection and name lookup elsewhere is refused and
recorded while this module runs (litellm's cost map, tracing, telemetry), and the module
fails if any was tried.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from typing import Any, Literal

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionNamedToolChoiceParam
from pydantic import BaseModel, SecretStr
from test_gateway import engine_url, running_gateway  # noqa: F401 - fixture
from test_gateway_required import templates

from splitserve.gateway import GatewayConfig, KeyRing

pytestmark = [
    pytest.mark.engine,
    # litellm's own TypedDicts, at its first call; not ours to fix
    pytest.mark.filterwarnings("ignore:.*using the `ReadOnly` qualifier:UserWarning"),
]

KEY = "sk-clients-test"
PROMPT = "What is the weather in Paris?"
ASK: list[ChatCompletionMessageParam] = [{"role": "user", "content": PROMPT}]
LOCATIONS = ("Paris", "London", "Tokyo")


class Weather(BaseModel):
    # enums keep a 135M model's values short; the integer one checks typed arguments
    location: Literal["Paris", "London", "Tokyo"]
    days: Literal[1, 2, 3]


TOOL = openai.pydantic_function_tool(Weather, name="get_weather")
NAMED: ChatCompletionNamedToolChoiceParam = {"type": "function", "function": {"name": "get_weather"}}
GEN: dict[str, Any] = {"max_tokens": 200, "temperature": 0}

# -- offline: loopback only ----------------------------------------------------------------

OFFLINE_ENV = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # else litellm fetches its cost map at import
    "LITELLM_OFFLINE_MODE": "true",  # and no other catalog or tokenizer either
    "LITELLM_TELEMETRY": "False",
    "LANGSMITH_TRACING": "false",
    "LANGCHAIN_TRACING_V2": "false",
    "OPENAI_AGENTS_DISABLE_TRACING": "1",
}
LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1", None}


@pytest.fixture(scope="module", autouse=True)
def offline() -> Iterator[None]:
    """Refuse (and record) connections and lookups off loopback; import the clients under it."""
    tried: list[object] = []
    real_connect, real_lookup = socket.socket.connect, socket.getaddrinfo

    def connect(sock: socket.socket, addr: Any) -> Any:
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not str(addr[0]).startswith(("127.", "::1")):
            tried.append(addr)
            raise OSError(f"test_gateway_clients: no network off loopback ({addr})")
        return real_connect(sock, addr)

    def lookup(host: Any, *args: Any, **kwargs: Any) -> Any:
        if (host.decode() if isinstance(host, bytes) else host) not in LOOPBACK_HOSTS:
            tried.append(host)
            raise socket.gaierror(f"test_gateway_clients: no lookups off loopback ({host})")
        return real_lookup(host, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        for k, v in OFFLINE_ENV.items():
            mp.setenv(k, v)
        mp.setattr(socket.socket, "connect", connect)
        mp.setattr(socket, "getaddrinfo", lookup)
        import agents
        import langchain_openai  # noqa: F401
        import litellm

        agents.set_tracing_disabled(True)
        litellm.telemetry = False
        yield
    assert not tried, f"a client tried to reach the network: {tried}"


@pytest.fixture(scope="module")
def gw(engine_url: str, offline: None) -> Iterator[str]:  # noqa: F811
    """The gateway in the Hermes format, with an API key required; yields its /v1 base URL."""
    cfg = GatewayConfig(
        engine_url=engine_url, chat_template=templates()["hermes"], model_format="hermes", keys=KeyRing.build(KEY)
    )
    with running_gateway(cfg) as url:
        yield f"{url}/v1"


@pytest.fixture(scope="module")
def model(gw: str) -> str:
    return sync(gw).models.list().data[0].id


def sync(base: str, key: str = KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=base, api_key=key, max_retries=0, timeout=300)


def aio(base: str, key: str = KEY) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=base, api_key=key, max_retries=0, timeout=300)


def one_weather_call(tool_calls: Any) -> Weather:
    """Exactly one call, to get_weather, whose JSON arguments validate as ``Weather``."""
    (call,) = tool_calls or []
    assert call.type == "function" and call.id and call.function.name == "get_weather"
    return Weather.model_validate_json(call.function.arguments)


# -- openai, sync -----------------------------------------------------------------------------


def test_openai_parse_required_gives_typed_arguments(gw: str, model: str) -> None:
    r = sync(gw).chat.completions.parse(
        model=model,
        messages=ASK,
        tools=[TOOL],
        tool_choice="required",
        parallel_tool_calls=False,
        **GEN,
    )
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and not choice.message.content
    (call,) = choice.message.tool_calls or []
    assert call.function.name == "get_weather"
    assert isinstance(call.function.parsed_arguments, Weather)
    assert call.function.parsed_arguments == one_weather_call(choice.message.tool_calls)


def test_openai_stream_helper_assembles_the_named_call(gw: str, model: str) -> None:
    with sync(gw).chat.completions.stream(
        model=model,
        messages=ASK,
        tools=[TOOL],
        tool_choice=NAMED,
        parallel_tool_calls=False,
        **GEN,
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_completion()
    assert kinds.count("tool_calls.function.arguments.delta") >= 2  # it arrived in pieces
    assert kinds.count("tool_calls.function.arguments.done") == 1
    (call,) = final.choices[0].message.tool_calls or []
    assert isinstance(call.function.parsed_arguments, Weather)
    assert final.choices[0].finish_reason == "tool_calls"


def test_openai_errors_are_the_sdk_classes(gw: str, model: str) -> None:
    with pytest.raises(openai.AuthenticationError) as auth:
        sync(gw, "sk-wrong").chat.completions.create(
            model=model,
            messages=ASK,
            tools=[TOOL],
            tool_choice="required",
            **GEN,
        )
    assert auth.value.status_code == 401
    with pytest.raises(openai.AuthenticationError):
        sync(gw, "sk-wrong").chat.completions.create(model=model, messages=ASK, stream=True)
    with pytest.raises(openai.BadRequestError) as bad:
        sync(gw).chat.completions.create(model=model, messages=ASK, temperature=5)
    assert bad.value.status_code == 400 and bad.value.body["param"] == "temperature"  # type: ignore[index]


# -- openai, async ----------------------------------------------------------------------------


def test_async_openai_call_stream_and_401(gw: str, model: str) -> None:
    async def main() -> tuple[Any, list[Any]]:
        client = aio(gw)
        whole = await client.chat.completions.create(
            model=model,
            messages=ASK,
            tools=[TOOL],
            tool_choice="required",
            parallel_tool_calls=False,
            **GEN,
        )
        stream = await client.chat.completions.create(
            model=model,
            messages=ASK,
            tools=[TOOL],
            tool_choice=NAMED,
            parallel_tool_calls=False,
            stream=True,
            **GEN,
        )
        chunks = [chunk async for chunk in stream]
        with pytest.raises(openai.AuthenticationError) as auth:
            await aio(gw, "sk-wrong").chat.completions.create(model=model, messages=ASK)
        assert auth.value.status_code == 401
        await client.close()
        return whole, chunks

    whole, chunks = asyncio.run(main())
    assert whole.choices[0].finish_reason == "tool_calls"
    one_weather_call(whole.choices[0].message.tool_calls)
    deltas = [tc for ch in chunks if ch.choices for tc in ch.choices[0].delta.tool_calls or []]
    assert deltas[0].id and deltas[0].function.name == "get_weather"
    Weather.model_validate_json("".join(d.function.arguments or "" for d in deltas))
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


# -- langchain-openai -------------------------------------------------------------------------


def chat_openai(gw: str, model: str, key: str = KEY) -> Any:
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(
        model=model,
        base_url=gw,
        api_key=SecretStr(key),
        max_retries=0,
        timeout=300,
        temperature=0,
        max_tokens=200,
    )  # type: ignore[call-arg]


def test_langchain_bind_tools_required(gw: str, model: str) -> None:
    from langchain_core.messages import AIMessage

    bound = chat_openai(gw, model).bind_tools([Weather], tool_choice="required", parallel_tool_calls=False)
    msg = bound.invoke(PROMPT)
    assert isinstance(msg, AIMessage) and not msg.invalid_tool_calls
    (call,) = msg.tool_calls
    assert call["name"] == "Weather" and call["id"]
    assert Weather.model_validate(call["args"]).location in LOCATIONS
    assert msg.response_metadata["finish_reason"] == "tool_calls"


def test_langchain_stream_accumulates_the_named_call(gw: str, model: str) -> None:
    from langchain_core.messages import AIMessageChunk

    bound = chat_openai(gw, model).bind_tools([Weather], tool_choice="Weather", parallel_tool_calls=False)
    chunks = list(bound.stream(PROMPT))
    assert all(isinstance(c, AIMessageChunk) for c in chunks)
    assert sum(1 for c in chunks if c.tool_call_chunks) >= 2  # the call arrived in pieces
    whole = chunks[0]
    for chunk in chunks[1:]:
        whole += chunk
    (call,) = whole.tool_calls
    assert call["name"] == "Weather" and isinstance(Weather.model_validate(call["args"]).days, int)


def test_langchain_wrong_key_is_authentication_error(gw: str, model: str) -> None:
    with pytest.raises(openai.AuthenticationError) as auth:
        chat_openai(gw, model, "sk-wrong").bind_tools([Weather], tool_choice="required").invoke(PROMPT)
    assert auth.value.status_code == 401


# -- litellm ----------------------------------------------------------------------------------


def litellm_call(gw: str, model: str, key: str = KEY, **kw: Any) -> Any:
    import litellm

    return litellm.completion(
        model=f"openai/{model}", api_base=gw, api_key=key, messages=ASK, max_retries=0, timeout=300, **{**GEN, **kw}
    )


def test_litellm_required_call(gw: str, model: str) -> None:
    import litellm

    r = litellm_call(gw, model, tools=[TOOL], tool_choice="required", parallel_tool_calls=False)
    assert isinstance(r, litellm.ModelResponse)
    assert r.choices[0].finish_reason == "tool_calls"
    assert one_weather_call(r.choices[0].message.tool_calls).location in LOCATIONS


def test_litellm_stream_chunk_builder_assembles_the_named_call(gw: str, model: str) -> None:
    import litellm

    chunks = list(litellm_call(gw, model, tools=[TOOL], tool_choice=NAMED, parallel_tool_calls=False, stream=True))
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.tool_calls) >= 2
    built = litellm.stream_chunk_builder(chunks, messages=ASK)
    assert built is not None and built.choices[0].finish_reason == "tool_calls"
    choice = built.choices[0]
    assert isinstance(choice, litellm.Choices)  # a chat completion's choice, not a text completion's
    assert isinstance(one_weather_call(choice.message.tool_calls).days, int)


def test_litellm_errors_are_its_exception_classes(gw: str, model: str) -> None:
    import litellm

    with pytest.raises(litellm.AuthenticationError) as auth:
        litellm_call(gw, model, "sk-wrong", tools=[TOOL], tool_choice="required")
    assert auth.value.status_code == 401
    with pytest.raises(litellm.BadRequestError) as bad:
        litellm_call(gw, model, temperature=5)
    assert bad.value.status_code == 400 and "temperature" in str(bad.value)


# -- openai-agents ----------------------------------------------------------------------------


def weather_agent(
    gw: str, model: str, calls: list[tuple[str, int]], key: str = KEY, tool_choice: str = "required"
) -> Any:
    from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, function_tool

    @function_tool
    def get_weather(location: Literal["Paris", "London", "Tokyo"], days: Literal[1, 2, 3]) -> str:
        """The weather forecast for a city."""
        calls.append((location, days))
        return f"sunny in {location} for {days} days"

    return Agent(
        name="weather",
        instructions="Answer with the weather tool.",
        tools=[get_weather],
        model=OpenAIChatCompletionsModel(model=model, openai_client=aio(gw, key)),
        model_settings=ModelSettings(tool_choice=tool_choice, parallel_tool_calls=False, temperature=0, max_tokens=200),
        tool_use_behavior="stop_on_first_tool",
    )


def assert_called_once_typed(calls: list[tuple[str, int]], final_output: Any) -> None:
    ((location, days),) = calls
    assert location in LOCATIONS and isinstance(days, int) and days in (1, 2, 3)
    assert final_output == f"sunny in {location} for {days} days"


def test_agents_runner_calls_the_function_tool(gw: str, model: str) -> None:
    from agents import Runner

    calls: list[tuple[str, int]] = []
    result = asyncio.run(Runner.run(weather_agent(gw, model, calls), PROMPT, max_turns=2))
    assert_called_once_typed(calls, result.final_output)


def test_agents_run_streamed_calls_the_named_tool(gw: str, model: str) -> None:
    from agents import Runner

    calls: list[tuple[str, int]] = []

    async def main() -> tuple[Any, list[Any]]:
        result = Runner.run_streamed(weather_agent(gw, model, calls, tool_choice="get_weather"), PROMPT, max_turns=2)
        names = [ev.name async for ev in result.stream_events() if ev.type == "run_item_stream_event"]
        return result, names

    result, names = asyncio.run(main())
    assert "tool_called" in names and "tool_output" in names
    assert_called_once_typed(calls, result.final_output)


def test_agents_wrong_key_is_authentication_error(gw: str, model: str) -> None:
    from agents import Runner

    calls: list[tuple[str, int]] = []
    with pytest.raises(openai.AuthenticationError) as auth:
        asyncio.run(Runner.run(weather_agent(gw, model, calls, "sk-wrong"), PROMPT, max_turns=2))
    assert auth.value.status_code == 401 and not calls
