"""``POST /v1/responses`` out: the deltas of a :class:`~._chat.Turn` -> Responses output items
and stream events.

:class:`ResponseBuilder` is pure: it takes the deltas in output order and returns the events
that follow from them, and builds the response object. The streamed answer sends those events;
the whole answer sends only :meth:`ResponseBuilder.response`, built by the same calls, so the
two never disagree.

Items open and close in output order, one at a time (``output_index`` 0, 1, ...):

- reasoning: ``reasoning`` item with one ``reasoning_text`` part (``reasoning_text.delta`` /
  ``.done``); the text goes back in a later request's input, so the model's earlier thinking
  is rendered where the template wants it;
- text: ``message`` item with one ``output_text`` part (``output_text.delta`` / ``.done``);
- a call to a function: ``function_call`` item (``function_call_arguments.delta`` / ``.done``),
  ``namespace`` set for a namespace's function;
- a call to a custom tool: ``custom_tool_call`` item whose ``input`` is the call's ``input``
  argument, sent in one ``custom_tool_call_input.delta`` when the call is complete (the model
  wrote it as a JSON or XML argument, which is not the raw input until it is whole), then
  ``.done``.

Every ``added`` has its ``done``, parts included; an item cut off by ``max_output_tokens``
is done with status ``incomplete`` and the response is ``incomplete`` (reason
``max_output_tokens``); a call the output ended inside otherwise (a stop sequence) is done
``incomplete`` too, never a call to run. The stream starts with ``response.created`` and
``response.in_progress`` and ends with one of ``response.completed``, ``response.incomplete``
and ``response.failed``, each carrying the whole response; every event has a
``sequence_number`` 0, 1, 2, ...
"""

from __future__ import annotations

import json
import secrets
import time
from json.encoder import encode_basestring
from typing import Any

from ._chat import CALL_ARGS, CALL_END, CALL_START, CONTENT, REASONING, Delta
from ._responses import ToolRef


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(16)}"


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


class _Item:
    """The output item being written."""

    def __init__(self, kind: int, item: dict[str, Any], ref: ToolRef | None = None) -> None:
        self.kind = kind
        self.item = item
        self.ref = ref
        self.text: list[str] = []


