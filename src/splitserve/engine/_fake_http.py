"""A :class:`~._fake.FakeEngine` served over HTTP in vLLM's shape, for tests and rehearsals (vLLM
itself needs GPUs): the fake's script, tokenizer and delays behind vLLM's OpenAI-compatible
routes, so :class:`~._vllm.VllmBackend` (and ``splitserve up`` with a ``vllm`` that runs this
module) talks to it as to vLLM.

:func:`vllm_app` is a starlette app with vLLM's shapes:

- ``GET /health``: 200 with an empty body (as vLLM; it says nothing about a live engine);
- ``GET /v1/models``: the one served model (``owned_by: vllm``, ``max_model_len``, ``root``: the
  model's path, where a client reads its ``tokenizer_config.json``; by default the name);
- ``POST /v1/completions``: whole, or streamed as server-sent events, each chunk
  ``{"id", "object": "text_completion", "created", "model", "choices": [{"index", "text",
  "logprobs", "finish_reason", "stop_reason"}], "usage": null}``, then, with
  ``stream_options.include_usage``, one chunk with ``"choices": []`` and the usage, then
  ``data: [DONE]``;
- ``POST /tokenize`` (``{"count", "max_model_len", "tokens", "token_strs"}``) and
  ``POST /detokenize`` (``{"prompt"}``);
- ``GET /metrics``: Prometheus text with a few ``vllm:`` series labelled ``model_name``;
- ``GET /version``.

Each completion takes the engine's next script entry (:meth:`~._fake.FakeEngine.generation`,
``max_tokens`` the limit): its tokens are the streamed pieces, one chunk each, after the fake's
delays; a stop string cuts them (``finish_reason: stop``, ``stop_reason`` the string),
``max_tokens`` (by default what the context leaves) finishes with ``length``; a
:class:`~._fake.FakeFailure` answers its status (0: the answer breaks off after its headers), ``drop_after`` breaks
the stream. ``max_model_len`` is the fake's ``n_ctx`` unless given; every completion body is in
:attr:`~._fake.FakeEngine.bodies`. Errors use vLLM's ``{"error": {"message", "type", "param",
"code"}}``. :func:`by_prompt` makes a script of a reply function (prompt -> text, one token a
character), :func:`echo_reply` the default one.

Run it: ``python -m splitserve.engine._fake_http --shape vllm --model NAME --port 8100``.
"""

from __future__ import annotations

import argparse
import json
import re
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ._fake import BOS, Entry, FakeEngine, FakeFailure, FakeRequest

if TYPE_CHECKING:
    from ._fake import _Generation as Generation

VERSION = "0.0.0+splitserve.fake"
_KINDS = {400: "BadRequestError", 404: "NotFoundError", 503: "ServiceUnavailableError"}
_MARKUP = re.compile(r"<\|[^|>]*\|>|</?[A-Za-z_][^<>]{0,40}>")


def echo_reply(prompt: str) -> str:
    """The default reply: the prompt's last eight words, markup (``<|im_start|>``, ``<think>``) removed."""
    words = _MARKUP.sub(" ", prompt).split()
    return "You said: " + " ".join(words[-8:]) if words else "Hello."


def by_prompt(reply: Callable[[str], str]) -> Callable[[dict[str, Any]], Entry]:
    """A :class:`~._fake.FakeEngine` script of a reply function: the reply to the request's
    prompt, one token a character."""
    return lambda body: list(reply(str(body.get("prompt") or "")))


def _error(status: int, message: str, param: str | None = None) -> JSONResponse:
    kind = _KINDS.get(status, "InternalServerError")
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": status}}, status)


def _cut_at_stop(tokens: list[str], stops: Any) -> tuple[list[str], str | None]:
    """The tokens before the first stop string (the token it starts in cut), and that string."""
    text = "".join(tokens)
    words = [stops] if isinstance(stops, str) else list(stops or [])
    hits = [(text.find(s), s) for s in words if isinstance(s, str) and s and s in text]
    if not hits:
        return tokens, None
    at, word = min(hits)
    pieces, end = [], 0
    for t in tokens:
        if end >= at:
            break
        pieces.append(t[: at - end])
        end += len(t)
    return pieces, word


class _Metrics:
    def __init__(self, model: str) -> None:
        self.registry = r = CollectorRegistry()
        self.labels = (model, "0")
        names = ["model_name", "engine"]
        self.running = Gauge("vllm:num_requests_running", "Requests in model execution.", names, registry=r)
        self.waiting = Gauge("vllm:num_requests_waiting", "Requests waiting to be processed.", names, registry=r)
        self.kv = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage; 1 means 100 percent.", names, registry=r)
        self.prompt = Counter("vllm:prompt_tokens", "Prefill tokens processed.", names, registry=r)
        self.gen = Counter("vllm:generation_tokens", "Generation tokens processed.", names, registry=r)
        self.success = Counter("vllm:request_success", "Successful requests.", [*names, "finished_reason"], registry=r)
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "Time to first token.", names, registry=r)
        for series in (self.running, self.waiting, self.kv, self.prompt, self.gen):
            series.labels(*self.labels)


