"""An agent loop through the gateway stays in the engine's prompt cache (real engine, SmolLM2).

The client drops ``reasoning_content`` from the assistant turns it sends back, as the OpenAI
SDK does; MiniMax-M3's template renders reasoning in every assistant turn, so without the
gateway's reasoning memory the history differs from what the model generated and the engine
re-reads it from there. The model's turns are forced (``force_output``) so every run is the
same loop.
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from test_gateway import NS, TOOLS, engine_url, running_gateway  # noqa: F401 - fixture

from splitserve.engine import resolve_source
from splitserve.gateway import GatewayConfig

pytestmark = [pytest.mark.engine]

REASONING = (
    "The user wants the weather in several cities. I will look each one up in turn, "
    "then compare the forecasts and answer with the warmest city and its temperature."
)


def forced(city: str) -> str:
    """What M3 writes, laid out exactly as its template renders an assistant turn."""
    return (
        f"<mm:think>{REASONING} Next: {city}.</mm:think>{NS}<tool_call>\n"
        f'{NS}<invoke name="get_weather">{NS}<location>{city}{NS}</location>'
        f"{NS}</invoke>\n{NS}</tool_call>"
    )


@contextmanager
def m3_gateway(engine_url: str, restore: bool, affinity: bool = True) -> Iterator[str]:  # noqa: F811
    template = (resolve_source(None).path / "models/templates/MiniMax-M3.jinja").read_text()
    cfg = GatewayConfig(
        engine_url=engine_url,
        chat_template=template,
        model_format="minimax-m3",
        test_hooks=True,
        restore_reasoning=restore,
        slot_affinity=affinity,
    )
    with running_gateway(cfg) as url:
        yield url


def loop(url: str, session: str, cities: list[str], ask: str = "Which city is warmest?") -> list[dict[str, Any]]:
    """Each turn: the model calls get_weather; the client sends back what an SDK would."""
    history: list[dict[str, Any]] = [{"role": "user", "content": ask}]
    turns = []
    for i, city in enumerate(cities):
        r = httpx.post(
            f"{url}/v1/chat/completions",
            headers={"X-Session-Id": session},
            timeout=300,
            json={
                "messages": history,
                "tools": TOOLS,
                "max_tokens": 400,
                "force_output": forced(city),
                "stream": i % 2 == 1,
                "stream_options": {"include_usage": True},
            },
        )
        assert r.status_code == 200, r.text
        msg, usage = _read(r)
        assert msg["tool_calls"] and msg["reasoning_content"].startswith("The user wants")
        turns.append(usage)
        history.append(
            {
                "role": "assistant",
                "content": msg.get("content"),  # no reasoning
                "tool_calls": msg["tool_calls"],
            }
        )
        history.append(
            {
                "role": "tool",
                "tool_call_id": msg["tool_calls"][0]["id"],
                "content": json.dumps({"city": city, "celsius": 20 + i}),
            }
        )
    return turns


def _read(r: httpx.Response) -> tuple[dict[str, Any], dict[str, Any]]:
    if not r.headers["content-type"].startswith("text/event-stream"):
        body = r.json()
        return body["choices"][0]["message"], body["usage"]
    msg: dict[str, Any] = {"content": "", "reasoning_content": "", "tool_calls": []}
    usage: dict[str, Any] = {}
    for line in r.text.splitlines():
        if not line.startswith("data: {"):
            continue
        chunk = json.loads(line[6:])
        usage = chunk.get("usage") or usage
        for choice in chunk.get("choices") or []:
            d = choice["delta"]
            msg["content"] += d.get("content") or ""
            msg["reasoning_content"] += d.get("reasoning_content") or ""
            for tc in d.get("tool_calls") or []:
                if tc.get("id"):
                    msg["tool_calls"].append(
                        {
                            "id": tc["id"],
                            "type": "function",
                            "function": {"name": tc["function"]["name"], "arguments": ""},
                        }
                    )
                msg["tool_calls"][tc["index"]]["function"]["arguments"] += tc["function"].get("arguments") or ""
    return msg, usage


def test_the_reasoning_is_put_back_and_the_history_stays_cached(engine_url: str) -> None:  # noqa: F811
    growth: dict[bool, list[int]] = {}
    for restore in (True, False):
        with m3_gateway(engine_url, restore) as url:
            turns = loop(url, f"s-{restore}", ["Paris", "Oslo", "Lima", "Rome"])
        prompt = [t["prompt_tokens"] for t in turns]
        missed = [t["prompt_tokens"] - t["prompt_tokens_details"]["cached_tokens"] for t in turns]
        # each turn reads again only its last assistant turn and the new tool result: what
        # the earlier turns rendered is byte-stable and stays in the slot
        assert all(m < 200 for m in missed[1:]), (restore, missed)
        growth[restore] = [b - a for a, b in itertools.pairwise(prompt)]
    # with the memory every assistant turn is rendered with the reasoning the model wrote for
    # it (about 40 tokens here); without it, as the client sent it: without
    assert all(r - n > 25 for r, n in zip(growth[True], growth[False])), growth


def test_two_sessions_keep_their_own_slots(engine_url: str) -> None:  # noqa: F811
    missed: dict[bool, int] = {}
    for affinity in (False, True):
        ask = f"Which city is warmest? (run {' '.join(uuid.uuid4().hex for _ in range(4))})"
        with m3_gateway(engine_url, True, affinity) as url:
            loop(url, "alice", ["Paris"], ask)
            # the same prompt: llama-server alone serves bob from alice's slot (the most similar)
            (b,) = loop(url, "bob", ["Paris"], ask)
            slots = httpx.get(f"{url}/slots", timeout=30).json()
            (again,) = loop(url, "alice", ["Paris"], ask)
        # what bob found cached beyond the system prompt and tools every M3 prompt starts with
        missed[affinity] = b["prompt_tokens"] - b["prompt_tokens_details"]["cached_tokens"]
        if affinity:  # bob took the other slot; alice's still holds her conversation
            assert all(x["n_prompt_tokens"] > b["prompt_tokens"] for x in slots), slots
            assert again["prompt_tokens_details"]["cached_tokens"] >= again["prompt_tokens"] - 2
    assert missed[False] <= 2 and missed[True] > 50, missed  # bob re-read his own question only
