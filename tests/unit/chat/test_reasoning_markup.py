"""Two parser defects that other servers' own suites expose, on our parsers and through the
gateway's chat endpoint (issue 29):

- hermes: a reasoning block holding ``<tool_call>`` markup (the model thinking about a call)
  stays reasoning; only calls after the block are calls. Fixtures: llama.cpp's
  ``tests/test-chat.cpp`` (Hermes 2 Pro, ``<think><tool_call>nah uhg</tool_call>``) and
  vLLM's ``tests/tool_parsers/test_hermes_tool_parser.py``
  (``MODEL_OUTPUT_WITH_TOOL_CALL_IN_THINK``), with the reasoning opener in the output and
  pre-filled by the prompt (QwQ's template ends its generation prompt with ``<think>``);
- qwen3-coder: a string parameter whose value holds a literal ``<parameter=NAME>`` line for a
  parameter the call already gave (a file being written that holds such markup) keeps it as
  text, in the shape of vLLM's ``tests/tool_parsers/test_qwen3coder_tool_parser.py`` cases
  (``get_current_weather``'s ``city``/``state``/``unit``).

Every fixture is parsed in one piece, char by char, at every boundary and at random groupings
(``parse_every_way``: stream == batch), then served by the gateway over the scripted engine,
streamed (one character per token) and whole.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import pytest

from splitserve.engine import FakeEngine, resolve_source
from splitserve.gateway import GatewayConfig, create_app

from ._support import calls_of, parse_every_way, tool

# -- fixtures -----------------------------------------------------------------------------

LLAMA_CPP_HERMES = "<think><tool_call>nah uhg</tool_call>"  # test-chat.cpp, Hermes 2 Pro

VLLM_HERMES_IN_THINK = (  # test_hermes_tool_parser.py, MODEL_OUTPUT_WITH_TOOL_CALL_IN_THINK
    '<think>Okay, ...<tool_call>\n{"name": "get_current_weather", "arguments": {"location": "Seattle"}}\n'
    "</tool_call>\n</think>After think\n<tool_call>\n"
    '{"name": "get_current_weather", "arguments": {"location": "Munich"}}\n</tool_call>\nSome suffix'
)
SEATTLE_MARKUP = '<tool_call>\n{"name": "get_current_weather", "arguments": {"location": "Seattle"}}\n</tool_call>'

HERMES_TOOLS = [tool("get_current_weather", {"location": {"type": "string"}})]

WEATHER = tool(
    "get_current_weather",
    {
        "city": {"type": "string"},
        "state": {"type": "string"},
        "unit": {"type": "string", "enum": ["fahrenheit", "celsius"]},
    },
    required=["city", "state"],
)
WRITE = tool("write_file", {"file_path": {"type": "string"}, "content": {"type": "string"}})
QWEN_TOOLS = [WEATHER, WRITE]


def q_call(name: str, params: list[tuple[str, str]]) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params)
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


# vLLM's single-call output, written by the model into a file: it names ``city``, ``state`` and
# ``unit`` again, parameters the outer call gave first
VLLM_SINGLE = q_call("get_current_weather", [("city", "Dallas"), ("state", "TX"), ("unit", "fahrenheit")])
DOC_WITH_PARAMS = "Parameters look like this:\n<parameter=city>\nDallas\n</parameter>\n<parameter=state>\nTX"
FILE_WITH_CALL_BODY = "<parameter=file_path>\nnotes.md\n</parameter>\n<parameter=content>\nhello\n</parameter>"


# -- hermes: tool-call markup inside reasoning ---------------------------------------------


@pytest.mark.parametrize("prefilled", [False, True])
def test_llama_cpp_call_markup_in_reasoning_is_reasoning(prefilled: bool) -> None:
    # pre-filled: the model repeated the opener the prompt wrote, which is dropped
    msg = parse_every_way("hermes", LLAMA_CPP_HERMES, prefilled=prefilled)
    assert msg.reasoning_content == "<tool_call>nah uhg</tool_call>"
    assert msg.content is None and msg.tool_calls == []


@pytest.mark.parametrize("prefilled", [False, True])
def test_vllm_call_in_think_then_a_real_call(prefilled: bool) -> None:
    text = VLLM_HERMES_IN_THINK.removeprefix("<think>") if prefilled else VLLM_HERMES_IN_THINK
    msg = parse_every_way("hermes", text, HERMES_TOOLS, prefilled=prefilled)
    assert msg.reasoning_content == "Okay, ..." + SEATTLE_MARKUP
    assert calls_of(msg) == [("get_current_weather", {"location": "Munich"})]
    assert msg.content == "After think\n\nSome suffix"


def test_prefilled_reasoning_that_only_mentions_a_call_stays_reasoning() -> None:
    """The pre-filled case the fix is for: before it, the opener ended the reasoning and the
    markup became a call (two calls, the reasoning cut at the opener)."""
    text = (
        "I could call it like "
        + SEATTLE_MARKUP
        + " but Munich was asked.\n</think>\n\n"
        + VLLM_HERMES_IN_THINK.split("</think>")[1]
    )
    msg = parse_every_way("hermes", text, HERMES_TOOLS, prefilled=True)
    assert msg.reasoning_content == "I could call it like " + SEATTLE_MARKUP + " but Munich was asked."
    assert calls_of(msg) == [("get_current_weather", {"location": "Munich"})]
    assert "<tool_call>" not in (msg.content or "")


def test_prefilled_reasoning_ended_by_a_call_without_a_closer_is_still_a_call() -> None:
    call = '<tool_call>\n{"name": "get_current_weather", "arguments": {"location": "Munich"}}\n</tool_call>'
    msg = parse_every_way("hermes", "Munich it is.\n" + call, HERMES_TOOLS, prefilled=True)
    assert msg.reasoning_content == "Munich it is."
    assert calls_of(msg) == [("get_current_weather", {"location": "Munich"})]
    assert msg.content is None


@pytest.mark.parametrize("fmt", ["qwen3-coder", "minimax-m2"])
def test_other_formats_keep_call_markup_in_prefilled_reasoning(fmt: str) -> None:
    call = {
        "qwen3-coder": q_call("get_current_weather", [("city", "Dallas"), ("state", "TX")]),
        "minimax-m2": '<minimax:tool_call>\n<invoke name="get_current_weather">\n'
        '<parameter name="city">Dallas</parameter>\n<parameter name="state">TX</parameter>\n'
        "</invoke>\n</minimax:tool_call>",
    }[fmt]
    text = f"Maybe {call} later.\n</think>\n\n{call}"
    msg = parse_every_way(fmt, text, QWEN_TOOLS, prefilled=True, every_boundary=False)
    assert msg.reasoning_content == f"Maybe {call} later."
    assert calls_of(msg) == [("get_current_weather", {"city": "Dallas", "state": "TX"})]


# -- qwen3-coder: a given parameter's markup inside a string value ------------------------


@pytest.mark.parametrize(
    "value",
    [VLLM_SINGLE, DOC_WITH_PARAMS, FILE_WITH_CALL_BODY, "<parameter=file_path>\n/etc/hosts"],
    ids=["whole-call", "unclosed-lines", "call-body", "given-name-first-line"],
)
def test_qwen3_coder_markup_of_a_given_parameter_in_a_string_is_text(value: str) -> None:
    text = "Writing it.\n" + q_call("write_file", [("file_path", "doc.md"), ("content", value)])
    msg = parse_every_way("qwen3-coder", text, QWEN_TOOLS, prefilled=False, every_boundary=len(text) < 400)
    assert calls_of(msg) == [("write_file", {"file_path": "doc.md", "content": value})]
    assert msg.content == "Writing it.\n"
    assert msg.warnings == []


def test_qwen3_coder_weather_given_params_then_literal_in_the_last_one() -> None:
    """vLLM's get_current_weather, the last string value naming ``city`` again: text."""
    unit = "fahrenheit\n<parameter=city>\nDallas"
    text = q_call("get_current_weather", [("city", "Dallas"), ("state", "TX"), ("unit", unit)])
    msg = parse_every_way("qwen3-coder", text, QWEN_TOOLS, prefilled=False)
    assert calls_of(msg) == [("get_current_weather", {"city": "Dallas", "state": "TX", "unit": unit})]


