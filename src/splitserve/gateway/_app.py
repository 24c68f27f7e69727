"""The gateway as an ASGI app: routes, auth, body limit, per-key limits, disconnects.

``create_app(GatewayConfig(...))`` returns a Starlette app; :func:`serve` runs it with
uvicorn. The engine is an :class:`~splitserve.engine.EngineBackend`: llama-server at
``config.engine_url`` unless ``create_app`` is given another (a
:class:`~splitserve.engine.FakeEngine` in tests). The served model (id, chat template, tool-call format) is read from the engine's
``/props`` on first use, so the gateway may start before the engine has loaded.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import anyio
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from .._errors import EngineError
from ..engine import CompletionRequest as EngineRequest
from ..engine import CompletionStream, EngineBackend, EngineReply
from ._access import ACCESS_LOG, CURRENT, RequestRecord, request_record
from ._chat import LastChunk, Timing, Turn, collect_chat, stream_chat
from ._config import GatewayConfig
from ._engine_errors import api_error, health_error
from ._errors import APIError
from ._limits import KeyLimiter
from ._messages import messages_routes
from ._metrics import Metrics
from ._relay import (
    NATIVE_GENERATING,
    native_whole,
    native_whole_body,
    openai_whole,
    own_model,
    relay,
    relay_events,
    single_prompt,
)
from ._responses_http import responses_handler
from ._router import SESSION_FIELD, ReplicaBackend, engines_backend
from ._schemas import ChatRequest, CompletionRequest, check_history, parse_body, safe_json_loads
from ._session import ReasoningMemory, SlotAffinity, session_key
from ._translate import ServedModel, plan_chat, resolve_format
from ._ui import ui_routes

T = TypeVar("T")


class EngineStream(Response):
    """A streamed response that notices a client leaving and then closes its source.

    Starlette's own ``StreamingResponse`` only sees a disconnect when a write fails; this
    one also listens for ``http.disconnect`` while the engine is still thinking, so the
    engine's slot is freed at once.
    """

    def __init__(
        self,
        body: AsyncIterator[bytes],
        on_disconnect: Callable[[], None],
        media_type: str = "text/event-stream",
        status_code: int = 200,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.body_iterator = body
        self.status_code = status_code
        given = {k.lower(): v for k, v in (headers or {}).items()}
        self.media_type = None if "content-type" in given else media_type
        self.background = None
        self._on_disconnect = on_disconnect
        self.on_done: Callable[[bool], None] | None = None
        """Called once when the response is over, with whether the client left first."""
        self.init_headers({"cache-control": "no-cache", "x-accel-buffering": "no"} | given)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        gone = sent = False
        gen = self.body_iterator
        try:
            with anyio.CancelScope() as writing:

                def left() -> None:
                    nonlocal gone
                    # After the whole body, a server's receive() says "disconnect" too: only
                    # a client that left before the end is gone.
                    gone = not sent
                    writing.cancel()

                listener = _watch(receive, left)
                try:
                    await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
                    async for chunk in gen:
                        if isinstance(chunk, LastChunk):
                            break
                        await send({"type": "http.response.body", "body": chunk, "more_body": True})
                    else:
                        chunk = b""
                    sent = True
                    await send({"type": "http.response.body", "body": chunk, "more_body": False})
                except OSError:
                    gone = not sent
                finally:
                    listener.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    if sent:
                        # The other streams' tokens that are ready go first: this one's
                        # client has its whole answer, what is left is bookkeeping.
                        await asyncio.sleep(0)
                finally:
                    await gen.aclose()  # type: ignore[attr-defined]
            if gone:
                self._on_disconnect()
            if self.on_done is not None:
                self.on_done(gone)


def _error(exc: APIError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)


class Gateway:
    """State shared by the routes of one gateway."""

    def __init__(self, config: GatewayConfig, backend: EngineBackend | None = None) -> None:
        self.config = config
        self.metrics = Metrics()
        self.limiter = KeyLimiter(config.max_concurrent, config.max_queue, on_change=self.metrics.on_limits)
        self.backend: EngineBackend = backend or engines_backend(
            config.engine_url, api_key=config.engine_api_key, route=config.route
        )
        if isinstance(self.backend, ReplicaBackend):
            self.backend.on_error = self.metrics.on_replica_error
        self._model: ServedModel | None = None
        self._model_lock = anyio.Lock()
        self.memory = ReasoningMemory()
        self._affinity: SlotAffinity | None = None

    def pin(self, body: dict[str, Any], session: str) -> None:
        """Send a session's requests to one engine slot and, over replicas, to one replica (the
        ones that hold its prompt in their cache)."""
        if self._affinity is not None and self.config.slot_affinity:
            body.setdefault("id_slot", self._affinity.slot_for(session))
        if isinstance(self.backend, ReplicaBackend):
            body[SESSION_FIELD] = session

    # -- the served model ------------------------------------------------------------
    async def model(self) -> ServedModel:
        if self._model is not None:
            return self._model
        async with self._model_lock:
            if self._model is None:
                self._model = await self._load_model()
        return self._model

    async def _load_model(self) -> ServedModel:
        try:
            props = (await self.backend.info()).props
        except EngineError as exc:
            raise api_error(exc) from None
        template = self.config.chat_template or props.get("chat_template") or ""
        if not template:
            raise APIError(
                500,
                "the engine reports no chat template; start the gateway with --chat-template FILE",
                type_="server_error",
            )
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
            id=self.config.model_name or stem,
            template=template,
            format=resolve_format(self.config.model_format, template),
            bos_token=str(props.get("bos_token") or ""),
            eos_token=str(props.get("eos_token") or ""),
            aliases=aliases,
            n_ctx=settings.get("n_ctx"),
            created=int(time.time()),
            add_bos=add_bos,
        )

    async def _engine_adds_bos(self) -> bool:
        """Whether the engine's tokenizer adds BOS: ``/tokenize`` with and without special tokens."""
        try:
            a = await self.backend.tokenize("a", add_special=True)
            b = await self.backend.tokenize("a", add_special=False)
        except EngineError:
            return True  # an engine without /tokenize: llama.cpp's default
        return len(a) > len(b) and a[len(a) - len(b) :] == b

    async def check_model(self, name: str | None) -> ServedModel:
        """The served model; with ``strict_model_names``, 404 unless ``name`` is one of its names
        (or absent)."""
        model = await self.model()
        if self.config.strict_model_names and name is not None and not model.answers_to(name):
            raise APIError(
                404,
                f"the model {name!r} does not exist; this gateway serves {model.id!r}",
                param="model",
                code="model_not_found",
            )
        return model

    # -- request plumbing ------------------------------------------------------------
    def authenticate(self, request: Request) -> str:
        keys = self.config.keys
        if not keys.enabled:
            return "anonymous"
        name = keys.check(request.headers.get("authorization")) or keys.check_key(request.headers.get("x-api-key"))
        if name is None:
            raise APIError(
                401,
                "missing or invalid API key: send 'Authorization: Bearer KEY' or 'x-api-key: KEY'",
                code="invalid_api_key",
            )
        _record(request).key = name
        return name

    async def read_body(self, request: Request) -> bytes:
        limit = self.config.max_body_bytes
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > limit:
            raise APIError(413, f"the request body is {declared} bytes; the limit is {limit}", code="request_too_large")
        chunks: list[bytes] = []
        size = 0
        try:
            with anyio.fail_after(self.config.body_timeout):
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > limit:
                        raise APIError(
                            413, f"the request body exceeds the limit of {limit} bytes", code="request_too_large"
                        )
                    chunks.append(chunk)
        except ClientDisconnect:
            raise APIError(400, "the client went away while sending the body") from None
        except TimeoutError:
            raise APIError(
                408,
                f"the request body did not arrive within {self.config.body_timeout:g} s",
                code="request_timeout",
                headers={"Connection": "close"},
            ) from None
        return b"".join(chunks)

    async def start(
        self,
        request: Request,
        key: str,
        stack: contextlib.AsyncExitStack,
        open_: Callable[[], Awaitable[T]],
    ) -> T | None:
        """Wait for a slot of ``key``'s limit (on ``stack``), then ``open_`` the engine request
        (which puts what it opened on ``stack``); None when the client leaves first: its queue
        place is freed and nothing reaches the engine (or the half-open engine request is
        closed). The caller closes ``stack``."""
        rec = _record(request)

        async def go() -> T:
            waited = time.perf_counter()
            await stack.enter_async_context(self.limiter.slot(key))
            rec.queue_s = time.perf_counter() - waited
            return await open_()

        resp = await _open_unless_disconnected(request, stack, go())
        if resp is None:
            self.metrics.disconnects.inc()
        return resp

    async def whole(self, request: Request, stack: contextlib.AsyncExitStack, work: Awaitable[T]) -> T | None:
        """Run ``work`` (reading the engine's answer, held by ``stack``, to a whole answer) unless
        the client leaves first; close the answer and free the slot (``stack``) either way. None,
        counted as a disconnect, when the client left."""
        try:
            result = await _unless_disconnected(request, work)
        except EngineError as exc:
            raise api_error(exc) from None
        finally:
            with anyio.CancelScope(shield=True):
                await stack.aclose()
        if result is None:
            self.metrics.disconnects.inc()
        return result

    # -- routes ------------------------------------------------------------------------
    async def chat(self, request: Request) -> Response:
        timing = Timing(arrived=time.perf_counter())
        key = self.authenticate(request)
        raw = await self.read_body(request)
        req: ChatRequest = parse_body(ChatRequest, raw)
        check_history(req)
        model = await self.check_model(req.model)
        rec = _record(request)
        rec.model = model.id
        restore = (lambda messages: self.memory.restore(key, messages)) if self.config.restore_reasoning else None
        plan = plan_chat(req, model, test_hooks=self.config.test_hooks, restore=restore)
        session = session_key(request.headers, req.model_extra or {})
        if session is not None:
            self.pin(plan.body, session)
        turn = Turn(plan, plan.parser())
        stack = contextlib.AsyncExitStack()
        if self.config.restore_reasoning:
            stack.callback(lambda: self.memory.remember(key, turn.message()))

        async def open_() -> CompletionStream:
            timing.engine_called = time.perf_counter()
            return await stack.enter_async_context(self.backend.stream(plan.request()))

        events = await self.start(request, key, stack, open_)
        if events is None:
            return Response(status_code=499)
        if req.stream:
            body = stream_chat(events, plan, model, turn, timing, self.metrics, stack.aclose, rec)
            return EngineStream(body, self.metrics.disconnects.inc)
        result = await self.whole(request, stack, collect_chat(events, plan, model, turn, timing, self.metrics, rec))
        if result is None:
            return Response(status_code=499)
        return JSONResponse(result)

    async def completions(self, request: Request) -> Response:
        key = self.authenticate(request)
        raw = await self.read_body(request)
        req: CompletionRequest = parse_body(CompletionRequest, raw)
        model = await self.check_model(req.model)
        rec = _record(request)
        rec.model = model.id
        body = safe_json_loads(raw)  # NaN, Infinity, 1e999, lone surrogates: 400 naming the field
        session = session_key(request.headers, body)
        if session is not None and isinstance(self.backend, ReplicaBackend):
            body[SESSION_FIELD] = session  # one replica per session (removed before the engine)
        # A whole answer is still asked for streamed: llama-server notices a closed connection
        # only when it writes (see "whole answers asked streamed" in _relay).
        by_stream = not req.stream and single_prompt(body) and not body.get("logprobs")
        if by_stream:
            body = {**body, "stream": True, "stream_options": {"include_usage": True}}
        stack = contextlib.AsyncExitStack()
        content = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
        resp = await self.start(
            request,
            key,
            stack,
            lambda: self._relay(
                stack, "POST", "/v1/completions", content=content, content_type="application/json", check=True
            ),
        )
        if resp is None:
            return Response(status_code=499)
        if req.stream:
            return EngineStream(relay_events(resp, stack, model.id, rec), self.metrics.disconnects.inc)
        data = await self.whole(request, stack, openai_whole(resp, rec) if by_stream else resp.aread())
        if data is None:
            return Response(status_code=499)
        return Response(own_model(data, model.id), media_type="application/json")

    async def native(self, request: Request, path: str) -> Response:
        """llama-server's own endpoints (``/completion``, ``/tokenize``, ``/props``, ``/slots``, ...),
        passed through under the gateway's auth, body limit and (for POSTs) per-key limit.

        ``path`` is the endpoint as the gateway names it (never the client's spelling), and
        ``/slots/ID`` only with a slot number and ``?action=save|restore|erase``."""
        key = self.authenticate(request)
        query = request.url.query
        if path == "/slots/{slot}":
            path, query = _slot_action(request)
        raw = await self.read_body(request) if request.method in ("POST", "PUT") else b""
        if request.method == "POST" and path in NATIVE_GENERATING:
            await self._name_model(request)
        stack = contextlib.AsyncExitStack()
        whole = native_whole_body(path, request.method, raw)
        if whole is not None:
            return await self._native_by_stream(request, key, path, whole, stack)

        def open_() -> Awaitable[EngineReply]:
            return self._relay(
                stack, request.method, path, query=query, content=raw, content_type=request.headers.get("content-type")
            )

        if request.method == "POST":
            resp = await self.start(request, key, stack, open_)
        else:
            resp = await _open_unless_disconnected(request, stack, open_())
        if resp is None:  # the client left; ``stack`` is closed
            return Response(status_code=499)
        headers = {
            k: v for k, v in resp.headers.items() if k.lower() in ("content-type", "retry-after", "cache-control")
        }
        generating = request.method == "POST" and path in NATIVE_GENERATING and resp.status == 200
        return EngineStream(
            relay(resp, stack, _record(request) if generating else None),
            self.metrics.disconnects.inc,
            status_code=resp.status,
            headers=headers,
        )

    async def _relay(
        self,
        stack: contextlib.AsyncExitStack,
        method: str,
        path: str,
        *,
        query: str = "",
        content: bytes = b"",
        content_type: str | None = None,
        check: bool = False,
    ) -> EngineReply:
        """A relayed engine request whose answer ``stack`` closes."""
        reply = await self.backend.relay(
            method, path, query=query, content=content, content_type=content_type, check=check
        )
        stack.push_async_callback(reply.aclose)
        return reply

    async def _name_model(self, request: Request) -> None:
        """The served model's id on the request's record (for its metrics), when it loads."""
        try:
            _record(request).model = (await self.model()).id
        except APIError:
            pass

    async def _native_by_stream(
        self, request: Request, key: str, path: str, body: dict[str, Any], stack: contextlib.AsyncExitStack
    ) -> Response:
        """A non-streamed native generation, asked streamed and put together (see "whole answers
        asked streamed" below)."""
        resp = await self.start(
            request,
            key,
            stack,
            lambda: self._relay(
                stack,
                "POST",
                path,
                content=json.dumps({**body, "stream": True}).encode(),
                content_type="application/json",
            ),
        )
        if resp is None:
            return Response(status_code=499)
        if resp.status != 200:
            status = resp.status
            ctype = resp.headers.get("content-type", "application/json")
            data = await self.whole(request, stack, resp.aread())
        else:
            status, ctype = 200, "application/json; charset=utf-8"
            data = await self.whole(request, stack, native_whole(resp, body, _record(request)))
        if data is None:
            return Response(status_code=499)
        return Response(data, status_code=status, headers={"Content-Type": ctype})

    async def models(self, request: Request) -> Response:
        self.authenticate(request)
        model = await self.model()
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {
                        "id": model.id,
                        "object": "model",
                        "created": model.created,
                        "owned_by": "splitserve",
                        "meta": {"format": model.format.name, "n_ctx": model.n_ctx},
                    }
                ],
            }
        )

    async def health(self, request: Request) -> Response:
        """Open without a key; ``?deep=1`` runs a generation, so it takes a key (when auth is
        on) and a place in that key's limit."""
        started = time.perf_counter()
        deep = request.query_params.get("deep") in ("1", "true", "yes")
        key = self.authenticate(request) if deep else ""
        error = health_error(await self.backend.health())
        if error is not None:
            raise error
        out: dict[str, Any] = {"status": "ok", "engine": self.backend.url}
        if deep:
            stack = contextlib.AsyncExitStack()
            probe = EngineRequest("Hello", n_predict=1, cache_prompt=False)

            async def open_() -> CompletionStream:
                return await stack.enter_async_context(self.backend.stream(probe))

            events = await self.start(request, key, stack, open_)
            if events is None:
                return Response(status_code=499)

            async def read() -> dict[str, Any]:
                last: dict[str, Any] = {}
                async for data in events.events():
                    if data.get("stop"):
                        last = data
                return last

            try:
                final = await _unless_disconnected(request, read()) or {}
            except EngineError as exc:
                raise api_error(exc) from None
            finally:
                with anyio.CancelScope(shield=True):
                    await stack.aclose()
            if int(final.get("tokens_predicted") or 0) < 1:
                raise APIError(
                    503,
                    "the engine answered but generated no token",
                    type_="service_unavailable",
                    headers={"Retry-After": "5"},
                )
            out["deep"] = {
                "tokens": final.get("tokens_predicted"),
                "ms": round((time.perf_counter() - started) * 1000, 1),
            }
        return JSONResponse(out)

    async def prometheus(self, request: Request) -> Response:
        self.authenticate(request)
        data, ctype = self.metrics.render(await self.backend.metrics())
        return Response(data, media_type=ctype.split(";")[0], headers={"Content-Type": ctype})


