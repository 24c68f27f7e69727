"""``/v1/chat/completions``: streamed and non-streamed answers from one engine stream.

Both paths read the engine's token stream through a :class:`~._turn.Turn`; the streamed
path writes each delta as an OpenAI ``chat.completion.chunk`` as soon as the parser lets
it go (the role-only chunk with the first of them, never before the engine's first token),
the other collects the same deltas into one ``chat.completion``.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from json.encoder import encode_basestring
from typing import Any

import anyio

from .._errors import EngineError
from ..engine import CompletionStream
from ._access import RequestRecord
from ._errors import APIError
from ._metrics import Metrics
from ._translate import Plan, ServedModel, dumps
from ._turn import CALL_ARGS, CALL_START, CONTENT, REASONING, Delta, Turn
from ._upstream import api_error


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


def _take(batch: list[dict[str, Any]], turn: Turn, outcome: Outcome, timing: Timing) -> list[Delta]:
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


async def _drive(events: CompletionStream, turn: Turn, outcome: Outcome, timing: Timing) -> AsyncIterator[list[Delta]]:
    """Engine events -> lists of deltas, one list per read of the engine's stream (see
    :func:`_take`); the parser's last deltas at the end."""
    try:
        async for batch in events:
            out = _take(batch, turn, outcome, timing)
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
            # _drive inlined: one generator layer fewer per read of the engine.
            async for batch in events:
                parts = _wire(_take(batch, turn, outcome, timing), head, tail)
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
    async for _ in _drive(events, turn, outcome, timing):
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


__all__ = ["LastChunk", "Outcome", "Timing", "collect_chat", "stream_chat"]
