"""The gateway as an ASGI app: routes, auth, body limit, per-key limits, disconnects.

``create_app(GatewayConfig(...))`` returns a Starlette app; :func:`serve` runs it with
uvicorn. The served model (id, chat template, tool-call format) is read from the engine's
``/props`` on first use, so the gateway may start before the engine has loaded.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from ._auth import KeyRing
from ._chat import Timing, collect_chat, stream_chat
from ._errors import APIError
from ._limits import KeyLimiter
from ._metrics import Metrics
from ._schemas import ChatRequest, CompletionRequest, check_history, parse_body
from ._session import ReasoningMemory, SlotAffinity, session_key
from ._translate import ServedModel, plan_chat, resolve_format
from ._turn import Turn
from ._upstream import Upstream


@dataclass
class GatewayConfig:
    """Everything ``splitserve serve`` takes; see docs/gateway.md."""

    engine_url: str
    host: str = "127.0.0.1"
    port: int = 8000
    keys: KeyRing = field(default_factory=lambda: KeyRing({}))
    model_format: str | None = None
    model_name: str | None = None
    chat_template: str | None = None
    engine_api_key: str | None = None
    max_body_bytes: int = 8 * 1024 * 1024
    max_concurrent: int = 16
    max_queue: int = 64
    test_hooks: bool = False
    restore_reasoning: bool = True
    """Put back the reasoning a client dropped from its earlier assistant turns (see _session)."""
    slot_affinity: bool = True
    """Send the requests of one session (``X-Session-Id`` or ``user``) to one engine slot."""


class EngineStream(Response):
    """A streamed response that notices a client leaving and then closes its source.

    Starlette's own ``StreamingResponse`` only sees a disconnect when a write fails; this
    one also listens for ``http.disconnect`` while the engine is still thinking, so the
    engine's slot is freed at once.
    """

    def __init__(self, body: AsyncIterator[bytes], on_disconnect: Callable[[], None],
                 media_type: str = "text/event-stream", status_code: int = 200,
                 headers: dict[str, str] | None = None) -> None:
        self.body_iterator = body
        self.status_code = status_code
        given = {k.lower(): v for k, v in (headers or {}).items()}
        self.media_type = None if "content-type" in given else media_type
        self.background = None
        self._on_disconnect = on_disconnect
        self.init_headers({"cache-control": "no-cache", "x-accel-buffering": "no"} | given)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        gone = False
        gen = self.body_iterator
        try:
            async with anyio.create_task_group() as tg:
                async def listen() -> None:
                    nonlocal gone
                    while True:
                        message = await receive()
                        if message["type"] == "http.disconnect":
                            gone = True
                            tg.cancel_scope.cancel()
                            return

                tg.start_soon(listen)
                try:
                    await send({"type": "http.response.start", "status": self.status_code,
                                "headers": self.raw_headers})
                    async for chunk in gen:
                        await send({"type": "http.response.body", "body": chunk,
                                    "more_body": True})
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                except OSError:
                    gone = True
                tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await gen.aclose()  # type: ignore[attr-defined]
            if gone:
                self._on_disconnect()


def _error(exc: APIError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)


class Gateway:
    """State shared by the routes of one gateway."""

    def __init__(self, config: GatewayConfig) -> None:
        self.config = config
        self.metrics = Metrics()
        self.limiter = KeyLimiter(config.max_concurrent, config.max_queue,
                                  on_change=self.metrics.on_limits)
        self.upstream = Upstream(config.engine_url, api_key=config.engine_api_key)
        self._model: ServedModel | None = None
        self._model_lock = anyio.Lock()
        self.memory = ReasoningMemory()
        self._affinity: SlotAffinity | None = None

    # -- the served model ------------------------------------------------------------
    async def model(self) -> ServedModel:
        if self._model is not None:
            return self._model
        async with self._model_lock:
            if self._model is None:
                self._model = await self._load_model()
        return self._model

    async def _load_model(self) -> ServedModel:
        props = await self.upstream.get_json("/props")
        template = self.config.chat_template or props.get("chat_template") or ""
        if not template:
            raise APIError(500, "the engine reports no chat template; start the gateway with "
                           "--chat-template FILE", type_="server_error")
        path = str(props.get("model_path") or props.get("model_alias") or "model")
        base = os.path.basename(path)
        stem = base.removesuffix(".gguf")
        alias = str(props.get("model_alias") or "")
        aliases = tuple(a for a in {path, base, stem, alias} if a)
        settings = props.get("default_generation_settings") or {}
        add_bos = await self._engine_adds_bos()
        slots = props.get("total_slots")
        if isinstance(slots, int) and slots > 0:
            self._affinity = SlotAffinity(slots)
        return ServedModel(
            id=self.config.model_name or stem, template=template,
            format=resolve_format(self.config.model_format, template),
            bos_token=str(props.get("bos_token") or ""), eos_token=str(props.get("eos_token") or ""),
            aliases=aliases, n_ctx=settings.get("n_ctx"), created=int(time.time()), add_bos=add_bos)

    async def _engine_adds_bos(self) -> bool:
        """Whether the engine's tokenizer adds BOS: ``/tokenize`` with and without special tokens."""
        try:
            with_special = await self.upstream.post_json("/tokenize", {"content": "a", "add_special": True})
            without = await self.upstream.post_json("/tokenize", {"content": "a", "add_special": False})
        except APIError:
            return True  # an engine without /tokenize: llama.cpp's default
        a, b = with_special.get("tokens") or [], without.get("tokens") or []
        return len(a) > len(b) and a[len(a) - len(b):] == b

    async def check_model(self, name: str | None) -> ServedModel:
        """The served model if ``name`` is one of its names (or absent); else 404."""
        model = await self.model()
        if name is not None and not model.answers_to(name):
            raise APIError(404, f"the model {name!r} does not exist; this gateway serves "
                           f"{model.id!r}", param="model", code="model_not_found")
        return model

    # -- request plumbing ------------------------------------------------------------
    def authenticate(self, request: Request) -> str:
        keys = self.config.keys
        if not keys.enabled:
            return "anonymous"
        name = keys.check(request.headers.get("authorization"))
        if name is None:
            raise APIError(401, "missing or invalid API key: send 'Authorization: Bearer KEY'",
                           code="invalid_api_key")
        return name

    async def read_body(self, request: Request) -> bytes:
        limit = self.config.max_body_bytes
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > limit:
            raise APIError(413, f"the request body is {declared} bytes; the limit is {limit}",
                           code="request_too_large")
        chunks: list[bytes] = []
        size = 0
        try:
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise APIError(413, f"the request body exceeds the limit of {limit} bytes",
                                   code="request_too_large")
                chunks.append(chunk)
        except ClientDisconnect:
            raise APIError(400, "the client went away while sending the body") from None
        return b"".join(chunks)

    # -- routes ------------------------------------------------------------------------
    async def chat(self, request: Request) -> Response:
        timing = Timing(arrived=time.perf_counter())
        key = self.authenticate(request)
        raw = await self.read_body(request)
        req: ChatRequest = parse_body(ChatRequest, raw)
        check_history(req)
        model = await self.check_model(req.model)
        restore = ((lambda messages: self.memory.restore(key, messages))
                   if self.config.restore_reasoning else None)
        plan = plan_chat(req, model, test_hooks=self.config.test_hooks, restore=restore)
        session = session_key(request.headers, req.model_extra or {})
        if session is not None and self._affinity is not None and self.config.slot_affinity:
            plan.body.setdefault("id_slot", self._affinity.slot_for(session))
        turn = Turn(plan, plan.parser())
        stack = contextlib.AsyncExitStack()
        if self.config.restore_reasoning:
            stack.callback(lambda: self.memory.remember(key, turn.message()))
        await stack.enter_async_context(self.limiter.slot(key))
        try:
            timing.engine_called = time.perf_counter()
            resp = await self.upstream.completion(plan.body)
        except BaseException:
            await stack.aclose()
            raise
        if req.stream:
            body = stream_chat(resp, plan, model, turn, timing, self.metrics, stack.aclose)
            return EngineStream(body, self.metrics.disconnects.inc)
        try:
            result = await _unless_disconnected(
                request, collect_chat(resp, plan, model, turn, timing, self.metrics))
        finally:
            with anyio.CancelScope(shield=True):
                await resp.aclose()
                await stack.aclose()
        if result is None:
            self.metrics.disconnects.inc()
            return Response(status_code=499)
        return JSONResponse(result)

    async def completions(self, request: Request) -> Response:
        key = self.authenticate(request)
        raw = await self.read_body(request)
        req: CompletionRequest = parse_body(CompletionRequest, raw)
        await self.check_model(req.model)
        body = json.loads(raw)
        stack = contextlib.AsyncExitStack()
        await stack.enter_async_context(self.limiter.slot(key))
        try:
            resp = await self.upstream.open("POST", "/v1/completions", body)
        except BaseException:
            await stack.aclose()
            raise
        if req.stream:
            return EngineStream(_relay(resp, stack), self.metrics.disconnects.inc)
        try:
            data = await resp.aread()
        finally:
            with anyio.CancelScope(shield=True):
                await resp.aclose()
                await stack.aclose()
        return Response(data, media_type="application/json")

    async def native(self, request: Request) -> Response:
        """llama-server's own endpoints (``/completion``, ``/tokenize``, ``/props``, ``/slots``, ...),
        passed through under the gateway's auth, body limit and (for POSTs) per-key limit."""
        key = self.authenticate(request)
        raw = await self.read_body(request) if request.method in ("POST", "PUT") else b""
        stack = contextlib.AsyncExitStack()
        if request.method == "POST":
            await stack.enter_async_context(self.limiter.slot(key))
        try:
            resp = await self.upstream.relay(request.method, request.url.path, request.url.query, raw,
                                             request.headers.get("content-type"))
        except BaseException:
            await stack.aclose()
            raise
        headers = {k: v for k, v in resp.headers.items()
                   if k.lower() in ("content-type", "retry-after", "cache-control")}
        return EngineStream(_relay(resp, stack), self.metrics.disconnects.inc, status_code=resp.status_code,
                            headers=headers)

    async def models(self, request: Request) -> Response:
        self.authenticate(request)
        model = await self.model()
        return JSONResponse({"object": "list", "data": [
            {"id": model.id, "object": "model", "created": model.created,
             "owned_by": "splitserve", "meta": {"format": model.format.name,
                                                "n_ctx": model.n_ctx}}]})

    async def health(self, request: Request) -> Response:
        started = time.perf_counter()
        await self.upstream.get_json("/health")
        out: dict[str, Any] = {"status": "ok", "engine": self.upstream.base_url}
        if request.query_params.get("deep") in ("1", "true", "yes"):
            resp = await self.upstream.completion(
                {"prompt": "Hello", "n_predict": 1, "cache_prompt": False})
            final: dict[str, Any] = {}
            try:
                from ._upstream import sse_events

                async for data in sse_events(resp):
                    if data.get("stop"):
                        final = data
            finally:
                await resp.aclose()
            if int(final.get("tokens_predicted") or 0) < 1:
                raise APIError(503, "the engine answered but generated no token",
                               type_="service_unavailable", headers={"Retry-After": "5"})
            out["deep"] = {"tokens": final.get("tokens_predicted"),
                           "ms": round((time.perf_counter() - started) * 1000, 1)}
        return JSONResponse(out)

    async def prometheus(self, request: Request) -> Response:
        self.authenticate(request)
        data, ctype = self.metrics.render()
        return Response(data, media_type=ctype.split(";")[0],
                        headers={"Content-Type": ctype})


