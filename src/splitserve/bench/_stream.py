"""Timing an OpenAI-style SSE stream, with no I/O.

:class:`SSEDecoder` turns lines into JSON payloads; :class:`StreamTimer` is fed
each payload with its arrival time and keeps the raw times that the different
"time to first token" definitions need: first chunk of any kind (a role-only
chunk counts, as in vLLM's bench), first chunk with content, first chunk with
reasoning, first chunk with anything generated, and every text-bearing chunk
after that.  Token counts are *not* taken from the chunks (one chunk may hold
several tokens); they come from the server's ``usage`` or ``timings``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

DONE = object()
"""Returned by :meth:`SSEDecoder.feed_line` for ``data: [DONE]``."""


class SSEDecoder:
    """Decodes ``data:`` lines of a server-sent event stream into JSON objects."""

    def __init__(self) -> None:
        self._data: list[str] = []

    def feed_line(self, line: str) -> Any:
        """One line without its newline; returns a payload, :data:`DONE` or ``None``."""
        line = line.rstrip("\r")
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            # Most servers send one data line per event followed by a blank line;
            # dispatch at once so the arrival time is the line's, not the blank's.
            if value.strip() == "[DONE]":
                self._data.clear()
                return DONE
            try:
                obj = json.loads(value)
            except json.JSONDecodeError:
                self._data.append(value)  # a payload split over several data lines
                return None
            self._data.clear()
            return obj
        return None

    def _dispatch(self) -> Any:
        if not self._data:
            return None
        text = "\n".join(self._data)
        self._data.clear()
        if text.strip() == "[DONE]":
            return DONE
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return {"error": {"message": f"unparseable stream event: {text[:120]}"}}


@dataclass
class StreamTrace:
    """What one streamed response looked like, times in seconds from the send."""

    first_chunk: float | None = None
    first_token: float | None = None
    first_content: float | None = None
    first_reasoning: float | None = None
    token_times: list[float] = field(default_factory=list)
    n_chunks: int = 0
    content: str = ""
    reasoning: str = ""
    tool_call_chunks: int = 0
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    """The tool calls the deltas built, in index order: ``{"id", "name", "arguments"}``."""
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    timings: dict[str, Any] | None = None
    error: str | None = None
    end: float | None = None


class StreamTimer:
    """Feed it every payload of a chat or text completion stream with its arrival time."""

    def __init__(self) -> None:
        self.trace = StreamTrace()
        self._content: list[str] = []
        self._reasoning: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}

    def _add_calls(self, deltas: Any) -> None:
        if not isinstance(deltas, list):
            return
        for pos, d in enumerate(deltas):
            if not isinstance(d, dict):
                continue
            index = d.get("index", pos)
            call = self._calls.setdefault(
                index if isinstance(index, int) else pos, {"id": None, "name": "", "arguments": ""}
            )
            if d.get("id"):
                call["id"] = str(d["id"])
            fn = d.get("function")
            if isinstance(fn, dict):
                if isinstance(fn.get("name"), str):
                    call["name"] += fn["name"]
                if isinstance(fn.get("arguments"), str):
                    call["arguments"] += fn["arguments"]

    def feed(self, payload: dict[str, Any], t: float) -> None:
        tr = self.trace
        if not isinstance(payload, dict):
            return
        if "error" in payload and not payload.get("choices"):
            err = payload["error"]
            tr.error = str(err.get("message", err)) if isinstance(err, dict) else str(err)
            return
        tr.n_chunks += 1
        if tr.first_chunk is None:
            tr.first_chunk = t
        if isinstance(payload.get("usage"), dict):
            tr.usage = payload["usage"]
        if isinstance(payload.get("timings"), dict):
            tr.timings = payload["timings"]
        for choice in payload.get("choices") or []:
            if not isinstance(choice, dict):
                continue
            if choice.get("finish_reason"):
                tr.finish_reason = str(choice["finish_reason"])
            delta = choice.get("delta")
            if not isinstance(delta, dict):
                delta = {}
            content = delta.get("content")
            if content is None and isinstance(choice.get("text"), str):
                content = choice["text"]  # /v1/completions
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            tools = delta.get("tool_calls")
            generated = False
            if isinstance(content, str) and content:
                self._content.append(content)
                if tr.first_content is None:
                    tr.first_content = t
                generated = True
            if isinstance(reasoning, str) and reasoning:
                self._reasoning.append(reasoning)
                if tr.first_reasoning is None:
                    tr.first_reasoning = t
                generated = True
            if tools:
                tr.tool_call_chunks += 1
                self._add_calls(tools)
                generated = True
            if generated:
                if tr.first_token is None:
                    tr.first_token = t
                tr.token_times.append(t)

    def finish(self, t_end: float) -> StreamTrace:
        tr = self.trace
        tr.end = t_end
        tr.content = "".join(self._content)
        tr.reasoning = "".join(self._reasoning)
        tr.tool_calls = [self._calls[i] for i in sorted(self._calls)]
        return tr


def token_counts(trace: StreamTrace) -> tuple[int | None, int | None, int | None, str]:
    """(prompt, completion, cached, source) from the server's usage, else its timings."""
    usage = trace.usage or {}
    timings = trace.timings or {}
    cached: int | None = None
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict) and details.get("cached_tokens") is not None:
        cached = int(details["cached_tokens"])
    elif timings.get("cache_n") is not None:
        cached = int(timings["cache_n"])
    if usage.get("prompt_tokens") is not None and usage.get("completion_tokens") is not None:
        return int(usage["prompt_tokens"]), int(usage["completion_tokens"]), cached, "usage"
    if timings.get("prompt_n") is not None and timings.get("predicted_n") is not None:
        prompt = int(timings["prompt_n"]) + int(timings.get("cache_n") or 0)
        return prompt, int(timings["predicted_n"]), cached, "timings"
    return None, None, cached, "none"