async def _open_unless_disconnected(request: Request, stack: contextlib.AsyncExitStack, work: Awaitable[T]) -> T | None:
    """:func:`_unless_disconnected` for work that opens an engine request on ``stack``: on an
    error or a client that left, ``stack`` is closed (shielded) before returning None or raising
    (an :class:`EngineError` as the API's error)."""
    try:
        resp = await _unless_disconnected(request, work)
    except BaseException as exc:
        with anyio.CancelScope(shield=True):
            await stack.aclose()
        if isinstance(exc, EngineError):
            raise api_error(exc) from None
        raise
    if resp is None:
        with anyio.CancelScope(shield=True):
            await stack.aclose()
    return resp


async def _unless_disconnected(request: Request, work: Awaitable[T]) -> T | None:
    """Run ``work``; cancel it and return None if the client disconnects first (``work``'s
    own errors are raised as they are)."""
    with anyio.CancelScope() as scope:
        watcher = _watch(request.receive, scope.cancel)
        try:
            return await work
        finally:
            watcher.cancel()
    return None  # the client left: ``work`` was cancelled


def _watch(receive: Receive, left: Callable[[], None]) -> asyncio.Task[None]:
    """A task that calls ``left()`` when the client disconnects; cancel it when done.

    A plain asyncio task beside the caller's, not an anyio task group: a task group and the
    cancelling of its scope at the end cost about 0.13 ms per use (anyio formats the task's
    repr into every cancel reason), twice per request; ``left`` cancels an anyio scope,
    which works across tasks."""

    async def watch() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        left()

    return asyncio.get_running_loop().create_task(watch())


