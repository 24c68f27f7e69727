"""Anthropic Messages <-> the gateway's chat request and answer: the pure translation.

``/v1/messages`` is served by the chat machinery: :func:`to_chat` turns a Messages request
into an OpenAI chat request body (validated by :class:`~._schemas.ChatRequest` and planned by
:func:`~._translate.plan_chat`, so the template, the tool-call format, grammar-forced
``tool_choice`` and the prompt cache are the chat path's own), and :class:`Blocks` turns the
:class:`~._chat.Turn`'s deltas into Messages content blocks and their SSE events.

What the translation does that a plain field mapping would not:

- ``system`` blocks are joined; Claude Code's per-request billing block
  (``x-anthropic-billing-header: ...``, whose ``cch`` changes every request) is dropped, and
  ``cache_control`` markers are never rendered, so the prompt prefix stays the same between
  the turns of an agent loop;
- ``system``-role messages inside ``messages`` (Claude Code sends one after the first user
  turn; Qwen-style templates raise on them) are folded: before the first turn into the system
  prompt, later into the user turn they follow (or, after an assistant turn, the next one);
- ``tool_result`` blocks become tool messages (``is_error`` marked in the text); ``thinking``
  blocks come back as the turn's reasoning; ``redacted_thinking`` is accepted and dropped;
- ``image`` blocks are refused with a 400 naming the block: no model this gateway serves reads
  images (the chat path takes text only);
- ``tool_choice`` ``any`` / ``tool`` are the chat path's ``required`` / named function, which the
  gateway forces with its call grammar; ``thinking`` and ``output_config.effort`` set the
  template's own switches, where it has them.

Blocks come out in output order (thinking, text, tool_use as the model wrote them), indexes
0, 1, 2... in start order, each closed before the next starts. A tool_use block is written
whole when its call is complete (one ``input_json_delta``), so a call cut off by the token
limit or with arguments that are not a JSON object never reaches the client, streamed or not.
"""

from __future__ import annotations

import functools
import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from json.encoder import encode_basestring
from typing import Any

import jinja2
import jinja2.meta

from ._chat import CALL_ARGS, CALL_END, CALL_START, CONTENT, REASONING, Delta
from ._errors import APIError, bad_request
from ._schemas import ENGINE_FIELDS

BILLING_PREFIX = "x-anthropic-billing-header"
"""The start of Claude Code's per-request system block (dropped: it changes every request)."""

THINKING_SWITCHES: dict[str, tuple[Any, Any]] = {
    "enable_thinking": (True, False),  # Qwen3, GLM
    "thinking": (True, False),  # DeepSeek V3.1
    "thinking_mode": ("enabled", "disabled"),  # MiniMax-M3
}
"""Template variables that turn the model's thinking on or off, with their (on, off) values."""

EFFORTS = {"low": "low", "medium": "medium", "high": "high", "xhigh": "high", "max": "high"}
"""``output_config.effort`` -> the ``reasoning_effort`` a template reads (gpt-oss: low/medium/high)."""

ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    504: "timeout_error",
    529: "overloaded_error",
}


@functools.lru_cache(maxsize=16)
def template_variables(template: str) -> frozenset[str]:
    """The variables a chat template reads from outside (its switches: ``enable_thinking``, ...)."""
    try:
        return frozenset(jinja2.meta.find_undeclared_variables(jinja2.Environment().parse(template)))
    except jinja2.TemplateError:
        return frozenset()


def anthropic_error(exc: APIError) -> tuple[int, dict[str, Any]]:
    """An :class:`APIError` as Anthropic answers it: the status and ``{"type":"error", ...}``.

    The per-key queue being full (the limiter's 429) is 529 ``overloaded_error``, Anthropic's
    "try again shortly"; other 5xx are ``api_error``; other 4xx ``invalid_request_error``."""
    status = exc.status
    if exc.code == "rate_limit_exceeded":
        status = 529
    kind = ANTHROPIC_TYPES.get(status) or ("api_error" if status >= 500 else "invalid_request_error")
    message = exc.message if exc.param is None or exc.message.startswith(exc.param) else f"{exc.param}: {exc.message}"
    return status, {"type": "error", "error": {"type": kind, "message": message}}


