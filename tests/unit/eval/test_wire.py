"""``eval run --api chat|messages|responses``: the eval's inspect_ai model speaks the chosen wire
API to the real gateway (over the scripted engine, on a loopback port): the same tool call and
answer come back on every path, the request reaches the endpoint of that API, and the
sampling stays greedy (temperature 0 reaches the engine, also through Anthropic's SDK, which
no longer sends it itself)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from helpers import serve_app
from splitserve.engine import FakeEngine, FakeOutput, resolve_source
from splitserve.eval._wire import EVAL_APIS, eval_model
from splitserve.gateway import GatewayConfig, create_app

CALL = 'Checking.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
ANSWER = "It is -3 C and snowing in Oslo."


def _gateway(engine: FakeEngine) -> Any:
    return create_app(GatewayConfig(engine_url="fake://", model_format="hermes"), engine)


@pytest.mark.parametrize("api", EVAL_APIS)
def test_the_eval_model_speaks_the_chosen_api(api: str) -> None:
    from inspect_ai.model import ChatMessageTool, ChatMessageUser, GenerateConfig
    from inspect_ai.tool import ToolInfo, ToolParam, ToolParams

    template = (resolve_source(None).path / "models/templates/Qwen-Qwen2.5-7B-Instruct.jinja").read_text()
    props = {"chat_template": template, "model_path": "/models/m.gguf", "default_generation_settings": {"n_ctx": 8192}}
    engine = FakeEngine([FakeOutput(tokens=list(CALL)), FakeOutput(tokens=list(ANSWER))], props=props)
    seen: list[str] = []
    app = _gateway(engine)

    async def logged(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            seen.append(scope["path"])
        await app(scope, receive, send)

    weather = ToolInfo(
        name="get_weather",
        description="Weather of a city",
        parameters=ToolParams(properties={"city": ToolParam(type="string")}, required=["city"]),
    )
    with serve_app(logged) as url:
        model = eval_model(api, "m", url + "/v1", None, GenerateConfig(temperature=0.0, max_retries=0))

        async def turns() -> tuple[Any, Any]:
            history: list[Any] = [ChatMessageUser(content="Weather in Oslo?")]
            first = await model.generate(history, tools=[weather])
            (call,) = first.message.tool_calls or []
            history += [
                first.message,
                ChatMessageTool(content="-3 C, snow", tool_call_id=call.id, function=call.function),
            ]
            second = await model.generate(history, tools=[weather])
            return first, second

        first, second = anyio.run(turns)
    (call,) = first.message.tool_calls
    assert (call.function, call.arguments) == ("get_weather", {"city": "Oslo"})
    assert second.completion == ANSWER and not second.message.tool_calls
    path = {"chat": "/v1/chat/completions", "messages": "/v1/messages", "responses": "/v1/responses"}[api]
    assert seen.count(path) == 2, seen
    assert [b.get("temperature") for b in engine.bodies] == [0.0, 0.0]
    assert "-3 C, snow" in engine.bodies[1]["prompt"]  # the tool result went back in that API's shape


def test_an_unknown_api_is_refused() -> None:
    with pytest.raises(ValueError, match="one of chat, messages, responses"):
        eval_model("completions", "m", "http://127.0.0.1:1/v1", None, None)
