"""The engine as the gateway and the cluster need it: one async interface, no HTTP types in it.

:class:`EngineBackend` is what sits behind the gateway (and, through :class:`~._client.BlockingEngine`,
behind the cluster's readiness wait and ``status``): health, the server's settings and slots,
tokenizing, raw completions streamed (or collected whole), the engine's Prometheus text and a
pass-through for the gateway's native routes. :class:`~._llamacpp.LlamaCppBackend` is llama-server over HTTP;
:class:`~._fake.FakeEngine` is a scripted engine for tests.

Failures are engine errors, converted by each caller at its own boundary (the gateway turns them
into its OpenAI-shaped errors, the cluster into node errors):

- :class:`EngineUnavailable`: the engine did not answer (not started, crashed, still binding);
- :class:`EngineHTTPError`: it answered with an error status (503 while loading);
- :class:`EngineStreamError`: a stream broke, or carried an error event, after it started.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal

import anyio

from .._errors import EngineError

HealthStatus = Literal["ok", "loading", "error", "down"]

LOADING_RETRY_AFTER = 2.0
"""Seconds a caller is told to wait when the engine is still loading its model."""
DOWN_RETRY_AFTER = 5.0
"""Seconds a caller is told to wait when the engine does not answer at all."""


class EngineUnavailable(EngineError):
    """The engine did not answer (not started, crashed, or still binding).

    ``url`` and ``path`` say what was asked, ``reason`` the kind of failure (the name of the
    transport error, e.g. ``ConnectError``)."""

    def __init__(self, message: str, *, url: str = "", path: str = "", reason: str = "") -> None:
        super().__init__(message)
        self.url = url
        self.path = path
        self.reason = reason

    def unreachable(self) -> str:
        """The failure as one sentence for a client: :func:`unreachable_message`."""
        return unreachable_message(self.url, self.path, self.reason or "no answer")


class EngineHTTPError(EngineError):
    """The engine answered with an error status; ``body`` is its answer as text."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"engine answered HTTP {status}: {body[:300]}")
        self.status = status
        self.body = body


class EngineStreamError(EngineError):
    """A stream that had started broke off, carried an event that is not JSON, or an error event."""


def unreachable_message(url: str, path: str, reason: str) -> str:
    return f"the engine at {url} is not reachable ({reason} on {path}); retry when it is up"


def engine_message(text: str) -> str:
    """The message of an engine's error answer (llama-server's ``{"error": {"message": ...}}``),
    else the text itself, shortened."""
    try:
        data = json.loads(text)
        err = data.get("error", data)
        return str(err.get("message", text)) if isinstance(err, dict) else str(err)
    except (ValueError, AttributeError):
        return text.strip()[:300]


@dataclass(frozen=True)
class EngineHealth:
    """What the engine's health check said.

    ``status``: ``ok`` (ready), ``loading`` (HTTP 503: the model is still loading), ``error``
    (any other status) or ``down`` (no answer; ``http_status`` 0). ``message`` is the engine's
    own message (for ``down``, a sentence naming the engine and the failure); ``retry_after``
    the seconds a caller should wait before asking again (None when ready or failed)."""

    status: HealthStatus
    http_status: int
    message: str
    retry_after: float | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def health_of(status: int, text: str) -> EngineHealth:
    """The :class:`EngineHealth` of a health answer with this HTTP status and body."""
    if status == 200:
        return EngineHealth("ok", 200, "ok")
    msg = engine_message(text)
    if status == 503:
        return EngineHealth("loading", 503, msg, LOADING_RETRY_AFTER)
    return EngineHealth("error", status, msg)


def health_down(url: str, path: str, reason: str) -> EngineHealth:
    return EngineHealth("down", 0, unreachable_message(url, path, reason), DOWN_RETRY_AFTER)


async def _once(data: bytes) -> AsyncIterator[bytes]:
    if data:
        yield data


@dataclass(eq=False)
class EngineReply:
    """The engine's answer to a passed-on request: status, headers (lower-case names) and body,
    whole (``bytes``) or as it comes (an async iterator of bytes). Close it when done (``async
    with``, or :meth:`aclose`): an unread streamed body holds the engine's connection."""

    status: int
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes | AsyncIterator[bytes] = b""
    closer: Callable[[], Awaitable[None]] | None = None

    def chunks(self) -> AsyncIterator[bytes]:
        """The body's bytes as they come (no copy, no extra layer for a streamed body)."""
        return _once(self.body) if isinstance(self.body, bytes) else self.body

    async def aread(self) -> bytes:
        if isinstance(self.body, bytes):
            return self.body
        parts = [chunk async for chunk in self.body]
        self.body = b"".join(parts)
        return self.body

    async def lines(self) -> AsyncIterator[bytes]:
        """The body's lines without their ends (``\\n``, ``\\r\\n``), as bytes; split on ``\\n``
        only, so a JSON string holding U+2028 stays on its line."""
        pending = b""
        async for chunk in self.chunks():
            if b"\n" not in chunk:
                pending += chunk
                continue
            *done, rest = (pending + chunk).split(b"\n")
            pending = rest
            for line in done:
                yield line[:-1] if line.endswith(b"\r") else line
        if pending:
            yield pending[:-1] if pending.endswith(b"\r") else pending

    async def aclose(self) -> None:
        closer, self.closer = self.closer, None
        if closer is not None:
            await closer()

    async def __aenter__(self) -> EngineReply:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