# -- request ----------------------------------------------------------------------------------


@dataclass
class Translated:
    """A Messages request as a chat request body, and what the answer needs to know."""

    chat: dict[str, Any]
    stop_sequences: list[str] = field(default_factory=list)
    session: str | None = None
    model: str | None = None
    warnings: list[str] = field(default_factory=list)


def _where(*parts: object) -> str:
    return ".".join(str(p) for p in parts)


def _obj(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise bad_request(f"{where}: must be an object", where)
    return value


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise bad_request(f"{where}: must be a list", where)
    return value


def _str(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise bad_request(f"{where}: must be a string", where)
    return value


def _no_vision(where: str) -> APIError:
    return bad_request(
        f"{where}: image blocks need a model that reads images; the model this gateway serves reads text only",
        where,
    )


def _texts(content: Any, where: str, *, images: bool = False) -> str:
    """The text of a string or a list of text blocks (``cache_control`` and citations ignored)."""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for j, block in enumerate(_list(content, where)):
        at = _where(where, j)
        block = _obj(block, at)
        kind = block.get("type")
        if kind == "text":
            parts.append(_str(block.get("text", ""), _where(at, "text")))
        elif kind == "image" or (images and kind == "document"):
            raise _no_vision(at)
        else:
            raise bad_request(f"{at}: a block of type {kind!r} is not supported here (text blocks only)", at)
    return "\n\n".join(parts)


def system_text(system: Any) -> str:
    """The system prompt: the string, or the text blocks joined, without the billing block."""
    if system is None:
        return ""
    if isinstance(system, str):
        return "" if system.startswith(BILLING_PREFIX) else system
    parts = []
    for j, block in enumerate(_list(system, "system")):
        block = _obj(block, f"system.{j}")
        if block.get("type") != "text":
            raise bad_request(f"system.{j}: system blocks are text blocks", f"system.{j}")
        text = _str(block.get("text", ""), f"system.{j}.text")
        if not text.startswith(BILLING_PREFIX):
            parts.append(text)
    return "\n\n".join(parts)


def _tool_result(block: dict[str, Any], at: str) -> dict[str, Any]:
    tid = block.get("tool_use_id")
    if not isinstance(tid, str) or not tid:
        raise bad_request(
            f"{at}.tool_use_id: a tool_result needs the id of the tool_use it answers", f"{at}.tool_use_id"
        )
    content = block.get("content", "")
    text = _texts(content, f"{at}.content", images=True) if content is not None else ""
    if block.get("is_error") is True:
        text = f"Error: {text}"
    return {"role": "tool", "tool_call_id": tid, "content": text}


def _user(content: Any, where: str) -> tuple[list[dict[str, Any]], list[str]]:
    """A user turn: its tool messages (from tool_result blocks) and its texts."""
    if isinstance(content, str):
        return [], [content]
    tools: list[dict[str, Any]] = []
    texts: list[str] = []
    for j, block in enumerate(_list(content, _where(where, "content"))):
        at = _where(where, "content", j)
        block = _obj(block, at)
        kind = block.get("type")
        if kind == "text":
            texts.append(_str(block.get("text", ""), f"{at}.text"))
        elif kind == "tool_result":
            tools.append(_tool_result(block, at))
        elif kind in ("image", "document"):
            raise _no_vision(at)
        elif kind in ("thinking", "redacted_thinking"):
            continue
        else:
            raise bad_request(f"{at}: a user block of type {kind!r} is not supported", at)
    return tools, texts


def _assistant(content: Any, where: str) -> dict[str, Any]:
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    for j, block in enumerate(_list(content, _where(where, "content"))):
        at = _where(where, "content", j)
        block = _obj(block, at)
        kind = block.get("type")
        if kind == "text":
            texts.append(_str(block.get("text", ""), f"{at}.text"))
        elif kind == "thinking":
            reasoning.append(_str(block.get("thinking", ""), f"{at}.thinking"))
        elif kind == "redacted_thinking":
            continue  # opaque; nothing to render
        elif kind == "tool_use":
            tid = _str(block.get("id"), f"{at}.id")
            name = _str(block.get("name"), f"{at}.name")
            args = _obj(block.get("input", {}), f"{at}.input")
            calls.append(
                {
                    "id": tid,
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)},
                }
            )
        elif kind in ("image", "document"):
            raise _no_vision(at)
        else:
            raise bad_request(f"{at}: an assistant block of type {kind!r} is not supported", at)
    msg: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts or not calls else None}
    if reasoning and any(reasoning):
        msg["reasoning_content"] = "".join(reasoning)
    if calls:
        msg["tool_calls"] = calls
    return msg


