"""One assistant turn: engine text -> parser events -> the deltas the client sees.

:class:`Turn` sits between the format's incremental parser and the wire. It applies the
request's tool policy to the events, the same way whether the answer is streamed or not
(so the two can never disagree):

- ``tool_choice: "none"``: calls the model writes anyway are dropped, with a warning;
- a named ``tool_choice``: calls to other functions are dropped, with a warning;
- ``parallel_tool_calls: false``: calls after the first are dropped, with a warning;
- kept calls are renumbered 0, 1, ... in output order.

``finish_reason`` agrees with the output: ``length`` when the engine hit the token limit
(a call cut off is never reported as made), else ``tool_calls`` when at least one complete
call was kept, else ``stop``.

A call cut off by the end of the output is dropped, and so is its text: what the parser
held back at the end because it might start a marker, or flushed at the end from a call
whose header never completed, is never content (see :func:`cut_markup`). No marker of the
format (call openers, reasoning markers, gpt-oss' harmony tokens) reaches ``content``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..chat import (
    ChatParser,
    ContentDelta,
    Event,
    ParseWarning,
    ReasoningDelta,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
    coalesce,
    find_first,
    hold_len,
)
from ._translate import Plan

_HARMONY = ("<|start|>", "<|channel|>", "<|message|>", "<|constrain|>", "<|end|>", "<|call|>", "<|return|>")


def markup_markers(fmt: Any) -> tuple[str, ...]:
    """The markers that open a tool call or a reasoning block in ``fmt``'s output."""
    markers = list(getattr(fmt, "call_openers", ()) or ())
    spec = getattr(fmt, "reasoning", None)
    if spec is not None:
        markers += [spec.open, spec.close]
    if getattr(fmt, "name", "") == "gpt-oss":
        markers += _HARMONY
    return tuple(m for m in dict.fromkeys(markers) if m)


def cut_markup(events: list[Event], markers: tuple[str, ...]) -> tuple[list[Event], str]:
    """The events of the parser's ``finish()`` without the text of a cut-off call.

    At the end of the output the parsers flush as content what they held back: a suffix
    that might start a marker (``]<]minimax[>[<tool_c``) or a call whose header never
    completed (``<tool_call>\n<function=get_wea``). That is markup of a call the end of
    the output cut off, which is dropped: content from the first complete marker on, and a
    trailing partial marker, are removed. Returns the events and the text removed."""
    if not markers:
        return events, ""
    events = coalesce(events)
    last = max((i for i, e in enumerate(events) if isinstance(e, ContentDelta)), default=-1)
    out: list[Event] = []
    removed: list[str] = []
    cut = False
    for i, ev in enumerate(events):
        if not isinstance(ev, ContentDelta):
            out.append(ev)
            continue
        text = ev.text
        if cut:
            removed.append(text)
            continue
        at, _ = find_first(text, markers)
        if at >= 0:
            cut = True
        elif i == last:
            at = len(text) - hold_len(text, markers)
        else:
            at = len(text)
        if at < len(text):
            removed.append(text[at:])
        if text[:at]:
            out.append(ContentDelta(text[:at]))
    return out, "".join(removed)


CONTENT, REASONING, CALL_START, CALL_ARGS, CALL_END = range(5)


@dataclass(frozen=True, slots=True)
class Delta:
    """One piece of the answer, in output order; ``index`` is the output call index."""

    kind: int
    text: str = ""
    index: int = 0
    id: str = ""
    name: str = ""


