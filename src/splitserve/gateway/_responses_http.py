"""The ``POST /v1/responses`` route: a Responses request through the gateway's chat path.

The request becomes the gateway's one chat request (:func:`._responses.to_chat`), is planned
and sent as chat's is (:func:`._translate.plan_chat`: the template, the tool-call grammar,
``json_schema``), and the engine's output is read by the same :class:`~._chat.Turn`, whose
deltas :class:`~._responses_out.ResponseBuilder` turns into items and events. So an agent
loop on this path keeps what chat gives it: the reasoning memory (reasoning a client dropped
is put back by tool-call id) and the session's engine slot (``X-Session-Id``, else
``prompt_cache_key``, else ``user``, else Codex's ``session-id`` header).

A prompt longer than the engine's context is ``context_length_exceeded``: a 400 for a whole
answer, a ``response.failed`` event for a streamed one (Codex then compacts its history).
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol, TypeVar

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .._errors import EngineError
from ..engine import CompletionStream, EngineBackend
from ._access import RequestRecord
from ._chat import REASONING, Delta, LastChunk, Outcome, Timing, Turn, record, take
from ._engine_errors import api_error
from ._errors import APIError
from ._metrics import Metrics
from ._responses import ChatPlan, ResponsesRequest, ResponseStore, to_chat
from ._responses_out import ResponseBuilder, responses_usage
from ._schemas import check_history, parse_body
from ._session import ReasoningMemory, session_key
from ._translate import Plan, ServedModel, plan_chat

T = TypeVar("T")


class GatewayLike(Protocol):
    """What the route uses of :class:`~._app.Gateway`."""

    config: Any
    metrics: Metrics
    memory: ReasoningMemory
    backend: EngineBackend

    def pin(self, body: dict[str, Any], session: str) -> None: ...

    def authenticate(self, request: Request) -> str: ...

    async def read_body(self, request: Request) -> bytes: ...

    async def check_model(self, name: str | None) -> ServedModel: ...

    async def start(
        self,
        request: Request,
        key: str,
        stack: contextlib.AsyncExitStack,
        open_: Callable[[], Awaitable[T]],
    ) -> T | None: ...

    async def whole(self, request: Request, stack: contextlib.AsyncExitStack, work: Awaitable[T]) -> T | None: ...


_CONTEXT = re.compile(r"context (size|length|window)|maximum context|too many tokens|exceeds the", re.I)


def context_exceeded(exc: APIError) -> bool:
    """Whether the engine refused the prompt for its length (llama-server's "exceeds the
    available context size", vLLM's "maximum context length"), at the start or, from an
    engine that says so in the stream, mid-stream (a 502 then)."""
    return exc.status in (400, 502) and bool(_CONTEXT.search(exc.message))


def _too_long(exc: APIError) -> APIError:
    return APIError(400, exc.message, param="input", code="context_length_exceeded")


def session_of(request: Request, req: ResponsesRequest) -> str | None:
    """The session key: chat's (``X-Session-Id``), else ``prompt_cache_key``, ``user`` or
    Codex's ``session-id`` header."""
    fallback = req.prompt_cache_key or req.user or request.headers.get("session-id")
    return session_key(request.headers, {"user": fallback})


def echo(req: ResponsesRequest) -> dict[str, Any]:
    """The request fields a response repeats."""
    extra = req.model_extra or {}
    return {
        "instructions": req.instructions,
        "tools": req.tools or [],
        "tool_choice": req.tool_choice or "auto",
        "parallel_tool_calls": req.parallel_tool_calls is not False,
        "max_output_tokens": req.max_output_tokens,
        "temperature": req.temperature,
        "top_p": req.top_p,
        "previous_response_id": req.previous_response_id,
        "reasoning": req.reasoning or {"effort": None, "summary": None},
        "text": req.text or {"format": {"type": "text"}},
        "store": req.store is not False,
        "truncation": "disabled",
        "metadata": extra.get("metadata") if isinstance(extra.get("metadata"), dict) else {},
    }


class _Counts:
    """Characters of the engine's output, and of its reasoning (for ``reasoning_tokens``)."""

    raw = 0
    reasoning = 0


def _count(deltas: list[Delta], counts: _Counts) -> list[Delta]:
    for d in deltas:
        if d.kind == REASONING:
            counts.reasoning += len(d.text)
    return deltas


class _Answer:
    """One answer in progress: the pieces both the streamed and the whole path use."""

    def __init__(
        self,
        gw: GatewayLike,
        plan: Plan,
        turn: Turn,
        builder: ResponseBuilder,
        timing: Timing,
        rec: RequestRecord | None,
        on_done: Callable[[], None],
    ) -> None:
        self.gw = gw
        self.plan = plan
        self.turn = turn
        self.builder = builder
        self.timing = timing
        self.rec = rec
        self.on_done = on_done
        self.outcome = Outcome()
        self.counts = _Counts()

    def feed(self, batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
        self.counts.raw += sum(len(data.get("content") or "") for data in batch)
        return self.builder.feed(_count(take(batch, self.turn, self.outcome, self.timing), self.counts))

    def finish(self) -> list[dict[str, Any]]:
        events = self.builder.feed(_count(self.turn.finish(), self.counts))
        warnings = self.turn.final_warnings(self.outcome.stop_type)
        usage = responses_usage(self.outcome.usage(), self.counts.reasoning, self.counts.raw)
        return events + self.builder.finish(self.outcome.stop_type, usage, warnings)

    def record(self) -> None:
        record(
            self.gw.metrics,
            self.outcome,
            self.timing,
            self.turn,
            self.turn.final_warnings(self.outcome.stop_type),
            self.rec,
        )
        self.on_done()


async def _stream(
    events: CompletionStream, answer: _Answer, release: Callable[[], Awaitable[None]]
) -> AsyncIterator[bytes]:
    r"""The SSE body of a streamed response; closes the engine stream and ``release``\ s the
    request's slot however it ends."""
    b = answer.builder
    timing = answer.timing
    try:
        yield b.sse(b.start())
        try:
            async for batch in events:
                out = answer.feed(batch)
                if out:
                    if not timing.first_sent:
                        timing.first_sent = time.perf_counter()
                    yield b.sse(out)
                if answer.outcome.final:
                    break
            last = answer.finish()
        except (EngineError, APIError) as exc:
            error = api_error(exc) if isinstance(exc, EngineError) else exc
            code = "context_length_exceeded" if context_exceeded(error) else "server_error"
            yield b.sse(b.fail(code, error.message))
            return
        try:
            yield LastChunk(b.sse(last))
        finally:
            answer.record()
    finally:
        with anyio.CancelScope(shield=True):
            await events.aclose()
            await release()


async def _failed(builder: ResponseBuilder, error: APIError) -> AsyncIterator[bytes]:
    """A streamed response that fails before the engine starts (the prompt does not fit)."""
    yield LastChunk(builder.sse(builder.start() + builder.fail("context_length_exceeded", error.message)))


async def _collect(events: CompletionStream, answer: _Answer) -> dict[str, Any]:
    try:
        async for batch in events:
            answer.feed(batch)
            if not answer.timing.first_sent:
                answer.timing.first_sent = time.perf_counter()
            if answer.outcome.final:
                break
    except EngineError as exc:
        error = api_error(exc)
        raise _too_long(error) if context_exceeded(error) else error from None
    answer.finish()
    answer.timing.first_sent = 0.0  # a whole answer has no first token on the wire
    answer.record()
    return answer.builder.response()


def responses_handler(
    gw: GatewayLike, stream_response: Callable[[AsyncIterator[bytes]], Response], store: ResponseStore | None = None
) -> Callable[[Request], Awaitable[Response]]:
    """The route's handler; ``stream_response`` makes the streamed response of an SSE body
    (the app's ``EngineStream``, which notices a client that leaves)."""
    responses = store if store is not None else ResponseStore()

    async def handle(request: Request) -> Response:
        timing = Timing(arrived=time.perf_counter())
        key = gw.authenticate(request)
        raw = await gw.read_body(request)
        req: ResponsesRequest = parse_body(ResponsesRequest, raw)
        model = await gw.check_model(req.model)
        rec: RequestRecord | None = getattr(request.state, "record", None)
        if rec is not None:
            rec.model = model.id
        history = responses.get(key, req.previous_response_id) if req.previous_response_id else None
        cp: ChatPlan = to_chat(req, model.template, history)
        check_history(cp.chat)
        restore_on = gw.config.restore_reasoning
        restore = (lambda messages: gw.memory.restore(key, messages)) if restore_on else None
        plan = plan_chat(cp.chat, model, test_hooks=gw.config.test_hooks, restore=restore)
        session = session_of(request, req)
        if session is not None:
            gw.pin(plan.body, session)  # one engine slot (and replica) per session
        turn = Turn(plan, plan.parser())
        builder = ResponseBuilder(model.id, cp.tools, echo(req))
        builder.warnings += cp.warnings + plan.warnings

        def done() -> None:
            if req.store is not False and builder.status in ("completed", "incomplete"):
                responses.put(key, builder.id, cp.items + [dict(item) for item in builder.output])

        answer = _Answer(gw, plan, turn, builder, timing, rec, done)
        stack = contextlib.AsyncExitStack()
        if restore_on:
            stack.callback(lambda: gw.memory.remember(key, turn.message()))

        async def open_() -> CompletionStream:
            timing.engine_called = time.perf_counter()
            return await stack.enter_async_context(gw.backend.stream(plan.request()))

        try:
            events = await gw.start(request, key, stack, open_)
        except APIError as exc:
            if not context_exceeded(exc):
                raise
            if req.stream:
                return stream_response(_failed(builder, exc))
            raise _too_long(exc) from None
        if events is None:
            return Response(status_code=499)
        if req.stream:
            return stream_response(_stream(events, answer, stack.aclose))
        result = await gw.whole(request, stack, _collect(events, answer))
        if result is None:
            return Response(status_code=499)
        return JSONResponse(result)

    return handle


__all__ = ["GatewayLike", "context_exceeded", "responses_handler"]