def to_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """``system`` and ``messages`` as OpenAI chat messages (see the module for the folding)."""
    system = [system_text(body.get("system"))]
    out: list[dict[str, Any]] = []
    pending: list[str] = []  # mid-conversation system texts waiting for the next user turn
    for i, m in enumerate(_list(body.get("messages"), "messages")):
        where = f"messages.{i}"
        m = _obj(m, where)
        role = m.get("role")
        content = m.get("content")
        if content is None:
            raise bad_request(f"{where}.content: required", f"{where}.content")
        if role == "system":
            text = _texts(content, f"{where}.content")
            if not out:
                system.append(text)
            elif out[-1]["role"] == "user":
                out[-1]["content"] = f"{out[-1]['content']}\n\n{text}" if out[-1]["content"] else text
            else:
                pending.append(text)
        elif role == "user":
            tools, texts = _user(content, where)
            out += tools
            texts = pending + texts
            pending = []
            if texts or not tools:
                out.append({"role": "user", "content": "\n\n".join(texts)})
        elif role == "assistant":
            out.append(_assistant(content, where))
        else:
            raise bad_request(f"{where}.role: must be 'user', 'assistant' or 'system'; got {role!r}", f"{where}.role")
    if pending:
        out.append({"role": "user", "content": "\n\n".join(pending)})
    if not out:
        raise bad_request("messages: at least one message is required", "messages")
    text = "\n\n".join(s for s in system if s)
    return ([{"role": "system", "content": text}] if text else []) + out


def _tools(tools: Any, warnings: list[str]) -> list[dict[str, Any]] | None:
    if tools is None:
        return None
    out = []
    for i, tool in enumerate(_list(tools, "tools")):
        at = f"tools.{i}"
        tool = _obj(tool, at)
        kind = tool.get("type")
        if kind not in (None, "custom"):
            warnings.append(f"{at}: the server tool {kind!r} is not available on this gateway; left out")
            continue
        if tool.get("defer_loading") is True:
            continue  # loaded on demand (tool search): not in the prompt
        name = _str(tool.get("name"), f"{at}.name")
        schema = _obj(tool.get("input_schema"), f"{at}.input_schema")
        fn: dict[str, Any] = {"name": name, "parameters": schema}
        if isinstance(tool.get("description"), str):
            fn["description"] = tool["description"]
        out.append({"type": "function", "function": fn})
    return out or None