def test_qwen3_coder_unclosed_parameter_still_ends_at_a_new_declared_one() -> None:
    """vLLM's missing-closer case: a parameter not given yet still ends an unclosed value."""
    text = (
        "<tool_call>\n<function=get_current_weather>\n<parameter=city>\nDallas\n<parameter=state>\nTX\n"
        "</parameter>\n<parameter=unit>\nfahrenheit\n</parameter>\n</function>\n</tool_call>"
    )
    msg = parse_every_way("qwen3-coder", text, QWEN_TOOLS, prefilled=False)
    assert calls_of(msg) == [("get_current_weather", {"city": "Dallas", "state": "TX", "unit": "fahrenheit"})]


# -- through the gateway's chat endpoint --------------------------------------------------


def _template(name: str) -> str:
    return (resolve_source(None).path / "models/templates" / name).read_text()


def _chat(template: str, fmt: str, output: str, tools: list[dict[str, Any]], stream: bool) -> dict[str, Any]:
    props = {
        "chat_template": _template(template),
        "model_path": "/models/m.gguf",
        "default_generation_settings": {"n_ctx": 65536},
        "total_slots": 1,
    }
    engine = FakeEngine([list(output)], props=props)  # one character per token
    app = create_app(GatewayConfig(engine_url="fake://", model_format=fmt), engine)
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "go"}],
        "tools": tools,
        "stream": stream,
        "chat_template_kwargs": {"enable_thinking": True},  # QwQ's template pre-fills <think> then
    }

    async def go() -> dict[str, Any]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as http:
            r = await http.post("/v1/chat/completions", json=body)
            assert r.status_code == 200, r.text
            if not stream:
                msg: dict[str, Any] = r.json()["choices"][0]["message"]
                return {
                    "reasoning": msg.get("reasoning_content"),
                    "content": msg.get("content"),
                    "calls": [
                        (c["function"]["name"], json.loads(c["function"]["arguments"]))
                        for c in msg.get("tool_calls") or []
                    ],
                }
            reasoning, content = "", ""
            names: dict[int, str] = {}
            args: dict[int, str] = {}
            for line in r.text.splitlines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                for choice in json.loads(line[6:]).get("choices", []):
                    d = choice.get("delta", {})
                    reasoning += d.get("reasoning_content") or ""
                    content += d.get("content") or ""
                    for c in d.get("tool_calls") or []:
                        fn = c.get("function", {})
                        if fn.get("name"):
                            names[c["index"]] = fn["name"]
                        args[c["index"]] = args.get(c["index"], "") + (fn.get("arguments") or "")
            return {
                "reasoning": reasoning or None,
                "content": content or None,
                "calls": [(names[i], json.loads(args[i])) for i in sorted(names)],
            }

    result: dict[str, Any] = anyio.run(go)
    result["prompt"] = str(engine.bodies[-1]["prompt"])
    return result


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize(
    ("template", "text"),
    [
        ("Qwen-QwQ-32B.jinja", VLLM_HERMES_IN_THINK.removeprefix("<think>")),
        ("Qwen-Qwen3-0.6B.jinja", VLLM_HERMES_IN_THINK),
    ],
    ids=["prefilled", "opener-in-output"],
)
def test_gateway_chat_hermes_call_markup_in_reasoning(template: str, text: str, stream: bool) -> None:
    got = _chat(template, "hermes", text, HERMES_TOOLS, stream)
    assert got["prompt"].endswith("<think>\n") == (not text.startswith("<think>"))
    assert got["reasoning"] == "Okay, ..." + SEATTLE_MARKUP
    assert got["calls"] == [("get_current_weather", {"location": "Munich"})]
    assert got["content"] == "After think\n\nSome suffix"


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_gateway_chat_qwen3_coder_given_parameter_markup_in_a_value(stream: bool) -> None:
    text = q_call("write_file", [("file_path", "doc.md"), ("content", FILE_WITH_CALL_BODY)])
    got = _chat("Qwen3-Coder.jinja", "qwen3-coder", text, QWEN_TOOLS, stream)
    assert got["calls"] == [("write_file", {"file_path": "doc.md", "content": FILE_WITH_CALL_BODY})]
    assert got["content"] is None


