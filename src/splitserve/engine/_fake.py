"""A scripted engine for tests: :class:`FakeEngine`, an :class:`~._backend.EngineBackend` with
no process and no socket, as httpx's ``MockTransport`` is an HTTP server without one.

Each generation (a streamed or whole ``/completion``, a native or OpenAI completion passed on
by the gateway) takes the next entry of the script; the last one repeats when the script runs
out. An entry is

- a ``str``: one whole completion, sent as one token;
- a list of ``str``: the token texts, one event each;
- a :class:`FakeOutput`: token texts with a stop type, extra fields for the last event
  (``timings``, ``tokens_evaluated``, ...) and, if asked, a connection drop after N tokens;
- a :class:`FakeFailure`: the engine answers this HTTP status and message (0: no answer).

``outputs`` may also be a callable: request body -> entry. ``n_predict`` (``max_tokens`` for
``/v1/completions``) cuts the tokens and makes the stop type ``limit``, as llama.cpp does.

Everything is deterministic: the delays are ``anyio.sleep`` calls of the given length, the
tokenizer is byte-level (id = byte + 3; BOS is 1, added with ``add_special``), the timings are
computed from the token counts. Every request is recorded in :attr:`FakeEngine.requests`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

import anyio

from ._backend import (
    LOADING_RETRY_AFTER,
    CompletionRequest,
    CompletionStream,
    EngineBackend,
    EngineHealth,
    EngineHTTPError,
    EngineInfo,
    EngineReply,
    EngineStreamError,
    EngineUnavailable,
    health_down,
)

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""The default chat template of a :class:`FakeEngine` (ChatML, no tool calls)."""

BOS = 1
_OFFSET = 3  # token id of byte b: b + 3 (0, 1, 2: padding, BOS, EOS)
GENERATING = ("/completion", "/completions", "/infill", "/v1/completions")
"""The relayed paths that generate (and take a script entry)."""


@dataclass
class FakeOutput:
    """One generation's answer (see the module)."""

    tokens: Sequence[str] = ("Hello", "!")
    stop_type: str = "eos"
    final: dict[str, Any] = field(default_factory=dict)
    """Fields of the last event, over the computed ones (``timings``, ``tokens_evaluated``, ...)."""
    drop_after: int | None = None
    """The connection breaks after this many tokens (at most all of them), before the last
    event (streams only)."""


@dataclass
class FakeFailure:
    """The engine answers ``status`` with ``message`` (llama-server's error JSON); 0: it does not
    answer at all (:class:`~._backend.EngineUnavailable`, as for a refused connection)."""

    status: int
    message: str = "the fake engine failed"


Entry = str | Sequence[str] | FakeOutput | FakeFailure


@dataclass
class FakeRequest:
    """One request the fake got: ``kind`` is the method of the backend that was called
    (``health``, ``info``, ``stream``, ``relay``; a whole completion is a ``stream``, the
    metrics and tokenizing a ``relay`` of ``/metrics`` and ``/tokenize``); ``path`` / ``method`` / ``query`` the llama-server request it stands
    for; ``body`` the decoded JSON body (or the raw bytes when it is not JSON)."""

    kind: str
    path: str
    body: Any = None
    method: str = "POST"
    query: str = ""


def _error_body(status: int, message: str) -> str:
    kind = "unavailable_error" if status == 503 else "invalid_request_error" if status < 500 else "server_error"
    return json.dumps({"error": {"code": status, "message": message, "type": kind}})


def _sse(events: list[dict[str, Any]]) -> bytes:
    return b"".join(b"data: " + json.dumps(e, ensure_ascii=False).encode() + b"\n\n" for e in events)


