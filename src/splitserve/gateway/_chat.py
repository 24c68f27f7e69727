"""Engine token events -> OpenAI deltas, and ``/v1/chat/completions`` written from them.

One module for one job, on the hot path of every generation route (chat, Messages,
Responses): :class:`Turn` feeds the engine's text to the format's incremental parser and
applies the request's tool policy; :func:`take` turns one batch of engine events into the
deltas the client sees; :func:`stream_chat` writes each delta as an OpenAI
``chat.completion.chunk`` as soon as the parser lets it go (the role-only chunk with the
first of them, never before the engine's first token), :func:`collect_chat` collects the
same deltas into one ``chat.completion``.

The tool policy, the same whether the answer is streamed or not (so the two can never disagree):

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
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from json.encoder import encode_basestring
from typing import Any

import anyio

from .._errors import EngineError
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
from ..engine import CompletionStream
from ._access import RequestRecord
from ._engine_errors import api_error
from ._errors import APIError
from ._metrics import Metrics
from ._translate import Plan, ServedModel, dumps

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


class LastChunk(bytes):
    """The last bytes of a streamed body: :class:`~._app.EngineStream` writes them with the
    body's end, in one write, before it lets the generator finish (counting, closing the
    engine's stream, freeing the slot: work the client need not wait for)."""


@dataclass
class Timing:
    """Monotonic instants of one request (seconds, ``time.perf_counter``)."""

    arrived: float
    engine_called: float = 0.0
    first_engine_token: float = 0.0
    first_sent: float = 0.0

    def added(self) -> float | None:
        if not (self.engine_called and self.first_engine_token and self.first_sent):
            return None
        return (self.engine_called - self.arrived) + (self.first_sent - self.first_engine_token)


@dataclass
class Outcome:
    """What the engine said at the end of the stream."""

    final: dict[str, Any] = field(default_factory=dict)

    @property
    def stop_type(self) -> str | None:
        value = self.final.get("stop_type")
        return value if isinstance(value, str) else None

    @property
    def timings(self) -> dict[str, Any] | None:
        """llama.cpp's ``timings`` (prompt/predicted n, ms, per second), passed on as llama-server does."""
        value = self.final.get("timings")
        return value if isinstance(value, dict) and value else None

    def usage(self) -> dict[str, Any]:
        f = self.final
        prompt = int(f.get("tokens_evaluated") or 0)
        completion = int(f.get("tokens_predicted") or 0)
        timings = f.get("timings") or {}
        cached = int(timings.get("cache_n") or 0)
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached},
        }


def completion_id() -> str:
    return "chatcmpl-" + secrets.token_hex(12)


def record(
    metrics: Metrics, outcome: Outcome, timing: Timing, turn: Turn, warnings: list[str], rec: RequestRecord | None
) -> None:
    """Count one finished chat answer; the request metrics and the access log line come from
    ``rec`` when the request ends (see _access)."""
    timings = outcome.final.get("timings") or {}
    usage = outcome.usage()
    if rec is not None:
        rec.usage(usage, turn.finish_reason(outcome.stop_type))
        rec.timings(timings)
        first = timing.first_sent or timing.first_engine_token
        if first:
            rec.ttft_s = first - timing.arrived
    tps = timings.get("predicted_per_second")
    if isinstance(tps, (int, float)) and tps > 0 and usage["completion_tokens"] > 1:
        metrics.tps.observe(float(tps))
    metrics.on_timings(timings)
    added = timing.added()
    if added is not None:
        metrics.added.observe(added)
    if warnings:
        metrics.warnings.inc(len(warnings))


def take(batch: list[dict[str, Any]], turn: Turn, outcome: Outcome, timing: Timing) -> list[Delta]:
    """The deltas of one batch of engine events (one read of its stream); the ``stop`` event
    lands in ``outcome`` and ends the answer: nothing after it is read. (Not waiting for the
    engine to end its body: on the H200, waiting cost 2-5 % of tokens/s; the engine reader
    takes the body's end in the background.)"""
    out: list[Delta] = []
    for data in batch:
        text = data.get("content")
        if text:
            if not timing.first_engine_token:
                timing.first_engine_token = time.perf_counter()
            out += turn.feed(text)
        if data.get("stop"):
            outcome.final = data
            break
    return out


async def drive(events: CompletionStream, turn: Turn, outcome: Outcome, timing: Timing) -> AsyncIterator[list[Delta]]:
    """Engine events -> lists of deltas, one list per read of the engine's stream (see
    :func:`take`); the parser's last deltas at the end."""
    try:
        async for batch in events:
            out = take(batch, turn, outcome, timing)
            if out:
                yield out
            if outcome.final:
                break
    except EngineError as exc:
        raise api_error(exc) from None
    deltas = turn.finish()
    if deltas:
        yield deltas


def _wire_delta(d: Delta) -> dict[str, Any] | None:
    if d.kind == CONTENT:
        return {"content": d.text}
    if d.kind == REASONING:
        return {"reasoning_content": d.text}
    if d.kind == CALL_START:
        return {
            "tool_calls": [
                {"index": d.index, "id": d.id, "type": "function", "function": {"name": d.name, "arguments": ""}}
            ]
        }
    if d.kind == CALL_ARGS:
        return {"tool_calls": [{"index": d.index, "function": {"arguments": d.text}}]}
    return None  # CALL_END: nothing on the wire


