"""Hostile input and cut-off output through the gateway in front of a real llama-server (SmolLM2).

- each class of hostile input that was a 500 is a 400 naming the field, and the gateway and
  engine serve normally after;
- a MiniMax-M3 tool call cut off by ``max_tokens`` (forced with the test hook, real token
  boundaries) leaves none of its markup in ``content``, streamed or not;
- the role-only chunk goes out with the first delta (after prefill), not before it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from helpers import bare_server, serve_app
from splitserve.engine import resolve_source
from splitserve.gateway import GatewayConfig, create_app

pytestmark = [pytest.mark.engine]

NS = "]<]minimax[>["
M3_CALL = (
    f"<mm:think>The user wants the weather.</mm:think>I'll check.{NS}<tool_call>\n"
    f'{NS}<invoke name="get_weather">\n{NS}<location>Paris{NS}</location>\n'
    f"{NS}<days>3{NS}</days>\n{NS}</invoke>\n{NS}</tool_call>"
)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"location": {"type": "string"}, "days": {"type": "integer"}},
            },
        },
    }
]
ASK = [{"role": "user", "content": "Weather in Paris?"}]
MARKUP = (NS, "]<]", "<tool_call", "<invoke", "mm:think", "minimax")


@pytest.fixture(scope="module")
def engine_url(engine, smollm2) -> Iterator[str]:  # type: ignore[no-untyped-def]
    with bare_server(engine, smollm2, "--parallel", "2", "-t", "1", ctx=4096) as url:
        yield url


@pytest.fixture(scope="module")
def m3(engine_url: str) -> Iterator[str]:
    template = (resolve_source(None).path / "models/templates/MiniMax-M3.jinja").read_text()
    cfg = GatewayConfig(engine_url=engine_url, chat_template=template, model_format="minimax-m3", test_hooks=True)
    with serve_app(create_app(cfg)) as url:
        yield url


@pytest.fixture(scope="module")
def plain(engine_url: str) -> Iterator[str]:
    with serve_app(create_app(GatewayConfig(engine_url=engine_url, test_hooks=True))) as url:
        yield url


def sse(text: str) -> list[dict]:  # type: ignore[type-arg]
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]


# -- 1 ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path,raw,param",
    [
        (
            "/v1/chat/completions",
            '{"messages":[{"role":"user","content":"x"}],"x":' + "[" * 50_000 + "]" * 50_000 + "}",
            None,
        ),
        ("/v1/completions", '{"prompt":"x","max_tokens":NaN}', "max_tokens"),
        ("/v1/chat/completions", '{"messages":[{"role":"user","content":"x"}],"top_k":NaN}', "top_k"),
        ("/v1/chat/completions", '{"messages":[{"role":"user","content":"x"}],"min_p":Infinity}', "min_p"),
        (
            "/v1/chat/completions",
            '{"messages":[{"role":"user","content":"x"}],"logit_bias":{"1":1e999}}',
            "logit_bias.1",
        ),
        ("/v1/chat/completions", '{"messages":[{"role":"user","content":"\\ud800"}]}', "messages.0.content"),
        ("/v1/chat/completions", '{"messages":[{"role":"user","content":"x"}],"stop":"\\ud800"}', "stop"),
        ("/v1/completions", '{"prompt":"\\ud800"}', "prompt"),
        (
            "/v1/chat/completions",
            '{"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"add_generation_prompt":false}}',
            "chat_template_kwargs.add_generation_prompt",
        ),
        (
            "/v1/chat/completions",
            '{"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"messages":[]}}',
            "chat_template_kwargs.messages",
        ),
        (
            "/v1/chat/completions",
            '{"messages":[{"role":"user","content":"x"}],"tool_choice":"required",'
            '"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object",'
            '"properties":{"a":{"type":"string"}},"required":[["a"]]}}}]}',
            "tools.0.function.parameters",
        ),
    ],
)
def test_hostile_input_is_400_naming_the_field(plain: str, path: str, raw: str, param: str | None) -> None:
    r = httpx.post(f"{plain}{path}", content=raw.encode(), headers={"content-type": "application/json"}, timeout=60)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and err["type"] == "invalid_request_error"
    ok = httpx.post(
        f"{plain}/v1/chat/completions",
        timeout=120,
        json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2},
    )
    assert ok.status_code == 200


# -- 11 -----------------------------------------------------------------------------------


@pytest.mark.parametrize("max_tokens", [14, 20, 26])
def test_m3_call_cut_off_by_max_tokens_leaks_no_markup(m3: str, max_tokens: int) -> None:
    body = {"messages": ASK, "tools": TOOLS, "max_tokens": max_tokens, "force_output": M3_CALL}
    whole = httpx.post(f"{m3}/v1/chat/completions", json=body, timeout=300).json()
    choice = whole["choices"][0]
    assert choice["finish_reason"] == "length" and not choice["message"].get("tool_calls")
    content = choice["message"]["content"] or ""
    assert not any(m in content for m in MARKUP), content
    assert "I'll check.".startswith(content) or content == "I'll check."
    streamed = httpx.post(f"{m3}/v1/chat/completions", json={**body, "stream": True}, timeout=300)
    chunks = sse(streamed.text)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    # (sampled, the two may cut at different tokens: each alone must be clean)
    assert not any(m in text for m in MARKUP), text
    assert "I'll check.".startswith(text) or text == "I'll check."
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert not any(c["choices"][0]["delta"].get("tool_calls") for c in chunks if c["choices"])


# -- 12 -----------------------------------------------------------------------------------


def test_role_chunk_is_sent_with_the_first_delta(plain: str) -> None:
    # The grammar forces the text, not its tokenization: the sampler may spell "Hello world" in up
    # to 11 tokens (one per character), so max_tokens leaves room for that; the grammar ends it.
    body = {
        "messages": [{"role": "user", "content": "word " * 600}],
        "max_tokens": 32,
        "stream": True,
        "force_output": "Hello world",
        "cache_prompt": False,
    }
    with httpx.stream("POST", f"{plain}/v1/chat/completions", json=body, timeout=300) as r:
        pieces = r.iter_raw()
        first = b""
        for piece in pieces:
            first += piece
            if b"\n\n" in first:
                break
        rest = b"".join(pieces)
    head = sse(first.decode())
    assert head[0]["choices"][0]["delta"]["role"] == "assistant"
    # the role came in the same write as the first content, after the engine's prefill
    assert len(head) >= 2 and head[1]["choices"][0]["delta"].get("content"), first
    chunks = head + sse(rest.decode())
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]) == "Hello world"
    assert sum("role" in c["choices"][0]["delta"] for c in chunks if c["choices"]) == 1