class FakeEngine(EngineBackend):
    """A scripted engine (see the module).

    ``loading``: True answers 503 "Loading model" (health ``loading``) until :meth:`ready`; an
    int N answers so to the first N calls. ``down``: nothing answers (health ``down``; every call
    raises :class:`~._backend.EngineUnavailable`). ``first_token_delay`` / ``token_delay``: seconds
    before the first token and between the others. ``batch``: tokens per batch of a stream.
    ``handler``: asked first for every relayed request; None falls back to the built-in routes.
    ``available``: asked before every call; while it says no, the engine is down."""

    def __init__(
        self,
        outputs: Sequence[Entry] | Callable[[dict[str, Any]], Entry] | None = None,
        *,
        props: dict[str, Any] | None = None,
        slots: list[dict[str, Any]] | None = None,
        metrics: bytes | str | None = None,
        tokenize: Callable[[str, bool], list[int]] | None = None,
        loading: bool | int = False,
        down: bool = False,
        first_token_delay: float = 0.0,
        token_delay: float = 0.0,
        batch: int = 1,
        handler: Callable[[FakeRequest], EngineReply | None] | None = None,
        url: str = "fake://engine",
        available: Callable[[], bool] | None = None,
    ) -> None:
        self.url = url
        self.available = available
        """Asked before every call: while it says no, nothing answers (as ``down``); e.g. "the fake
        llama-server process listens" (:meth:`~splitserve.cluster.FakeNetwork.edges` sets it)."""
        self._outputs = outputs if outputs is not None else [FakeOutput()]
        self._taken = 0
        self.props_answer: dict[str, Any] = (
            props
            if props is not None
            else {
                "chat_template": CHATML,
                "model_path": "/models/fake.gguf",
                "default_generation_settings": {"n_ctx": 4096},
                "total_slots": 1,
            }
        )
        self.slots_answer = slots if slots is not None else [{"id": 0, "n_ctx": 4096, "is_processing": False}]
        self.metrics_text = metrics.encode() if isinstance(metrics, str) else metrics
        self._tokenize = tokenize
        self._loading: bool | int = loading
        self.down = down
        self.first_token_delay = first_token_delay
        self.token_delay = token_delay
        self.batch = max(1, batch)
        self.handler = handler
        self.requests: list[FakeRequest] = []
        self.started = 0
        """Generations begun (streamed or whole)."""
        self.finished = 0
        """Generations that reached their last event."""
        self.aborted = 0
        """Generations closed before their last event was read (a client that left, a drop)."""
        self.closed = False

    # -- state ----------------------------------------------------------------------------
    def ready(self) -> None:
        """End the loading state."""
        self._loading = False

    @property
    def loading(self) -> bool:
        return bool(self._loading)

    @property
    def bodies(self) -> list[Any]:
        """The body of every generation request, in order."""
        return [r.body for r in self.requests if r.kind == "stream" or r.path in GENERATING]

    def _record(self, kind: str, path: str, body: Any = None, method: str = "POST", query: str = "") -> None:
        self.requests.append(FakeRequest(kind, path, body, method, query))

    def _gate(self, path: str) -> FakeFailure | None:
        """Down or loading: the failure this call meets (a loading count is used up here)."""
        if self.down or (self.available is not None and not self.available()):
            return FakeFailure(0)
        if self._loading:
            if not isinstance(self._loading, bool):
                self._loading -= 1
            return FakeFailure(503, "Loading model")
        return None

    def _raise(self, failure: FakeFailure, path: str) -> NoReturn:
        if failure.status == 0:
            raise EngineUnavailable(
                f"{self.url}{path}: ConnectError: {failure.message}", url=self.url, path=path, reason="ConnectError"
            )
        raise EngineHTTPError(failure.status, _error_body(failure.status, failure.message))

    def _check(self, path: str) -> None:
        failure = self._gate(path)
        if failure is not None:
            self._raise(failure, path)

    def _entry(self, body: dict[str, Any]) -> FakeOutput | FakeFailure:
        if callable(self._outputs):
            entry = self._outputs(body)
        else:
            script = list(self._outputs)
            if not script:
                raise ValueError("FakeEngine: the script of outputs is empty")
            entry = script[min(self._taken, len(script) - 1)]
        self._taken += 1
        if isinstance(entry, (FakeOutput, FakeFailure)):
            return entry
        if isinstance(entry, str):
            return FakeOutput([entry])
        return FakeOutput(list(entry))

    def _generation(self, body: dict[str, Any], limit_key: str = "n_predict") -> _Generation:
        entry = self._entry(body)
        if isinstance(entry, FakeFailure):
            raise _Failed(entry)
        return _Generation(self, entry, body, limit_key)

    def generation(self, body: dict[str, Any], limit_key: str = "n_predict") -> _Generation | FakeFailure:
        """Take the next script entry for the generation request ``body``, as the built-in routes
        do: the failure it scripts, or its generation (``tokens`` cut by ``body[limit_key]``,
        ``stop_type``, ``prompt_n``, ``delay(i)``, ``done()``, ``close()``), for a face of the
        fake that speaks another wire shape (:mod:`._fake_http`)."""
        try:
            return self._generation(body, limit_key)
        except _Failed as failed:
            return failed.failure

    def count_tokens(self, prompt: Any) -> int:
        if isinstance(prompt, str):
            return len(self._tokens(prompt, True))
        if isinstance(prompt, list):
            return sum(self.count_tokens(p) if isinstance(p, (str, list)) else 1 for p in prompt)
        return 0

    def _tokens(self, text: str, add_special: bool) -> list[int]:
        if self._tokenize is not None:
            return self._tokenize(text, add_special)
        return ([BOS] if add_special else []) + [b + _OFFSET for b in text.encode("utf-8")]

    def token_ids(self, text: str, add_special: bool = True) -> list[int]:
        """The fake's tokens of ``text`` (no request recorded, no failure scripted)."""
        return self._tokens(text, add_special)

    @staticmethod
    def token_text(tokens: Sequence[int]) -> str:
        """The text of byte-level token ids (special tokens dropped)."""
        return bytes(t - _OFFSET for t in tokens if _OFFSET <= t < _OFFSET + 256).decode("utf-8", "replace")

    # -- the interface ----------------------------------------------------------------------
    async def health(self) -> EngineHealth:
        self._record("health", "/health", method="GET")
        failure = self._gate("/health")
        if failure is None:
            return EngineHealth("ok", 200, "ok")
        if failure.status == 0:
            return health_down(self.url, "/health", "ConnectError")
        return EngineHealth("loading", 503, failure.message, LOADING_RETRY_AFTER)

    async def info(self, timeout: float | None = None) -> EngineInfo:
        self._record("info", "/props", method="GET")
        self._check("/props")
        return EngineInfo(dict(self.props_answer), [dict(s) for s in self.slots_answer])

    def stream(self, request: CompletionRequest) -> CompletionStream:
        body = request.llamacpp()
        body["stream"] = True
        return _FakeStream(self, body)

    async def relay(
        self,
        method: str,
        path: str,
        *,
        query: str = "",
        content: bytes = b"",
        content_type: str | None = None,
        check: bool = False,
    ) -> EngineReply:
        try:
            body: Any = json.loads(content) if content else None
        except ValueError:
            body = content
        req = FakeRequest("relay", path, body, method, query)
        self.requests.append(req)
        reply = self._relay(req)
        if check and reply.status != 200:
            text = (await reply.aread()).decode("utf-8", "replace")
            await reply.aclose()
            raise EngineHTTPError(reply.status, text)
        return reply

    async def aclose(self) -> None:
        self.closed = True

    # -- relayed requests ---------------------------------------------------------------------
    def _relay(self, req: FakeRequest) -> EngineReply:
        failure = self._gate(req.path)
        if failure is not None:
            if failure.status == 0:
                self._raise(failure, req.path)
            return _json_reply(failure.status, _error_body(failure.status, failure.message))
        if self.handler is not None:
            reply = self.handler(req)
            if reply is not None:
                return reply
        body = req.body if isinstance(req.body, dict) else {}
        path, method = req.path, req.method
        if path in GENERATING and method == "POST":
            openai = path == "/v1/completions"
            try:
                gen = self._generation(body, "max_tokens" if openai else "n_predict")
            except _Failed as failed:
                if failed.failure.status == 0:
                    self._raise(failed.failure, path)
                return _json_reply(failed.failure.status, _error_body(failed.failure.status, failed.failure.message))
            if body.get("stream"):
                return EngineReply(200, {"content-type": "text/event-stream"}, gen.sse(openai), gen.close)
            return _RelayWhole(gen, openai).reply()
        if path == "/health" and method == "GET":
            return _json_reply(200, json.dumps({"status": "ok"}))
        if path == "/props" and method == "GET":
            return _json_reply(200, json.dumps(self.props_answer))
        if path == "/slots" and method == "GET":
            return _json_reply(200, json.dumps(self.slots_answer))
        if path.startswith("/slots/") and method == "POST":
            slot = path.removeprefix("/slots/")
            return _json_reply(200, json.dumps({"id_slot": int(slot) if slot.isdigit() else slot, "query": req.query}))
        if path == "/tokenize" and method == "POST":
            tokens = self._tokens(str(body.get("content") or ""), bool(body.get("add_special")))
            return _json_reply(200, json.dumps({"tokens": tokens}))
        if path == "/detokenize" and method == "POST":
            toks = [t for t in body.get("tokens") or [] if isinstance(t, int)]
            text = bytes(t - _OFFSET for t in toks if _OFFSET <= t < _OFFSET + 256).decode("utf-8", "replace")
            return _json_reply(200, json.dumps({"content": text}))
        if path == "/metrics" and method == "GET" and self.metrics_text is not None:
            return EngineReply(200, {"content-type": "text/plain; version=0.0.4"}, self.metrics_text)
        return _json_reply(404, _error_body(404, "File Not Found"))


