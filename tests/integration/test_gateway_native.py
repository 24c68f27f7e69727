"""The gateway is a faithful front for llama-server: the same prompt tokens (BOS handled as the
engine does), the same greedy text, and llama-server's native endpoints passed through."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from test_gateway import engine_url, running_gateway  # noqa: F401 - fixture

from splitserve.gateway import GatewayConfig, KeyRing

pytestmark = [pytest.mark.engine]

MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name three colors."}]


@pytest.fixture(scope="module")
def gateway(engine_url: str) -> Iterator[str]:  # noqa: F811
    with running_gateway(GatewayConfig(engine_url=engine_url, keys=KeyRing.build("sk-native", None))) as url:
        yield url


AUTH = {"Authorization": "Bearer sk-native"}


def greedy_chat(url: str, headers: dict[str, str] | None = None) -> dict:  # type: ignore[type-arg]
    r = httpx.post(
        f"{url}/v1/chat/completions",
        headers=headers or {},
        timeout=120,
        json={"messages": MESSAGES, "max_tokens": 16, "temperature": 0, "seed": 1, "cache_prompt": False},
    )
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def test_same_prompt_tokens_and_greedy_text_as_llama_server(engine_url: str, gateway: str) -> None:  # noqa: F811
    # SmolLM2's BOS is <|im_start|> but its tokenizer does not add one: the gateway must keep the
    # template's, or the prompt loses its first token and the reply changes.
    direct = greedy_chat(engine_url)
    via = greedy_chat(gateway, AUTH)
    assert via["usage"]["prompt_tokens"] == direct["usage"]["prompt_tokens"]
    assert via["choices"][0]["message"]["content"] == direct["choices"][0]["message"]["content"]


def test_native_endpoints_pass_through_under_auth(engine_url: str, gateway: str) -> None:  # noqa: F811
    body = {"content": "Hello world", "add_special": False}
    assert httpx.post(f"{gateway}/tokenize", json=body, timeout=30).status_code == 401
    tokens = httpx.post(f"{gateway}/tokenize", json=body, headers=AUTH, timeout=30)
    assert tokens.status_code == 200
    assert tokens.json() == httpx.post(f"{engine_url}/tokenize", json=body, timeout=30).json()
    text = httpx.post(f"{gateway}/detokenize", json={"tokens": tokens.json()["tokens"]}, headers=AUTH, timeout=30)
    assert text.json()["content"].strip() == "Hello world"

    props = httpx.get(f"{gateway}/props", headers=AUTH, timeout=30)
    assert props.status_code == 200 and "chat_template" in props.json()
    slots = httpx.get(f"{gateway}/slots", headers=AUTH, timeout=30)
    assert slots.status_code == 200 and slots.json()[0]["n_ctx"] == 2048  # 4096 over 2 slots

    done = httpx.post(
        f"{gateway}/completion",
        headers=AUTH,
        timeout=120,
        json={"prompt": "The capital of France is", "n_predict": 4, "temperature": 0},
    )
    assert done.status_code == 200
    ref = httpx.post(
        f"{engine_url}/completion",
        timeout=120,
        json={"prompt": "The capital of France is", "n_predict": 4, "temperature": 0},
    )
    assert done.json()["content"] == ref.json()["content"]

    events = []
    with httpx.stream(
        "POST",
        f"{gateway}/completion",
        headers=AUTH,
        timeout=120,
        json={"prompt": "Hi", "n_predict": 3, "stream": True},
    ) as resp:
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(line[6:]) for line in resp.iter_lines() if line.startswith("data: ")]
    assert events and events[-1]["stop"] is True

    # The engine's own errors come back as the engine gave them.
    bad = httpx.post(f"{gateway}/completion", headers=AUTH, timeout=30, json={"n_predict": 1})
    assert bad.status_code == 400
    assert bad.status_code == httpx.post(f"{engine_url}/completion", timeout=30, json={"n_predict": 1}).status_code
    # A path neither the gateway nor llama-server has stays a 404 in OpenAI's error shape.
    missing = httpx.get(f"{gateway}/v1/nothing", headers=AUTH, timeout=30)
    assert missing.status_code == 404 and missing.json()["error"]["message"].startswith("no such endpoint")