@dataclass(slots=True)
class CompletionRequest:
    """One raw completion, as every backend takes it: rendered by each to its own wire format
    (:meth:`llamacpp`: llama-server's ``/completion`` body; vLLM's ``/v1/completions`` in
    :func:`~._vllm.completions_body`).

    ``prompt``: text (the engine tokenizes it, adding BOS where the model wants one) or token
    ids. ``n_predict``: the most tokens to generate (-1: no limit). The sampling fields are
    left to the engine's defaults when None. ``grammar`` (GBNF) and ``json_schema`` constrain
    the output; ``stop`` ends it at any of these strings. ``cache_prompt`` and ``id_slot`` are
    llama.cpp's prompt cache and slot (other engines cache prefixes by themselves).
    ``extra``: llama.cpp fields passed on as they are (``samplers``, ``dry_multiplier``, ...);
    an engine that has no such field ignores them."""

    prompt: str | list[int]
    n_predict: int = -1
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repeat_penalty: float | None = None
    ignore_eos: bool | None = None
    n_probs: int | None = None
    stop: list[str] = field(default_factory=list)
    grammar: str | None = None
    json_schema: dict[str, Any] | None = None
    cache_prompt: bool = True
    id_slot: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def llamacpp(self) -> dict[str, Any]:
        """llama-server's ``/completion`` body (``stream`` not set): the fields that are set, then ``extra``."""
        body: dict[str, Any] = {**self.extra, "prompt": self.prompt, "n_predict": self.n_predict}
        for name in _OPTIONAL:
            value = getattr(self, name)
            if value is not None:
                body[name] = value
        if self.stop:
            body["stop"] = list(self.stop)
        body["cache_prompt"] = self.cache_prompt
        return body

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> CompletionRequest:
        """The request of a llama-server ``/completion`` body (``stream`` dropped; fields this
        type does not name go to ``extra``)."""
        known = {k: body[k] for k in _FIELDS if k in body and body[k] is not None}
        if "stop" in known:
            known["stop"] = [known["stop"]] if isinstance(known["stop"], str) else list(known["stop"])
        extra = {k: v for k, v in body.items() if k not in _FIELDS and k != "stream"}
        return cls(**known, extra=extra)


_OPTIONAL = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "repeat_penalty",
    "ignore_eos",
    "n_probs",
    "grammar",
    "json_schema",
    "id_slot",
)
_FIELDS = frozenset(_OPTIONAL) | {"prompt", "n_predict", "stop", "cache_prompt"}


@dataclass(frozen=True)
class EngineInfo:
    """What the engine says about itself, in one value: its settings (llama-server's ``/props``,
    as ``props``), its parallel slots (``/slots``; none for an engine that schedules requests
    itself) and the fields the gateway reads from them."""

    props: dict[str, Any]
    slots: list[dict[str, Any]]

    @property
    def chat_template(self) -> str:
        return str(self.props.get("chat_template") or "")

    @property
    def bos_token(self) -> str:
        return str(self.props.get("bos_token") or "")

    @property
    def eos_token(self) -> str:
        return str(self.props.get("eos_token") or "")

    @property
    def model_path(self) -> str:
        return str(self.props.get("model_path") or "")

    @property
    def model_alias(self) -> str:
        return str(self.props.get("model_alias") or "")

    @property
    def n_ctx(self) -> int | None:
        """The context length of a request (per slot), None when the engine does not say."""
        settings = self.props.get("default_generation_settings") or {}
        value = settings.get("n_ctx") if isinstance(settings, dict) else None
        return value if isinstance(value, int) else None

    @property
    def total_slots(self) -> int | None:
        value = self.props.get("total_slots")
        return value if isinstance(value, int) else None


