"""``POST /v1/messages`` and ``POST /v1/messages/count_tokens``: the Anthropic Messages API.

A Messages request is translated into the gateway's chat request
(:func:`~._messages_translate.to_chat`) and served exactly as ``/v1/chat/completions`` serves
it: the same template rendering, tool-call format, grammar-forced ``tool_choice``, reasoning
memory, slot affinity (``X-Session-Id``, Claude Code's ``X-Claude-Code-Session-Id``, else
``metadata.user_id``), per-key limits and disconnect handling. The turn's deltas become
Messages content blocks (:class:`~._messages_translate.Blocks`); streamed, as SSE with
``event:`` lines: ``message_start`` and a ``ping`` at once, more pings every
:data:`PING_S` seconds until the engine's first token, the blocks' events, ``message_delta``
(stop reason and the whole usage) and ``message_stop``.

Errors have Anthropic's shape and statuses (:func:`~._messages_translate.anthropic_error`),
also inside a stream (``event: error``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .._errors import EngineError
from ..engine import CompletionStream
from ._access import RequestRecord, request_record
from ._chat import LastChunk, Outcome, Timing, Turn, drive, record, take
from ._engine_errors import api_error
from ._errors import APIError, bad_request
from ._messages_translate import (
    PING,
    Blocks,
    Translated,
    anthropic_error,
    message_id,
    message_shell,
    remembered,
    sse,
    stop_reason,
    to_chat,
    usage,
)
from ._metrics import Metrics
from ._responses_http import GatewayLike
from ._schemas import ChatRequest, check_history, parse_body, safe_json_loads
from ._translate import Plan, ServedModel, plan_chat


class Gateway(GatewayLike, Protocol):
    """What the Messages routes use of :class:`~._app.Gateway` (a protocol: no import of the app)."""

    async def model(self) -> ServedModel: ...


PING_S = 5.0
"""Seconds between ``ping`` events while the engine has not sent its first token."""

CLAUDE_SESSION_HEADER = "x-claude-code-session-id"


def error_response(exc: APIError) -> JSONResponse:
    status, body = anthropic_error(exc)
    return JSONResponse(body, status_code=status, headers=exc.headers)


async def _anthropic(work: Callable[[], Awaitable[Response]]) -> Response:
    try:
        return await work()
    except APIError as exc:
        return error_response(exc)
    except EngineError as exc:
        return error_response(api_error(exc))
    except Exception as exc:  # noqa: BLE001 - a gateway defect: still an Anthropic-shaped answer
        return error_response(APIError(500, f"internal error: {type(exc).__name__}: {exc}", type_="server_error"))


async def _translate(gw: Gateway, request: Request, key: str, *, count_only: bool = False) -> tuple[Translated, Plan]:
    raw = await gw.read_body(request)
    data = safe_json_loads(raw)
    if not isinstance(data, dict):
        raise bad_request("the request body must be a JSON object")
    name = data.get("model")
    if name is not None and not isinstance(name, str):
        raise bad_request("model: must be a string", "model")
    if not count_only and not isinstance(name, str):
        raise bad_request("model: required", "model")
    model = await gw.check_model(name)
    request_record(request).model = model.id
    tr = to_chat(data, model.template, count_only=count_only)
    if count_only:
        tr.chat["max_tokens"] = 1
    req: ChatRequest = parse_body(ChatRequest, json.dumps(tr.chat, ensure_ascii=False).encode())
    check_history(req)
    restore = (lambda messages: gw.memory.restore(key, messages)) if gw.config.restore_reasoning else None
    plan = plan_chat(req, model, test_hooks=gw.config.test_hooks, restore=restore)
    tr.model = tr.model or model.id
    return tr, plan


StreamResponse = Callable[[AsyncIterator[bytes]], Response]
"""Makes the streamed response (the app's ``EngineStream``, which notices a client that leaves)."""


async def messages(gw: Gateway, request: Request, stream_response: StreamResponse) -> Response:
    return await _anthropic(lambda: _messages(gw, request, stream_response))


async def _messages(gw: Gateway, request: Request, stream_response: StreamResponse) -> Response:
    timing = Timing(arrived=time.perf_counter())
    key = gw.authenticate(request)
    tr, plan = await _translate(gw, request, key)
    rec = request_record(request)
    session = request.headers.get("x-session-id") or request.headers.get(CLAUDE_SESSION_HEADER) or tr.session
    if session:
        gw.pin(plan.body, str(session)[:256])  # one engine slot (and replica) per session
    turn = Turn(plan, plan.parser())
    streamed = tr.chat.get("stream") is True
    blocks = Blocks(stream=streamed)
    stack = contextlib.AsyncExitStack()
    if gw.config.restore_reasoning:
        stack.callback(lambda: gw.memory.remember(key, remembered(blocks, "".join(turn.reasoning))))

    async def open_() -> CompletionStream:
        timing.engine_called = time.perf_counter()
        return await stack.enter_async_context(gw.backend.stream(plan.request()))

    events = await gw.start(request, key, stack, open_)
    if events is None:
        return Response(status_code=499)
    if streamed:
        body = stream_messages(events, tr, turn, blocks, timing, gw.metrics, stack.aclose, rec)
        return stream_response(body)
    result = await gw.whole(request, stack, collect_messages(events, tr, turn, blocks, timing, gw.metrics, rec))
    if result is None:
        return Response(status_code=499)
    return JSONResponse(result)


async def collect_messages(
    events: CompletionStream,
    tr: Translated,
    turn: Turn,
    blocks: Blocks,
    timing: Timing,
    metrics: Metrics,
    rec: RequestRecord | None = None,
) -> dict[str, Any]:
    """The whole Messages answer (the caller closes ``events``)."""
    outcome = Outcome()
    async for deltas in drive(events, turn, outcome, timing):
        blocks.feed(deltas)
    blocks.finish()
    body = message_shell(message_id(), tr.model or "")
    body["content"] = blocks.content
    body["stop_reason"], body["stop_sequence"] = stop_reason(blocks, outcome.final, tr.stop_sequences)
    body["usage"] = usage(outcome.final)
    warnings = turn.final_warnings(outcome.stop_type) + blocks.warnings + tr.warnings
    if warnings:
        body["splitserve"] = {"warnings": warnings}
    record(metrics, outcome, timing, turn, warnings, rec)
    return body


async def _first_batch(it: AsyncIterator[list[dict[str, Any]]]) -> AsyncIterator[bytes | list[dict[str, Any]] | None]:
    """Pings every :data:`PING_S` seconds until the engine's first batch, then that batch (None
    at the end of the stream)."""
    task = asyncio.ensure_future(anext(it, None))
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=PING_S)
            if done:
                break
            yield PING
    finally:
        if not task.done():
            task.cancel()
            with anyio.CancelScope(shield=True), contextlib.suppress(BaseException):
                await task
    yield task.result()