def vllm_app(
    engine: FakeEngine | Sequence[Entry] | Callable[[dict[str, Any]], Entry] | None = None,
    model: str = "fake",
    *,
    max_model_len: int | None = None,
    api_key: str | None = None,
    root: str | None = None,
) -> Starlette:
    """The fake (or a new one with these script entries; none: :func:`echo_reply`) as an ASGI app
    speaking vLLM's API for ``model`` (see the module); ``app.state.engine`` is the engine."""
    if not isinstance(engine, FakeEngine):
        engine = FakeEngine(engine if engine is not None else by_prompt(echo_reply))
    face = _VllmFace(engine, model, max_model_len, api_key, root or model)
    app = Starlette(
        routes=[
            Route("/health", face.health, methods=["GET"]),
            Route("/version", face.version, methods=["GET"]),
            Route("/v1/models", face.models, methods=["GET"]),
            Route("/v1/completions", face.completions, methods=["POST"]),
            Route("/tokenize", face.tokenize, methods=["POST"]),
            Route("/detokenize", face.detokenize, methods=["POST"]),
            Route("/metrics", face.metrics_text, methods=["GET"]),
        ]
    )
    app.state.engine = engine
    return app


class _VllmFace:
    """The routes of :func:`vllm_app`."""

    def __init__(self, fake: FakeEngine, model: str, max_model_len: int | None, api_key: str | None, root: str) -> None:
        self.fake = fake
        self.model = model
        self.root = root
        settings = fake.props_answer.get("default_generation_settings") or {}
        self.context = max_model_len or int(settings.get("n_ctx") or 4096)
        self.api_key = api_key
        self.metrics = _Metrics(model)

    def denied(self, request: Request) -> Response | None:
        if self.api_key and request.headers.get("authorization") != f"Bearer {self.api_key}":
            return JSONResponse({"error": "Unauthorized"}, 401)
        return None

    async def read_json(self, request: Request) -> dict[str, Any] | JSONResponse:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return _error(400, "the body is not JSON")
        if not isinstance(body, dict):
            return _error(400, "the body must be a JSON object")
        name = body.get("model")
        if name is not None and name != self.model:
            return _error(404, f"The model `{name}` does not exist.", "model")
        return body

    async def health(self, request: Request) -> Response:
        return Response(status_code=200)

    async def version(self, request: Request) -> Response:
        return JSONResponse({"version": VERSION})

    async def models(self, request: Request) -> Response:
        if (no := self.denied(request)) is not None:
            return no
        now = int(time.time())
        perm = {"id": f"modelperm-{uuid.uuid4().hex}", "object": "model_permission", "created": now}
        card = {"id": self.model, "object": "model", "created": now, "owned_by": "vllm", "root": self.root}
        card |= {"parent": None, "max_model_len": self.context, "permission": [perm]}
        return JSONResponse({"object": "list", "data": [card]})

    def prompt_of(self, body: dict[str, Any]) -> str | JSONResponse:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            prompt = self.fake.token_text(prompt)
        if not isinstance(prompt, str):
            return _error(400, "prompt must be a string (or one list of token ids)", "prompt")
        if body.get("n") not in (None, 1):
            return _error(400, "the fake serves n = 1 only", "n")
        if (n := self.fake.count_tokens(prompt)) > self.context:
            return _error(
                400,
                f"This model's maximum context length is {self.context} tokens. However, your request has "
                f"{n} input tokens. Please reduce the length of the input messages.",
                "prompt",
            )
        return prompt

    async def completions(self, request: Request) -> Response:
        if (no := self.denied(request)) is not None:
            return no
        body = await self.read_json(request)
        if isinstance(body, JSONResponse):
            return body
        self.fake.requests.append(FakeRequest("http", "/v1/completions", body))
        prompt = self.prompt_of(body)
        if isinstance(prompt, JSONResponse):
            return prompt
        limit = body.get("max_tokens")
        if limit is None:
            limit = self.context - self.fake.count_tokens(prompt)
        gen = self.fake.generation({**body, "prompt": prompt, "max_tokens": limit}, "max_tokens")
        if isinstance(gen, FakeFailure):
            return _error(gen.status, gen.message) if gen.status else StreamingResponse(_broken(gen.message))
        out = _Answer(self, gen, body)
        self.metrics.prompt.labels(*self.metrics.labels).inc(gen.prompt_n)
        if body.get("stream"):
            return StreamingResponse(out.chunks(), media_type="text/event-stream")
        return JSONResponse(await out.whole())

    async def tokenize(self, request: Request) -> Response:
        body = await self.read_json(request)
        if isinstance(body, JSONResponse):
            return body
        if not isinstance(prompt := body.get("prompt"), str):
            return _error(400, "the fake tokenizes a prompt string only", "prompt")
        tokens = self.fake.token_ids(prompt, bool(body.get("add_special_tokens", True)))
        strs = [("<s>" if t == BOS else self.fake.token_text([t])) for t in tokens]
        out = {"count": len(tokens), "max_model_len": self.context, "tokens": tokens}
        return JSONResponse({**out, "token_strs": strs if body.get("return_token_strs") else None})

    async def detokenize(self, request: Request) -> Response:
        body = await self.read_json(request)
        if isinstance(body, JSONResponse):
            return body
        tokens = body.get("tokens")
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            return _error(400, "tokens must be a list of token ids", "tokens")
        return JSONResponse({"prompt": self.fake.token_text(tokens)})

    async def metrics_text(self, request: Request) -> Response:
        return Response(generate_latest(self.metrics.registry), media_type=CONTENT_TYPE_LATEST)