def _choice(choice: Any, chat: dict[str, Any]) -> None:
    if choice is None:
        return
    choice = _obj(choice, "tool_choice")
    kind = choice.get("type")
    if kind == "auto":
        chat["tool_choice"] = "auto"
    elif kind == "any":
        chat["tool_choice"] = "required"
    elif kind == "none":
        chat["tool_choice"] = "none"
    elif kind == "tool":
        name = _str(choice.get("name"), "tool_choice.name")
        if name not in {t["function"]["name"] for t in chat.get("tools") or []}:
            raise bad_request(f"tool_choice.name: {name!r} is not one of the request's tools", "tool_choice.name")
        chat["tool_choice"] = {"type": "function", "function": {"name": name}}
    else:
        raise bad_request(
            f"tool_choice.type: must be 'auto', 'any', 'tool' or 'none'; got {kind!r}", "tool_choice.type"
        )
    if choice.get("disable_parallel_tool_use") is True:
        chat["parallel_tool_calls"] = False


def _number(body: dict[str, Any], key: str, low: float, high: float | None) -> float | int | None:
    value = body.get(key)
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or value < low
        or (high is not None and value > high)
    ):
        span = f"between {low:g} and {high:g}" if high is not None else f"at least {low:g}"
        raise bad_request(f"{key}: must be a number {span}", key)
    return value


def to_chat(body: dict[str, Any], template: str, *, count_only: bool = False) -> Translated:
    """A Messages request body -> an OpenAI chat request body (see the module); 400 naming the
    field for what is malformed. ``count_only``: ``/v1/messages/count_tokens`` (no
    ``max_tokens``)."""
    warnings: list[str] = []
    model = body.get("model")
    if not count_only:
        limit = body.get("max_tokens")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise bad_request("max_tokens: required, an integer of at least 1", "max_tokens")
    chat: dict[str, Any] = {"messages": to_messages(body)}
    if not count_only:
        chat["max_tokens"] = body["max_tokens"]
        chat["stream"] = body.get("stream") is True
    tools = _tools(body.get("tools"), warnings)
    if tools:
        chat["tools"] = tools
    _choice(body.get("tool_choice"), chat)
    if chat.get("tool_choice") is not None and not tools:
        if chat["tool_choice"] == "none" or chat["tool_choice"] == "auto":
            del chat["tool_choice"]
        else:
            raise bad_request("tool_choice: 'any' and 'tool' need tools", "tool_choice")
    stops = body.get("stop_sequences")
    stop_list: list[str] = []
    if stops is not None:
        stop_list = [_str(s, f"stop_sequences.{i}") for i, s in enumerate(_list(stops, "stop_sequences"))]
        if stop_list:
            chat["stop"] = stop_list
    for key, low, high in (("temperature", 0.0, 1.0), ("top_p", 0.0, 1.0)):
        value = _number(body, key, low, high)
        if value is not None:
            chat[key] = value
    top_k = _number(body, "top_k", 0, None)
    if top_k is not None:
        chat["top_k"] = int(top_k)
    kwargs: dict[str, Any] = {}
    thinking = body.get("thinking")
    if thinking is not None:
        thinking = _obj(thinking, "thinking")
        kind = thinking.get("type")
        if kind not in ("enabled", "disabled", "adaptive"):
            raise bad_request(
                f"thinking.type: must be 'enabled', 'disabled' or 'adaptive'; got {kind!r}", "thinking.type"
            )
        on = kind != "disabled"
        names = template_variables(template)
        for name, values in THINKING_SWITCHES.items():
            if name in names:
                kwargs[name] = values[0] if on else values[1]
        if kind == "adaptive" and "thinking_mode" in kwargs:
            kwargs["thinking_mode"] = "adaptive"  # MiniMax-M3: the model decides
        if kind == "enabled":
            budget = thinking.get("budget_tokens")
            if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
                raise bad_request("thinking.budget_tokens: a positive integer is required", "thinking.budget_tokens")
            chat["reasoning_budget_tokens"] = budget
    config = body.get("output_config")
    if config is not None:
        config = _obj(config, "output_config")
        effort = config.get("effort")
        if effort is not None:
            if effort not in EFFORTS:
                raise bad_request(f"output_config.effort: must be one of {', '.join(EFFORTS)}", "output_config.effort")
            if "reasoning_effort" in template_variables(template):
                kwargs["reasoning_effort"] = EFFORTS[effort]
        fmt = config.get("format")
        if fmt is not None:
            fmt = _obj(fmt, "output_config.format")
            if fmt.get("type") != "json_schema":
                raise bad_request("output_config.format.type: must be 'json_schema'", "output_config.format.type")
            schema = _obj(fmt.get("schema"), "output_config.format.schema")
            chat["response_format"] = {"type": "json_schema", "json_schema": {"name": "output", "schema": schema}}
    if kwargs:
        chat["chat_template_kwargs"] = kwargs
    for key, value in body.items():  # llama.cpp's own fields (ignore_eos, min_p, ...), as on chat
        if key in ENGINE_FIELDS and key not in chat:
            chat[key] = value
    session = None
    meta = body.get("metadata")
    if isinstance(meta, dict) and isinstance(meta.get("user_id"), str) and meta["user_id"]:
        session = meta["user_id"][:256]
        chat["user"] = session
    return Translated(
        chat=chat,
        stop_sequences=stop_list,
        session=session,
        model=model if isinstance(model, str) else None,
        warnings=warnings,
    )