def _slot_action(request: Request) -> tuple[str, str]:
    """``POST /slots/ID?action=save|restore|erase`` normalised, or 404/400 for anything else."""
    raw = request.scope.get("raw_path") or request.url.path.encode()
    raw_path = raw.decode("latin-1").split("?", 1)[0]
    slot = raw_path.removeprefix("/slots/")
    if not raw_path.startswith("/slots/") or not slot.isdigit() or not slot.isascii() or len(slot) > 6:
        raise APIError(
            404,
            f"no such endpoint: {request.method} {raw_path[:200]}; the slot "
            "endpoints are GET /slots and POST /slots/ID?action=save|restore|erase",
        )
    if request.method != "POST":
        raise APIError(405, f"method not allowed: {request.method} /slots/{slot} (POST only)")
    action = request.query_params.get("action")
    if action not in ("save", "restore", "erase") or len(request.query_params) != 1:
        raise APIError(400, "POST /slots/ID takes ?action=save, restore or erase and nothing else", param="action")
    return f"/slots/{int(slot)}", f"action={action}"


def _record(request: Request) -> RequestRecord:
    """The request's :class:`RequestRecord` (one is made for a request outside :func:`_wrap`)."""
    return request_record(request)


def _wrap(
    gw: Gateway, name: str, handler: Callable[[Request], Awaitable[Response]]
) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        rec = request.state.record = RequestRecord(name, request.method, request.url.path, time.perf_counter())
        if isinstance(gw.backend, ReplicaBackend):
            rec.replica = "-"  # until the backend picks one (note_replica)
        CURRENT.set(rec)
        try:
            response = await handler(request)
        except APIError as exc:
            response = _error(exc)
        except EngineError as exc:  # one the routes did not convert: the same mapping
            response = _error(api_error(exc))
        except Exception as exc:  # noqa: BLE001 - a gateway defect: still an OpenAI-shaped answer
            response = _error(APIError(500, f"internal error: {type(exc).__name__}: {exc}", type_="server_error"))
        gw.metrics.requests.labels(name, str(response.status_code)).inc()
        rec.status = response.status_code
        rec.disconnected = response.status_code == 499
        if isinstance(response, EngineStream):
            response.on_done = lambda gone: _finish(gw, rec, gone)
        else:
            _finish(gw, rec, rec.disconnected)
        return response

    return endpoint