def _json_reply(status: int, text: str) -> EngineReply:
    return EngineReply(status, {"content-type": "application/json; charset=utf-8"}, text.encode())


class _Failed(Exception):
    def __init__(self, failure: FakeFailure) -> None:
        super().__init__(failure.message)
        self.failure = failure


class _Generation:
    """The events of one scripted generation, native or OpenAI-shaped, with their delays."""

    def __init__(self, engine: FakeEngine, out: FakeOutput, body: dict[str, Any], limit_key: str) -> None:
        self.engine = engine
        self.out = out
        tokens = list(out.tokens)
        stop_type = out.stop_type
        limit = body.get(limit_key)
        if isinstance(limit, int) and not isinstance(limit, bool) and 0 <= limit < len(tokens):
            tokens, stop_type = tokens[:limit], "limit"
        self.tokens = tokens
        self.stop_type = stop_type
        self.prompt_n = engine.count_tokens(body.get("prompt", ""))
        self.model = str(engine.props_answer.get("model_path") or "fake")
        self.finished = False
        self.opened = True
        engine.started += 1

    async def delay(self, i: int) -> None:
        wait = self.engine.first_token_delay if i == 0 else self.engine.token_delay
        if wait > 0:
            await anyio.sleep(wait)

    async def wait_all(self) -> None:
        for i in range(len(self.tokens)):
            await self.delay(i)
        self.done()

    def done(self) -> None:
        if not self.finished:
            self.finished = True
            self.engine.finished += 1

    async def close(self) -> None:
        if self.opened:
            self.opened = False
            if not self.finished:
                self.engine.aborted += 1

    # the last event's numbers
    def final_native(self) -> dict[str, Any]:
        n = len(self.tokens)
        timings = {
            "cache_n": 0,
            "prompt_n": self.prompt_n,
            "prompt_ms": float(self.prompt_n),
            "predicted_n": n,
            "predicted_ms": 10.0 * n,
            "predicted_per_second": 100.0 if n else 0.0,
        }
        return {
            "content": "",
            "stop": True,
            "stop_type": self.stop_type,
            "tokens_predicted": n,
            "tokens_evaluated": self.prompt_n,
            "model": self.model,
            "timings": timings,
            **self.out.final,
        }

    def whole_native(self) -> dict[str, Any]:
        return {**self.final_native(), "content": "".join(self.tokens), "tokens": []}

    def _usage(self) -> tuple[dict[str, Any], dict[str, Any]]:
        final = self.final_native()
        got = final.get("timings")
        timings: dict[str, Any] = got if isinstance(got, dict) else {}
        prompt, completion = int(final["tokens_evaluated"] or 0), int(final["tokens_predicted"] or 0)
        usage: dict[str, Any] = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": int(timings.get("cache_n") or 0)},
        }
        return usage, timings

    def _choice(self, text: str, finish: str | None) -> dict[str, Any]:
        return {"text": text, "index": 0, "logprobs": None, "finish_reason": finish}

    def _finish(self) -> str:
        return "length" if self.stop_type == "limit" else "stop"

    def openai_chunk(self, text: str) -> dict[str, Any]:
        return {"choices": [self._choice(text, None)], "model": self.model, "object": "text_completion"}

    def openai_final(self) -> dict[str, Any]:
        usage, timings = self._usage()
        return {
            "choices": [self._choice("", self._finish())],
            "model": self.model,
            "object": "text_completion",
            "usage": usage,
            "timings": timings,
        }

    def whole_openai(self) -> dict[str, Any]:
        out = self.openai_final()
        out["choices"] = [self._choice("".join(self.tokens), self._finish())]
        return out

    async def events(self, openai: bool = False) -> AsyncIterator[list[dict[str, Any]]]:
        """Batches of events (``engine.batch`` tokens each), then the last event alone."""
        batch: list[dict[str, Any]] = []
        drop = self.out.drop_after
        for i, text in enumerate(self.tokens):
            if drop is not None and i >= drop:
                break
            await self.delay(i)
            batch.append(self.openai_chunk(text) if openai else {"content": text, "stop": False})
            if len(batch) >= self.engine.batch:
                yield batch
                batch = []
        if batch:
            yield batch
        if drop is not None:
            raise EngineStreamError("the engine connection broke mid-stream: RemoteProtocolError")
        self.done()
        yield [self.openai_final() if openai else self.final_native()]

    async def sse(self, openai: bool) -> AsyncIterator[bytes]:
        async for batch in self.events(openai):
            yield _sse(batch)
        if openai:
            yield b"data: [DONE]\n\n"


