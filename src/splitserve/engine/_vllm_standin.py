"""A stand-in that speaks vLLM's OpenAI-compatible HTTP API, for tests (vLLM itself needs GPUs).

:func:`create_app` is a small starlette app with vLLM's shapes:

- ``GET /health``: 200 with an empty body (as vLLM; it says nothing about a live engine);
- ``GET /v1/models``: the one served model (``owned_by: vllm``, ``max_model_len``);
- ``POST /v1/completions``: whole, or streamed as server-sent events, each chunk
  ``{"id", "object": "text_completion", "created", "model", "choices": [{"index", "text",
  "logprobs", "finish_reason", "stop_reason"}], "usage": null}``, then, with
  ``stream_options.include_usage``, one chunk with ``"choices": []`` and the usage, then
  ``data: [DONE]``;
- ``POST /tokenize`` (``{"count", "max_model_len", "tokens", "token_strs"}``) and
  ``POST /detokenize`` (``{"prompt"}``);
- ``GET /metrics``: Prometheus text with a few ``vllm:`` series labelled ``model_name``;
- ``GET /version``.

Output is scripted and deterministic: ``reply`` is a string, a list of strings (one per
generation, the last repeating) or a function of the prompt; by default the reply echoes the
prompt's last words. One token is one character (token id = code point + 3; BOS is 1, prepended
when ``add_special_tokens``), so ``max_tokens`` cuts characters and finishes with ``length``.
Errors use vLLM's ``{"error": {"message", "type", "param", "code"}}``.

Run it: ``python -m splitserve.engine._vllm_standin --port 8100 --host 127.0.0.1``.
"""

from __future__ import annotations

import argparse
import json
import re
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

BOS = 1
_OFFSET = 3
STANDIN_VERSION = "0.0.0+splitserve.standin"

Reply = str | Sequence[str] | Callable[[str], str]


def tokenize(text: str, add_special_tokens: bool = True) -> list[int]:
    """The stand-in's tokens: one per character (code point + 3), BOS first when asked."""
    return ([BOS] if add_special_tokens else []) + [ord(c) + _OFFSET for c in text]


def detokenize(tokens: Sequence[int]) -> str:
    """The text of :func:`tokenize`'s tokens (special tokens dropped)."""
    return "".join(chr(t - _OFFSET) for t in tokens if t >= _OFFSET)


_MARKUP = re.compile(r"<\|[^|>]*\|>|</?[A-Za-z_][^<>]{0,40}>")


def echo_reply(prompt: str) -> str:
    """The default reply: the prompt's last eight words, markup (``<|im_start|>``, ``<think>``) removed."""
    words = _MARKUP.sub(" ", prompt).split()
    return "You said: " + " ".join(words[-8:]) if words else "Hello."


@dataclass
class StandinState:
    """What the stand-in serves and has served."""

    model: str = "standin"
    max_model_len: int = 4096
    api_key: str | None = None
    reply: Reply = echo_reply
    token_delay: float = 0.0
    """Seconds between streamed tokens."""
    generations: int = 0
    requests: list[dict[str, Any]] = field(default_factory=list)
    """Every completion request body, in order."""
    running: int = 0
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        labels = ["model_name", "engine"]
        r = self.registry
        self.m_running = Gauge("vllm:num_requests_running", "Requests in model execution.", labels, registry=r)
        self.m_waiting = Gauge("vllm:num_requests_waiting", "Requests waiting to be processed.", labels, registry=r)
        self.m_kv = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage; 1 means 100 percent.", labels, registry=r)
        self.m_prompt = Counter("vllm:prompt_tokens", "Prefill tokens processed.", labels, registry=r)
        self.m_gen = Counter("vllm:generation_tokens", "Generation tokens processed.", labels, registry=r)
        self.m_success = Counter(
            "vllm:request_success", "Successfully processed requests.", [*labels, "finished_reason"], registry=r
        )
        self.m_ttft = Histogram(
            "vllm:time_to_first_token_seconds", "Time to first token in seconds.", labels, registry=r
        )
        for g in (self.m_running, self.m_waiting, self.m_kv):
            g.labels(self.model, "0").set(0)
        self.m_prompt.labels(self.model, "0")
        self.m_gen.labels(self.model, "0")

    def next_reply(self, prompt: str) -> str:
        self.generations += 1
        if isinstance(self.reply, str):
            return self.reply
        if callable(self.reply):
            return self.reply(prompt)
        script = list(self.reply)
        return script[min(self.generations - 1, len(script) - 1)] if script else ""


def _error(status: int, message: str, kind: str = "BadRequestError", param: str | None = None) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": status}}, status)


def _authorized(state: StandinState, request: Request) -> bool:
    return not state.api_key or request.headers.get("authorization") == f"Bearer {state.api_key}"