def _finish(gw: Gateway, rec: RequestRecord, gone: bool) -> None:
    """The end of a request: its metrics and its access log line."""
    rec.disconnected = gone
    rec.close()
    gw.metrics.on_request(rec)
    if ACCESS_LOG.isEnabledFor(logging.INFO):
        ACCESS_LOG.info(rec.line())


NATIVE_ENDPOINTS = (
    "/completion",
    "/completions",
    "/infill",
    "/tokenize",
    "/detokenize",
    "/apply-template",
    "/embedding",
    "/embeddings",
    "/v1/embeddings",
    "/rerank",
    "/reranking",
    "/v1/rerank",
    "/v1/reranking",
    "/props",
    "/slots",
    "/slots/{slot}",
    "/lora-adapters",
)
"""llama-server's own endpoints, passed through to the engine under these names only
(``/slots/{slot}``: a slot number with ``?action=save|restore|erase``, POST)."""


def create_app(config: GatewayConfig, backend: EngineBackend | None = None) -> Starlette:
    """The gateway's ASGI app; ``app.state.gateway`` is the :class:`Gateway`. ``backend``: the
    engine (default: llama-server at ``config.engine_url``); the app closes it at shutdown."""
    gw = Gateway(config, backend)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await gw.backend.aclose()

    routes = [
        Route("/v1/chat/completions", _wrap(gw, "chat", gw.chat), methods=["POST"]),
        Route("/v1/completions", _wrap(gw, "completions", gw.completions), methods=["POST"]),
        Route(
            "/v1/responses",
            _wrap(gw, "responses", responses_handler(gw, lambda body: EngineStream(body, gw.metrics.disconnects.inc))),
            methods=["POST"],
        ),
        Route("/v1/models", _wrap(gw, "models", gw.models), methods=["GET"]),
        Route("/health", _wrap(gw, "health", gw.health), methods=["GET"]),
        Route("/metrics", _wrap(gw, "metrics", gw.prometheus), methods=["GET"]),
    ]
    routes += ui_routes(gw)  # the dashboard: /ui, /ui/state
    routes += messages_routes(
        gw, _wrap, lambda body: EngineStream(body, gw.metrics.disconnects.inc)
    )  # the Anthropic Messages API: /v1/messages, count_tokens
    for path in NATIVE_ENDPOINTS:
        handler = functools.partial(gw.native, path=path)
        routes.append(Route(path, _wrap(gw, "native", handler), methods=["GET", "POST"]))

    async def not_found(request: Request, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 404)
        what = "no such endpoint" if status == 404 else "method not allowed"
        return _error(APIError(status, f"{what}: {request.method} {request.url.path}"))

    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={404: not_found, 405: not_found})
    app.state.gateway = gw
    return app


__all__ = ["EngineStream", "Gateway", "create_app"]
