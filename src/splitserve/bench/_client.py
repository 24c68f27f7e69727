"""The HTTP side: one streamed request to an OpenAI-compatible endpoint, measured.

Works against any server that speaks ``/v1/chat/completions`` or
``/v1/completions`` with SSE streaming, and against the agent APIs ``/v1/messages``
(Anthropic) and ``/v1/responses`` (OpenAI), whose requests and events _wire translates; llama.cpp's extras (``timings`` in the
final chunk, ``/props``) are read when present and left empty when not.  The
transport is httpx's, so unit tests pass ``httpx.MockTransport``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

import httpx

from .._errors import AuthError, NotRunningError, UsageError
from ._records import RequestRecord
from ._stream import DONE, SSEDecoder, StreamTimer, StreamTrace, token_counts
from ._wire import ANTHROPIC_VERSION, PATHS, chunk_reader, wire_body

Api = Literal["chat", "completions", "messages", "responses"]
APIS: tuple[str, ...] = ("chat", "completions", "messages", "responses")

PROPS_KEEP = ("total_slots", "model_path", "model_alias", "build_info", "model_ftype", "chat_template_caps")


@dataclass
class Target:
    """Where requests go and how they are shaped."""

    url: str
    """Base URL, with or without the trailing ``/v1``."""
    model: str | None = None
    api_key: str | None = None
    api: Api = "chat"
    timeout_s: float = 600.0
    ignore_eos: bool = True
    """Send llama.cpp's ``ignore_eos`` so every request generates exactly ``max_tokens``."""
    seed: int | None = 0
    """Sent with every request (with temperature 0: greedy and repeatable); ``None``: not sent."""
    extra_body: dict[str, Any] = field(default_factory=dict)
    root: str = field(init=False, default="")
    """``scheme://host:port[/prefix]`` without ``/v1``: where llama.cpp's ``/props`` is."""
    v1: str = field(init=False, default="")

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise UsageError(f"--url {self.url!r}: expected http://HOST:PORT[/v1]")
        path = parts.path.rstrip("/")
        if path.endswith("/v1"):
            path = path[: -len("/v1")]
        self.root = urlunsplit((parts.scheme, parts.netloc, path, "", ""))
        self.v1 = self.root + "/v1"

    def describe(self) -> dict[str, Any]:
        return {"url": self.v1, "model": self.model, "api": self.api, "ignore_eos": self.ignore_eos}


