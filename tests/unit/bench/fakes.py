"""A fake OpenAI-compatible streaming endpoint for unit tests of the bench's pure logic.

It counts words as tokens, keeps a prompt cache keyed by the whole prompt (so a
repeated prompt reports all its tokens cached, a new one only the 5-token
"template prefix") and streams ``max_tokens`` one-word chunks.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

PREFIX = 5


class FakeServer:
    def __init__(self, answer: str | None = None, slots: int = 1, reasoning: bool = False) -> None:
        self.seen: set[str] = set()
        self.bodies: list[dict[str, Any]] = []
        self.answer = answer
        self.slots = slots
        self.reasoning = reasoning

    def handler(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "fake-model"}]})
        if request.url.path == "/props":
            return httpx.Response(200, json={"total_slots": self.slots, "build_info": "fake",
                                             "default_generation_settings": {"n_ctx": 4096}})
        body = json.loads(request.content)
        self.bodies.append(body)
        text = body["messages"][0]["content"] if "messages" in body else body["prompt"]
        n_prompt = len(text.split()) + PREFIX
        cached = n_prompt - 1 if text in self.seen else PREFIX
        self.seen.add(text)
        n = body["max_tokens"]
        words = (self.answer.split() if self.answer is not None else ["w"] * n)[:n]
        events = [{"choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]}]
        if self.reasoning:
            events += [{"choices": [{"index": 0, "delta": {"reasoning_content": "think "}}]}] * n
            words = []
        events += [{"choices": [{"index": 0, "delta": {"content": w + " "}}]} for w in words]
        finish = "length" if self.reasoning or len(words) >= n else "stop"
        events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        n_out = n if self.reasoning else len(words)
        events.append({"choices": [], "usage": {"prompt_tokens": n_prompt, "completion_tokens": n_out,
                                                "prompt_tokens_details": {"cached_tokens": cached}},
                       "timings": {"cache_n": cached, "prompt_n": n_prompt - cached, "prompt_ms": 10.0,
                                   "predicted_n": n_out, "predicted_ms": 20.0}})
        sse = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
        return httpx.Response(200, content=sse.encode(), headers={"content-type": "text/event-stream"})

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handler)
