"""tool_choice "required" / named, enforced by the gateway's call grammar on a real engine.

SmolLM2 never calls a tool by itself; with ``tool_choice: "required"`` the gateway sends
the engine a GBNF grammar of the format's call syntax, so the model must write a call and
the gateway must return it structured. Also: llama.cpp's own grammar parser accepts the
grammar of every format (a bad grammar is a 400 there), and what the engine writes under
each format's grammar is read back by that format's parser as one well-formed call.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from test_gateway import client, engine_url, model_id, running_gateway  # noqa: F401 - fixture

from splitserve.chat import get_format, list_formats, parse_complete, tool_call_grammar
from splitserve.engine import resolve_source
from splitserve.gateway import GatewayConfig

pytestmark = [pytest.mark.engine]

# enums keep a 135M model's values short; free strings are covered in test_grammar
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {
                    "location": {"type": "string", "enum": ["Paris", "London", "Tokyo"]},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["location"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "enum": ["Oslo", "Lima"]}},
                "required": ["city"],
            },
        },
    },
]
# for the acceptance check: every schema shape the grammar handles, a tool without
# parameters, an object whose properties are all optional
RICH_TOOLS: list[dict[str, Any]] = TOOLS + [
    {
        "type": "function",
        "function": {
            "name": "search",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string"},
                    "limit": {"type": "integer"},
                    "score": {"type": "number"},
                    "exact": {"type": "boolean"},
                    "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                    "near": {"type": "object", "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}}},
                    "any": {},
                    "maybe": {"type": ["string", "null"]},
                    "either": {"anyOf": [{"type": "integer"}, {"const": "auto"}]},
                    "ref": {"$ref": "#/$defs/x"},
                },
                "$defs": {"x": {"type": "string"}},
            },
        },
    },
    {"type": "function", "function": {"name": "ping"}},
]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
NAMES = {"get_weather", "get_time"}


def assert_structured_call(r: Any, names: set[str]) -> None:
    """A non-streamed answer that is complete calls to allowed tools, JSON arguments, no text."""
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    assert choice.message.tool_calls, choice.message
    for call in choice.message.tool_calls:
        assert call.function.name in names and call.id and call.type == "function"
        assert isinstance(json.loads(call.function.arguments), dict)
    assert not choice.message.content
    assert "splitserve" not in (r.model_extra or {})  # no parse or "required but no call" warning


def assert_streamed_call(chunks: list[Any], names: set[str]) -> None:
    """The streamed shape: the first tool-call delta has id, type and name; each call's argument
    fragments join to a JSON object; finish_reason tool_calls; no text."""
    deltas = [ch.choices[0].delta for ch in chunks if ch.choices]
    tool_deltas = [tc for d in deltas for tc in (d.tool_calls or [])]
    first = tool_deltas[0]
    assert first.id and first.type == "function" and first.function.name in names
    by_index: dict[int, str] = {}
    for tc in tool_deltas:
        by_index[tc.index] = by_index.get(tc.index, "") + (tc.function.arguments or "")
    assert by_index and all(isinstance(json.loads(a), dict) for a in by_index.values())
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    assert not "".join(d.content or "" for d in deltas)


PROMPT = "<|im_start|>user\nWhat is the weather in Paris?<|im_end|>\n<|im_start|>assistant\n"


def templates() -> dict[str, str]:
    root = resolve_source(None).path / "models/templates"
    return {
        "minimax-m3": (root / "MiniMax-M3.jinja").read_text(),
        "hermes": (root / "Qwen-Qwen2.5-7B-Instruct.jinja").read_text(),
        "glm-4.5": (root / "GLM-4.6.jinja").read_text(),
        "kimi-k2": (root / "moonshotai-Kimi-K2.jinja").read_text(),
    }


# M3's and GLM's templates let the model choose to think; a 135M model that takes the
# optional reasoning branch rambles there, so those runs turn thinking off (the prompt then
# ends with the closer, or the model is told not to think, and the grammar offers no
# reasoning)
KWARGS: dict[str, dict[str, Any]] = {
    "minimax-m3": {"thinking_mode": "disabled"},
    "hermes": {},
    "glm-4.5": {"enable_thinking": False},
    "kimi-k2": {},
}


@pytest.fixture(scope="module", params=["minimax-m3", "hermes", "glm-4.5", "kimi-k2"])
def gateway(request: pytest.FixtureRequest, engine_url: str) -> Iterator[tuple[str, dict[str, Any]]]:  # noqa: F811
    fmt = request.param
    cfg = GatewayConfig(engine_url=engine_url, chat_template=templates()[fmt], model_format=fmt)
    with running_gateway(cfg) as url:
        if fmt in ONE_CALL:
            _ONE_CALL_URLS.add(url)
        yield url, KWARGS[fmt]


_ONE_CALL_URLS: set[str] = set()


# Under these templates' markup SmolLM2 never chooses to close the block of calls: with
# parallel calls allowed it writes calls until the token limit. One call is what is tested.
ONE_CALL = ("glm-4.5", "kimi-k2")


def create(gw: tuple[str, dict[str, Any]], extra_body: dict[str, Any] | None = None, **kw: Any) -> Any:
    url, kwargs = gw
    if any(url == u for u in _ONE_CALL_URLS):
        kw.setdefault("parallel_tool_calls", False)
    extra = {**(extra_body or {}), "chat_template_kwargs": kwargs}
    return client(url).chat.completions.create(
        model=model_id(url), messages=ASK, tools=TOOLS, max_tokens=200, temperature=0, extra_body=extra, **kw
    )


# -- through the gateway, with the official client ------------------------------------------


def test_required_gives_a_structured_call(gateway: tuple[str, dict[str, Any]]) -> None:
    assert_structured_call(create(gateway, tool_choice="required"), NAMES)


def test_required_streamed(gateway: tuple[str, dict[str, Any]]) -> None:
    assert_streamed_call(list(create(gateway, tool_choice="required", stream=True)), NAMES)


def test_named_choice_calls_that_function_once(gateway: tuple[str, dict[str, Any]]) -> None:
    r = create(gateway, tool_choice={"type": "function", "function": {"name": "get_time"}}, parallel_tool_calls=False)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls or []
    assert call.function.name == "get_time"
    assert json.loads(call.function.arguments)["city"] in ("Oslo", "Lima")


def test_parallel_false_gives_exactly_one_call(gateway: tuple[str, dict[str, Any]]) -> None:
    r = create(gateway, tool_choice="required", parallel_tool_calls=False)
    (call,) = r.choices[0].message.tool_calls or []
    assert call.function.name in NAMES
    assert r.choices[0].finish_reason == "tool_calls"


def test_client_grammar_with_required_is_a_400(gateway: tuple[str, dict[str, Any]]) -> None:
    import openai

    with pytest.raises(openai.BadRequestError) as err:
        create(gateway, tool_choice="required", extra_body={"grammar": 'root ::= "x"'})
    assert err.value.body["param"] == "grammar"  # type: ignore[index]


# -- every format: llama.cpp parses the grammar; what it writes parses back -----------------


def _variants(fmt_name: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"parallel": True}, {"parallel": False, "name": "get_time"}]
    if get_format(fmt_name).reasoning is not None:
        out += [{"prefilled": True}, {"reasoning": False}]
    return out


@pytest.mark.parametrize("fmt_name", [f.name for f in list_formats()])
def test_engine_accepts_every_format_grammar(engine_url: str, fmt_name: str) -> None:  # noqa: F811
    fmt = get_format(fmt_name)
    for options in _variants(fmt_name):
        grammar = tool_call_grammar(fmt, RICH_TOOLS, **options)
        r = httpx.post(
            f"{engine_url}/completion", timeout=120, json={"prompt": PROMPT, "grammar": grammar, "n_predict": 1}
        )
        assert r.status_code == 200, (options, r.text)


def test_engine_rejects_a_broken_grammar(engine_url: str) -> None:  # noqa: F811
    """The acceptance check above can fail: llama-server answers 400 for a bad grammar."""
    r = httpx.post(
        f"{engine_url}/completion",
        timeout=60,
        json={"prompt": PROMPT, "grammar": "root ::= undefined-rule", "n_predict": 1},
    )
    assert r.status_code == 400 and "grammar" in r.text


@pytest.mark.parametrize("fmt_name", [f.name for f in list_formats()])
def test_engine_output_under_the_grammar_parses_to_one_call(
    engine_url: str,  # noqa: F811
    fmt_name: str,
) -> None:
    fmt = get_format(fmt_name)
    grammar = tool_call_grammar(fmt, TOOLS, parallel=False, reasoning=False)
    r = httpx.post(
        f"{engine_url}/completion",
        timeout=300,
        # Kimi-K3's markup is long in SmolLM2's tokens (about 150 for one call)
        json={"prompt": PROMPT, "grammar": grammar, "n_predict": 400, "temperature": 0},
    )
    body = r.json()
    assert body["stop_type"] == "eos", body["content"]  # the grammar ended, the engine stopped
    msg = parse_complete(fmt, body["content"], TOOLS, prefilled=False)
    assert msg.warnings == [] and not msg.content, (body["content"], msg)
    (call,) = msg.tool_calls
    assert call["function"]["name"] in NAMES
    args = json.loads(call["function"]["arguments"])
    if call["function"]["name"] == "get_weather":
        assert args["location"] in ("Paris", "London", "Tokyo")
    else:
        assert args["city"] in ("Oslo", "Lima")
