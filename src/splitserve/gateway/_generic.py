"""Tool calls for a chat template with no tool support: Hermes-style, taught in the prompt.

A template the chat layer knows no tool-call format for (ChatML as SmolLM2 ships it, and
many small models) neither shows the model the request's tools nor renders a tool
conversation. For such a model (the ``plain`` format) a request with ``tools`` and a
``tool_choice`` other than ``"none"`` is served like this instead:

- :func:`generic_messages` rewrites the messages so a template that knows only
  system/user/assistant renders them: the tools go into the system message (appended to
  the first one, or a new one), as JSON inside ``<tools></tools>`` with the instruction to
  answer ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``; an assistant
  message's ``tool_calls`` become those blocks after its text; tool results become a user
  message of ``<tool_response>...</tool_response>`` blocks (consecutive results, and a user
  message right after them, are one message, so user/assistant turns still alternate);
- the output is read by the ``hermes`` parser (:data:`GENERIC`: hermes without its
  ``<think>`` split, which a plain template does not have either), and ``required`` /
  a named ``tool_choice`` is enforced with hermes' call grammar.

Older llama.cpp builds did the like for such templates (their "generic" chat handler: the
tools described in the system prompt, a JSON answer under a grammar); the pinned build's
template autoparser serves them content only, so there ``required`` gives no call. Hermes'
syntax is used here because it is the one small instruct models most often saw in training.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from ..chat import ToolCallFormat, get_format
from ._plain import PLAIN

GENERIC: ToolCallFormat = dataclasses.replace(
    get_format("hermes"),
    description="hermes tool calls taught in the system prompt, for a template without "
    "tool support (no reasoning split)",
    reasoning=None,
    end_markers=PLAIN.end_markers,
    aliases=(),
)
"""The format a ``plain`` model's tool requests are read in: the hermes parser and grammar."""

_INSTRUCTION = (
    "You can call functions. The available functions are listed as JSON within "
    "<tools></tools>:\n<tools>\n{tools}\n</tools>\n\n"
    'To call a function, reply with <tool_call>{{"name": <function-name>, "arguments": '
    "<arguments-json-object>}}</tool_call> (one block per call). Results come back within "
    "<tool_response></tool_response>."
)


def uses_generic(fmt: ToolCallFormat, tools: list[dict[str, Any]] | None, tool_choice: str) -> bool:
    """Whether a request is served by the fallback: a plain model, tools, a choice not "none"."""
    return fmt.name == PLAIN.name and bool(tools) and tool_choice != "none"


def tools_text(tools: list[dict[str, Any]]) -> str:
    """The instruction that describes ``tools`` (OpenAI tool dicts) to the model."""
    lines = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    return _INSTRUCTION.format(tools=lines)


def call_block(call: dict[str, Any]) -> str:
    """One OpenAI tool call as the ``<tool_call>`` block hermes' grammar writes."""
    raw = call.get("function")
    fn: dict[str, Any] = raw if isinstance(raw, dict) else {}
    args: Any = fn.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except ValueError:
            pass  # the gateway's schema refuses such history; keep the text if it gets here
    value = {"name": fn.get("name", ""), "arguments": args}
    return f"<tool_call>\n{json.dumps(value, ensure_ascii=False)}\n</tool_call>"


def _text(content: Any) -> str:
    return content if isinstance(content, str) else ""


def generic_messages(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, system: bool = True
) -> list[dict[str, Any]]:
    """The messages (as the template gets them) rewritten for a template without tools.

    Pure: the input is not changed. ``system=False`` puts the tool description at the
    start of the first user message instead (for templates that refuse a system role).
    """
    out: list[dict[str, Any]] = []
    results: list[str] = []  # <tool_response> blocks waiting for their user message

    def flush(then: str = "") -> None:
        if results:
            body = "\n".join(results) + (f"\n\n{then}" if then else "")
            out.append({"role": "user", "content": body})
            results.clear()

    for message in messages:
        role = message.get("role")
        if role == "tool":
            results.append(f"<tool_response>\n{_text(message.get('content'))}\n</tool_response>")
            continue
        if role == "user" and results:
            flush(_text(message.get("content")))
            continue
        flush()
        msg = {k: v for k, v in message.items() if k != "tool_calls"}
        if role == "assistant" and message.get("tool_calls"):
            # back to back, as the call grammar writes them (a newline between is content)
            blocks = "".join(call_block(c) for c in message["tool_calls"] if isinstance(c, dict))
            text = _text(message.get("content"))
            msg["content"] = f"{text}\n{blocks}" if text else blocks
        out.append(msg)
    flush()

    described = tools_text(tools)
    if system:
        if out and out[0].get("role") == "system":
            text = _text(out[0].get("content"))
            out[0] = {**out[0], "content": f"{text}\n\n{described}" if text else described}
        else:
            out.insert(0, {"role": "system", "content": described})
        return out
    sys_text = ""
    if out and out[0].get("role") == "system":
        sys_text = _text(out.pop(0).get("content"))
    head = "\n\n".join(t for t in (sys_text, described) if t)
    first_user = next((i for i, m in enumerate(out) if m.get("role") == "user"), None)
    if first_user is None:
        out.insert(0, {"role": "user", "content": head})
    else:
        text = _text(out[first_user].get("content"))
        out[first_user] = {**out[first_user], "content": f"{head}\n\n{text}" if text else head}
    return out


__all__ = ["GENERIC", "call_block", "generic_messages", "tools_text", "uses_generic"]