def _wire(deltas: list[Delta], head: bytes, tail: bytes) -> list[bytes]:
    """The chunks of these deltas. Text, nearly every token's delta, is encoded directly (the
    bytes ``dumps`` writes for ``{"content": text}``, without a JSON encoder per token)."""
    parts = []
    for d in deltas:
        if d.kind == CONTENT:
            parts.append(head + b'{"content":' + encode_basestring(d.text).encode() + b"}" + tail)
        elif d.kind == REASONING:
            parts.append(head + b'{"reasoning_content":' + encode_basestring(d.text).encode() + b"}" + tail)
        else:
            wire = _wire_delta(d)
            if wire is not None:
                parts.append(head + dumps(wire).encode() + tail)
    return parts


async def stream_chat(
    events: CompletionStream,
    plan: Plan,
    model: ServedModel,
    turn: Turn,
    timing: Timing,
    metrics: Metrics,
    release: Callable[[], Awaitable[None]],
    rec: RequestRecord | None = None,
) -> AsyncIterator[bytes]:
    r"""The SSE body of a streamed chat completion; closes the engine stream and ``release``\ s
    the request's slot however it ends."""
    cid = completion_id()
    created = int(time.time())
    head = (
        f'data: {{"id":"{cid}","object":"chat.completion.chunk","created":{created},'
        f'"model":{dumps(model.id)},"choices":[{{"index":0,"delta":'
    ).encode()
    tail = b',"logprobs":null,"finish_reason":null}]}\n\n'
    outcome = Outcome()
    # The role-only chunk goes out with the first real delta (as llama-server does), not at
    # once: a client timing its first token from the first chunk would time nothing else.
    role = head + b'{"role":"assistant","content":""}' + tail
    try:
        try:
            # drive inlined: one generator layer fewer per read of the engine.
            async for batch in events:
                parts = _wire(take(batch, turn, outcome, timing), head, tail)
                if parts:
                    if not timing.first_sent:
                        timing.first_sent = time.perf_counter()
                        parts.insert(0, role)
                    yield b"".join(parts) if len(parts) > 1 else parts[0]
                if outcome.final:
                    break
            parts = _wire(turn.finish(), head, tail)
            if parts:
                if not timing.first_sent:
                    timing.first_sent = time.perf_counter()
                    parts.insert(0, role)
                yield b"".join(parts)
        except (EngineError, APIError) as exc:
            error = api_error(exc) if isinstance(exc, EngineError) else exc
            yield b"data: " + error.body_bytes() + b"\n\n"
            return
        warnings = turn.final_warnings(outcome.stop_type)
        last: dict[str, Any] = {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model.id,
            "choices": [
                {"index": 0, "delta": {}, "logprobs": None, "finish_reason": turn.finish_reason(outcome.stop_type)}
            ],
        }
        if warnings:
            last["splitserve"] = {"warnings": warnings}
        if outcome.timings:
            last["timings"] = outcome.timings
        chunks = [b"data: " + dumps(last).encode() + b"\n\n"]
        if not timing.first_sent:  # no delta at all: the role still comes first
            chunks.insert(0, role)
        if plan.include_usage:
            chunks.append(
                b"data: "
                + dumps(
                    {
                        "id": cid,
                        "object": "chat.completion.chunk",
                        "created": created,
                        "model": model.id,
                        "choices": [],
                        "usage": outcome.usage(),
                    }
                ).encode()
                + b"\n\n"
            )
        chunks.append(b"data: [DONE]\n\n")
        try:
            yield LastChunk(b"".join(chunks))
        finally:
            # Counted once the client has the whole answer (the writer ends the body with
            # the last chunk before it resumes this generator), off the client's path.
            record(metrics, outcome, timing, turn, warnings, rec)
    finally:
        with anyio.CancelScope(shield=True):
            await events.aclose()
            await release()


async def collect_chat(
    events: CompletionStream,
    plan: Plan,
    model: ServedModel,
    turn: Turn,
    timing: Timing,
    metrics: Metrics,
    rec: RequestRecord | None = None,
) -> dict[str, Any]:
    """The whole ``chat.completion`` object (the caller closes ``events``)."""
    outcome = Outcome()
    async for _ in drive(events, turn, outcome, timing):
        if not timing.first_sent:
            timing.first_sent = time.perf_counter()
    warnings = turn.final_warnings(outcome.stop_type)
    body: dict[str, Any] = {
        "id": completion_id(),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model.id,
        "choices": [
            {
                "index": 0,
                "message": turn.message(),
                "logprobs": None,
                "finish_reason": turn.finish_reason(outcome.stop_type),
            }
        ],
        "usage": outcome.usage(),
    }
    if warnings:
        body["splitserve"] = {"warnings": warnings}
    if outcome.timings:
        body["timings"] = outcome.timings
    timing.first_sent = 0.0  # a whole answer has no first token on the wire
    record(metrics, outcome, timing, turn, warnings, rec)
    return body


__all__ = [
    "CALL_ARGS",
    "CALL_END",
    "CALL_START",
    "CONTENT",
    "REASONING",
    "Delta",
    "LastChunk",
    "Outcome",
    "Timing",
    "Turn",
    "collect_chat",
    "cut_markup",
    "drive",
    "markup_markers",
    "record",
    "stream_chat",
    "take",
]
