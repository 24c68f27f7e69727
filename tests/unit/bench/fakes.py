"""A fake OpenAI-compatible streaming endpoint for unit tests of the bench's pure logic.

It counts words as tokens, keeps a prompt cache keyed by the whole prompt (so a
repeated prompt reports all its tokens cached, a new one only the 5-token
"template prefix") and streams ``max_tokens`` one-word chunks.
"""

from __future__ import annotations

import json
import re
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
            return httpx.Response(
                200,
                json={"total_slots": self.slots, "build_info": "fake", "default_generation_settings": {"n_ctx": 4096}},
            )
        body = json.loads(request.content)
        self.bodies.append(body)
        text = body["messages"][0]["content"] if "messages" in body else body["prompt"]
        n_prompt = len(text.split()) + PREFIX
        cached = n_prompt - 1 if text in self.seen else PREFIX
        self.seen.add(text)
        n = body["max_tokens"]
        words = (self.answer.split() if self.answer is not None else ["w"] * n)[:n]
        events: list[dict[str, Any]] = [
            {"choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]}
        ]
        if self.reasoning:
            events += [{"choices": [{"index": 0, "delta": {"reasoning_content": "think "}}]}] * n
            words = []
        events += [{"choices": [{"index": 0, "delta": {"content": w + " "}}]} for w in words]
        finish = "length" if self.reasoning or len(words) >= n else "stop"
        events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        n_out = n if self.reasoning else len(words)
        events.append(
            {
                "choices": [],
                "usage": {
                    "prompt_tokens": n_prompt,
                    "completion_tokens": n_out,
                    "prompt_tokens_details": {"cached_tokens": cached},
                },
                "timings": {
                    "cache_n": cached,
                    "prompt_n": n_prompt - cached,
                    "prompt_ms": 10.0,
                    "predicted_n": n_out,
                    "predicted_ms": 20.0,
                },
            }
        )
        sse = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
        return httpx.Response(200, content=sse.encode(), headers={"content-type": "text/event-stream"})

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handler)


def _prompt_words(body: dict[str, Any]) -> list[str]:
    """Every message's text (tool calls included) as one word list, as a template would render it."""
    words: list[str] = [tool["function"]["name"] for tool in body.get("tools") or []]  # tools lead, as in templates
    for m in body.get("messages") or []:
        words.append(f"<{m.get('role')}>")
        content = m.get("content")
        if isinstance(content, str):
            words += content.split()
        for call in m.get("tool_calls") or []:
            words += [call["function"]["name"], *call["function"]["arguments"].split()]
    return words


class WorkloadFake:
    """A chat endpoint for the workload benches.

    Prompt cache: a request's cached tokens are the template prefix plus its longest common word
    prefix with any earlier prompt (so replayed agent turns are mostly cached).  Answers: the
    last user message's first code block, word by word (a perfect copier), or ``"ok"`` words when
    it has none; with ``calls`` set, agent turns answer with a tool call.  ``draft`` adds
    llama.cpp's ``draft_n`` / ``draft_n_accepted``; ``diverge_after`` replaces the answer's words
    from that word on (a speculative server that did not reproduce greedy output).
    """

    def __init__(
        self, draft: tuple[int, int] | None = None, diverge_after: int | None = None, calls: bool = False
    ) -> None:
        self.prompts: list[list[str]] = []
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.draft = draft
        self.diverge_after = diverge_after
        self.calls = calls

    def answer(self, body: dict[str, Any]) -> list[str]:
        users = [m for m in body.get("messages") or [] if m.get("role") == "user"]
        text = users[-1]["content"] if users and isinstance(users[-1].get("content"), str) else ""
        if "```" in text:
            block = "```" + text.split("```", 2)[1] + "```"
            return re.findall(r"\s*\S+", block)  # pieces that keep the whitespace: a faithful copy
        return [" ok"] * 6

    def handler(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "fake-model"}]})
        if request.url.path == "/props":
            return httpx.Response(
                200, json={"total_slots": 1, "build_info": "fake", "default_generation_settings": {"n_ctx": 8192}}
            )
        body = json.loads(request.content)
        self.bodies.append(body)
        self.headers.append(dict(request.headers))
        if "messages" not in body:
            body["messages"] = [{"role": "user", "content": body["prompt"]}]
        words = _prompt_words(body)
        best = 0
        for seen in self.prompts:
            n = 0
            for a, b in zip(seen, words):
                if a != b:
                    break
                n += 1
            best = max(best, n)
        self.prompts.append(words)
        n_prompt = len(words) + PREFIX
        cached = min(n_prompt - 1, PREFIX + best)
        n = body["max_tokens"]
        out = self.answer(body)
        if body.get("ignore_eos"):
            out = (out + [" pad"] * n)[:n]
        out = out[:n]
        if self.diverge_after is not None:
            out = out[: self.diverge_after] + [" DIFFERENT"] * (len(out) - self.diverge_after)
        events: list[dict[str, Any]] = [{"choices": [{"index": 0, "delta": {"role": "assistant"}}]}]
        agent = bool(body.get("tools")) and self.calls
        if agent:
            events.append(
                {
                    "choices": [
                        {
                            "index": 0,
                            "delta": {
                                "tool_calls": [
                                    {
                                        "index": 0,
                                        "id": "c1",
                                        "type": "function",
                                        "function": {"name": "read_file", "arguments": ""},
                                    }
                                ]
                            },
                        }
                    ]
                }
            )
            events += [
                {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": part}}]}}]}
                for part in ('{"path": ', '"a.py"}')
            ]
            n_out = 3
        else:
            events += [{"choices": [{"index": 0, "delta": {"content": w}}]} for w in out]
            n_out = len(out)
        finish = "tool_calls" if agent else ("length" if n_out >= n else "stop")
        events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        timings: dict[str, Any] = {
            "cache_n": cached,
            "prompt_n": n_prompt - cached,
            "prompt_ms": 10.0,
            "predicted_n": n_out,
            "predicted_ms": 20.0 if self.draft is None else 8.0,
        }
        if self.draft is not None:
            timings |= {"draft_n": self.draft[0], "draft_n_accepted": self.draft[1]}
        events.append(
            {
                "choices": [],
                "usage": {
                    "prompt_tokens": n_prompt,
                    "completion_tokens": n_out,
                    "prompt_tokens_details": {"cached_tokens": cached},
                },
                "timings": timings,
            }
        )
        sse = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
        return httpx.Response(200, content=sse.encode(), headers={"content-type": "text/event-stream"})

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handler)