# -- answer ----------------------------------------------------------------------------------


def message_id() -> str:
    return "msg_" + secrets.token_hex(12)


def tool_use_id(call_id: str) -> str:
    """The ``toolu_`` id of a call the parser named ``call_...`` (or anything else)."""
    return "toolu_" + (call_id.removeprefix("call_") or secrets.token_hex(12))


def sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False, separators=(',', ':'))}\n\n".encode()


PING = b'event: ping\ndata: {"type":"ping"}\n\n'


def _delta_head(index: int, kind: str) -> bytes:
    return (
        f'event: content_block_delta\ndata: {{"type":"content_block_delta","index":{index},'
        f'"delta":{{"type":"{kind}","{"text" if kind == "text_delta" else "thinking"}":'
    ).encode()


class Blocks:
    """The turn's deltas -> Messages content blocks (:attr:`content`) and, when ``stream``, the
    SSE events that build them (see the module)."""

    def __init__(self, stream: bool = True) -> None:
        self.stream = stream
        self.content: list[dict[str, Any]] = []
        self.warnings: list[str] = []
        self._kind: str | None = None  # the open block: "text" | "thinking"
        self._parts: list[str] = []
        self._head = b""
        self._calls: dict[int, tuple[str, str, list[str]]] = {}

    @property
    def tool_uses(self) -> list[dict[str, Any]]:
        return [b for b in self.content if b["type"] == "tool_use"]

    def feed(self, deltas: Sequence[Delta]) -> list[bytes]:
        out: list[bytes] = []
        for d in deltas:
            if d.kind == CONTENT or d.kind == REASONING:
                kind = "text" if d.kind == CONTENT else "thinking"
                if self._kind != kind:
                    self._close(out)
                    self._open(kind, out)
                self._parts.append(d.text)
                if self.stream:
                    out.append(self._head + encode_basestring(d.text).encode() + b"}}\n\n")
            elif d.kind == CALL_START:
                self._calls[d.index] = (d.id, d.name, [])
            elif d.kind == CALL_ARGS:
                call = self._calls.get(d.index)
                if call is not None:
                    call[2].append(d.text)
            elif d.kind == CALL_END:
                done = self._calls.pop(d.index, None)
                if done is not None:
                    self._tool(*done, out)
        return out

    def finish(self) -> list[bytes]:
        """Close the open block; calls never ended are dropped (cut off by the end of the output)."""
        out: list[bytes] = []
        self._close(out)
        for _, name, _ in self._calls.values():
            self.warnings.append(f"the tool call {name!r} was cut off by the end of the output; dropped")
        self._calls.clear()
        return out

    def _open(self, kind: str, out: list[bytes]) -> None:
        self._kind = kind
        self._parts = []
        index = len(self.content)
        self.content.append(
            {"type": "text", "text": ""} if kind == "text" else {"type": "thinking", "thinking": "", "signature": ""}
        )
        if self.stream:
            out.append(
                sse(
                    "content_block_start",
                    {"type": "content_block_start", "index": index, "content_block": dict(self.content[-1])},
                )
            )
            self._head = _delta_head(index, "text_delta" if kind == "text" else "thinking_delta")

    def _close(self, out: list[bytes]) -> None:
        if self._kind is None:
            return
        index = len(self.content) - 1
        block = self.content[-1]
        text = "".join(self._parts)
        if self._kind == "text":
            block["text"] = text
        else:
            block["thinking"] = text
            if self.stream:
                out.append(
                    sse(
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": index,
                            "delta": {"type": "signature_delta", "signature": ""},
                        },
                    )
                )
        if self.stream:
            out.append(sse("content_block_stop", {"type": "content_block_stop", "index": index}))
        self._kind = None
        self._parts = []

    def _tool(self, call_id: str, name: str, parts: list[str], out: list[bytes]) -> None:
        args = "".join(parts)
        try:
            parsed = json.loads(args) if args.strip() else {}
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            self.warnings.append(f"the tool call {name!r} has arguments that are not a JSON object; dropped")
            return
        self._close(out)
        index = len(self.content)
        block = {"type": "tool_use", "id": tool_use_id(call_id), "name": name, "input": parsed}
        self.content.append(block)
        if self.stream:
            out.append(
                sse(
                    "content_block_start",
                    {"type": "content_block_start", "index": index, "content_block": {**block, "input": {}}},
                )
            )
            out.append(
                sse(
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": json.dumps(parsed, ensure_ascii=False)},
                    },
                )
            )
            out.append(sse("content_block_stop", {"type": "content_block_stop", "index": index}))