async def stream_messages(
    events: CompletionStream,
    tr: Translated,
    turn: Turn,
    blocks: Blocks,
    timing: Timing,
    metrics: Metrics,
    release: Callable[[], Awaitable[None]],
    rec: RequestRecord | None = None,
) -> AsyncIterator[bytes]:
    r"""The SSE body of a streamed Messages answer; closes the engine stream and ``release``\ s
    the request's slot however it ends."""
    outcome = Outcome()
    model = tr.model or ""
    try:
        try:
            yield sse("message_start", {"type": "message_start", "message": message_shell(message_id(), model)}) + PING
            it = events.__aiter__()
            first: list[dict[str, Any]] | None = None
            async for got in _first_batch(it):
                if isinstance(got, bytes):
                    yield got
                else:
                    first = got
            if first is not None:
                parts = blocks.feed(take(first, turn, outcome, timing))
                if parts:
                    timing.first_sent = time.perf_counter()
                    yield b"".join(parts)
                if not outcome.final:
                    async for batch in it:
                        parts = blocks.feed(take(batch, turn, outcome, timing))
                        if parts:
                            if not timing.first_sent:
                                timing.first_sent = time.perf_counter()
                            yield b"".join(parts) if len(parts) > 1 else parts[0]
                        if outcome.final:
                            break
            parts = blocks.feed(turn.finish()) + blocks.finish()
            if parts:
                yield b"".join(parts)
        except (EngineError, APIError) as exc:
            error = api_error(exc) if isinstance(exc, EngineError) else exc
            yield sse("error", anthropic_error(error)[1])
            return
        reason, seq = stop_reason(blocks, outcome.final, tr.stop_sequences)
        delta: dict[str, Any] = {
            "type": "message_delta",
            "delta": {"stop_reason": reason, "stop_sequence": seq},
            "usage": usage(outcome.final),
        }
        warnings = turn.final_warnings(outcome.stop_type) + blocks.warnings + tr.warnings
        if warnings:
            delta["splitserve"] = {"warnings": warnings}
        try:
            yield LastChunk(sse("message_delta", delta) + sse("message_stop", {"type": "message_stop"}))
        finally:
            record(metrics, outcome, timing, turn, warnings, rec)
    finally:
        with anyio.CancelScope(shield=True):
            await events.aclose()
            await release()


async def count_tokens(gw: Gateway, request: Request) -> Response:
    async def work() -> Response:
        key = gw.authenticate(request)
        _, plan = await _translate(gw, request, key, count_only=True)
        model = await gw.model()
        try:
            tokens = await gw.backend.tokenize(plan.prompt, add_special=model.add_bos)
        except EngineError as exc:
            raise api_error(exc) from None
        return JSONResponse({"input_tokens": len(tokens)})

    return await _anthropic(work)


async def not_found(request: Request) -> Response:
    if request.url.path in ("/v1/messages", "/v1/messages/count_tokens"):
        return error_response(APIError(405, f"method not allowed: {request.method} {request.url.path} (POST only)"))
    return error_response(APIError(404, f"no such endpoint: {request.method} {request.url.path}"))


def messages_routes(gw: Gateway, wrap: Callable[..., Any], stream_response: StreamResponse) -> list[Route]:
    """The Messages API's routes (``wrap``: the app's per-request bookkeeping; ``stream_response``:
    makes a streamed answer)."""
    return [
        Route("/v1/messages", wrap(gw, "messages", lambda r: messages(gw, r, stream_response)), methods=["POST"]),
        Route("/v1/messages/count_tokens", wrap(gw, "count_tokens", lambda r: count_tokens(gw, r)), methods=["POST"]),
        # the other methods and paths under /v1/messages: 405 / 404 in Anthropic's shape
        Route("/v1/messages", wrap(gw, "messages", not_found), methods=["GET", "PUT", "PATCH", "DELETE"]),
        Route("/v1/messages/{rest:path}", wrap(gw, "messages", not_found), methods=["GET", "POST", "PUT", "DELETE"]),
    ]


__all__ = ["PING_S", "collect_messages", "count_tokens", "messages", "messages_routes", "stream_messages"]