@dataclass
class _Generation:
    pieces: list[str]
    finish_reason: str
    stop_reason: str | None
    prompt_tokens: int

    @property
    def text(self) -> str:
        return "".join(self.pieces)


def _generate(state: StandinState, body: dict[str, Any]) -> _Generation | JSONResponse:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        prompt = detokenize(prompt)
    if not isinstance(prompt, str):
        return _error(400, "prompt must be a string (or one list of token ids)", param="prompt")
    if int(body.get("n") or 1) != 1:
        return _error(400, "the stand-in serves n = 1 only", param="n")
    prompt_tokens = len(tokenize(prompt))
    if prompt_tokens > state.max_model_len:
        return _error(
            400,
            f"This model's maximum context length is {state.max_model_len} tokens. However, your request has "
            f"{prompt_tokens} input tokens. Please reduce the length of the input messages.",
            param="prompt",
        )
    text = state.next_reply(prompt)
    finish, stop_reason = "stop", None
    stops = body.get("stop") or []
    for s in [stops] if isinstance(stops, str) else list(stops):
        at = text.find(s) if s else -1
        if at >= 0:
            text, stop_reason = text[:at], s
    pieces = list(text)
    max_tokens = body.get("max_tokens")
    limit = state.max_model_len - prompt_tokens if max_tokens is None else int(max_tokens)
    if len(pieces) > limit:
        pieces, finish, stop_reason = pieces[: max(limit, 0)], "length", None
    return _Generation(pieces, finish, stop_reason, prompt_tokens)