# -- the same fixtures on the agent APIs (/v1/messages, /v1/responses), streamed and whole ---


def _agent_api(
    api: str, template: str, fmt: str, output: str, tools: list[dict[str, Any]], stream: bool
) -> dict[str, Any]:
    from splitserve.bench import Target
    from splitserve.bench._client import BenchClient
    from splitserve.bench._wire import wire_body

    props = {
        "chat_template": _template(template),
        "model_path": "/models/m.gguf",
        "default_generation_settings": {"n_ctx": 65536},
    }
    engine = FakeEngine([list(output)], props=props)
    app = create_app(GatewayConfig(engine_url="fake://", model_format=fmt), engine)
    messages = [{"role": "user", "content": "go"}]
    # thinking on, in each API's words: Messages' thinking field sets the template's switch
    kwargs: dict[str, Any] = (
        {"thinking": {"type": "adaptive"}} if api == "messages" else {"chat_template_kwargs": {"enable_thinking": True}}
    )

    async def go() -> dict[str, Any]:
        transport = httpx.ASGITransport(app=app)
        if stream:  # the bench's client reads either API's events (tested in tests/unit/bench/test_wire.py)
            target = Target(url="http://gw", model="m", api=api, ignore_eos=False)  # type: ignore[arg-type]
            async with BenchClient(target, transport=transport) as client:
                rec = await client.request(
                    "r", "x", {}, "", 4096, keep_text=None, messages=messages, tools=tools, body_extra=kwargs
                )
            assert rec.error is None, rec.error
            calls = [(c["name"], json.loads(c["arguments"])) for c in rec.tool_calls]
            return {"reasoning": rec.reasoning or None, "content": rec.text or None, "calls": calls}
        chat = {"model": "m", "messages": messages, "tools": tools, "max_tokens": 4096, "stream": False} | kwargs
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as http:
            r = await http.post(f"/v1/{api}", json=wire_body(api, chat))
        assert r.status_code == 200, r.text
        data = r.json()
        reasoning, content, calls = "", "", []
        if api == "messages":
            for b in data["content"]:
                reasoning += b.get("thinking", "") if b["type"] == "thinking" else ""
                content += b.get("text", "") if b["type"] == "text" else ""
                if b["type"] == "tool_use":
                    calls.append((b["name"], b["input"]))
        else:
            for item in data["output"]:
                if item["type"] == "reasoning":
                    reasoning += "".join(c["text"] for c in item.get("content") or [])
                elif item["type"] == "message":
                    content += "".join(c.get("text", "") for c in item["content"])
                elif item["type"] == "function_call":
                    calls.append((item["name"], json.loads(item["arguments"])))
        return {"reasoning": reasoning or None, "content": content or None, "calls": calls}

    result: dict[str, Any] = anyio.run(go)
    return result


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("api", ["messages", "responses"])
def test_agent_apis_hermes_call_markup_in_prefilled_reasoning(api: str, stream: bool) -> None:
    text = VLLM_HERMES_IN_THINK.removeprefix("<think>")
    got = _agent_api(api, "Qwen-QwQ-32B.jinja", "hermes", text, HERMES_TOOLS, stream)
    assert got["reasoning"] == "Okay, ..." + SEATTLE_MARKUP
    assert got["calls"] == [("get_current_weather", {"location": "Munich"})]
    assert got["content"] is not None and "Seattle" not in got["content"]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("api", ["messages", "responses"])
def test_agent_apis_qwen3_coder_given_parameter_markup_in_a_value(api: str, stream: bool) -> None:
    text = q_call("write_file", [("file_path", "doc.md"), ("content", FILE_WITH_CALL_BODY)])
    got = _agent_api(api, "Qwen3-Coder.jinja", "qwen3-coder", text, QWEN_TOOLS, stream)
    assert got["calls"] == [("write_file", {"file_path": "doc.md", "content": FILE_WITH_CALL_BODY})]