class BenchClient:
    """An async client for one target; use as ``async with BenchClient(t) as c``."""

    def __init__(
        self, target: Target, transport: httpx.AsyncBaseTransport | None = None, max_connections: int = 64
    ) -> None:
        self.target = target
        headers = {"Authorization": f"Bearer {target.api_key}"} if target.api_key else {}
        self._http = httpx.AsyncClient(
            transport=transport,
            headers=headers,
            timeout=httpx.Timeout(target.timeout_s, connect=10.0),
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
        )

    async def __aenter__(self) -> BenchClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._http.aclose()

    async def probe(self) -> dict[str, Any]:
        """What the server says about itself (``/v1/models``; llama.cpp's ``/props``).

        Fills in the target's model when none was given.  Raises
        :class:`NotRunningError` when the endpoint cannot be reached.
        """
        info: dict[str, Any] = {}
        try:
            resp = await self._http.get(self.target.v1 + "/models")
        except httpx.HTTPError as exc:
            raise NotRunningError(
                f"cannot reach {self.target.v1} ({type(exc).__name__}: {exc}); is the server running?"
            ) from None
        if resp.status_code == 401:
            raise AuthError(f"{self.target.v1}/models")
        if resp.is_success:
            try:
                ids = [m.get("id") for m in resp.json().get("data", []) if isinstance(m, dict)]
            except ValueError:
                ids = []
            info["models"] = ids
            if self.target.model is None and ids:
                self.target.model = ids[0]
        try:
            props = await self._http.get(self.target.root + "/props")
            if props.is_success:
                data = props.json()
                info.update({k: data[k] for k in PROPS_KEEP if k in data})
                dgs = data.get("default_generation_settings") or {}
                if "n_ctx" in dgs:
                    info["n_ctx"] = dgs["n_ctx"]
        except (httpx.HTTPError, ValueError):
            pass
        return info

    def body(
        self,
        text: str,
        max_tokens: int,
        ignore_eos: bool | None = None,
        messages: list[dict[str, Any]] | None = None,
        tools: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        t = self.target
        body: dict[str, Any] = {
            "model": t.model or "default",
            "max_tokens": max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
            "temperature": 0,
        }
        if t.seed is not None:
            body["seed"] = t.seed
        if t.api != "completions":  # chat, and the agent APIs (rewritten from it, see _wire)
            body["messages"] = messages if messages is not None else [{"role": "user", "content": text}]
            if tools:
                body["tools"] = tools
        else:
            body["prompt"] = text
        if t.ignore_eos if ignore_eos is None else ignore_eos:
            body["ignore_eos"] = True
        body.update(t.extra_body)
        return body

    async def request(
        self,
        rec_id: str,
        kind: str,
        cell: dict[str, Any],
        text: str,
        max_tokens: int,
        batch: int = 0,
        batch_t0: float | None = None,
        keep_text: int | None = 400,
        ignore_eos: bool | None = None,
        messages: list[dict[str, Any]] | None = None,
        tools: list[dict[str, Any]] | None = None,
        headers: dict[str, str] | None = None,
        body_extra: dict[str, Any] | None = None,
    ) -> RequestRecord:
        """Send one streamed request and return its record (errors are recorded, not raised).

        ``messages`` (and ``tools``) replace the one user message made of ``text`` (not for
        completions); for ``messages`` / ``responses`` the chat body is rewritten in that API;
        ``keep_text=None`` keeps the whole output, reasoning included.
        """
        api = self.target.api
        path = PATHS[api]
        body = wire_body(api, self.body(text, max_tokens, ignore_eos, messages, tools) | (body_extra or {}))
        reader = chunk_reader(api)
        if api == "messages":
            headers = {"anthropic-version": ANTHROPIC_VERSION} | (headers or {})
        timer = StreamTimer()
        decoder = SSEDecoder()
        started_at = time.time()
        t0 = time.perf_counter()
        status: int | None = None
        error: str | None = None
        try:
            async with self._http.stream("POST", self.target.v1 + path, json=body, headers=headers) as resp:
                status = resp.status_code
                if status == 401:  # every request would fail the same way: stop at once
                    raise AuthError(self.target.v1 + path)
                if not resp.is_success:
                    raw = (await resp.aread()).decode(errors="replace")
                    error = f"HTTP {status}: {_error_message(raw)}"
                else:
                    async for line in resp.aiter_lines():
                        payload = decoder.feed_line(line)
                        if reader is not None and payload is not None and payload is not DONE:
                            payload = reader.feed(payload)  # an agent API's event as a chat chunk
                        if payload is None:
                            continue
                        if payload is DONE:
                            break
                        timer.feed(payload, time.perf_counter() - t0)
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        trace = timer.finish(time.perf_counter() - t0)
        offset = round((t0 - batch_t0) * 1000.0, 3) if batch_t0 is not None else 0.0
        return _record(trace, rec_id, kind, cell, batch, started_at, offset, keep_text, status, error)


def _record(
    trace: StreamTrace,
    rec_id: str,
    kind: str,
    cell: dict[str, Any],
    batch: int,
    started_at: float,
    send_offset_ms: float,
    keep_text: int | None,
    status: int | None,
    error: str | None,
) -> RequestRecord:
    """A request's record from its stream's trace (its times in ms, its token counts, the text
    kept: ``keep_text`` characters, None for all, reasoning included)."""
    if error is None and trace.error:
        error = trace.error
    prompt, completion, cached, source = token_counts(trace)

    def ms(v: float | None) -> float | None:
        return None if v is None else round(v * 1000.0, 3)

    content = trace.content
    timings = trace.timings or {}
    return RequestRecord(
        id=rec_id,
        kind=kind,
        cell=cell,
        batch=batch,
        started_at=started_at,
        send_offset_ms=send_offset_ms,
        ttf_chunk_ms=ms(trace.first_chunk),
        ttf_token_ms=ms(trace.first_token),
        ttf_content_ms=ms(trace.first_content),
        ttf_reasoning_ms=ms(trace.first_reasoning),
        e2e_ms=ms(trace.end),
        token_times_ms=[round(t * 1000.0, 3) for t in trace.token_times],
        n_chunks=trace.n_chunks,
        prompt_tokens=prompt,
        completion_tokens=completion,
        cached_tokens=cached,
        tokens_source=source,
        timings=trace.timings,
        finish_reason=trace.finish_reason,
        text=content if keep_text is None else content[:keep_text],
        reasoning_chars=len(trace.reasoning),
        tool_call_chunks=trace.tool_call_chunks,
        reasoning=trace.reasoning if keep_text is None else "",
        tool_calls=trace.tool_calls,
        draft_n=_count(timings.get("draft_n")),
        draft_accepted=_count(timings.get("draft_n_accepted")),
        status=status,
        error=error,
        extra={"reasoning_tail": trace.reasoning[-200:]} if trace.reasoning else {},
    )


def _count(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _error_message(raw: str) -> str:
    import json

    try:
        data = json.loads(raw)
    except ValueError:
        return raw.strip()[:300]
    err = data.get("error") if isinstance(data, dict) else None
    if isinstance(err, dict):
        return str(err.get("message", err))[:300]
    return str(err or data)[:300]
