"""The agent wire APIs on the client side, with no I/O: a chat request body in the Anthropic
Messages or OpenAI Responses shape, and their streamed events read back as chat chunks.

``bench speed --api messages|responses`` (and the eval) measure the path an agent takes:
Claude Code speaks ``POST /v1/messages``, Codex ``POST /v1/responses``. The bench builds
its requests as chat bodies (messages, tools, the engine's extra fields); :func:`to_messages`
and :func:`to_responses` rewrite one, and :class:`MessagesChunks` / :class:`ResponsesChunks`
turn each event of the answer's stream into the chat chunk :class:`~._stream.StreamTimer`
reads (``choices[0].delta`` with ``content`` / ``reasoning_content`` / ``tool_calls``, a
``finish_reason``, a ``usage`` with ``prompt_tokens_details.cached_tokens``), or ``DONE`` at the
stream's terminal event. Formats: agent-apis.md sections 1 and 3.
"""

from __future__ import annotations

import json
from typing import Any

from ._stream import DONE

WIRE_APIS = ("messages", "responses")
PATHS = {"chat": "/chat/completions", "completions": "/completions", "messages": "/messages", "responses": "/responses"}
ANTHROPIC_VERSION = "2023-06-01"

# chat body keys the rewrites handle themselves; any other key (llama.cpp's ignore_eos,
# cache_prompt, seed, ...) is passed on as it is
_CHAT_KEYS = {"model", "messages", "tools", "max_tokens", "stream", "stream_options", "temperature", "top_p", "stop"}

_STOP_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "tool_use": "tool_calls"}


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def _args(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw) if raw.strip() else {}
        except ValueError:
            return {}
    return raw if isinstance(raw, dict) else {}


def _passthrough(chat: dict[str, Any], out: dict[str, Any]) -> dict[str, Any]:
    for key, value in chat.items():
        if key not in _CHAT_KEYS and key not in out:
            out[key] = value
    return out


# -- requests ---------------------------------------------------------------------------------


