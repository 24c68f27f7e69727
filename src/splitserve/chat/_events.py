"""Parser events, the parsed message, and the assembler that turns events into a message.

Every format's parser emits the same small set of events, in output order:

- :class:`ContentDelta` / :class:`ReasoningDelta`: visible text and reasoning text;
- :class:`ToolCallStart` (index, id, name), then :class:`ToolCallArgsDelta` fragments whose
  concatenation is the call's arguments as a JSON object text, then :class:`ToolCallEnd`;
- :class:`ParseWarning`: something in the output was malformed or cut off; the parser
  recovered (it never raises on model output) and says what it did.

A call that starts but never ends (output cut off by the token limit) gets no
:class:`ToolCallEnd`; :class:`MessageAssembler` drops it and keeps the calls before it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class ContentDelta:
    """Visible assistant text."""

    text: str


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    """Reasoning ("thinking") text, without its markers."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolCallStart:
    """A tool call begins: its position among this message's calls, a unique id, the name."""

    index: int
    id: str
    name: str


@dataclass(frozen=True, slots=True)
class ToolCallArgsDelta:
    """A fragment of the call's arguments JSON text; fragments concatenate to a JSON object."""

    index: int
    text: str


@dataclass(frozen=True, slots=True)
class ToolCallEnd:
    """The call with this index is complete; its argument fragments form valid JSON."""

    index: int


@dataclass(frozen=True, slots=True)
class ParseWarning:
    """The output was malformed or truncated; ``raw`` holds the text concerned."""

    message: str
    raw: str = ""


Event = ContentDelta | ReasoningDelta | ToolCallStart | ToolCallArgsDelta | ToolCallEnd | ParseWarning


@dataclass
class ParsedMessage:
    """One assistant message as the OpenAI API returns it.

    ``tool_calls`` are OpenAI dicts ``{"id", "type": "function", "function": {"name",
    "arguments"}}`` with ``arguments`` a JSON string; ``warnings`` lists what the parser
    recovered from; ``dropped_calls`` counts calls cut off before their end.
    """

    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    dropped_calls: int = 0

    def to_openai(self) -> dict[str, Any]:
        """The ``{"content", "reasoning_content", "tool_calls"}`` object `splitserve parse` prints."""
        return {"content": self.content, "reasoning_content": self.reasoning_content, "tool_calls": self.tool_calls}


class MessageAssembler:
    """Collects events (from one parser) into a :class:`ParsedMessage`."""

    def __init__(self) -> None:
        self._content: list[str] = []
        self._reasoning: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self._args: dict[int, list[str]] = {}
        self._ended: set[int] = set()
        self._warnings: list[str] = []

    def add(self, events: list[Event]) -> None:
        """Take a batch of events, in order."""
        for ev in events:
            if isinstance(ev, ContentDelta):
                self._content.append(ev.text)
            elif isinstance(ev, ReasoningDelta):
                self._reasoning.append(ev.text)
            elif isinstance(ev, ToolCallStart):
                self._calls[ev.index] = {
                    "id": ev.id,
                    "type": "function",
                    "function": {"name": ev.name, "arguments": ""},
                }
                self._args[ev.index] = []
            elif isinstance(ev, ToolCallArgsDelta):
                self._args.setdefault(ev.index, []).append(ev.text)
            elif isinstance(ev, ToolCallEnd):
                self._ended.add(ev.index)
            elif isinstance(ev, ParseWarning):
                self._warnings.append(ev.message)

    def result(self) -> ParsedMessage:
        """The message so far; calls without an end are dropped."""
        calls = []
        dropped = 0
        warnings = list(self._warnings)
        for index in sorted(self._calls):
            if index not in self._ended:
                dropped += 1
                continue
            call = {**self._calls[index], "function": dict(self._calls[index]["function"])}
            args = "".join(self._args.get(index, []))
            try:
                json.loads(args)
            except ValueError:  # a parser defect; never hand invalid JSON to a client
                dropped += 1
                warnings.append(f"tool call {index}: arguments were not valid JSON; dropped")
                continue
            call["function"]["arguments"] = args
            calls.append(call)
        content = "".join(self._content)
        reasoning = "".join(self._reasoning)
        return ParsedMessage(
            content=content if content.strip() else None,
            reasoning_content=reasoning if reasoning.strip() else None,
            tool_calls=calls,
            warnings=warnings,
            dropped_calls=dropped,
        )


def coalesce(events: list[Event]) -> list[Event]:
    """Merge adjacent deltas of the same kind (and call): the chunking-independent view."""
    out: list[Event] = []
    for ev in events:
        last = out[-1] if out else None
        if isinstance(ev, ContentDelta) and isinstance(last, ContentDelta):
            out[-1] = ContentDelta(last.text + ev.text)
        elif isinstance(ev, ReasoningDelta) and isinstance(last, ReasoningDelta):
            out[-1] = ReasoningDelta(last.text + ev.text)
        elif isinstance(ev, ToolCallArgsDelta) and isinstance(last, ToolCallArgsDelta) and last.index == ev.index:
            out[-1] = ToolCallArgsDelta(ev.index, last.text + ev.text)
        elif isinstance(ev, (ContentDelta, ReasoningDelta, ToolCallArgsDelta)) and not ev.text:
            continue
        else:
            out.append(ev)
    return out