class Turn:
    """Feeds engine text to the parser and applies the request's tool policy."""

    def __init__(self, plan: Plan, parser: ChatParser) -> None:
        self.plan = plan
        self._parser = parser
        self._out: dict[int, int] = {}  # parser call index -> output call index
        self._dropped: set[int] = set()
        self._calls: list[dict[str, Any]] = []
        self._args: list[list[str]] = []
        self._ended: set[int] = set()
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.warnings: list[str] = []
        self._markers = markup_markers(plan.format)

    def feed(self, text: str) -> list[Delta]:
        return self._apply(self._parser.feed(text)) if text else []

    def finish(self) -> list[Delta]:
        events, removed = cut_markup(self._parser.finish(), self._markers)
        if removed:
            self.warnings.append(
                f"the text of a tool call cut off by the end of the output was "
                f"dropped ({len(removed)} characters of markup)"
            )
        return self._apply(events)

    def _apply(self, events: list[Event]) -> list[Delta]:
        if len(events) > 1:
            events = coalesce(events)
        out: list[Delta] = []
        for ev in events:
            if isinstance(ev, ContentDelta):
                if ev.text:
                    self.content.append(ev.text)
                    out.append(Delta(CONTENT, ev.text))
            elif isinstance(ev, ReasoningDelta):
                if ev.text:
                    self.reasoning.append(ev.text)
                    out.append(Delta(REASONING, ev.text))
            elif isinstance(ev, ToolCallStart):
                reason = self._refuse(ev.name)
                if reason:
                    self._dropped.add(ev.index)
                    self.warnings.append(f"tool call {ev.name!r} dropped: {reason}")
                    continue
                idx = len(self._calls)
                self._out[ev.index] = idx
                self._calls.append({"id": ev.id, "type": "function", "function": {"name": ev.name, "arguments": ""}})
                self._args.append([])
                out.append(Delta(CALL_START, index=idx, id=ev.id, name=ev.name))
            elif isinstance(ev, ToolCallArgsDelta):
                at = self._out.get(ev.index)
                if at is not None and ev.text:
                    self._args[at].append(ev.text)
                    out.append(Delta(CALL_ARGS, ev.text, index=at))
            elif isinstance(ev, ToolCallEnd):
                end = self._out.get(ev.index)
                if end is not None:
                    self._ended.add(end)
                    out.append(Delta(CALL_END, index=end))
            elif isinstance(ev, ParseWarning):
                self.warnings.append(ev.message)
        return out

    def _refuse(self, name: str) -> str | None:
        plan = self.plan
        if plan.tool_choice == "none":
            return 'tool_choice is "none"' if plan.tools else "the request declares no tools"
        if plan.named_tool is not None and name != plan.named_tool:
            return f"tool_choice names {plan.named_tool!r}"
        if not plan.parallel and self._calls:
            return "parallel_tool_calls is false and a call was already made"
        return None

    def tool_calls(self) -> list[dict[str, Any]]:
        """The complete kept calls, arguments as JSON text (invalid JSON is dropped)."""
        calls = []
        for idx, call in enumerate(self._calls):
            if idx not in self._ended:
                continue
            args = "".join(self._args[idx])
            try:
                json.loads(args)
            except ValueError:
                continue
            calls.append({**call, "function": {**call["function"], "arguments": args}})
        return calls

    def finish_reason(self, stop_type: str | None) -> str:
        if stop_type == "limit":
            return "length"
        if self.tool_calls():
            return "tool_calls"
        return "stop"

    def final_warnings(self, stop_type: str | None) -> list[str]:
        """Warnings, plus a note when a required tool call was not made."""
        warnings = list(self.warnings)
        if self.plan.tool_choice == "required" and not self.tool_calls():
            what = f"{self.plan.named_tool!r}" if self.plan.named_tool else "a tool"
            warnings.append(f"tool_choice required {what} but the model made no complete call")
        started = len(self._calls) - len(self.tool_calls())
        if started and stop_type == "limit":
            warnings.append(f"{started} tool call(s) cut off by the token limit; dropped")
        return warnings

    def message(self) -> dict[str, Any]:
        """The non-streamed assistant message."""
        calls = self.tool_calls()
        content = "".join(self.content)
        reasoning = "".join(self.reasoning)
        msg: dict[str, Any] = {"role": "assistant", "content": content if (content or not calls) else None}
        if reasoning:
            msg["reasoning_content"] = reasoning
        if calls:
            msg["tool_calls"] = calls
        return msg


__all__ = [
    "CALL_ARGS",
    "CALL_END",
    "CALL_START",
    "CONTENT",
    "REASONING",
    "Delta",
    "Turn",
    "cut_markup",
    "markup_markers",
]