def to_messages(chat: dict[str, Any]) -> dict[str, Any]:
    """A chat request body as an Anthropic Messages one: system messages -> ``system``,
    assistant tool calls -> ``tool_use`` blocks, ``tool`` messages -> ``tool_result`` blocks in
    a user turn, tools -> ``{name, description, input_schema}``."""
    system: list[str] = []
    messages: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].extend(blocks)  # consecutive turns of one role merge
        else:
            messages.append({"role": role, "content": blocks})

    for m in chat.get("messages") or []:
        role = m.get("role")
        if role in ("system", "developer"):
            system.append(_text(m.get("content")))
        elif role == "tool":
            add(
                "user",
                [
                    {
                        "type": "tool_result",
                        "tool_use_id": str(m.get("tool_call_id") or ""),
                        "content": _text(m.get("content")),
                    }
                ],
            )
        elif role == "assistant":
            blocks: list[dict[str, Any]] = []
            if m.get("reasoning_content"):
                blocks.append({"type": "thinking", "thinking": str(m["reasoning_content"]), "signature": ""})
            if _text(m.get("content")):
                blocks.append({"type": "text", "text": _text(m.get("content"))})
            for c in m.get("tool_calls") or []:
                fn = c.get("function") or {}
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": str(c.get("id") or ""),
                        "name": fn.get("name", ""),
                        "input": _args(fn.get("arguments")),
                    }
                )
            if blocks:
                add("assistant", blocks)
        else:
            add("user", [{"type": "text", "text": _text(m.get("content"))}])
    body: dict[str, Any] = {
        "model": chat.get("model", "default"),
        "max_tokens": chat.get("max_tokens", 1024),
        "messages": messages,
    }
    if system:
        body["system"] = "\n\n".join(system)
    tools = [t.get("function") or {} for t in chat.get("tools") or [] if isinstance(t, dict)]
    if tools:
        body["tools"] = [
            {
                "name": f.get("name", ""),
                "description": f.get("description", ""),
                "input_schema": f.get("parameters") or {"type": "object"},
            }
            for f in tools
        ]
    for key in ("stream", "temperature", "top_p"):
        if key in chat:
            body[key] = chat[key]
    if chat.get("stop"):
        stop = chat["stop"]
        body["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
    return _passthrough(chat, body)


def to_responses(chat: dict[str, Any]) -> dict[str, Any]:
    """A chat request body as an OpenAI Responses one, stateless as Codex sends it
    (``store: false``, the whole history as input items): system messages -> ``instructions``,
    assistant tool calls -> ``function_call`` items, ``tool`` messages ->
    ``function_call_output`` items, flat function tools, ``max_output_tokens``."""
    instructions: list[str] = []
    items: list[dict[str, Any]] = []
    for m in chat.get("messages") or []:
        role = m.get("role")
        if role == "system":
            instructions.append(_text(m.get("content")))
        elif role == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": str(m.get("tool_call_id") or ""),
                    "output": _text(m.get("content")),
                }
            )
        elif role == "assistant":
            if m.get("reasoning_content"):
                text = str(m["reasoning_content"])
                items.append(
                    {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": text}]}
                )
            if _text(m.get("content")):
                items.append(
                    {
                        "type": "message",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": _text(m.get("content"))}],
                    }
                )
            for c in m.get("tool_calls") or []:
                fn = c.get("function") or {}
                items.append(
                    {
                        "type": "function_call",
                        "call_id": str(c.get("id") or ""),
                        "name": fn.get("name", ""),
                        "arguments": fn.get("arguments") or "{}",
                    }
                )
        else:
            items.append({"type": "message", "role": role or "user", "content": _text(m.get("content"))})
    body: dict[str, Any] = {"model": chat.get("model", "default"), "input": items, "store": False}
    if instructions:
        body["instructions"] = "\n\n".join(instructions)
    if "max_tokens" in chat:
        body["max_output_tokens"] = chat["max_tokens"]
    tools = [t.get("function") or {} for t in chat.get("tools") or [] if isinstance(t, dict)]
    if tools:
        body["tools"] = [
            {
                "type": "function",
                "name": f.get("name", ""),
                "description": f.get("description", ""),
                "parameters": f.get("parameters") or {"type": "object"},
                "strict": False,
            }
            for f in tools
        ]
    for key in ("stream", "temperature", "top_p"):
        if key in chat:
            body[key] = chat[key]
    return _passthrough(chat, body)


def wire_body(api: str, chat: dict[str, Any]) -> dict[str, Any]:
    """The body for ``api``: the chat body rewritten for messages/responses, else as it is."""
    if api == "messages":
        return to_messages(chat)
    if api == "responses":
        return to_responses(chat)
    return chat


# -- streamed answers ---------------------------------------------------------------------------


def _chunk(
    delta: dict[str, Any] | None = None, finish: str | None = None, usage: dict[str, Any] | None = None
) -> dict[str, Any]:
    chunk: dict[str, Any] = {"choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}]}
    if usage is not None:
        chunk["usage"] = usage
    return chunk


def _error(err: Any) -> dict[str, Any]:
    if isinstance(err, dict):
        return {"error": {"message": str(err.get("message") or err.get("code") or err)}}
    return {"error": {"message": str(err)}}


class MessagesChunks:
    """Anthropic Messages stream events -> chat chunks (see the module)."""

    def __init__(self) -> None:
        self._calls: dict[int, int] = {}  # block index -> tool call index
        self._input = 0
        self._cached = 0

    def feed(self, event: Any) -> Any:
        """One event's data -> a chat chunk, ``DONE`` (``message_stop``), or None (``ping``)."""
        if not isinstance(event, dict):
            return None
        kind = event.get("type")
        if kind == "message_start":
            usage = (event.get("message") or {}).get("usage") or {}
            self._cached = int(usage.get("cache_read_input_tokens") or 0)
            self._input = (
                int(usage.get("input_tokens") or 0) + self._cached + int(usage.get("cache_creation_input_tokens") or 0)
            )
            return _chunk({"role": "assistant"})
        if kind == "content_block_start":
            block = event.get("content_block") or {}
            if block.get("type") == "tool_use":
                index = self._calls.setdefault(int(event.get("index", 0)), len(self._calls))
                call = {
                    "index": index,
                    "id": block.get("id"),
                    "type": "function",
                    "function": {"name": block.get("name", ""), "arguments": ""},
                }
                return _chunk({"tool_calls": [call]})
            return None
        if kind == "content_block_delta":
            delta = event.get("delta") or {}
            dtype = delta.get("type")
            if dtype == "text_delta":
                return _chunk({"content": delta.get("text", "")})
            if dtype == "thinking_delta":
                return _chunk({"reasoning_content": delta.get("thinking", "")})
            if dtype == "input_json_delta":
                known = self._calls.get(int(event.get("index", 0)))
                if known is None:
                    return None
                return _chunk(
                    {"tool_calls": [{"index": known, "function": {"arguments": delta.get("partial_json", "")}}]}
                )
            return None
        if kind == "message_delta":
            reason = (event.get("delta") or {}).get("stop_reason")
            final = event.get("usage") or {}
            out = int(final.get("output_tokens") or 0)
            if "input_tokens" in final:  # the counts are cumulative: the final ones win
                self._cached = int(final.get("cache_read_input_tokens") or 0)
                self._input = (
                    int(final.get("input_tokens") or 0)
                    + self._cached
                    + int(final.get("cache_creation_input_tokens") or 0)
                )
            usage = {
                "prompt_tokens": self._input,
                "completion_tokens": out,
                "total_tokens": self._input + out,
                "prompt_tokens_details": {"cached_tokens": self._cached},
            }
            return _chunk(finish=_STOP_REASONS.get(str(reason), str(reason)) if reason else None, usage=usage)
        if kind == "message_stop":
            return DONE
        if kind == "error" or "error" in event:
            return _error(event.get("error"))
        return None


class ResponsesChunks:
    """OpenAI Responses stream events -> chat chunks (see the module)."""

    def __init__(self) -> None:
        self._calls: dict[int, int] = {}  # output index -> tool call index

    def _call(self, output_index: Any) -> int | None:
        return self._calls.get(int(output_index)) if isinstance(output_index, int) else None

    def feed(self, event: Any) -> Any:
        """One event -> a chat chunk, ``DONE`` (completed / incomplete / failed), or None."""
        if not isinstance(event, dict):
            return None
        kind = str(event.get("type", ""))
        if kind in ("response.created", "response.in_progress"):
            return _chunk({"role": "assistant"}) if kind == "response.created" else None
        if kind == "response.output_item.added":
            item = event.get("item") or {}
            if item.get("type") in ("function_call", "custom_tool_call"):
                index = self._calls.setdefault(int(event.get("output_index", 0)), len(self._calls))
                call = {
                    "index": index,
                    "id": item.get("call_id"),
                    "type": "function",
                    "function": {"name": item.get("name", ""), "arguments": ""},
                }
                return _chunk({"tool_calls": [call]})
            return None
        if kind == "response.output_text.delta":
            return _chunk({"content": event.get("delta", "")})
        if kind in ("response.reasoning_text.delta", "response.reasoning_summary_text.delta"):
            return _chunk({"reasoning_content": event.get("delta", "")})
        if kind in ("response.function_call_arguments.delta", "response.custom_tool_call_input.delta"):
            known = self._call(event.get("output_index"))
            if known is None:
                return None
            return _chunk({"tool_calls": [{"index": known, "function": {"arguments": event.get("delta", "")}}]})
        if kind in ("response.completed", "response.incomplete"):
            response = event.get("response") or {}
            usage = response.get("usage") or {}
            prompt = int(usage.get("input_tokens") or 0)  # cached tokens included, as in chat
            out = int(usage.get("output_tokens") or 0)
            cached = int((usage.get("input_tokens_details") or {}).get("cached_tokens") or 0)
            if kind == "response.incomplete":
                finish = "length"
            elif any(
                i.get("type") in ("function_call", "custom_tool_call")
                for i in response.get("output") or []
                if isinstance(i, dict)
            ):
                finish = "tool_calls"
            else:
                finish = "stop"
            return _chunk(
                finish=finish,
                usage={
                    "prompt_tokens": prompt,
                    "completion_tokens": out,
                    "total_tokens": prompt + out,
                    "prompt_tokens_details": {"cached_tokens": cached},
                },
            )
        if kind == "response.failed":
            return _error((event.get("response") or {}).get("error") or "response.failed")
        if kind == "error":
            return _error(event)
        return None


def chunk_reader(api: str) -> MessagesChunks | ResponsesChunks | None:
    """The event reader for ``api`` (None: chat and completions streams are chunks already)."""
    if api == "messages":
        return MessagesChunks()
    if api == "responses":
        return ResponsesChunks()
    return None