async def _relay(resp: httpx.Response, stack: contextlib.AsyncExitStack) -> AsyncIterator[bytes]:
    """The engine's bytes as they come; closes the engine response and frees the slot at the end."""
    try:
        async for chunk in resp.aiter_raw():
            yield chunk
    finally:
        with anyio.CancelScope(shield=True):
            await resp.aclose()
            await stack.aclose()


async def _unless_disconnected(request: Request, work: Awaitable[dict[str, Any]]
                               ) -> dict[str, Any] | None:
    """Run ``work``; cancel it and return None if the client disconnects first."""
    result: dict[str, Any] | None = None

    async with anyio.create_task_group() as tg:
        async def watch() -> None:
            while True:
                message = await request.receive()
                if message["type"] == "http.disconnect":
                    tg.cancel_scope.cancel()
                    return

        async def run() -> None:
            nonlocal result
            result = await work
            tg.cancel_scope.cancel()

        tg.start_soon(watch)
        tg.start_soon(run)
    return result


def _wrap(gw: Gateway, name: str, handler: Callable[[Request], Awaitable[Response]]
          ) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        try:
            response = await handler(request)
        except APIError as exc:
            response = _error(exc)
        except Exception as exc:  # noqa: BLE001 - a gateway defect: still an OpenAI-shaped answer
            response = _error(APIError(500, f"internal error: {type(exc).__name__}: {exc}",
                                       type_="server_error"))
        gw.metrics.requests.labels(name, str(response.status_code)).inc()
        return response

    return endpoint