def _usage(gen: _Generation, details: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {
        "prompt_tokens": gen.prompt_tokens,
        "total_tokens": gen.prompt_tokens + len(gen.pieces),
        "completion_tokens": len(gen.pieces),
    }
    if details:
        out["prompt_tokens_details"] = None
    return out


def create_app(
    model: str = "standin",
    *,
    max_model_len: int = 4096,
    api_key: str | None = None,
    reply: Reply = echo_reply,
    token_delay: float = 0.0,
    state: StandinState | None = None,
) -> Starlette:
    """The stand-in as an ASGI app; ``app.state.standin`` is its :class:`StandinState`."""
    st = state or StandinState(
        model=model, max_model_len=max_model_len, api_key=api_key, reply=reply, token_delay=token_delay
    )

    async def health(request: Request) -> Response:
        return Response(status_code=200)

    async def version(request: Request) -> Response:
        return JSONResponse({"version": STANDIN_VERSION})

    async def models(request: Request) -> Response:
        if not _authorized(st, request):
            return JSONResponse({"error": "Unauthorized"}, 401)
        now = int(time.time())
        perm = {
            "id": f"modelperm-{uuid.uuid4().hex}",
            "object": "model_permission",
            "created": now,
            "allow_create_engine": False,
            "allow_sampling": True,
            "allow_logprobs": True,
            "allow_search_indices": False,
            "allow_view": True,
            "allow_fine_tuning": False,
            "organization": "*",
            "group": None,
            "is_blocking": False,
        }
        card = {
            "id": st.model,
            "object": "model",
            "created": now,
            "owned_by": "vllm",
            "root": st.model,
            "parent": None,
            "max_model_len": st.max_model_len,
            "permission": [perm],
        }
        return JSONResponse({"object": "list", "data": [card]})

    async def read_json(request: Request) -> dict[str, Any] | JSONResponse:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return _error(400, "the body is not JSON")
        return body if isinstance(body, dict) else _error(400, "the body must be a JSON object")

    def check_model(body: dict[str, Any]) -> JSONResponse | None:
        name = body.get("model")
        if name is not None and name != st.model:
            return _error(404, f"The model `{name}` does not exist.", "NotFoundError", "model")
        return None

    async def completions(request: Request) -> Response:
        if not _authorized(st, request):
            return JSONResponse({"error": "Unauthorized"}, 401)
        body = await read_json(request)
        if isinstance(body, JSONResponse):
            return body
        st.requests.append(body)
        bad = check_model(body)
        if bad is not None:
            return bad
        gen = _generate(st, body)
        if isinstance(gen, JSONResponse):
            return gen
        rid = f"cmpl-{uuid.uuid4().hex}"
        created = int(time.time())
        labels = (st.model, "0")
        st.m_prompt.labels(*labels).inc(gen.prompt_tokens)
        if not body.get("stream"):
            st.m_gen.labels(*labels).inc(len(gen.pieces))
            st.m_success.labels(*labels, gen.finish_reason).inc()
            choice = {
                "index": 0,
                "text": gen.text,
                "logprobs": None,
                "finish_reason": gen.finish_reason,
                "stop_reason": gen.stop_reason,
                "prompt_logprobs": None,
            }
            return JSONResponse(
                {
                    "id": rid,
                    "object": "text_completion",
                    "created": created,
                    "model": st.model,
                    "choices": [choice],
                    "service_tier": None,
                    "system_fingerprint": None,
                    "usage": _usage(gen),
                    "kv_transfer_params": None,
                }
            )
        options = body.get("stream_options") or {}
        include_usage = bool(options.get("include_usage"))
        continuous = include_usage and bool(options.get("continuous_usage_stats"))
        return StreamingResponse(
            _stream(st, gen, rid, created, include_usage, continuous), media_type="text/event-stream"
        )

    async def tokenize_route(request: Request) -> Response:
        body = await read_json(request)
        if isinstance(body, JSONResponse):
            return body
        bad = check_model(body)
        if bad is not None:
            return bad
        prompt = body.get("prompt")
        if not isinstance(prompt, str):
            return _error(400, "the stand-in tokenizes a prompt string only", param="prompt")
        tokens = tokenize(prompt, bool(body.get("add_special_tokens", True)))
        strs = [("<s>" if t == BOS else chr(t - _OFFSET)) for t in tokens] if body.get("return_token_strs") else None
        return JSONResponse(
            {"count": len(tokens), "max_model_len": st.max_model_len, "tokens": tokens, "token_strs": strs}
        )

    async def detokenize_route(request: Request) -> Response:
        body = await read_json(request)
        if isinstance(body, JSONResponse):
            return body
        bad = check_model(body)
        if bad is not None:
            return bad
        tokens = body.get("tokens")
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            return _error(400, "tokens must be a list of token ids", param="tokens")
        return JSONResponse({"prompt": detokenize(tokens)})

    async def metrics(request: Request) -> Response:
        return Response(generate_latest(st.registry), media_type=CONTENT_TYPE_LATEST)

    app = Starlette(
        routes=[
            Route("/health", health, methods=["GET"]),
            Route("/version", version, methods=["GET"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/v1/completions", completions, methods=["POST"]),
            Route("/tokenize", tokenize_route, methods=["POST"]),
            Route("/detokenize", detokenize_route, methods=["POST"]),
            Route("/metrics", metrics, methods=["GET"]),
        ]
    )
    app.state.standin = st
    return app


def _sse(data: dict[str, Any] | str) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"data: {text}\n\n".encode()


async def _stream(
    st: StandinState, gen: _Generation, rid: str, created: int, include_usage: bool, continuous: bool
) -> AsyncIterator[bytes]:
    labels = (st.model, "0")
    st.running += 1
    st.m_running.labels(*labels).set(st.running)
    start = time.monotonic()
    try:
        pieces = gen.pieces or [""]
        for i, piece in enumerate(pieces):
            if i and st.token_delay:
                await anyio.sleep(st.token_delay)
            last = i == len(pieces) - 1
            chunk: dict[str, Any] = {
                "id": rid,
                "object": "text_completion",
                "created": created,
                "model": st.model,
                "choices": [
                    {
                        "index": 0,
                        "text": piece,
                        "logprobs": None,
                        "finish_reason": gen.finish_reason if last else None,
                        "stop_reason": gen.stop_reason if last else None,
                    }
                ],
                "usage": None,
            }
            if continuous:
                done = len(gen.pieces[: i + 1])
                chunk["usage"] = {
                    "prompt_tokens": gen.prompt_tokens,
                    "total_tokens": gen.prompt_tokens + done,
                    "completion_tokens": done,
                }
            if i == 0:
                st.m_ttft.labels(*labels).observe(time.monotonic() - start)
            if piece:
                st.m_gen.labels(*labels).inc()
            yield _sse(chunk)
        st.m_success.labels(*labels, gen.finish_reason).inc()
        if include_usage:
            yield _sse(
                {
                    "id": rid,
                    "object": "text_completion",
                    "created": created,
                    "model": st.model,
                    "choices": [],
                    "usage": _usage(gen, details=False),
                }
            )
        yield _sse("[DONE]")
    finally:
        st.running -= 1
        st.m_running.labels(*labels).set(st.running)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m splitserve.engine._vllm_standin", description=__doc__.split("\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--model", default="standin", help="the served model name")
    p.add_argument("--max-model-len", type=int, default=4096)
    p.add_argument("--api-key", default=None)
    p.add_argument("--reply", default=None, help="a fixed reply (default: echo the prompt's last words)")
    p.add_argument("--token-delay", type=float, default=0.0, help="seconds between streamed tokens")
    args = p.parse_args(argv)
    import uvicorn

    app = create_app(
        args.model,
        max_model_len=args.max_model_len,
        api_key=args.api_key,
        reply=args.reply if args.reply is not None else echo_reply,
        token_delay=args.token_delay,
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