class CompletionStream(ABC):
    """One streamed raw completion: ``async with backend.stream(request) as events`` sends it, and
    ``async for batch in events`` yields its server-sent events as lists of decoded JSON objects,
    as many at a time as one read of the engine brought (a reader that falls behind then handles
    several tokens at once instead of falling further behind). The ``[DONE]`` marker ends the
    iteration; an error event raises :class:`EngineStreamError`. Leaving the ``async with``
    closes the engine's response, which aborts the generation if it is still running."""

    async def __aenter__(self) -> CompletionStream:
        await self.open()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    @abstractmethod
    async def open(self) -> None:
        """Send the request; raises :class:`EngineUnavailable` / :class:`EngineHTTPError`."""

    @abstractmethod
    def batches(self) -> AsyncIterator[list[dict[str, Any]]]:
        """The events, a list per read (see the class)."""

    def __aiter__(self) -> AsyncIterator[list[dict[str, Any]]]:
        return self.batches()

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        """:meth:`batches`, one event at a time."""
        async for batch in self.batches():
            for data in batch:
                yield data

    @abstractmethod
    async def aclose(self) -> None:
        """Close the engine's response (idempotent)."""


class EngineBackend(ABC):
    """An engine that turns prompts into tokens (see the module).

    What a backend implements: :meth:`info`, :meth:`health`, :meth:`stream`, :meth:`relay` and
    :meth:`aclose`. :meth:`complete` (the stream, collected), :meth:`tokenize` (``POST
    /tokenize``, relayed; an engine whose ``/tokenize`` is shaped otherwise overrides it) and
    :meth:`metrics` (``GET /metrics``, relayed) are built on them."""

    url: str
    """Where the engine is, for messages (``http://127.0.0.1:8080``)."""

    @abstractmethod
    async def health(self) -> EngineHealth:
        """The engine's health; never raises for an engine that is down or failing."""

    @abstractmethod
    async def info(self, timeout: float | None = None) -> EngineInfo:
        """The engine's settings and slots in one value (see :class:`EngineInfo`). ``timeout``:
        seconds, None for the backend's default."""

    @abstractmethod
    def stream(self, request: CompletionRequest) -> CompletionStream:
        """A streamed raw completion of ``request``; use it as ``async with backend.stream(request)
        as events`` (see :class:`CompletionStream`): its events are llama.cpp's (``content``,
        and a last one with ``stop``, ``stop_type``, ``tokens_predicted``, ``tokens_evaluated``,
        ``timings``) whatever the engine."""

    @abstractmethod
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
        """A native request passed on as it came (the gateway's ``/completion``, ``/tokenize``,
        ``/slots``, ``/v1/completions``, ...): any status comes back, the body unread. With
        ``check``, an answer other than 200 raises :class:`EngineHTTPError` instead (its body
        read and the reply closed)."""

    @abstractmethod
    async def aclose(self) -> None:
        """Release the backend's connections."""

    async def complete(self, request: CompletionRequest) -> dict[str, Any]:
        """A whole completion: the stream, collected; llama.cpp's last event with ``content``
        the whole text."""
        texts: list[str] = []
        final: dict[str, Any] = {}
        async with self.stream(request) as events:
            async for batch in events:
                for data in batch:
                    text = data.get("content")
                    if text:
                        texts.append(str(text))
                    if data.get("stop"):
                        final = data
        return {**final, "content": "".join(texts)}

    async def tokenize(self, text: str, add_special: bool = False) -> list[int]:
        """The token ids of ``text`` (with BOS and the like when ``add_special``): llama-server's
        ``/tokenize``, relayed."""
        content = json.dumps({"content": text, "add_special": add_special}, ensure_ascii=False).encode()
        async with await self.relay(
            "POST", "/tokenize", content=content, content_type="application/json", check=True
        ) as reply:
            raw = await reply.aread()
        try:
            data = json.loads(raw)
        except ValueError:
            raise EngineStreamError(f"the engine's /tokenize answer is not JSON: {raw[:120]!r}") from None
        tokens = data.get("tokens") if isinstance(data, dict) else None
        return [t["id"] if isinstance(t, dict) else int(t) for t in tokens or []]

    async def metrics(self) -> bytes | None:
        """The engine's Prometheus text, None when it has none (or does not answer within a second)."""
        with anyio.move_on_after(1.0):
            try:
                async with await self.relay("GET", "/metrics") as reply:
                    if reply.status != 200 or "text/plain" not in reply.headers.get("content-type", ""):
                        return None
                    return await reply.aread()
            except EngineError:
                return None
        return None


__all__ = [
    "DOWN_RETRY_AFTER",
    "LOADING_RETRY_AFTER",
    "CompletionRequest",
    "CompletionStream",
    "EngineBackend",
    "EngineHTTPError",
    "EngineHealth",
    "EngineInfo",
    "EngineReply",
    "EngineStreamError",
    "EngineUnavailable",
    "HealthStatus",
    "engine_message",
    "health_down",
    "health_of",
    "unreachable_message",
]