NATIVE_ENDPOINTS = (
    "/completion", "/completions", "/infill", "/tokenize", "/detokenize", "/apply-template",
    "/embedding", "/embeddings", "/v1/embeddings", "/rerank", "/reranking", "/v1/rerank",
    "/v1/reranking", "/props", "/slots", "/slots/{slot:path}", "/lora-adapters",
)
"""llama-server's own endpoints, passed through to the engine unchanged."""


def create_app(config: GatewayConfig) -> Starlette:
    """The gateway's ASGI app; ``app.state.gateway`` is the :class:`Gateway`."""
    gw = Gateway(config)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await gw.upstream.aclose()

    routes = [
        Route("/v1/chat/completions", _wrap(gw, "chat", gw.chat), methods=["POST"]),
        Route("/v1/completions", _wrap(gw, "completions", gw.completions), methods=["POST"]),
        Route("/v1/models", _wrap(gw, "models", gw.models), methods=["GET"]),
        Route("/health", _wrap(gw, "health", gw.health), methods=["GET"]),
        Route("/metrics", _wrap(gw, "metrics", gw.prometheus), methods=["GET"]),
    ]
    native = _wrap(gw, "native", gw.native)
    for path in NATIVE_ENDPOINTS:
        routes.append(Route(path, native, methods=["GET", "POST"]))
    async def not_found(request: Request, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 404)
        what = "no such endpoint" if status == 404 else "method not allowed"
        return _error(APIError(status, f"{what}: {request.method} {request.url.path}"))

    app = Starlette(routes=routes, lifespan=lifespan,
                    exception_handlers={404: not_found, 405: not_found})
    app.state.gateway = gw
    return app


def load_template(path: Path) -> str:
    from .._errors import UsageError

    try:
        return path.read_text()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the chat template: {exc.strerror}") from None


__all__ = ["EngineStream", "Gateway", "GatewayConfig", "create_app", "load_template"]
