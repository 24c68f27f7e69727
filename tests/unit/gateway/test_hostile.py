"""Hostile input to the gateway: each class that was a 5xx is a 400 naming the field; a cut-off
tool call leaves no markup in content; the role chunk waits for the first delta; and a
property-based fuzz of every route (strategies and fake engine from
``benchmarks/bench_gateway_fuzz.py``) finds no 5xx, OpenAI's error shape, a healthy gateway."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from hypothesis import HealthCheck, given, settings

from splitserve.chat import get_format, list_formats
from splitserve.gateway._chat import Turn
from splitserve.gateway._schemas import MAX_DEPTH, check_json, safe_json_loads
from splitserve.gateway._translate import Plan

_BENCH = Path(__file__).resolve().parents[3] / "benchmarks" / "bench_gateway_fuzz.py"
_spec = importlib.util.spec_from_file_location("bench_gateway_fuzz", _BENCH)
assert _spec is not None and _spec.loader is not None
fuzz = importlib.util.module_from_spec(_spec)
sys.modules["bench_gateway_fuzz"] = fuzz
_spec.loader.exec_module(fuzz)

MSG = '"messages":[{"role":"user","content":"hi"}]'


def post(path: str, raw: bytes, app: Any = None) -> httpx.Response:
    app = app or fuzz.in_process_app()

    async def go() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c:
            return await c.post(path, content=raw, headers={"content-type": "application/json"})

    return anyio.run(go)


def chat(raw: str) -> httpx.Response:
    return post("/v1/chat/completions", raw.encode())


def assert_400(r: httpx.Response, param: str | None) -> None:
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["param"] == param, err
    assert set(err) == {"message", "type", "param", "code"}


# -- 1. each class of hostile input is a 400 naming the field ------------------------------


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 5000, 100_000])
def test_deeply_nested_json_is_400(depth: int) -> None:
    r = chat("{" + MSG + ',"x":' + "[" * depth + "]" * depth + "}")
    assert r.status_code == 400 and "nested deeper" in r.json()["error"]["message"]
    r = post("/v1/completions", ('{"prompt":' + "[" * depth + "]" * depth + "}").encode())
    assert r.status_code == 400 and "nested deeper" in r.json()["error"]["message"]


def test_nesting_within_the_limit_is_accepted() -> None:
    shallow = "[" * (MAX_DEPTH - 2) + "]" * (MAX_DEPTH - 2)
    assert chat("{" + MSG + f',"unknown":{shallow}' + "}").status_code == 200


@pytest.mark.parametrize(
    "field,value,param",
    [
        ("top_k", "NaN", "top_k"),
        ("min_p", "Infinity", "min_p"),
        ("min_p", "-Infinity", "min_p"),
        ("logit_bias", '{"15":1e999}', "logit_bias.15"),
        ("logit_bias", "[[15, NaN]]", "logit_bias.0.1"),
        ("repeat_penalty", "1e400", "repeat_penalty"),
        ("temperature", "NaN", "temperature"),
        ("seed", "1" + "0" * 30, "seed"),
    ],
)
def test_non_finite_numbers_in_chat_are_400(field: str, value: str, param: str) -> None:
    assert_400(chat("{" + MSG + f',"{field}":{value}' + "}"), param)


@pytest.mark.parametrize(
    "body,param",
    [
        ('{"prompt":"x","max_tokens":NaN}', "max_tokens"),
        ('{"prompt":"x","temperature":Infinity}', "temperature"),
        ('{"prompt":"x","logit_bias":{"1":1e999}}', "logit_bias.1"),
    ],
)
def test_non_finite_numbers_in_completions_are_400(body: str, param: str) -> None:
    assert_400(post("/v1/completions", body.encode()), param)


@pytest.mark.parametrize(
    "raw,param",
    [
        ('{"messages":[{"role":"user","content":"a\\ud800b"}]}', "messages.0.content"),
        ('{"messages":[{"role":"user","content":[{"type":"text","text":"\\udfff"}]}]}', "messages.0.content.0.text"),
        ("{" + MSG + ',"stop":"\\ud800"}', "stop"),
        ("{" + MSG + ',"stop":["ok","\\ud83d"]}', "stop.1"),
    ],
)
def test_lone_surrogates_in_chat_are_400(raw: str, param: str) -> None:
    assert_400(chat(raw), param)


def test_lone_surrogates_in_prompt_are_400_and_pairs_are_text() -> None:
    assert_400(post("/v1/completions", b'{"prompt":"\\ud800"}'), "prompt")
    assert_400(post("/v1/completions", b'{"prompt":["a","\\udc00x"]}'), "prompt.1")
    assert post("/v1/completions", b'{"prompt":"\\ud83d\\ude00"}').status_code == 200  # a pair: 😀
    assert chat('{"messages":[{"role":"user","content":"\\ud83d\\ude00"}]}').status_code == 200


@pytest.mark.parametrize("key", ["add_generation_prompt", "messages", "tools", "template"])
def test_chat_template_kwargs_colliding_with_the_renderer_are_400(key: str) -> None:
    assert_400(chat("{" + MSG + f',"chat_template_kwargs":{{"{key}":[]}}' + "}"), f"chat_template_kwargs.{key}")


def test_chat_template_kwargs_that_are_template_variables_still_work() -> None:
    assert chat("{" + MSG + ',"chat_template_kwargs":{"enable_thinking":false,"x":1}}').status_code == 200


def test_unhashable_required_entry_with_tool_choice_required_is_400() -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "f",
                "parameters": {"type": "object", "properties": {"a": {"type": "string"}}, "required": [["a"]]},
            },
        }
    ]
    r = chat("{" + MSG + f',"tools":{json.dumps(tools)},"tool_choice":"required"' + "}")
    assert_400(r, "tools.0.function.parameters")
    assert "required" in r.json()["error"]["message"]
    nested = [
        {
            "type": "function",
            "function": {
                "name": "f",
                "parameters": {"type": "object", "properties": {"o": {"type": "object", "required": [{"x": 1}]}}},
            },
        }
    ]
    assert_400(
        chat("{" + MSG + f',"tools":{json.dumps(nested)},"tool_choice":"required"' + "}"), "tools.0.function.parameters"
    )


def test_check_json_names_the_path_and_safe_loads_refuses() -> None:
    with pytest.raises(Exception) as err:
        check_json({"a": [1, {"b": float("nan")}]})
    assert getattr(err.value, "param", None) == "a.1.b"
    with pytest.raises(Exception) as err:
        safe_json_loads(b'{"\\ud800": 1}')
    assert getattr(err.value, "status", None) == 400
    assert safe_json_loads(b'{"a": [1, 2.5, "\\u00e9"]}') == {"a": [1, 2.5, "é"]}


# -- 11. a call cut off by the end of the output leaves no markup in content ------------------


def _turn(fmt: Any) -> Turn:
    plan = Plan(
        body={},
        prompt="",
        prefilled=False,
        tools=None,
        tool_choice="auto",
        named_tool=None,
        parallel=True,
        include_usage=False,
        format=fmt,
    )
    return Turn(plan, plan.parser())


def test_m3_call_cut_by_max_tokens_leaks_no_markup() -> None:
    turn = _turn(get_format("minimax-m3"))
    turn.feed("I'll check.]<]minimax[>[<tool_call")
    turn.finish()
    assert "".join(turn.content) == "I'll check."
    assert not turn.tool_calls() and any("cut off" in w for w in turn.warnings)


@pytest.mark.parametrize("fmt", [f for f in list_formats() if f.name != "llama3-json"], ids=lambda f: f.name)
def test_no_format_leaks_a_cut_off_call_into_content(fmt: Any) -> None:
    text = "Some text. " + fmt.example
    for cut in range(len("Some text. ") + 1, len(text)):
        turn = _turn(fmt)
        for i in range(0, cut, 3):  # streamed in pieces, as tokens come
            turn.feed(text[i : min(i + 3, cut)])
        turn.finish()
        content = "".join(turn.content)
        assert "Some text.".startswith(content.rstrip()) or content.rstrip() == "Some text.", (cut, content)
    whole = _turn(fmt)
    whole.feed(text)
    whole.finish()
    assert len(whole.tool_calls()) >= 1  # a complete call is still a call


def test_plain_text_ending_like_no_marker_is_kept() -> None:
    turn = _turn(get_format("hermes"))
    turn.feed("Use a < b and x > y.")
    turn.finish()
    assert "".join(turn.content) == "Use a < b and x > y."


# -- 12. the role chunk goes out with the first delta, not before prefill ---------------------


def _asgi_stream(app: Any, body: dict[str, Any]) -> list[bytes]:
    """The body writes of one streamed chat answer, as the ASGI server would send them."""
    sent: list[bytes] = []
    raw = json.dumps(body).encode()

    async def go() -> None:
        given_body = False

        async def receive() -> dict[str, Any]:
            nonlocal given_body
            if not given_body:
                given_body = True
                return {"type": "http.request", "body": raw, "more_body": False}
            await anyio.sleep(3600)
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.body" and message.get("body"):
                sent.append(message["body"])

        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": "/v1/chat/completions",
            "raw_path": b"/v1/chat/completions",
            "query_string": b"",
            "root_path": "",
            "headers": [(b"content-type", b"application/json")],
            "client": ("127.0.0.1", 1),
            "server": ("gw", 80),
        }
        with anyio.fail_after(30):
            await app(scope, receive, send)

    anyio.run(go)
    return sent


def test_role_chunk_waits_for_the_first_delta() -> None:
    writes = _asgi_stream(fuzz.in_process_app(), {"messages": [{"role": "user", "content": "x"}], "stream": True})
    first = writes[0].decode()
    assert '"role":"assistant"' in first and '"content":"' in first.split("\n\n")[1]
    assert all('"role"' not in w.decode() for w in writes[1:])
    assert writes[-1].decode().endswith("data: [DONE]\n\n")


def test_role_chunk_still_comes_first_when_nothing_is_generated() -> None:
    app = fuzz.in_process_app()
    engine = app.state.engine
    engine.OUTPUTS = ("",)
    writes = b"".join(_asgi_stream(app, {"messages": [{"role": "user", "content": "x"}], "stream": True})).decode()
    chunks = [json.loads(c[6:]) for c in writes.split("\n\n") if c.startswith("data: {")]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


# -- the fuzz ---------------------------------------------------------------------------------

_APP = fuzz.in_process_app()


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(fuzz.cases)
def test_fuzzed_requests_get_no_5xx_and_openai_errors(case: Any) -> None:
    async def go() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=_APP), base_url="http://gw") as c:
            return await c.request(case.method, case.path, content=case.body, headers=case.headers)

    r = anyio.run(go)
    # each endpoint's own error shape (OpenAI's; Anthropic's on /v1/messages)
    assert not fuzz.checker(case)(r.status_code, r.content, "text/event-stream" in r.headers.get("content-type", ""))


def test_gateway_is_healthy_after_the_fuzz() -> None:
    r = post("/v1/chat/completions", json.dumps(fuzz.NORMAL).encode(), app=_APP)
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["role"] == "assistant"
    limiter = _APP.state.gateway.limiter
    assert limiter.running == 0 and limiter.queued == 0  # every fuzzed request gave its slot back
    wrong = post("/v1/models", b"", app=_APP)  # POST: 405 in OpenAI's shape
    assert wrong.status_code == 405 and "error" in wrong.json()