def stop_reason(blocks: Blocks, final: dict[str, Any], stop_sequences: list[str]) -> tuple[str, str | None]:
    """``stop_reason`` and ``stop_sequence`` of the answer: the token limit, a caller's stop
    sequence, a tool call, or the end of the turn."""
    if final.get("stop_type") == "limit":
        return "max_tokens", None
    word = final.get("stopping_word")
    if final.get("stop_type") == "word" and isinstance(word, str) and word in stop_sequences:
        return "stop_sequence", word
    if blocks.tool_uses:
        return "tool_use", None
    return "end_turn", None


def usage(final: dict[str, Any]) -> dict[str, Any]:
    """Anthropic's usage: ``input_tokens`` excludes what the prompt cache served."""
    prompt = int(final.get("tokens_evaluated") or 0)
    timings = final.get("timings") or {}
    cached = min(prompt, int(timings.get("cache_n") or 0)) if isinstance(timings, dict) else 0
    return {
        "input_tokens": prompt - cached,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
        "output_tokens": int(final.get("tokens_predicted") or 0),
    }


def message_shell(mid: str, model: str) -> dict[str, Any]:
    return {
        "id": mid,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {
            "input_tokens": 0,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": 0,
        },
    }


def remembered(blocks: Blocks, reasoning: str) -> dict[str, Any]:
    """The answer as a chat assistant message with its ``toolu_`` ids, for the reasoning memory."""
    calls = [
        {"id": b["id"], "type": "function", "function": {"name": b["name"], "arguments": json.dumps(b["input"])}}
        for b in blocks.tool_uses
    ]
    return {"role": "assistant", "content": None, "reasoning_content": reasoning, "tool_calls": calls}


__all__ = [
    "BILLING_PREFIX",
    "PING",
    "Blocks",
    "Translated",
    "anthropic_error",
    "message_id",
    "message_shell",
    "sse",
    "stop_reason",
    "system_text",
    "to_chat",
    "to_messages",
    "tool_use_id",
    "usage",
]