class _Answer:
    """One completion's answer in vLLM's shape: the generation's tokens cut at a stop string."""

    def __init__(self, face: _VllmFace, gen: Generation, body: dict[str, Any]) -> None:
        self.gen = gen
        self.metrics = face.metrics
        self.pieces, self.word = _cut_at_stop(gen.tokens, body.get("stop"))
        self.finish = "stop" if self.word is not None or gen.stop_type != "limit" else "length"
        self.head = {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time())}
        self.head["model"] = face.model
        self.options = body.get("stream_options") or {}

    def usage(self, done: int) -> dict[str, Any]:
        prompt = self.gen.prompt_n
        return {"prompt_tokens": prompt, "total_tokens": prompt + done, "completion_tokens": done}

    def choice(self, text: str, last: bool) -> dict[str, Any]:
        finish, word = (self.finish, self.word) if last else (None, None)
        return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish, "stop_reason": word}

    async def whole(self) -> dict[str, Any]:
        try:
            await self.gen.wait_all()
        finally:
            await self.gen.close()
        labels = self.metrics.labels
        self.metrics.gen.labels(*labels).inc(len(self.pieces))
        self.metrics.success.labels(*labels, self.finish).inc()
        choice = {**self.choice("".join(self.pieces), True), "prompt_logprobs": None}
        extra = {"service_tier": None, "system_fingerprint": None, "kv_transfer_params": None}
        usage = {**self.usage(len(self.pieces)), "prompt_tokens_details": None}
        return {**self.head, "choices": [choice], **extra, "usage": usage}

    async def chunks(self) -> AsyncIterator[bytes]:
        gen, pieces, labels = self.gen, self.pieces, self.metrics.labels
        every = bool(self.options.get("include_usage")) and bool(self.options.get("continuous_usage_stats"))
        running = self.metrics.running.labels(*labels)
        running.inc()
        start = time.monotonic()
        try:
            for i, piece in enumerate(pieces or [""]):
                if gen.out.drop_after is not None and i >= gen.out.drop_after:
                    raise ConnectionAbortedError("the fake engine dropped the stream")
                await gen.delay(i)
                if i == 0:
                    self.metrics.ttft.labels(*labels).observe(time.monotonic() - start)
                self.metrics.gen.labels(*labels).inc(1 if piece else 0)
                usage = self.usage(min(i + 1, len(pieces))) if every else None
                yield _sse({**self.head, "choices": [self.choice(piece, i >= len(pieces) - 1)], "usage": usage})
            gen.done()
            self.metrics.success.labels(*labels, self.finish).inc()
            if self.options.get("include_usage"):
                yield _sse({**self.head, "choices": [], "usage": self.usage(len(pieces))})
            yield b"data: [DONE]\n\n"
        finally:
            running.dec()
            await gen.close()


async def _broken(message: str) -> AsyncIterator[bytes]:
    """A body that breaks off before its first byte (the connection closes)."""
    raise ConnectionAbortedError(message)
    yield b""


def _sse(data: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(data, separators=(",", ":")).encode() + b"\n\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m splitserve.engine._fake_http", description=__doc__.split("\n")[0])
    p.add_argument("--shape", choices=["vllm"], default="vllm", help="the engine whose HTTP API is served")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--model", default="fake", help="the served model name")
    p.add_argument("--root", default=None, help="the model's path in /v1/models (default: the name)")
    p.add_argument("--max-model-len", type=int, default=4096)
    p.add_argument("--api-key", default=None)
    p.add_argument("--reply", default=None, help="a fixed reply (default: echo the prompt's last words)")
    p.add_argument("--token-delay", type=float, default=0.0, help="seconds between streamed tokens")
    args = p.parse_args(argv)
    import uvicorn

    script = by_prompt(echo_reply) if args.reply is None else [list(args.reply)]
    engine = FakeEngine(script, token_delay=args.token_delay)
    app = vllm_app(engine, args.model, max_model_len=args.max_model_len, api_key=args.api_key, root=args.root)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