class ResponseBuilder:
    """Deltas -> events and the response (see the module)."""

    def __init__(
        self,
        model: str,
        tools: dict[str, ToolRef],
        echo: dict[str, Any],
        *,
        response_id: str | None = None,
        created_at: int | None = None,
    ) -> None:
        self.id = response_id or new_id("resp")
        self.created_at = created_at if created_at is not None else int(time.time())
        self.model = model
        self.tools = tools
        self.echo = echo
        """Request fields the response repeats (instructions, tools, tool_choice, ...)."""
        self.output: list[dict[str, Any]] = []
        self.seq = 0
        self._open: _Item | None = None
        self._calls: dict[int, _Item] = {}  # Turn's call index -> its item
        self.usage: dict[str, Any] | None = None
        self.status = "in_progress"
        self.error: dict[str, Any] | None = None
        self.incomplete: dict[str, Any] | None = None
        self.warnings: list[str] = []
        self._delta_head: bytes = b""

    # -- the response object ----------------------------------------------------------
    def response(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": self.status,
            "model": self.model,
            "output": [dict(item) for item in self.output],
            "error": self.error,
            "incomplete_details": self.incomplete,
            "usage": self.usage,
            **self.echo,
        }
        if self.warnings:
            out["splitserve"] = {"warnings": list(self.warnings)}
        return out

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        ev = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return ev

    def start(self) -> list[dict[str, Any]]:
        """``response.created`` and ``response.in_progress``."""
        return [
            self._event("response.created", response=self.response()),
            self._event("response.in_progress", response=self.response()),
        ]

    # -- items -----------------------------------------------------------------------------
    def _open_item(self, kind: int, item: dict[str, Any], ref: ToolRef | None = None) -> list[dict[str, Any]]:
        events = self._close()
        self._open = _Item(kind, item, ref)
        self.output.append(item)
        index = len(self.output) - 1
        events.append(self._event("response.output_item.added", output_index=index, item=dict(item)))
        if kind == CONTENT:
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            events.append(
                self._event(
                    "response.content_part.added", item_id=item["id"], output_index=index, content_index=0, part=part
                )
            )
            self._delta_head = (
                b'{"type":"response.output_text.delta","item_id":"'
                + item["id"].encode()
                + b'","output_index":'
                + str(index).encode()
                + b',"content_index":0,"logprobs":[],"sequence_number":'
            )
        elif kind == REASONING:
            part = {"type": "reasoning_text", "text": ""}
            events.append(
                self._event(
                    "response.content_part.added", item_id=item["id"], output_index=index, content_index=0, part=part
                )
            )
        return events

    def _close(self, status: str = "completed") -> list[dict[str, Any]]:
        cur, self._open = self._open, None
        if cur is None:
            return []
        item = cur.item
        index = len(self.output) - 1
        events: list[dict[str, Any]] = []
        text = "".join(cur.text)
        if cur.kind == CONTENT:
            part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
            common = {"item_id": item["id"], "output_index": index, "content_index": 0}
            events.append(self._event("response.output_text.done", **common, text=text, logprobs=[]))
            events.append(self._event("response.content_part.done", **common, part=part))
            item.update(status=status, content=[part])
        elif cur.kind == REASONING:
            part = {"type": "reasoning_text", "text": text}
            common = {"item_id": item["id"], "output_index": index, "content_index": 0}
            events.append(self._event("response.reasoning_text.done", **common, text=text))
            events.append(self._event("response.content_part.done", **common, part=part))
            item.update(status=status, content=[part])
        elif item["type"] == "function_call":
            item.update(status=status, arguments=text)
            events.append(
                self._event(
                    "response.function_call_arguments.done",
                    item_id=item["id"],
                    output_index=index,
                    name=item["name"],
                    arguments=text,
                )
            )
        else:  # custom_tool_call: its raw input, whole, when the call is
            raw = _custom_input(text) if status == "completed" else ""
            item.update(status=status, input=raw)
            common = {"item_id": item["id"], "output_index": index}
            if raw:
                events.append(self._event("response.custom_tool_call_input.delta", **common, delta=raw))
            events.append(self._event("response.custom_tool_call_input.done", **common, input=raw))
        events.append(self._event("response.output_item.done", output_index=index, item=dict(item)))
        return events

    def feed(self, deltas: list[Delta]) -> list[dict[str, Any]]:
        """The events of these deltas."""
        events: list[dict[str, Any]] = []
        for d in deltas:
            cur = self._open
            if d.kind == CONTENT or d.kind == REASONING:
                if cur is None or cur.kind != d.kind:
                    item: dict[str, Any]
                    if d.kind == CONTENT:
                        item = {"id": new_id("msg"), "type": "message", "role": "assistant", "status": "in_progress"}
                        item["content"] = []
                    else:
                        item = {"id": new_id("rs"), "type": "reasoning", "summary": [], "content": []}
                    events += self._open_item(d.kind, item)
                    cur = self._open
                assert cur is not None
                cur.text.append(d.text)
                if d.kind == CONTENT:
                    events.append(self._event_text(d.text))
                else:
                    events.append(
                        self._event(
                            "response.reasoning_text.delta",
                            item_id=cur.item["id"],
                            output_index=len(self.output) - 1,
                            content_index=0,
                            delta=d.text,
                        )
                    )
            elif d.kind == CALL_START:
                ref = self.tools.get(d.name) or ToolRef("function", d.name)
                if ref.kind == "custom":
                    item = {"id": new_id("ctc"), "type": "custom_tool_call", "call_id": d.id, "name": ref.name}
                    item["input"] = ""
                else:
                    item = {"id": new_id("fc"), "type": "function_call", "call_id": d.id, "name": ref.name}
                    item.update(arguments="", status="in_progress")
                if ref.namespace:
                    item["namespace"] = ref.namespace
                events += self._open_item(CALL_START, item, ref)
                if self._open is not None:
                    self._calls[d.index] = self._open
            elif d.kind == CALL_ARGS:
                call = self._calls.get(d.index)
                if call is None or call is not self._open:
                    continue
                call.text.append(d.text)
                if call.item["type"] == "function_call":
                    events.append(
                        self._event(
                            "response.function_call_arguments.delta",
                            item_id=call.item["id"],
                            output_index=len(self.output) - 1,
                            delta=d.text,
                        )
                    )
            elif d.kind == CALL_END and self._calls.get(d.index) is self._open:
                events += self._close()
        return events

    def _event_text(self, text: str) -> dict[str, Any]:
        ev = {"type": "response.output_text.delta", "sequence_number": self.seq, "_fast": text}
        self.seq += 1
        return ev

    # -- the end -----------------------------------------------------------------------------
    def finish(self, stop_type: str | None, usage: dict[str, Any], warnings: list[str]) -> list[dict[str, Any]]:
        """Close what is open; ``response.completed``, or ``response.incomplete`` when the
        engine stopped at the token limit."""
        self.usage = usage
        self.warnings += warnings
        if stop_type == "limit":
            events = self._close("incomplete")
            self.status = "incomplete"
            self.incomplete = {"reason": "max_output_tokens"}
            return [*events, self._event("response.incomplete", response=self.response())]
        cut = self._open is not None and self._open.kind == CALL_START  # a call the output ended inside
        if cut:
            self.warnings.append("a tool call cut off by the end of the output is incomplete")
        events = self._close("incomplete" if cut else "completed")
        self.status = "completed"
        return [*events, self._event("response.completed", response=self.response())]

    def fail(self, code: str, message: str) -> list[dict[str, Any]]:
        """Close what is open (incomplete) and ``response.failed`` with this error."""
        events = self._close("incomplete")
        self.status = "failed"
        self.error = {"code": code, "message": message}
        return [*events, self._event("response.failed", response=self.response())]

    # -- the wire ------------------------------------------------------------------------------
    def sse(self, events: list[dict[str, Any]]) -> bytes:
        """The SSE bytes of these events (``event:`` and ``data:`` lines). Text deltas, nearly
        every token's event, are written without a JSON encoder per token."""
        out = []
        for ev in events:
            text = ev.get("_fast")
            if text is not None:
                out.append(
                    b"event: response.output_text.delta\ndata: "
                    + self._delta_head
                    + str(ev["sequence_number"]).encode()
                    + b',"delta":'
                    + encode_basestring(text).encode()
                    + b"}\n\n"
                )
            else:
                out.append(b"event: " + ev["type"].encode() + b"\ndata: " + _dumps(ev).encode() + b"\n\n")
        return b"".join(out)


def _custom_input(arguments: str) -> str:
    """A custom tool's raw input from the call's arguments: the ``input`` string, else the one
    string argument, else the arguments' JSON text."""
    try:
        args = json.loads(arguments)
    except ValueError:
        return arguments
    if isinstance(args, dict):
        if isinstance(args.get("input"), str):
            return str(args["input"])
        strings = [v for v in args.values() if isinstance(v, str)]
        if len(args) == 1 and strings:
            return strings[0]
    return arguments


def responses_usage(chat_usage: dict[str, Any], reasoning_chars: int, raw_chars: int) -> dict[str, Any]:
    """Responses' usage from chat's: ``input_tokens`` includes the cached ones. The engine does
    not say how many output tokens were reasoning: ``reasoning_tokens`` is the output tokens
    times the reasoning's share of the output's characters."""
    prompt = int(chat_usage.get("prompt_tokens") or 0)
    completion = int(chat_usage.get("completion_tokens") or 0)
    cached = int((chat_usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
    reasoning = round(completion * reasoning_chars / raw_chars) if raw_chars else 0
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": min(reasoning, completion)},
        "total_tokens": prompt + completion,
    }


__all__ = ["ResponseBuilder", "new_id", "responses_usage"]