class _RelayWhole:
    """A non-streamed relayed generation: the whole JSON answer after the delays."""

    def __init__(self, gen: _Generation, openai: bool) -> None:
        self.gen = gen
        self.openai = openai

    async def body(self) -> AsyncIterator[bytes]:
        await self.gen.wait_all()
        data = self.gen.whole_openai() if self.openai else self.gen.whole_native()
        yield json.dumps(data, ensure_ascii=False).encode()

    def reply(self) -> EngineReply:
        return EngineReply(200, {"content-type": "application/json; charset=utf-8"}, self.body(), self.gen.close)


class _FakeStream(CompletionStream):
    def __init__(self, engine: FakeEngine, body: dict[str, Any]) -> None:
        self._engine = engine
        self._body = body
        self._gen: _Generation | None = None

    async def open(self) -> None:
        engine = self._engine
        engine._record("stream", "/completion", dict(self._body))
        engine._check("/completion")
        try:
            self._gen = engine._generation(self._body)
        except _Failed as failed:
            engine._raise(failed.failure, "/completion")

    def batches(self) -> AsyncIterator[list[dict[str, Any]]]:
        if self._gen is None:
            raise RuntimeError("the stream is not open: use `async with backend.stream(request) as events`")
        return self._gen.events()

    async def aclose(self) -> None:
        gen, self._gen = self._gen, None
        if gen is not None:
            await gen.close()


__all__ = ["CHATML", "FakeEngine", "FakeFailure", "FakeOutput", "FakeRequest"]
